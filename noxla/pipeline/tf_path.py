"""TF's path: the export pipeline through TensorFlow, for one function (``export``) and for several
signatures (``export_signatures``), as the API and the CLI take it where noxla's graph does not
(``noxla.api.run``). It lowers into one ``tf.function`` with named inputs and outputs, converts
(``noxla.pipeline.tf_tflite``: TF's TFLite converter; ``noxla.pipeline.tf_tfjs``: TF.js through
grappler; a SavedModel here) and writes beside the final path before renaming into place: a failed
export leaves nothing at ``path``. ``on_step`` reports each step as it runs (the CLI prints them).
"""
from __future__ import annotations

import functools
import gc
import os
from typing import Callable, Mapping, Sequence

import tensorflow as tf

from lowering_rules.core.vocabulary import Target
from noxla.front.interpreter import Weights
from noxla.front.lowering import (  # noqa: F401  (part of this module's API)
    input_signature,
    needs_tfjs_lowering,
    needs_tflite_lowering,
    serving_function,
    uses_uint32,
)
from noxla.front.shapes import dim_vars
from noxla.front.tracing import Program
from noxla.pipeline import graph_signatures
from noxla.pipeline.preflight import (  # noqa: F401  (atomic_output, Exported: part of this module's API)
    Cleared,
    ClearedSignatures,
    Exported,
    ExportOptions,
    OnStep,
    atomic_output,
    preflight,
    preflight_signatures,
    require_supported,
    run_step,
    write_chunks,
)
from noxla.pipeline.tf_function import Handoff, module_for
from noxla.pipeline.tf_tfjs import write_tfjs
from noxla.pipeline.tf_tflite import tflite_bytes
from noxla.runtimes.demo import write_demo
from noxla.writers.tf.gradients import SAVE_OPTIONS, saved_model_module, signature_function
from noxla.writers.tf.replay import CapturedWeights
from noxla.writers.tf.weight_stubs import StubMismatch, WeightStubs
from noxla.writers.tfjs.ops import backstop_reading
from noxla.writers.tflite.flatbuffer import large as large_tflite
from noxla.writers.tflite.flatbuffer.merge import merged_model
from noxla.writers.tflite.flatbuffer.projections import join_matrix_vector_projections


def write_saved_model(concrete, path: str, module: tf.Module | None = None) -> None:
    """``module`` (default: one holding ``concrete``) saved with ``concrete`` as ``serving_default``,
    custom gradients included (``gradients.saved_model_module``'s are JAX's)."""
    tf.saved_model.save(module or module_for(concrete), path, signatures={"serving_default": concrete},
                        options=SAVE_OPTIONS)


# --------------------------------------------------------------------------- the pipeline

def collecting_new_objects_only(fun: Callable) -> Callable:
    """Run ``fun`` with the objects that exist when it starts (TF's, JAX's and noxla's modules:
    half a million after the imports) frozen, i.e. out of the garbage collector's sight, and
    unfrozen afterwards. Building a graph allocates enough to trigger a full collection, which
    would otherwise walk that whole heap: 0.3-0.4 s of a cold export. Nothing is left frozen, so
    nothing that dies meanwhile is kept; a process that froze its own heap is left as it is."""
    @functools.wraps(fun)
    def run(*args, **kwargs):
        if gc.get_freeze_count():
            return fun(*args, **kwargs)
        gc.freeze()
        try:
            return fun(*args, **kwargs)
        finally:
            gc.unfreeze()
    return run


def export(fun: Callable, example_args: Sequence, **options) -> Exported:
    """The TF pipeline for one function: ``ExportOptions(**options)`` (its fields are the keywords;
    an unknown one is a TypeError), the preflight, then ``export_cleared``. (``noxla.api.run`` is the
    entry that also takes noxla's graph for .tflite and TF.js, where they cover the export.)"""
    return export_cleared(fun, example_args, preflight(fun, example_args, ExportOptions(**options)))


