"""noxla's own graph of TF ops (issue 41): the rules' ops recorded without TensorFlow
(``lower.record_program``), written as a TF.js graph model (``tfjs``) or replayed as real TF ops
(``tf_replay``, the oracle). The default TF.js export: what is not recorded yet raises
``Uncovered``, and the export takes TensorFlow's path, saying so in its steps. See docs/graph.md."""
from __future__ import annotations

import os
from typing import Callable, Sequence

from noxla.graph.dtypes import Uncovered
from noxla.preflight import Cleared, ExportOptions, OnStep, atomic_output, run_step, write_chunks

__all__ = ["ENV", "Uncovered", "covers_tflite", "enabled", "export_tfjs", "export_tflite", "lone_default_tflite",
           "write_program_tfjs"]


# NOXLA_TFJS_GRAPH=0 sends every TF.js export through TensorFlow's lowering and tensorflowjs's
# converter (TF's path: the oracle the graph path is compared with, and the way around a graph bug).
ENV = "NOXLA_TFJS_GRAPH"


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def write_program_tfjs(program, path: str, strict: bool = False, quantize: str | None = None,
                       weight_shard_size_bytes: int | None = None) -> None:
    """``program``'s TF.js model written at ``path`` from the graph, as ``export_tfjs`` writes it (the
    tests' harness writes what the export would). Raises ``Uncovered`` before writing anything."""
    from noxla.graph.lower import record_program
    from noxla.graph.tfjs import write_tfjs
    from noxla.lowering_variants import needs_tfjs_lowering
    recorded = record_program(program, strict, needs_tfjs_lowering(program))
    extra = {} if weight_shard_size_bytes is None else {"weight_shard_size_bytes": weight_shard_size_bytes}
    write_tfjs(recorded, path, quantize, **extra)


# The TFLite writer of the graph (``noxla.graph.tflite``) writes a lone default .tflite where it
# covers the program; NOXLA_TFLITE_GRAPH=0 sends every .tflite through TF's path.
TFLITE_ENV = "NOXLA_TFLITE_GRAPH"


def lone_default_tflite(options: ExportOptions) -> bool:
    """A lone default .tflite for LiteRT or LiteRT.js's wasm: what a writer without TensorFlow may
    take (``strict`` keeps IEEE-exact lowerings, which only TF's path has; LiteRT.js's WebGPU takes
    lowerings and flatbuffer passes of its own)."""
    target = options.tflite_target
    return (set(options.wanted) == {"tflite"} and not options.strict and options.quantize is None
            and options.polymorphic_shapes is None
            and str(getattr(target, "value", target)) in ("tflite", "litertjs"))


def covers_tflite(options: ExportOptions) -> bool:
    return os.environ.get(TFLITE_ENV) != "0" and lone_default_tflite(options)


def export_tflite(cleared: Cleared, path: str, overwrite: bool, on_step: OnStep | None = None) -> str | None:
    """The .tflite written at ``path`` by the graph's TFLite writer; None (nothing written) when the
    program uses something it does not cover, which another path then exports."""
    from noxla.graph.tflite import graph_tflite_chunks
    return write_covered(cleared, path, overwrite, on_step, "lower+write (graph tflite)", graph_tflite_chunks,
                         "graph tflite writer: {}; lowering through TensorFlow")


def write_covered(cleared: Cleared, path: str, overwrite: bool, on_step: OnStep | None, step: str,
                  chunks_of: Callable, declined: str) -> str | None:
    """A writer without TensorFlow (``chunks_of(program)``, raising ``Uncovered``) writing ``path``;
    None (nothing written, and the step ``declined`` naming why) where it does not cover the program."""
    try:
        chunks = run_step(on_step, step, chunks_of, cleared.program)
    except Uncovered as e:
        if on_step is not None:
            on_step(declined.format(e), 0.0)
        return None
    return run_step(on_step, f"write {path}", write_chunks, chunks, path, overwrite)


def export_tfjs(cleared: Cleared, fun: Callable, example_args: Sequence, options: ExportOptions) -> str | None:
    """The TF.js model written at ``options.tfjs`` from the graph; None (nothing written, and a step
    saying why) when the graph path is turned off or the program uses something the graph does not
    record, which TF's path then exports."""
    from noxla.graph.lower import record_program
    from noxla.graph.tfjs import write_tfjs
    from noxla.lowering_variants import needs_tfjs_lowering
    program, path, on_step = cleared.program, options.tfjs, options.on_step
    if not enabled():
        return _through_tensorflow(on_step, f"{ENV}=0")
    if options.polymorphic_shapes is not None:
        return _through_tensorflow(on_step, "polymorphic shapes are not recorded in noxla's graph yet")
    try:
        recorded = run_step(on_step, "lower (noxla's graph, no TensorFlow)", record_program, program,
                            options.strict, needs_tfjs_lowering(program))
        with atomic_output(path, options.overwrite) as scratch:
            run_step(on_step, f"write tfjs {path}", write_tfjs, recorded, scratch, options.tfjs_quantize,
                     options.tfjs_shard_bytes)
            if options.demo_page:
                from noxla.demo import write_demo
                write_demo(scratch, fun, program, example_args)
    except Uncovered as e:
        return _through_tensorflow(on_step, f"noxla's graph does not record {e}")
    return os.path.abspath(path)


def _through_tensorflow(on_step, reason: str) -> None:
    run_step(on_step, f"tfjs through TensorFlow: {reason}", lambda: None)
    return None
