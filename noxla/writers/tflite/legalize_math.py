"""Elementwise functions, index reductions, fills and gathers legalized as TF's converter writes
them: each into its one builtin (``ATAN2``, ``SIGN``, ``ARG_MAX``, ``REDUCE_ALL``, ``GATHER_ND``);
a ``Fill`` of a value computed at run time as a ``BROADCAST_TO`` of it, which the passes fold into
the broadcasting operators reading it, as the converter folds its ``FILL``."""
from __future__ import annotations

import numpy as np

from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite.legalize import _attr, _dtype, _int32, _out, _shape, _static, legalizer, reshape
from noxla.writers.tflite.model import MAX_RANK


@legalizer("Atan2")
def _atan2(graph, node, y, x):
    return _out(graph, "ATAN2", node, [y, x])


@legalizer("Real", "Imag")
def _complex_part(graph, node, z):
    """A complex64 program input's part, as TF's converter writes it: REAL / IMAG of the input."""
    return _out(graph, node.op.upper(), node, [z])


@legalizer("Sign")
def _sign(graph, node, x):
    return _out(graph, "SIGN", node, [x])


@legalizer("ArgMax", "ArgMin")
def _arg(graph, node, x, axis):
    """LiteRT's kernel keeps the first of equal values, as TF's (the rules order NaN themselves)."""
    if _dtype(node) != np.int32:
        raise Uncovered(f"{node.op} with {_dtype(node)} output in the TFLite writer")
    axis = int(_static(axis, f"{node.op}'s axis"))
    kind = "ARG_MAX" if node.op == "ArgMax" else "ARG_MIN"
    return _out(graph, kind, node, [x, _int32(graph, axis)], outputType=2)   # schema.TensorType.INT32


@legalizer("All")
def _all(graph, node, x, axes):
    axes = sorted({int(a) % len(x.shape) for a in np.reshape(_static(axes, "reduction axes"), -1)})
    if not axes:
        return x
    return _out(graph, "REDUCE_ALL", node, [x, _int32(graph, axes)], keepDims=_attr(node, "keep_dims", False))


@legalizer("GatherNd")
def _gather_nd(graph, node, params, indices):
    """Past rank 6 (``model.MAX_RANK``), the index vectors as one list, gathered, and a RESHAPE to
    the output: each slice taken at the same index vector, in the same order."""
    shape = _shape(node)
    if len(shape) <= MAX_RANK:
        return _out(graph, "GATHER_ND", node, [params, indices])
    depth = int(indices.shape[-1])
    count = int(np.prod(indices.shape[:-1]))
    flat = graph.add("GATHER_ND", [params, reshape(graph, indices, (count, depth))],
                     (count, *params.shape[depth:]), _dtype(node))
    return reshape(graph, flat, shape)


@legalizer("Fill")
def _fill(graph, node, dims, value):
    shape = _shape(node)
    if value.is_constant:   # grappler folds it
        return graph.constant(np.full(shape, value.data, _dtype(node)))
    return _out(graph, "BROADCAST_TO", node, [reshape(graph, value, ()), _int32(graph, shape)])
