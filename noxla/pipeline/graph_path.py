"""The default .tflite and TF.js exports: written from noxla's graph (``noxla.graph``, recorded
without TensorFlow) by its writers (``noxla.writers.tflite``, ``noxla.writers.tfjs``). What the graph
does not record yet raises ``Uncovered``, and the export takes TensorFlow's path
(``noxla.pipeline.tf_path``), saying so in its steps. See docs/graph.md."""
from __future__ import annotations

import os
from typing import Callable, Sequence

from noxla.errors import ExportError
from noxla.graph.dtypes import Uncovered
from noxla.pipeline.preflight import Cleared, ClearedSignatures, ExportOptions, atomic_output, run_step

__all__ = ["ENV", "Uncovered", "covers_tflite", "enabled", "export_signatures_tfjs", "export_tfjs", "tflite_chunks",
           "why_tflite_needs_tensorflow", "write_program_tfjs"]


# NOXLA_TFJS_GRAPH=0 sends every TF.js export through TensorFlow's lowering and tensorflowjs's
# converter (TF's path: the oracle the graph path is compared with, and the way around a graph bug).
ENV = "NOXLA_TFJS_GRAPH"


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def write_program_tfjs(program, path: str, strict: bool = False, quantize: str | None = None,
                       weight_shard_size_bytes: int | None = None) -> None:
    """``program``'s TF.js model written at ``path`` from the graph, as ``export_tfjs`` writes it (the
    tests' harness writes what the export would). Raises ``Uncovered`` before writing anything."""
    from noxla.front.lowering_variants import needs_tfjs_lowering
    from noxla.graph.lower import record_program
    from noxla.writers.tfjs.from_graph import write_tfjs
    recorded = record_program(program, strict, needs_tfjs_lowering(program))
    extra = {} if weight_shard_size_bytes is None else {"weight_shard_size_bytes": weight_shard_size_bytes}
    write_tfjs(recorded, path, quantize, **extra)


# The TFLite writer of the graph (``noxla.writers.tflite``) writes a lone default .tflite where it
# covers the program; NOXLA_TFLITE_GRAPH=0 sends every .tflite through TF's path.
TFLITE_ENV = "NOXLA_TFLITE_GRAPH"


def why_tflite_needs_tensorflow(options: ExportOptions) -> str | None:
    """None where the graph's TFLite writer may take the .tflite (every target and ``strict``, each
    with its declared passes: ``noxla.writers.tflite.VARIANTS``; symbolic sizes too; quantized
    only by LiteRT's quantizer), else why TF's path takes it."""
    if os.environ.get(TFLITE_ENV) == "0":
        return f"{TFLITE_ENV}=0"
    if options.quantize is not None:   # LiteRT's quantizer quantizes the graph's file (noxla.writers.tflite.quantize)
        from noxla.writers.tflite.quantize import why_tensorflow_quantizes
        reason = why_tensorflow_quantizes(options.quantize)
        if reason is not None:
            return f"quantize={options.quantize!r} ({reason})"
    return None


def covers_tflite(options: ExportOptions) -> bool:
    """A lone .tflite the graph's TFLite writer may take (several signatures: ``noxla.pipeline.graph_signatures``)."""
    return set(options.wanted) == {"tflite"} and why_tflite_needs_tensorflow(options) is None


def covers_signatures(options: ExportOptions) -> bool:
    """Several signatures (LLM decoders, shape buckets) from the graph, as a lone .tflite: by
    default, where the graph's TFLite writer may take the file (``covers_tflite``; NOXLA_TFLITE_GRAPH=0
    sends them through TF's path). Its forms against TF's path's: tests/test_llm_graph_tflite.py."""
    return covers_tflite(options)


