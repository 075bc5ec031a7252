"""Integer arithmetic on constants simplified as grappler simplifies it on TF's path before the
converter, where the result is exact (integer sums wrap and associate): the dimension expressions
JAX evaluates for a symbolic size (``b * 1 + 0``) and a scatter's flat positions (an iota plus an
iota) leave no operator TF's path's file lacks. Folds tried before a node's legalizer (``FOLDS``)."""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.legalize import FOLDS, _dtype, _shape
from noxla.writers.tflite.model import Graph, broadcast_shape


def _integer_identity(graph: Graph, node, inputs: list, folded: set) -> list | None:   # one of FOLDS
    """An integer ``x * 1``, ``x + 0`` or ``x - 0`` is ``x`` where it keeps x's shape (exact, as
    grappler's arithmetic folds them on TF's path): the dimension expressions JAX evaluates for a
    symbolic size (``b * 1 + 0``) leave the run-time size itself."""
    if node.op not in ("Mul", "Add", "AddV2", "Sub") or not np.issubdtype(_dtype(node), np.integer):
        return None
    neutral = 1 if node.op == "Mul" else 0
    for x, c in (inputs, inputs[::-1]) if node.op != "Sub" else (inputs,):
        if c.is_constant and not x.is_constant and x.shape == _shape(node) and np.all(c.data == neutral):
            return [x]
    return None


def _integer_constants_summed(graph: Graph, node, inputs: list, folded: set) -> list | None:   # one of FOLDS
    """An integer ``(x + c1) + c2`` as ``x + (c1 + c2)`` (wrapping sums associate exactly), as
    grappler moves constants together on TF's path: a scatter's flat positions sum two iotas."""
    if node.op not in ("Add", "AddV2") or not np.issubdtype(_dtype(node), np.integer):
        return None
    a, c2 = inputs if inputs[1].is_constant else inputs[::-1]
    if not c2.is_constant:
        return None
    inner = next((op for op in reversed(graph.ops) if any(t is a for t in op.outputs)), None)
    if inner is None or inner.kind != "ADD" or inner.options.get("fusedActivationFunction"):
        return None
    x, c1 = inner.inputs if inner.inputs[1].is_constant else inner.inputs[::-1]
    if x.is_constant or not c1.is_constant:
        return None
    with np.errstate(over="ignore"):
        c = (c1.data + c2.data).astype(_dtype(node))
    if c.size > max(c1.data.size, c2.data.size, 1024) or broadcast_shape(x.shape, c.shape) != _shape(node):
        return None
    return [graph.add("ADD", [x, graph.constant(c)], _shape(node), _dtype(node), fusedActivationFunction=0)]


FOLDS.extend([_integer_identity, _integer_constants_summed])