@collecting_new_objects_only
def export_cleared(fun: Callable, example_args: Sequence, cleared: Cleared) -> Exported:
    """The one export pipeline, for the API and the CLI: trace once, check every requested target
    up front, lower, then convert and write each output beside its path and rename it into place.
    ``cleared``: ``noxla.pipeline.preflight.preflight``'s result (run before importing this module and
    TensorFlow, so that a refused program costs neither), with the ``ExportOptions`` it settled:

    The SavedModel is lowered with run-time checks of the inputs against ``polymorphic_shapes``
    (Assert ops); the .tflite and TF.js models without them (neither runs Assert). ``strict``
    keeps JAX's NaN/inf semantics exactly instead of fused ops (see ``noxla.api.convert``).
    ``quantize`` (.tflite: "float16", "dynamic_int8", "int8" calibrated on ``representative_data``)
    and ``tfjs_quantize`` (TF.js weight storage: "uint8", "uint16", "float16") are checked before
    anything is traced (see ``noxla.writers.quantize``).
    TF.js has no uint32: a program that uses uint32 (or PRNG keys) is lowered for it a second time,
    carrying those values as the int32s with the same bits (so is one with a rule that lowers
    otherwise for TF.js, ``needs_tfjs_lowering``). The SavedModel's TF gradient is JAX's (see
    ``noxla.api.convert``); ``saved_model_variables`` names the positional arguments it keeps as
    ``tf.Variable``s instead of inputs (``gradients.saved_model_module``); ``saved_model_gradient=False``
    saves it without a gradient (saving traces the VJP otherwise). Beside a TF.js model, ``demo_page``
    writes index.html and demo_data.json (example inputs and JAX's outputs on them): the page runs
    the model on every backend the browser offers and shows the error against JAX (``noxla serve``).
    ``tflite_target`` is where the .tflite will run: "tflite" (LiteRT), "litertjs" (LiteRT.js: checked
    for its tensor dtypes and static shapes) or "litertjs-webgpu" (also checked for what its WebGPU
    delegate computes wrong, and lowered with the exact alternatives it runs on the GPU where the
    default .tflite's ops would fall back to wasm: ``limitations.targets.WEBGPU_FALLBACKS``, ``exported``).
    """
    program, targets, samples, options = cleared.program, cleared.targets, cleared.samples, cleared.options
    wanted, strict, overwrite, on_step = options.wanted, options.strict, options.overwrite, options.on_step
    webgpu = targets.get("tflite") == Target.LITERTJS_WEBGPU
    polymorphic = bool(dim_vars(program.in_avals))
    lowered: dict[tuple[bool, bool], object] = {}
    tfjs_own_lowering = "tfjs" in wanted and needs_tfjs_lowering(program)
    # The .tflite's own lowering (``needs_tflite_lowering``) holds converter-only ops: never shared.
    tflite_own_lowering = "tflite" in wanted and needs_tflite_lowering(program)

    def concrete_for(kind: str):
        key = (polymorphic and kind == "saved_model", kind == "tfjs" and tfjs_own_lowering,
               kind == "tflite" and webgpu, kind == "tflite" and tflite_own_lowering)
        if key not in lowered:
            name = "lower"
            if lowered:
                name += (" (with input shape checks)" if key[0] else " (for TF.js)" if key[1]
                         else " (for WebGPU)" if key[2] else " (for TFLite)")
            lowered[key] = run_step(on_step, name, serving_function, program, key[0], strict, key[1],
                                    webgpu=key[2], tflite=key[3])
        return lowered[key]

    if "tfjs" in wanted:  # the declarations passed in the preflight; TF.js's op-list backstop is left
        # It reads the ops of the graph the TF.js converter gets, this export's own lowering,
        # instead of lowering the program once more: strict or not, uint32 carried as int32 or
        # not, those are the ops the converter sees. A sampling model's lowering is half its cold export.
        require_supported(program, Target.TFJS, backstop_reading(program.closed_jaxpr, lambda: concrete_for("tfjs")))

    written = {}
    for kind, path in wanted.items():
        if kind == "saved_model":  # lowered with JAX's gradients (gradients.saved_model_module)
            def write_module(_, scratch):
                module, concrete = saved_model_module(fun, program, example_args, options.polymorphic_shapes,
                                                      tuple(options.polymorphic_constraints), strict,
                                                      options.saved_model_variables, options.saved_model_gradient)
                write_saved_model(concrete, scratch, module)
            written[kind] = run_step(on_step, f"convert+write {kind} {path}", _write_with, write_module, None,
                                     path, overwrite)
            continue
        if kind == "tflite":  # converting and writing are separate steps; the other converters write
            if "tfjs" not in wanted or tfjs_own_lowering or webgpu or tflite_own_lowering:  # its only user
                data = _lone_tflite(program, strict, webgpu, tflite_own_lowering, options.allow_flex,
                                    options.quantize, samples, on_step)
            else:
                data = run_step(on_step, "convert tflite", tflite_bytes, concrete_for(kind), options.allow_flex,
                                options.quantize, samples, webgpu)
            written[kind] = run_step(on_step, f"write {path}", write_chunks, data, path, overwrite)
        else:
            concrete = concrete_for(kind)

            def writer(concrete, scratch):
                write_tfjs(concrete, scratch, options.tfjs_quantize, options.tfjs_shard_bytes)
                if options.demo_page:  # the page a user opens (or `noxla serve`s) to run the model in a browser
                    write_demo(scratch, fun, program, example_args)
            written[kind] = run_step(on_step, f"convert+write {kind} {path}", _write_with, writer, concrete,
                                     path, overwrite)
    return Exported(program, written)


