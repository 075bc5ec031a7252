"""Which TF ops TF.js runs, and which ops a lowering emits that it does not.

TF.js's graph models run the ops of its converter's op mapper lists; ``noxla/writers/tfjs/op_list.json``
holds their names (``noxla.writers.tfjs.graph.tfjs_supported_ops``), generated from the npm package by
``tools/gen_tfjs_ops.py`` (a test fails when it is stale), and the TF.js export refuses a graph
holding any other op. Rules declare their limitations up front; this module is the backstop that
lowers the program once and compares the op types it emits (control-flow bodies included) with that
list, naming the primitive whose name scope emitted each unsupported op. It reads the lowering the
export writes: noxla's graph after TF.js's passes (no TensorFlow), and TF's lowering only where the
graph does not record the program or emits an op TF.js lacks, which TF's path then exports (with
TensorFlow installed; without it, the graph's ops are the verdict). It lives on the export side (it
lowers), and the exporters hand ``TFJS_BACKSTOP`` to the limitations engine's check.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable

from jax.extend import core

from limitations.engine import iter_eqns
from lowering_rules.core.jax_compat import closed_jaxpr
from lowering_rules.core.vocabulary import Target
from noxla.errors import tensorflow_installed
from noxla.front.lowering_variants import needs_tfjs_lowering
from noxla.front.tracing import Program
from noxla.writers.tfjs.graph import tfjs_supported_ops

# Call wrappers the TF.js export inlines (noxla.writers.tfjs.optimize.inlined_calls) before it checks op types;
# their bodies are in the function library, which is checked op by op.
_INLINED_BY_CONVERTER = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


@dataclasses.dataclass(frozen=True)
class EmittedOp:
    op_type: str
    name: str          # the node name, its name-scope path included
    primitive: str     # the primitive whose name scope emitted it, or "" when none did


def _as_program(program_or_jaxpr):
    """A ``Program`` for a closed jaxpr, so it lowers exactly as the exporters lower it."""
    if isinstance(program_or_jaxpr, Program):
        return program_or_jaxpr
    closed = closed_jaxpr(program_or_jaxpr)  # an open jaxpr closed, its own constants kept (JAX 0.11+)
    in_avals = tuple(v.aval for v in closed.jaxpr.invars)
    out_avals = tuple(v.aval for v in closed.jaxpr.outvars)
    return Program("check", closed, None, None, in_avals, out_avals,
                   tuple(f"input_{i}" for i in range(len(in_avals))),
                   tuple(f"output_{i}" for i in range(len(out_avals))))


def _graph_nodes(concrete) -> Iterable:
    graph_def = concrete.graph.as_graph_def()
    yield from graph_def.node
    for function in graph_def.library.function:
        yield from function.node_def


def _primitives_in(closed_jaxpr) -> frozenset[str]:
    return frozenset(e.primitive.name for e in iter_eqns(closed_jaxpr))


def emitting_primitive(node_name: str, primitives: Iterable[str]) -> str:
    """The innermost scope of ``node_name`` that names one of ``primitives``.

    The interpreter opens ``tf.name_scope(primitive)`` around each equation; TF makes repeated
    scope names unique with a ``_N`` suffix. The last path component is the op's own name.
    """
    primitives = set(primitives)
    for scope in reversed(node_name.split("/")[:-1]):
        for candidate in (scope, re.sub(r"_\d+$", "", scope)):
            if candidate in primitives:
                return candidate
    return ""


def emitted_ops(program_or_jaxpr) -> list[EmittedOp]:
    """Every op TF's lowering of a program for TF.js emits (as TF's path lowers it), sorted by node name."""
    from noxla.front.lowering import serving_function  # imports TensorFlow
    program = _as_program(program_or_jaxpr)
    return ops_of(serving_function(program, uint32_as_int32=needs_tfjs_lowering(program)), program.closed_jaxpr)


def graph_unsupported_ops(program_or_jaxpr) -> list[EmittedOp] | None:
    """The ops of noxla's graph of a program, after TF.js's passes (what its TF.js writer writes), that
    TF.js does not run, sorted by node name; None where the graph does not record the program."""
    from noxla.graph.dtypes import Uncovered
    from noxla.graph.lower import record_program
    from noxla.writers.tfjs.from_graph import optimized_for_tfjs, unsupported_nodes
    program = _as_program(program_or_jaxpr)
    try:
        recorded = record_program(program, uint32_as_int32=needs_tfjs_lowering(program))
        functions = optimized_for_tfjs(recorded)
    except Uncovered:
        return None
    primitives = _primitives_in(program.closed_jaxpr)
    nodes = {(n.op, n.name) for n in unsupported_nodes(recorded.graph, functions)}
    return [EmittedOp(op, name, emitting_primitive(name, primitives)) for op, name in sorted(nodes, key=lambda o: o[1])]


def ops_of(concrete, closed_jaxpr) -> list[EmittedOp]:
    """Every op of a lowering (``concrete``) of ``closed_jaxpr``, sorted by node name."""
    primitives = _primitives_in(closed_jaxpr)
    ops = {(n.op, n.name) for n in _graph_nodes(concrete)}
    return [EmittedOp(op, name, emitting_primitive(name, primitives)) for op, name in sorted(ops, key=lambda o: o[1])]


def unsupported_tfjs_ops(program_or_jaxpr) -> list[EmittedOp]:
    """The ops a TF.js export of a program would write that TF.js cannot run: noxla's graph's where it
    records them all in ops TF.js runs (its writer writes the model), else TF's lowering's (TF's path
    exports it), or the graph's when TensorFlow is not installed; none where neither lowers it (the
    export then says it needs TensorFlow)."""
    from_graph = graph_unsupported_ops(program_or_jaxpr)
    if from_graph is not None and (not from_graph or not tensorflow_installed()):
        return from_graph
    if not tensorflow_installed():
        return []
    return _unsupported(emitted_ops(program_or_jaxpr))


def _unsupported(ops: list[EmittedOp]) -> list[EmittedOp]:
    supported = tfjs_supported_ops() | _INLINED_BY_CONVERTER
    return [op for op in ops if op.op_type not in supported]


def eqn_emits(eqn, op_types: Iterable[str]) -> bool:
    """Whether lowering this one equation alone emits any of ``op_types`` TF.js lacks.

    Used only after a whole-program lowering found an unsupported op, to tell which of
    several applications of the same primitive emitted it.
    """
    invars = list(dict.fromkeys(v for v in eqn.invars if not isinstance(v, core.Literal)))
    outvars = [v for v in eqn.outvars if not isinstance(v, core.DropVar)]
    jaxpr = core.Jaxpr([], invars, outvars, [eqn])
    return bool({op.op_type for op in unsupported_tfjs_ops(closed_jaxpr(jaxpr))} & set(op_types))


class _TfjsBackstop:
    """The TF.js op-list backstop in the shape ``limitations.engine.OpBackstop`` asks for.

    ``lowered``: (a closed jaxpr, a callable returning a lowering of it that an exporter makes
    anyway, the graph its converter gets): its ops are read instead of lowering that program again
    (a third of a cold TF.js export's lowering time, half a sampling model's)."""
    target = Target.TFJS

    def __init__(self, lowered: tuple[object, Callable[[], object]] | None = None):
        self._lowered = lowered

    def unsupported_ops(self, closed_jaxpr) -> list[EmittedOp]:
        if self._lowered is not None and closed_jaxpr is self._lowered[0]:
            return _unsupported(ops_of(self._lowered[1](), closed_jaxpr))
        return unsupported_tfjs_ops(closed_jaxpr)

    def eqn_emits(self, eqn, op_types: Iterable[str]) -> bool:
        return eqn_emits(eqn, op_types)

    def __repr__(self) -> str:
        return "TFJS_BACKSTOP"


TFJS_BACKSTOP = _TfjsBackstop()


def backstop_reading(closed_jaxpr, lower: Callable[[], object]) -> _TfjsBackstop:
    """The backstop, reading the ops of ``lower()``: an exporter's own lowering of ``closed_jaxpr``,
    the graph the TF.js converter gets (strict or not, uint32 carried as int32 or not)."""
    return _TfjsBackstop((closed_jaxpr, lower))
