"""While and If bodies as TFLite subgraphs, in the forms TF's converter writes them: a StatelessWhile
as ``WHILE`` (its cond and body subgraphs each take every loop variable, the captures after the
recorded ones, and the body returns them all, a capture as the input it is), a StatelessIf as ``IF``
(the predicate, then the captures, which both branches take). A body's constants are its own
tensors (the recorder copies a captured Const into the body). Each body is legalized as a graph of
its own (``legalize_nodes``) and given the passes the main graph gets (``optimize``): they are
valid within a body, whose inputs and outputs they keep. LiteRT runs a body only where its
inputs' and outputs' types and shapes are the operator's, which ``optimize`` checks last."""
from __future__ import annotations

import numpy as np

from noxla.graph.core import Function, Node
from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite.legalize import legalize_nodes, legalizer, live
from noxla.writers.tflite.model import (
    GRAPH_WRITER_KINDS,
    MAX_RANK,
    RUNTIME_DTYPES,
    Graph,
    Op,
    Tensor,
    dims,
    shape_of,
    subgraphs,
)


def _carried(graph: Graph, t: Tensor) -> Tensor:
    """``t`` as a loop variable or branch value: of a type LiteRT's WHILE and IF copy (byte for
    byte, whatever the type) and the kernels around them are held to JAX on (``model``'s
    GRAPH_WRITER_KINDS: uint32, a PRNG key's words; float16 and int8, moved and cast)."""
    allowed = RUNTIME_DTYPES | {np.dtype(np.bool_)} | (set(GRAPH_WRITER_KINDS) if graph.uint32_moves else set())
    if t.dtype not in allowed or 0 in t.shape or len(t.shape) > MAX_RANK:
        raise Uncovered(f"a loop variable or branch value of {t.dtype} {t.shape}")
    return t


def _body(outer: Graph, function: Function) -> Graph:
    """``function`` as a graph of its own: its ``_Arg``s the inputs, its results the outputs."""
    body = Graph(uint32_moves=outer.uint32_moves)
    body.name = function.name   # the subgraph's name (the recorder's: while_body, cond_true, ...)
    values: dict = {}
    for arg in function.args:
        dtype, shape = arg.node.outputs[arg.index]
        t = _carried(outer, Tensor(dims(shape), np.dtype(dtype.as_numpy_dtype)))
        body.inputs.append(t)
        values[(id(arg.node), arg.index)] = t
    nodes = function.graph.nodes
    legalize_nodes(body, nodes, values, live(function.rets, function.args, nodes))
    body.outputs = [values[(id(t.node), t.index)] for t in function.rets]
    return body


def _results(node: Node) -> list[Tensor]:
    return [Tensor(dims(shape), np.dtype(dtype.as_numpy_dtype)) for dtype, shape in node.outputs]


@legalizer("StatelessWhile", "While")
def _while(graph, node, *loop_vars):
    cond, body = _body(graph, node.functions["cond"]), _body(graph, node.functions["body"])
    outs = [_carried(graph, t) for t in _results(node)]
    graph.ops.append(Op("WHILE", list(loop_vars), outs, {"condSubgraphIndex": cond, "bodySubgraphIndex": body}))
    return outs


@legalizer("StatelessIf", "If")
def _if(graph, node, pred, *captured):
    then, otherwise = _body(graph, node.functions["then_branch"]), _body(graph, node.functions["else_branch"])
    outs = [_carried(graph, t) for t in _results(node)]
    graph.ops.append(Op("IF", [pred, *captured], outs, {"thenSubgraphIndex": then, "elseSubgraphIndex": otherwise}))
    return outs


def optimize(graph: Graph, passes) -> None:
    """``passes(g)`` on every body ``graph`` names, after the main graph's (which may have
    pruned a loop away); then a loop body's moved variables copied, and each body checked against
    its operator."""
    graphs = [graph, *subgraphs(graph)]
    for body in graphs[1:]:
        passes(body)
    for g in graphs:
        for op in g.ops:
            if op.kind == "WHILE":
                _copy_moved(op.options["bodySubgraphIndex"])
            _agree(op)


def _copy_moved(body: Graph) -> None:
    """A body result that is another loop variable's input, copied (a RESHAPE to its own shape, as
    the converter writes it): LiteRT copies the results into the inputs one at a time, so ``(b, a)``
    returned as they are would read ``a`` after it was overwritten."""
    for i, t in enumerate(body.outputs):
        if any(t is x for j, x in enumerate(body.inputs) if j != i):
            body.outputs[i] = body.add("RESHAPE", [t, shape_of(body, t)], t.shape, t.dtype)


def _agree(op: Op) -> None:
    """LiteRT's WHILE and IF need each body's inputs and outputs to be the operator's own, in type
    and shape: a pass that changed one would make a model LiteRT refuses or misreads."""
    if op.kind not in ("WHILE", "IF"):
        return
    operands = op.inputs if op.kind == "WHILE" else op.inputs[1:]
    cond, body = (op.options["condSubgraphIndex"], op.options["bodySubgraphIndex"]) if op.kind == "WHILE" \
        else (op.options["thenSubgraphIndex"], op.options["elseSubgraphIndex"])
    expected = [(t.shape, t.dtype) for t in operands]
    results = [(t.shape, t.dtype) for t in op.outputs]
    for g, ins, outs in ((cond, expected, None if op.kind == "WHILE" else results), (body, expected, results)):
        if [(t.shape, t.dtype) for t in g.inputs] != ins or (
                outs is not None and [(t.shape, t.dtype) for t in g.outputs] != outs):
            raise Uncovered(f"a {op.kind} body whose inputs or outputs a pass changed")
    if op.kind == "WHILE" and [(t.shape, t.dtype) for t in cond.outputs] != [((), np.dtype(np.bool_))]:
        raise Uncovered("a WHILE condition that is no boolean scalar")
