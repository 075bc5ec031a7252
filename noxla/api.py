"""The public API: ``convert``, ``check`` and the ``export_*`` functions."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import lowering_rules  # noqa: F401  (registers every rule)
from limitations.engine import Report
from lowering_rules.core.vocabulary import Target
from noxla.errors import ExportError, require_tensorflow
from noxla.front.tracing import check_callable, trace
from noxla.pipeline.preflight import (
    DEFAULT_SHARD_BYTES,
    Exported,
    ExportOptions,
    full_check,
    preflight,
    preflight_signatures,
    run_step,
    write_chunks,
)

if TYPE_CHECKING:
    from noxla.pipeline.preflight import OnStep

# The exporters and the converted callable import TensorFlow; ``check`` needs none, so they are
# imported when first called (see ``lowering_rules.core.lazy_tensorflow``).


def check(fun: Callable, *example_args, target: Target | str = Target.TFLITE,
          polymorphic_shapes=None) -> Report:
    """Every use in ``fun`` that ``target`` cannot run, found before any TF op is built."""
    program = trace(fun, example_args, polymorphic_shapes)
    return full_check(program.closed_jaxpr, target)


def convert(fun: Callable, *, polymorphic_shapes=None, polymorphic_constraints: Sequence[str] = (),
            with_gradient: bool = True, enable_xla: bool | None = None, native_serialization: bool = False,
            native_serialization_platforms: Sequence[str] | None = None,
            native_serialization_disabled_checks: Sequence = (), strict: bool = False) -> Callable:
    """A TF callable computing ``fun``: a drop-in for ``jax2tf.convert(fun, enable_xla=False)``.

    It takes tf.Tensors, tf.Variables, numpy arrays, Python scalars (typed as JAX types them, so
    float64 under ``JAX_ENABLE_X64``) and pytrees of them, positionally or by parameter name, runs
    eagerly or inside ``tf.function``, and traces ``fun`` once per distinct input signature.

    ``polymorphic_shapes`` and ``polymorphic_constraints`` are jax2tf's (``jax.export``'s syntax);
    dimension variables must be >= 1, checked when the function runs (TF Assert ops in a graph).

    ``with_gradient=True`` (jax2tf's default): TF differentiates the function with JAX's own VJP
    (``jax.vjp``, converted by noxla in turn), so custom_vjp/custom_jvp rules and ``stop_gradient``
    hold, to any order. ``with_gradient=False``: asking TF for a gradient is an error.

    ``enable_xla`` is accepted either way: noxla never emits XLA ops, and a graph without them also
    runs where XLA does. ``native_serialization=True`` (StableHLO in an ``XlaCallModule`` op, and
    its ``native_serialization_*`` options) is jax2tf's other path: use ``jax2tf.convert`` for it.

    By default patterns become fused ops (MaxPool, Softmax, Relu, ...) that compute what JAX
    computes for finite inputs but may treat NaN/inf differently (``noxla limitations`` lists
    where, per rule). ``strict=True`` keeps JAX's NaN/inf semantics exactly, with more ops.
    """
    check_callable(fun)
    refuse_native_serialization(native_serialization, native_serialization_platforms,
                                native_serialization_disabled_checks)
    del enable_xla
    require_tensorflow("noxla.convert (it returns a TF callable)")
    from noxla.writers.tf import gradients
    return gradients.tf_callable(fun, polymorphic_shapes, tuple(polymorphic_constraints), with_gradient, strict)


def refuse_native_serialization(native_serialization, platforms, disabled_checks) -> None:
    if native_serialization or platforms or disabled_checks:
        raise TypeError(
            "noxla lowers to plain TF ops and never serializes StableHLO: native_serialization=True, "
            "native_serialization_platforms and native_serialization_disabled_checks belong to "
            "jax2tf's native path. Drop them to get noxla's ops (TFLite, TF.js, TF), or call "
            "jax.experimental.jax2tf.convert for an XlaCallModule op.")


def export_saved_model(fun: Callable, *example_args, path: str, polymorphic_shapes=None,
                       polymorphic_constraints: Sequence[str] = (), variables=None, with_gradient: bool = True,
                       overwrite: bool = False, strict: bool = False, on_step: OnStep | None = None) -> str:
    """A SavedModel whose ``serving_default`` signature computes ``fun`` (inputs checked against
    ``polymorphic_shapes`` at run time), differentiable in TF with JAX's gradients (saved with
    ``experimental_custom_gradients``; first order, as TF saves them).
    ``variables``: the positional argument(s) (index or parameter name) kept as ``tf.Variable``s
    holding their example values, so the model fine-tunes (``trainable_variables``) and shares its
    weights; the signature takes only the other arguments. ``with_gradient=False``: a gradient is an
    error, and saving skips tracing JAX's VJP (2-5x faster). ``strict``: see ``convert``.
    ``fun`` may instead be ``{signature_key: (function, example_args)}``: one SavedModel with a
    signature per key, each with JAX's gradients too (see ``export_tflite``; without ``variables``)."""
    require_tensorflow("a SavedModel")
    if isinstance(fun, Mapping):
        _check_signatures_call(example_args, polymorphic_shapes)
        if variables is not None or polymorphic_constraints:
            raise ExportError("variables and polymorphic_constraints take one function, not several signatures")
        return run(fun, (), ExportOptions(saved_model=path, overwrite=overwrite, strict=strict,
                                          saved_model_gradient=with_gradient, on_step=on_step)).written["saved_model"]
    return export(fun, example_args, saved_model=path, polymorphic_shapes=polymorphic_shapes,
                  polymorphic_constraints=polymorphic_constraints, saved_model_variables=variables,
                  saved_model_gradient=with_gradient, overwrite=overwrite, strict=strict,
                  on_step=on_step).written["saved_model"]


