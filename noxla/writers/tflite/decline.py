"""Graphs the graph's TFLite writer would write with more operators than the TF path: reshapes and
projections TF's path's flatbuffer passes remove or join. ``what_the_tf_path_does_better`` names
what it finds, and the writer then runs those passes on its file
(``noxla.writers.tflite.Passes.merged``), which must come out no larger than the TF path's."""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.model import Graph, View, unknown

# Operators that run alike in another layout of their input (``noxla.writers.tflite.flatbuffer.reshapes``).
_ELEMENTWISE = {"ABS", "CEIL", "COS", "EXP", "FLOOR", "GELU", "HARD_SWISH", "LOG", "LOGISTIC", "NEG", "RELU",
                "RELU6", "RSQRT", "SIN", "SQRT", "TANH", "ADD", "DIV", "MAXIMUM", "MINIMUM", "MUL", "SUB",
                "SOFTMAX"}


def what_the_tf_path_does_better(graph: Graph) -> str | None:
    """What the TF path's flatbuffer passes would write smaller in a fused graph, or None: a reshape
    and its inverse around operators that run alike in either layout, a squeeze of leading unit axes
    before a batched product (``noxla.writers.tflite.flatbuffer.reshapes``), projections of one row
    of one input, which it joins into one FULLY_CONNECTED (``noxla.writers.tflite.flatbuffer.projections``)."""
    reason = reshapes_the_tf_path_removes(graph)
    if reason:
        return reason
    rows: dict = {}
    for op in graph.ops:
        if op.kind == "FULLY_CONNECTED":
            lead = op.inputs[0].shape[:-1]   # rows known only at run time: not one row here
            rows.setdefault(op.inputs[0].id, []).append(None if unknown(lead) else int(np.prod(lead)))
    if any(len(r) > 1 and 1 in r for r in rows.values()):
        return "projections of one row of one input, which the TF path joins"
    return None


def reshapes_the_tf_path_removes(graph: Graph) -> str | None:
    """What TF's path's reshape passes (``noxla.writers.tflite.flatbuffer.reshapes``) would remove from ``graph``, or
    None: a reshape and its inverse around operators that run alike in either layout, a squeeze of
    leading unit axes before a batched product."""
    view = View.of(graph)
    for op in graph.ops:
        if op.kind != "RESHAPE":
            continue
        readers = [r for r in view.read_by.get(op.out.id, []) if r is not None]
        a, b = op.inputs[0].shape, op.out.shape
        if any(r.kind == "BATCH_MATMUL" for r in readers) and len(a) > len(b) \
                and a[len(a) - len(b):] == b and all(d == 1 for d in a[:len(a) - len(b)]):
            return "a squeeze before a batched product, which the TF path's passes remove"
        links, t = 0, op.out
        while len(view.read_by.get(t.id, [])) == 1 and view.read_by[t.id][0] is not None:
            reader = view.read_by[t.id][0]   # the chain noxla.writers.tflite.flatbuffer.reshapes follows: one reader
            # each
            if reader.kind == "RESHAPE" and reader.out.shape == op.inputs[0].shape and links:
                return "reshapes around elementwise operators, which the TF path's passes remove"
            if reader.kind not in _ELEMENTWISE | {"RESHAPE"}:
                break
            links, t = links + (reader.kind != "RESHAPE"), reader.out
    return None