def _lone_tflite(program: Program, strict: bool, webgpu: bool, tflite: bool, allow_flex: bool,
                 quantize: str | None, samples: Callable | None, on_step: OnStep | None) -> bytes | list:
    """The .tflite of a lowering no other output reads, made as the several-signature export makes
    its one: the weights held once and not copied (``interpreter.Weights``), the graph freed before
    converting, the large weights handed to the converter as stand-ins (``noxla.writers.tf.weight_stubs``) and
    written straight from their arrays. BERT-base: the converter no longer copies 0.44 GB of weights
    several times. int8 calibration runs the function itself, so it keeps real constants; were the
    converter to change a stubbed weight, the program is lowered again and converted with them."""
    def lowered(unread: bool):
        weights = Weights(unread=unread)
        return weights, Handoff(run_step(on_step, "lower", serving_function, program, False, strict,
                                         weights=weights, webgpu=webgpu, tflite=tflite,
                                         sequenced=not unread))  # unread: only frozen, never run
    if quantize == "int8":
        return run_step(on_step, "convert tflite", tflite_bytes, lowered(False)[1], allow_flex, quantize, samples,
                        webgpu)
    stubs = WeightStubs(reassociate=not strict) if quantize is None else None
    weights, concrete = lowered(True)
    try:
        model = run_step(on_step, "convert tflite", tflite_bytes, concrete, allow_flex, quantize, samples, webgpu,
                         stubs, weights)
    except StubMismatch:
        if on_step is not None:
            on_step("the converter changed a stubbed weight: converting with the real ones", 0.0)
        weights, concrete = lowered(True)
        return run_step(on_step, "convert tflite", tflite_bytes, concrete, allow_flex, quantize, samples, webgpu,
                        weights=weights)
    if stubs is None:
        return model
    if not webgpu:
        join_matrix_vector_projections(model, stubs)
    return run_step(on_step, "serialize", large_tflite.serialized, model, stubs=stubs)


def _write_with(writer, concrete, path: str, overwrite: bool) -> str:
    with atomic_output(path, overwrite) as scratch:
        writer(concrete, scratch)
    return os.path.abspath(path)


# --------------------------------------------------------------------------- several signatures

# One signature: a function and its example arguments (a tuple, as ``export_tflite``'s ``*example_args``).
Signatures = Mapping[str, "tuple[Callable, Sequence]"]


def _signature_functions(programs: Mapping[str, Program], strict: bool, on_step: OnStep | None,
                         webgpu: bool = False, tflite: bool = False, weights: Weights | None = None) -> dict:
    """Each signature's traced and checked program lowered: key -> concrete function (``tflite``: for
    the TFLite converter alone, see ``serving_function``). ``weights``: the table of their weights
    (held once for all of them, see ``Lowering``)."""
    weights = Weights() if weights is None else weights
    return {key: run_step(on_step, f"lower {key}", serving_function, program, False, strict, weights=weights,
                          webgpu=webgpu, tflite=tflite, sequenced=not weights.unread)
            for key, program in programs.items()}


def export_signatures(signatures: Signatures, *, tflite: str | None = None, saved_model: str | None = None,
                      allow_flex: bool = False, overwrite: bool = False, strict: bool = False,
                      quantize: str | None = None, tflite_target: Target | str = Target.TFLITE,
                      on_step: OnStep | None = None, rewrite: Callable | None = None) -> dict[str, str]:
    """One .tflite and/or SavedModel holding several signatures (``{key: (fun, example_args)}``),
    each with inputs named after its function's parameters and outputs after its dict keys or
    pytree paths, as a single-function export names them. In the .tflite each signature is
    converted on its own (the direct path of ``tflite_bytes``) and the models are merged into one
    flatbuffer, where equal constants (the weights the signatures share) are stored once. By
    default noxla's graph writes each model instead (``noxla.pipeline.graph_path.covers_signatures``: a .tflite
    alone, not strict, not TF's quantizer, NOXLA_TFLITE_GRAPH not 0), merged the same way, where it
    covers every signature (``noxla.pipeline.graph_signatures``).
    ``tflite_target``: as ``export``'s. Returns {"tflite" / "saved_model": absolute path}.
    Every signature is traced and checked for every output (``preflight_signatures``, the preflight
    of a single-function export) before anything is lowered or written. ``rewrite(model, stubs)``:
    called on the merged .tflite (an unpacked ``ModelT``; ``stubs`` the ``WeightStubs`` whose
    placeholders its buffers may hold, or None) before it is written
    (noxla.writers.tflite.flatbuffer.quantize_weights)."""
    options = ExportOptions(tflite=tflite, saved_model=saved_model, allow_flex=allow_flex, overwrite=overwrite,
                            strict=strict, quantize=quantize, tflite_target=tflite_target, on_step=on_step)
    cleared = preflight_signatures(signatures, options)
    written = graph_signatures.export_tflite(cleared, rewrite)  # noxla's graph, where it may and covers them
    if written is not None:
        return {"tflite": written}
    return export_cleared_signatures(cleared, rewrite).written