def export_tflite(fun: Callable, *example_args, path: str, polymorphic_shapes=None, allow_flex: bool = False,
                  overwrite: bool = False, strict: bool = False, quantize: str | None = None,
                  representative_data=None, target: str = "tflite", shape_buckets=None,
                  on_step: OnStep | None = None) -> str:
    """A .tflite using TFLITE_BUILTINS only (plus SELECT_TF_OPS when ``allow_flex``).
    ``target``: where it will run, "tflite" (LiteRT), "litertjs" or "litertjs-webgpu" (LiteRT.js in
    the browser: checked for it up front; for WebGPU also lowered with the exact alternatives its
    delegate runs where the default's ops would fall back to wasm, see noxla.pipeline.tf_path.export).
    ``strict``: JAX's NaN/inf semantics exactly (see ``convert``).
    ``quantize``: None, "float16", "dynamic_int8" or "int8" (see noxla.writers.quantize); "int8" calibrates
    on ``representative_data``: a callable yielding samples (one array per input, shaped like the
    example's), or one array per input with a leading axis of samples.

    ``fun`` may instead be ``{signature_key: (function, example_args)}`` (e.g. ``prefill_8`` and
    ``decode``): one .tflite with a signature per key, for LiteRT's signature runners, whose
    weights are stored once however many signatures use them (not with ``quantize="int8"``).

    ``shape_buckets`` (``{"b": [1, 8, 32]}``, with ``polymorphic_shapes`` naming those variables):
    one signature per size instead of dynamic dimensions, keyed ``b1``, ``b8``, ``b32`` (LiteRT.js
    runs static shapes only; see noxla.front.shape_buckets)."""
    if shape_buckets is not None:
        if isinstance(fun, Mapping):
            raise ExportError("shape buckets are for one function; give {signature_key: ...} or buckets")
        from noxla.front.shape_buckets import bucket_signatures
        fun, example_args = bucket_signatures(fun, example_args, polymorphic_shapes, shape_buckets), ()
        polymorphic_shapes = None
    if isinstance(fun, Mapping):
        _check_signatures_call(example_args, polymorphic_shapes)
        if representative_data is not None:
            raise ExportError("representative_data is for int8, which several signatures do not take")
        return run(fun, (), ExportOptions(tflite=path, allow_flex=allow_flex, overwrite=overwrite, strict=strict,
                                          quantize=quantize, tflite_target=target,
                                          on_step=on_step)).written["tflite"]
    return export(fun, example_args, tflite=path, polymorphic_shapes=polymorphic_shapes, allow_flex=allow_flex,
                  overwrite=overwrite, strict=strict, quantize=quantize, representative_data=representative_data,
                  tflite_target=target, on_step=on_step).written["tflite"]


def export_tfjs(fun: Callable, *example_args, path: str, polymorphic_shapes=None, overwrite: bool = False,
                strict: bool = False, quantize: str | None = None,
                weight_shard_size_bytes: int = DEFAULT_SHARD_BYTES, on_step: OnStep | None = None) -> str:
    """A TF.js graph model directory (model.json and weight shards of at most ``weight_shard_size_bytes``).
    ``strict``: JAX's NaN/inf semantics exactly (see ``convert``).
    ``quantize``: None, "uint8", "uint16" or "float16" weight storage (dequantized when loaded).
    ``fun`` may instead be ``{signature_key: (function, example_args)}``: one model holding every
    signature, its inputs and outputs keyed ``<signature_key>/<name>``; TF.js runs one signature's
    outputs from its inputs alone (``noxla.writers.tfjs.signatures``; written by noxla's graph only)."""
    return export(fun, example_args, tfjs=path, polymorphic_shapes=polymorphic_shapes, overwrite=overwrite,
                  strict=strict, tfjs_quantize=quantize, tfjs_shard_bytes=weight_shard_size_bytes,
                  on_step=on_step).written["tfjs"]


