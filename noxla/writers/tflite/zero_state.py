"""A recurrent cell's first step from a zero state, as grappler folds it on TF's path: the forget
gate times the zero initial cell state, added to the input gate's product, is that product
(``c1 = f * 0 + i * g`` is ``i * g``), and the forget gate is then computed for nothing.

``f * 0`` is not 0 where ``f`` is NaN, so the fold is made only where ``f`` and the other addend
are NaN in the same rows: both computed from one input ``x`` of [rows, k] whose elements are NaN or
finite and bounded (an embedding, with the NaN a gather out of range fills in), through a
FULLY_CONNECTED (which makes a whole row NaN where a row of ``x`` holds one, as ``NaN * w`` is NaN
for every ``w``, and no other element NaN or infinite, its bound keeping the sums finite), splits
along the units, and elementwise operators of constants or of operands of the same rows. In a row
without a NaN, ``f * 0 + q`` is ``q`` (up to a zero's sign); in a row with one, both are NaN."""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.model import Graph, Tensor, View

_FINITE = 1e30   # a bound below it leaves float32 sums and products far from infinity
_MOVES = {"RESHAPE", "TRANSPOSE", "UNPACK", "SLICE", "SPLIT_V", "SPLIT", "PACK", "CONCATENATION",
          "SELECT", "SELECT_V2"}


def zero_state_products(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        if op.kind != "ADD" or op.options.get("fusedActivationFunction"):
            continue
        for product, q in (op.inputs, op.inputs[::-1]):
            gate = _times_zeros(view, product)
            if gate is None or q.shape != op.out.shape or gate.shape != op.out.shape:
                continue
            rows_f, rows_q = _rows(view, gate), _rows(view, q)
            if rows_f is not None and rows_q is not None and rows_f[0] == rows_q[0]:
                graph.replace_uses(op.out, q)
                return True
    return False


def _times_zeros(view: View, t: Tensor) -> Tensor | None:
    op = view.producer(t, "MUL")
    if op is None or op.options.get("fusedActivationFunction"):
        return None
    for x, zeros in (op.inputs, op.inputs[::-1]):
        if zeros.is_constant and not x.is_constant and not np.any(zeros.data) and x.shape == t.shape:
            return x
    return None


def _bound(data: np.ndarray) -> float | None:
    finite = data[~np.isnan(data)] if data.dtype.kind == "f" else data
    if finite.size and not np.all(np.isfinite(finite)):
        return None
    return float(np.max(np.abs(finite))) if finite.size else 0.0


def _nan_or_bounded(view: View, t: Tensor, depth: int = 0) -> float | None:
    """A bound on every element of ``t`` that is not NaN (none infinite); None where not known."""
    if t.is_constant:
        return _bound(t.data)
    op = view.made_by.get(t.id)
    if op is None or depth > 32:
        return None
    if op.kind in ("LOGISTIC", "TANH"):
        return 1.0
    if op.kind == "GATHER" and op.inputs[0].is_constant:
        return _bound(op.inputs[0].data)
    if op.kind not in _MOVES:
        return None
    data = op.inputs[1:] if op.kind in ("SELECT", "SELECT_V2") else \
        op.inputs if op.kind in ("PACK", "CONCATENATION") else op.inputs[:1]
    if op.kind == "SPLIT":
        data = op.inputs[1:]
    bounds = [_nan_or_bounded(view, d, depth + 1) for d in data]
    return None if any(b is None for b in bounds) else max(bounds)


def _rows(view: View, t: Tensor, depth: int = 0) -> tuple | None:
    """(which rows, bound): ``t`` [rows, units] is NaN in whole rows, those of a row of one input
    that holds a NaN (named by that input), and finite within the bound elsewhere."""
    op = view.made_by.get(t.id)
    if op is None or depth > 32 or len(t.shape) != 2:
        return None
    if op.kind == "FULLY_CONNECTED":
        x, weights, bias = op.inputs
        if op.options.get("fusedActivationFunction") or len(x.shape) != 2 or x.shape[0] != t.shape[0] \
                or not weights.is_constant or bias is not None and not bias.is_constant:
            return None
        bound_x, bound_w = _nan_or_bounded(view, x), _bound(np.sum(np.abs(weights.data), axis=1))
        bound_b = 0.0 if bias is None else _bound(bias.data)
        if bound_x is None or bound_w is None or bound_b is None or np.isnan(weights.data).any():
            return None
        rows = _rows(view, x, depth + 1)
        return _checked(rows[0] if rows is not None else x.id, bound_x * bound_w + bound_b)
    if op.kind in ("SPLIT_V", "SPLIT"):
        data = op.inputs[1] if op.kind == "SPLIT" else op.inputs[0]
        axis = int((op.inputs[0] if op.kind == "SPLIT" else op.inputs[2]).data)
        return _rows(view, data, depth + 1) if axis in (-1, len(data.shape) - 1) else None
    if op.kind in ("LOGISTIC", "TANH"):
        rows = _rows(view, op.inputs[0], depth + 1)
        return None if rows is None else (rows[0], 1.0)
    if op.kind in ("ADD", "SUB", "MUL") and not op.options.get("fusedActivationFunction"):
        parts = []
        for x in op.inputs:
            if x.is_constant:
                parts.append((None, _bound(x.data)))
            elif x.shape == t.shape:
                parts.append(_rows(view, x, depth + 1))
            else:
                return None
        if any(p is None or p[1] is None for p in parts) or len({p[0] for p in parts} - {None}) != 1:
            return None
        (which,) = {p[0] for p in parts} - {None}
        (a, _), (b, _) = ((p[1], 0) for p in parts)
        return _checked(which, a * b if op.kind == "MUL" else a + b)
    return None


def _checked(which, bound: float) -> tuple | None:
    return (which, bound) if bound < _FINITE else None