@collecting_new_objects_only
def export_cleared_signatures(cleared: ClearedSignatures, rewrite: Callable | None = None) -> Exported:
    """The several-signature pipeline after its preflight: each output lowered, converted and written
    beside its path, renamed into place once whole."""
    options, programs = cleared.options, cleared.programs
    strict, overwrite, on_step = options.strict, options.overwrite, options.on_step
    written = {}
    if options.tflite is not None:
        webgpu = cleared.targets["tflite"] == Target.LITERTJS_WEBGPU
        # Only ``frozen_graph_def`` reads the weights' values here: the tensors need not hold them.
        weights = Weights(unread=True)
        concretes = _signature_functions(programs, strict, on_step, webgpu, tflite=True, weights=weights)
        data = _converted_signatures(concretes, options.allow_flex, options.quantize, on_step, webgpu, weights,
                                     strict, rewrite)
        del concretes, weights
        written["tflite"] = run_step(on_step, f"write {options.tflite}", write_chunks, data, options.tflite,
                                     overwrite)
    if options.saved_model is not None:  # noxla's graph replayed, the weights captured once for all
        weights = CapturedWeights(variables=True)
        concretes = {key: run_step(on_step, f"lower {key}", signature_function, program, strict, weights,
                                   options.saved_model_gradient)
                     for key, program in programs.items()}

        def writer(concretes, scratch):
            module = tf.Module()
            module.weights = weights.variables()
            for i, concrete in enumerate(concretes.values()):
                setattr(module, f"signature_{i}", concrete)
            tf.saved_model.save(module, scratch, signatures=concretes, options=SAVE_OPTIONS)
        written["saved_model"] = run_step(on_step, f"convert+write saved_model {options.saved_model}",
                                          _write_with, writer, concretes, options.saved_model, overwrite)
    return Exported(next(iter(programs.values())), written)


def _converted_signatures(concretes: Mapping, allow_flex: bool, quantize: str | None,
                          on_step: OnStep | None, webgpu: bool = False, weights: Weights | None = None,
                          strict: bool = False, rewrite: Callable | None = None) -> list:
    """The signatures converted and merged into one flatbuffer (as chunks: past 2 GB, the form of
    ``noxla.writers.tflite.flatbuffer.large``). Unquantized, the converter sees
    the large weights as stand-ins and their bytes are spliced in afterwards
    (``noxla.writers.tf.weight_stubs``); were the converter to change a weight, it converts again with them."""
    stubs = WeightStubs(reassociate=not strict) if quantize is None else None
    try:
        models = {key: run_step(on_step, f"convert tflite {key}", tflite_bytes, concrete, allow_flex, quantize,
                                webgpu=webgpu, stubs=stubs, weights=weights)
                  for key, concrete in concretes.items()}
    except StubMismatch:
        stubs = None
        if on_step is not None:
            on_step("the converter changed a stubbed weight: converting with the real ones", 0.0)
        models = {key: run_step(on_step, f"convert tflite {key}", tflite_bytes, concrete, allow_flex, quantize,
                                webgpu=webgpu, weights=weights)
                  for key, concrete in concretes.items()}
    merged = run_step(on_step, "merge signatures", merged_model, models, stubs)
    del models
    if not webgpu:  # across signatures: a weight one joins and another does not would be stored twice
        join_matrix_vector_projections(merged, stubs)
    if rewrite is not None:
        run_step(on_step, "rewrite", rewrite, merged, stubs)
    return run_step(on_step, "serialize", large_tflite.serialized, merged, stubs=stubs)
