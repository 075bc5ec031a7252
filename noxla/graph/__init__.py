"""noxla's own graph of TF ops (issue 41, stage 1): the rules' ops recorded without TensorFlow
(``lower.record_program``), written as a TF.js graph model (``tfjs``) or replayed as real TF ops
(``tf_replay``, the oracle). What is not recorded yet raises ``Uncovered``, and the export takes
TensorFlow's path as before. See docs/graph.md."""
from __future__ import annotations

import os
from typing import Callable, Sequence

from noxla.graph.dtypes import Uncovered
from noxla.preflight import Cleared, ExportOptions, atomic_output, run_step

__all__ = ["Uncovered", "covers", "enabled", "export_tfjs", "write_program_tfjs"]


# Stage 1 takes the graph path only when asked (NOXLA_TFJS_GRAPH=1): on three zoo models its
# model.json still has more ops than TF's path, whose grappler makes rewrites the graph's passes do
# not make yet (AddN of add chains, a layer norm's reassociations; docs/graph.md). The default flips
# when tests/test_graph.py's op-count comparison holds on the whole zoo.
ENV = "NOXLA_TFJS_GRAPH"


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def covers(options: ExportOptions) -> bool:
    """Whether an export may take the graph path: a lone TF.js model of static shapes, when enabled."""
    return enabled() and set(options.wanted) == {"tfjs"} and options.polymorphic_shapes is None


def write_program_tfjs(program, path: str, strict: bool = False, quantize: str | None = None,
                       weight_shard_size_bytes: int | None = None) -> None:
    """``program``'s TF.js model written at ``path`` from the graph, as ``export_tfjs`` writes it (for
    the tests' harness, which writes what the export would). Raises ``Uncovered`` before writing."""
    from noxla.graph.lower import record_program
    from noxla.graph.tfjs import write_tfjs
    from noxla.lowering_variants import needs_tfjs_lowering
    recorded = record_program(program, strict, needs_tfjs_lowering(program))
    extra = {} if weight_shard_size_bytes is None else {"weight_shard_size_bytes": weight_shard_size_bytes}
    write_tfjs(recorded, path, quantize, **extra)


def export_tfjs(cleared: Cleared, fun: Callable, example_args: Sequence, options: ExportOptions) -> str | None:
    """The TF.js model written at ``path`` from the graph; None (nothing written) when the program
    uses something the graph does not record, which TF's path then exports."""
    from noxla.graph.lower import record_program
    from noxla.graph.tfjs import write_tfjs
    from noxla.lowering_variants import needs_tfjs_lowering
    program, path, on_step = cleared.program, options.tfjs, options.on_step
    try:
        recorded = run_step(on_step, "lower (graph)", record_program, program, options.strict,
                            needs_tfjs_lowering(program))
        with atomic_output(path, options.overwrite) as scratch:
            run_step(on_step, f"write tfjs {path}", write_tfjs, recorded, scratch, options.tfjs_quantize,
                     options.tfjs_shard_bytes)
            if options.demo_page:
                from noxla.demo import write_demo
                write_demo(scratch, fun, program, example_args)
    except Uncovered as e:
        if on_step is not None:
            on_step(f"graph writer: {e}; lowering through TensorFlow", 0.0)
        return None
    return os.path.abspath(path)