def tflite_chunks(cleared: Cleared, why: list[str]) -> list | None:
    """The .tflite's chunks from the graph's TFLite writer (nothing written yet); None where TF's
    path must write it, with the reason appended to ``why`` and given as a step."""
    from lowering_rules.core.vocabulary import Target
    from noxla.writers.tflite import graph_tflite_chunks
    on_step = cleared.options.on_step
    reason = why_tflite_needs_tensorflow(cleared.options)
    if reason is None:
        try:
            chunks = run_step(on_step, "lower+write (graph tflite)", graph_tflite_chunks, cleared.program,
                              strict=cleared.options.strict,
                              webgpu=cleared.targets["tflite"] == Target.LITERTJS_WEBGPU)
        except Uncovered as e:
            reason = f"the graph tflite writer does not cover {e}"
        else:
            if cleared.options.quantize is None:
                return chunks
            from noxla.writers.tflite.quantize import quantized
            return [run_step(on_step, f"quantize {cleared.options.quantize} (LiteRT's quantizer)", quantized, chunks,
                             cleared.options.quantize, cleared.samples)]
    why.append(f"tflite: {reason}")
    if on_step is not None:
        on_step(f"graph tflite writer: {reason}; lowering through TensorFlow", 0.0)
    return None


def export_tfjs(cleared: Cleared, fun: Callable, example_args: Sequence, options: ExportOptions,
                why: list[str]) -> str | None:
    """The TF.js model written at ``options.tfjs`` from the graph; None (nothing written, and a step
    saying why, also appended to ``why``) when the graph path is turned off or the program uses
    something the graph does not record, which TF's path then exports. Symbolic sizes are
    recorded (the model's -1 sizes)."""
    from noxla.front.lowering_variants import needs_tfjs_lowering
    from noxla.graph.lower import record_program
    from noxla.writers.tfjs.from_graph import write_tfjs
    program, path, on_step = cleared.program, options.tfjs, options.on_step
    if not enabled():
        return _through_tensorflow(on_step, f"{ENV}=0", why)
    try:
        recorded = run_step(on_step, "lower (noxla's graph, no TensorFlow)", record_program, program,
                            options.strict, needs_tfjs_lowering(program))
        with atomic_output(path, options.overwrite) as scratch:
            run_step(on_step, f"write tfjs {path}", write_tfjs, recorded, scratch, options.tfjs_quantize,
                     options.tfjs_shard_bytes)
            if options.demo_page:
                from noxla.runtimes.demo import write_demo
                write_demo(scratch, fun, program, example_args)
    except Uncovered as e:
        return _through_tensorflow(on_step, f"noxla's graph does not record {e}", why)
    return os.path.abspath(path)


def export_signatures_tfjs(cleared: ClearedSignatures) -> str:
    """Several signatures in one TF.js model at ``options.tfjs`` (``noxla.writers.tfjs.signatures``),
    written by noxla's graph alone: TF's path writes one function per TF.js model. Where the graph
    does not cover a signature, an ExportError names it (nothing written)."""
    from noxla.front.lowering_variants import needs_tfjs_lowering
    from noxla.graph.lower import record_program
    from noxla.writers.tfjs.from_graph import write_signatures_tfjs
    options, on_step = cleared.options, cleared.options.on_step
    if not enabled():
        raise ExportError(f"several signatures to TF.js are written by noxla's graph only, and {ENV}=0")
    recorded = {}
    try:
        for key, program in cleared.programs.items():
            try:
                recorded[key] = run_step(on_step, f"lower {key} (noxla's graph, no TensorFlow)", record_program,
                                         program, options.strict, needs_tfjs_lowering(program))
            except Uncovered as e:
                raise Uncovered(f"signature {key!r}: {e}") from None
        with atomic_output(options.tfjs, options.overwrite) as scratch:
            run_step(on_step, f"write tfjs {options.tfjs}", write_signatures_tfjs, recorded, scratch,
                     options.tfjs_quantize, options.tfjs_shard_bytes)
    except Uncovered as e:
        raise ExportError(f"several signatures to TF.js are written by noxla's graph only, which does not "
                          f"record {e}. Export such a signature on its own (noxla.export_tfjs), which "
                          "TensorFlow's path takes") from None
    return os.path.abspath(options.tfjs)


def _through_tensorflow(on_step, reason: str, why: list[str]) -> None:
    why.append(f"tfjs: {reason}")
    run_step(on_step, f"tfjs through TensorFlow: {reason}", lambda: None)
    return None
