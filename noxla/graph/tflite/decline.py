"""Graphs the direct writer leaves to the TF path because it would write them with more
operators: patterns the TF path's rules lower in fewer operators than their equations, and
reshapes and projections its flatbuffer passes remove or join. Each raises ``Uncovered``; a graph
taken here must come out no larger than the TF path's."""
from __future__ import annotations

import numpy as np

from noxla.graph.tflite.model import Graph, Op, Tensor, Uncovered, View

# Operators that run alike in another layout of their input (``noxla.tflite_reshapes``).
_ELEMENTWISE = {"ABS", "CEIL", "COS", "EXP", "FLOOR", "GELU", "HARD_SWISH", "LOG", "LOGISTIC", "NEG", "RELU",
                "RELU6", "RSQRT", "SIN", "SQRT", "TANH", "ADD", "DIV", "MAXIMUM", "MINIMUM", "MUL", "SUB",
                "SOFTMAX"}


def decline_what_the_tf_path_does_better(graph: Graph, passes_follow: bool = False) -> None:
    """``Uncovered`` for a fused graph the TF path would write smaller: one its rules shorten (below)
    or its own flatbuffer passes would: a reshape and its inverse around operators that run alike
    in either layout, a squeeze of leading unit axes before a batched product (``noxla.tflite_reshapes``), projections
    of one row of one input, which it joins into one FULLY_CONNECTED (``noxla.tflite_projections``).
    ``passes_follow``: those passes run on what is written here (``noxla.graph_signatures`` runs
    them on the merged signatures, as TF's path does), so nothing is declined for them."""
    if passes_follow:
        return
    view = View.of(graph)
    for op in graph.ops:
        if op.kind != "RESHAPE":
            continue
        readers = [r for r in view.read_by.get(op.out.id, []) if r is not None]
        a, b = op.inputs[0].shape, op.out.shape
        if any(r.kind == "BATCH_MATMUL" for r in readers) and len(a) > len(b) \
                and a[len(a) - len(b):] == b and all(d == 1 for d in a[:len(a) - len(b)]):
            raise Uncovered("a squeeze before a batched product, which the TF path's passes remove")
        links, t = 0, op.out
        while len(view.read_by.get(t.id, [])) == 1 and view.read_by[t.id][0] is not None:
            reader = view.read_by[t.id][0]   # the chain noxla.tflite_reshapes follows: one reader each
            if reader.kind == "RESHAPE" and reader.out.shape == op.inputs[0].shape and links:
                raise Uncovered("reshapes around elementwise operators, which the TF path's passes remove")
            if reader.kind not in _ELEMENTWISE | {"RESHAPE"}:
                break
            links, t = links + (reader.kind != "RESHAPE"), reader.out
    rows: dict = {}
    for op in graph.ops:
        if op.kind == "FULLY_CONNECTED":
            rows.setdefault(op.inputs[0].id, []).append(int(np.prod(op.inputs[0].shape[:-1])))
    if any(len(r) > 1 and 1 in r for r in rows.values()):
        raise Uncovered("projections of one row of one input, which the TF path joins")


def _behind(view: View, t: Tensor, through: set) -> list[Op]:
    """The operators that make ``t``, and those behind them through operators of ``through``."""
    found, todo = {}, [t]
    while todo:
        op = view.made_by.get(todo.pop().id)
        if op is not None and id(op) not in found:
            found[id(op)] = op
            if op.kind in through:
                todo.extend(x for x in op.inputs if x is not None and not x.is_constant)
    return list(found.values())


def decline_patterns_its_rules_shorten(graph: Graph) -> None:
    """Patterns the TF path's rules lower in fewer operators than their equations: rotary
    embeddings (``lowering_rules.rope``: halves or pairs of one tensor, rotated and joined), a
    slice of a join (``lowering_rules.joins`` reads the part), and a product of a repeated operand
    (``lowering_rules.grouped_query`` reads it unrepeated). Only the direct writer, which lowers
    JAX's equations itself, needs this; the graph writer writes what the rules wrote."""
    view = View.of(graph)
    moves = {"RESHAPE", "TRANSPOSE"}
    for op in graph.ops:
        if op.kind == "CONCATENATION":
            sliced = [{s.inputs[0].id for s in _behind(view, x, _ELEMENTWISE | moves)
                       if s.kind in {"SLICE", "STRIDED_SLICE"}} for x in op.inputs]
            if any(a & b for i, a in enumerate(sliced) for b in sliced[i + 1:]):
                raise Uncovered("a rotary embedding, which the TF path's rule writes in fewer operators")
        if op.kind in {"SLICE", "STRIDED_SLICE"} and any(
                p.kind == "CONCATENATION" for p in _behind(view, op.inputs[0], {"RESHAPE"})):
            raise Uncovered("a slice of a concatenation, which the TF path reads from the part")
        if op.kind == "BATCH_MATMUL" and any(
                p.kind == "BROADCAST_TO" for x in op.inputs[:2] for p in _behind(view, x, moves)):
            raise Uncovered("a product of a repeated operand, which the TF path reads unrepeated")
