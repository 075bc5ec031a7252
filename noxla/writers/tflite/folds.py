"""Folds the graph writer makes after ``passes.simplify`` where TF's converter (its constant folding)
writes fewer operators than the legalized rules' ops:

- an operator of constants only is its value, where numpy computes exactly what LiteRT's kernel
  would: moves (RESHAPE, SLICE, CONCATENATION), selects, casts between integer types, and int32
  arithmetic whose results fit in int32 (``threefry``'s split of a PRNG key's seed into words:
  the high word of an int32 seed is a select on a constant condition of zeros);
- operators of the same kind on equal small constants and the same run-time tensors compute
  one thing, computed once (``fuse.first_common_operator``, after the folds: a bound checked
  twice against one literal);
- a FULLY_CONNECTED of a RESHAPE that only merges the leading axes reads the RESHAPE's input, as
  the converter writes it (the kernel flattens leading axes itself);
- ``x OR false`` is x, ``x AND true`` is x (grappler's folds of a constant identity operand: the
  strict relu's ``isnan(x) | isnan(0)``, whose second operand the recorder folds to false);
- an activation into its producer again (``fuse.activation_into_producer``), where ``passes`` left
  out the RESHAPE between them (DenseGeneral's bias and ReLU after its FULLY_CONNECTED).

Each computes the same values in the same order as the ops it replaces."""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.fuse import activation_into_producer, first_common_operator
from noxla.writers.tflite.model import Graph, Op

_INT = {np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.bool_), np.dtype(np.int64), np.dtype(np.int8),
        np.dtype(np.uint8), np.dtype(np.int16)}
_ARITHMETIC = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply}


def fold(graph: Graph) -> bool:
    for rewrite in (_constant_operators, _logical_identities, first_common_operator, _fully_connected_of_flatten,
                    activation_into_producer):
        if rewrite(graph):
            return True
    return False


def _value(op: Op) -> np.ndarray | None:
    """What LiteRT computes for ``op`` of constant inputs, where numpy computes it exactly; else None."""
    data = [t.data for t in op.inputs if t is not None]
    out = op.out
    if op.options.get("fusedActivationFunction"):
        return None
    if op.kind == "RESHAPE":
        return data[0].reshape(out.shape)
    if op.kind == "CAST":
        return data[0].astype(out.dtype) if data[0].dtype in _INT and out.dtype in _INT else None
    if op.kind == "SELECT_V2" or op.kind == "SELECT" and len({t.shape for t in op.inputs}) == 1:
        return np.where(data[0].astype(bool), data[1], data[2])
    if op.kind == "SLICE":
        begin, size = (np.asarray(d).tolist() for d in data[1:])
        return data[0][tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]
    if op.kind == "CONCATENATION":
        return np.concatenate(data, axis=op.options["axis"])
    if out.dtype != np.int32 or any(d.dtype != np.int32 for d in data) or len(data) != 2:
        return None
    a, b = (d.astype(np.int64) for d in data)
    if op.kind in _ARITHMETIC:
        value = _ARITHMETIC[op.kind](a, b)
    elif op.kind in ("FLOOR_DIV", "FLOOR_MOD") and np.all(b != 0):
        value = (np.floor_divide if op.kind == "FLOOR_DIV" else np.mod)(a, b)
    else:
        return None
    return value if np.all(np.abs(value) < 2**31 - 1) else None   # LiteRT's int32 overflow left alone


def _constant_operators(graph: Graph) -> bool:
    outputs = {t.id for t in graph.outputs}
    for op in graph.ops:
        if len(op.outputs) != 1 or op.out.id in outputs \
                or not all(t is None or t.is_constant for t in op.inputs):
            continue
        value = _value(op)
        if value is None or tuple(value.shape) != op.out.shape \
                or value.size > max(t.data.size for t in op.inputs if t is not None):   # no constant grown
            continue
        graph.replace_uses(op.out, graph.constant(value.astype(op.out.dtype)))
        return True
    return False


_IDENTITY = {"LOGICAL_OR": False, "LOGICAL_AND": True}


def _logical_identities(graph: Graph) -> bool:
    """LOGICAL_OR of a constant all false, LOGICAL_AND of one all true: the other operand, where it
    has the output's shape (not where the constant broadcasts it)."""
    for op in graph.ops:
        if op.kind not in _IDENTITY:
            continue
        for k, t in enumerate(op.inputs):
            other = op.inputs[1 - k]
            if t.is_constant and np.all(np.asarray(t.data, bool) == _IDENTITY[op.kind]) \
                    and other.shape == op.out.shape:
                graph.replace_uses(op.out, other)
                return True
    return False


def _fully_connected_of_flatten(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        flatten = view.producer(op.inputs[0], "RESHAPE") if op.kind == "FULLY_CONNECTED" else None
        if flatten is None or len(op.out.shape) != 2 or len(flatten.out.shape) != 2:
            continue
        x = flatten.inputs[0]
        if len(x.shape) >= 2 and x.shape[-1:] == flatten.out.shape[-1:] and not x.is_constant \
                and int(np.prod(x.shape[:-1])) == op.out.shape[0]:
            op.inputs[0] = x
            op.options = {**op.options, "keepNumDims": False}
            return True
    return False