def export(fun: Callable, example_args: Sequence, **options) -> Exported:
    """``run`` with ``ExportOptions(**options)`` (the keywords of ``noxla.pipeline.tf_path.export``; an unknown
    one is a TypeError)."""
    return run(fun, example_args, ExportOptions(**options))


def run(fun: Callable | Mapping, example_args: Sequence, options: ExportOptions,
        rewrite: Callable | None = None) -> Exported:
    """The one entry of every export (the export_* functions, the CLI, the LLM exports): the preflight
    (options, paths, trace, every output target's check; a program the check refuses is refused
    before TensorFlow is imported, ``noxla.pipeline.preflight``), then noxla's graph (``noxla.graph``): its
    TFLite writer for a default .tflite, its TF.js writer for the TF.js model, where it records the
    program; else the TF pipeline for what is left (without TensorFlow: ``TensorFlowMissing``,
    naming why, before anything is written). ``fun`` may be ``{signature_key: (function, example_args)}``
    (``noxla.pipeline.tf_path.export_signatures``' form; ``example_args`` then empty), with ``rewrite``: its
    ``rewrite`` of the merged .tflite (``noxla.llm.quantize``'s weight quantization)."""
    if isinstance(fun, Mapping):
        _check_signatures_call(example_args, options.polymorphic_shapes)
        cleared_signatures = preflight_signatures(fun, options)
        if options.tfjs is not None:  # one model.json holding every signature, from noxla's graph
            from noxla.pipeline import graph_path as graph
            return Exported(next(iter(cleared_signatures.programs.values())),
                            {"tfjs": graph.export_signatures_tfjs(cleared_signatures)})
        from noxla.pipeline import graph_signatures
        why: list[str] = []
        written = graph_signatures.export_tflite(cleared_signatures, rewrite, why)  # by default, where covered
        if written is not None:
            return Exported(next(iter(cleared_signatures.programs.values())), {"tflite": written})
        _require_tensorflow_for(why)
        from noxla.pipeline.tf_path import export_cleared_signatures
        return export_cleared_signatures(cleared_signatures, rewrite)
    if rewrite is not None:
        raise ExportError("rewrite is for several signatures' .tflite")
    cleared = preflight(fun, example_args, options)
    from noxla.pipeline import graph_path as graph
    if options.saved_model is not None:   # before anything is written
        require_tensorflow("A SavedModel")
    why: list[str] = []   # what noxla's graph does not take, and why: TF's path writes it
    chunks = graph.tflite_chunks(cleared, why) if options.tflite is not None else None
    if chunks is None and options.tflite is not None:
        _require_tensorflow_for(why)
    written = {}
    if options.tfjs is not None:  # from noxla's graph, without TensorFlow, where it records the program
        tfjs = graph.export_tfjs(cleared, fun, example_args, options, why)
        if tfjs is None:
            _require_tensorflow_for(why)
        else:
            written["tfjs"] = tfjs
    if chunks is not None:
        written["tflite"] = run_step(options.on_step, f"write {options.tflite}", write_chunks, chunks,
                                     options.tflite, options.overwrite)
    rest = {kind: None for kind in written}
    if set(options.wanted) == set(rest):
        return Exported(cleared.program, written)
    options = dataclasses.replace(options, **rest)
    cleared = dataclasses.replace(cleared, targets={k: v for k, v in cleared.targets.items() if k not in rest},
                                  options=options)
    from noxla.pipeline.tf_path import export_cleared
    exported = export_cleared(fun, example_args, cleared)
    return Exported(exported.program, {**exported.written, **written})


def _require_tensorflow_for(why: list[str]) -> None:
    require_tensorflow(f"This export ({'; '.join(why)})")


def _check_signatures_call(example_args, polymorphic_shapes) -> None:
    if example_args:
        raise ExportError("with {signature_key: (function, example_args)}, the example arguments go in "
                          "the dict, not after it")
    if polymorphic_shapes is not None:
        raise ExportError("several signatures take static shapes: export one signature per shape "
                          "(e.g. prefill_8, prefill_32)")
