"""Polymorphic programs (symbolic sizes: the recorder's None, ``model.DYNAMIC``) legalized as TF's
converter legalizes a tf.function of None sizes: the rules' run-time shape arithmetic as recorded
(``Shape`` as SHAPE; its slices, integer ops and ``Pack`` by their usual legalizers), and the ops
that take a computed shape as the builtins reading it at run time: RESHAPE of a shape tensor,
FILL, BROADCAST_TO, SLICE and STRIDED_SLICE of run-time bounds, PAD, PADV2 and MIRROR_PAD of run-time
paddings, TILE of run-time multiples, RANGE, ZEROS_LIKE, TRANSPOSE_CONV to a run-time output
shape, SPLIT_V of run-time sizes, SCATTER_ND to a run-time shape. Where every size involved is
known, the static legalizers' forms. A reshape to one unknown size among known ones reads a constant shape
with -1 there (the element count determines it) rather than the computed one."""
from __future__ import annotations

import numpy as np

from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite import legalize_math, legalize_nn, legalize_scans  # noqa: F401  (the static ones kept below)
from noxla.writers.tflite.legalize import (
    LEGALIZERS,
    _attr,
    _dtype,
    _many,
    _nhwc,
    _out,
    _padding,
    _per_axis,
    _shape,
    _static,
    legalizer,
    reshape,
)
from noxla.writers.tflite.model import Graph, RunTimeSize, Tensor, shape_constant, unknown

_STATIC = {op: LEGALIZERS[op] for op in ("Reshape", "Squeeze", "ExpandDims", "BroadcastTo", "Fill", "Slice",
                                         "StridedSlice", "Pad", "PadV2", "MirrorPad", "Tile", "Conv2DBackpropInput",
                                         "SplitV", "ScatterNd")}


def _int32(graph: Graph, t: Tensor) -> Tensor:
    """A shape, bound or padding tensor as int32 (the builtins' type for them)."""
    if t.dtype == np.int32:
        return t
    if t.is_constant:
        return graph.constant(t.data.astype(np.int32))
    return graph.add("CAST", [t], t.shape, np.int32)


def reshape_to(graph: Graph, x: Tensor, shape: tuple, computed: Tensor | None = None) -> Tensor:
    """``x`` reshaped to ``shape`` (sizes ``DYNAMIC`` where unknown). One unknown size: a RESHAPE
    to a constant with -1 there. Several: a RESHAPE of ``computed`` (the program's shape tensor),
    whose output's unknown sizes are fresh: the passes must not take them for ``x``'s."""
    if not unknown(shape):
        return reshape(graph, x, shape)
    if unknown(shape) == 1:
        if shape == x.shape:   # the known sizes and the element count agree: the same shape
            return x
        return graph.add("RESHAPE", [x, shape_constant(graph, shape)], shape, x.dtype)
    if computed is None:
        shape_constant(graph, shape)   # Uncovered
    fresh = tuple(RunTimeSize() if isinstance(d, RunTimeSize) else d for d in shape)
    return graph.add("RESHAPE", [x, _int32(graph, computed)], fresh, x.dtype)


def _known(*shapes) -> bool:
    return not any(unknown(s) for s in shapes)


@legalizer("Shape")
def _shape_op(graph, node, x):
    if _dtype(node) != np.int32:
        raise Uncovered(f"a Shape of {_dtype(node)} in the TFLite writer")
    return _out(graph, "SHAPE", node, [x], outType=2)   # schema.TensorType.INT32


@legalizer("Reshape", "Squeeze", "ExpandDims")
def _reshape(graph, node, x, *shape):
    out = _shape(node)
    if _known(out, x.shape):
        return _STATIC[node.op](graph, node, x, *shape)
    if unknown(out) < 2 or node.op == "Reshape":
        return reshape_to(graph, x, out, shape[0] if node.op == "Reshape" else None)
    if node.op == "Squeeze":
        axes = [a % len(x.shape) for a in _attr(node, "squeeze_dims", [])] or \
            [a for a, d in enumerate(x.shape) if d == 1]
        return _out(graph, "SQUEEZE", node, [x], squeezeDims=axes)
    return _out(graph, "EXPAND_DIMS", node, [x, _int32(graph, shape[0])])


@legalizer("BroadcastTo")
def _broadcast_to(graph, node, x, shape):
    out = _shape(node)
    if _known(out):
        return _STATIC["BroadcastTo"](graph, node, x, shape)
    if x.shape == out:   # JAX broadcasts a size to an equal one or from 1
        return x
    return _out(graph, "BROADCAST_TO", node, [x, _int32(graph, shape)])


@legalizer("Fill")
def _fill(graph, node, shape, value):
    if _known(_shape(node)):
        return _STATIC["Fill"](graph, node, shape, value)
    return _out(graph, "FILL", node, [_int32(graph, shape), reshape(graph, value, ())])


@legalizer("ZerosLike")
def _zeros_like(graph, node, x):
    return _out(graph, "ZEROS_LIKE", node, [x])


@legalizer("Range")
def _range(graph, node, start, limit, delta):
    return _out(graph, "RANGE", node, [start, limit, delta])


@legalizer("Tile")
def _tile(graph, node, x, multiples):
    if multiples.is_constant:
        return _STATIC["Tile"](graph, node, x, multiples)
    return _out(graph, "TILE", node, [x, _int32(graph, multiples)])


@legalizer("Slice")
def _slice(graph, node, x, begin, size):
    if _known(_shape(node)):   # the static form: the size is the output's
        return _STATIC["Slice"](graph, node, x, begin, size)
    return _out(graph, "SLICE", node, [x, _int32(graph, begin), _int32(graph, size)])   # a size of -1: the rest


@legalizer("StridedSlice")
def _strided_slice(graph, node, x, begin, end, strides):
    """STRIDED_SLICE of x's own axes, as the static form (an ellipsis expanded, new axes a reshape
    after it), where a size is unknown and the bounds are constants; TF's bounds and masks as they
    are where the bounds are computed (no ellipsis or new axis then)."""
    bounds = (begin, end, strides)
    if _known(x.shape, _shape(node)) and all(t.is_constant for t in bounds):
        return _STATIC["StridedSlice"](graph, node, x, begin, end, strides)
    if all(t.is_constant for t in bounds):
        b, e, s, masks, new_axes = _per_axis(node, x, begin, end, strides)
        out = _shape(node)
        kept = tuple(n for i, n in enumerate(out) if i not in new_axes)
        if _ends_at_zero(e, s, masks):
            raise Uncovered("a STRIDED_SLICE ending at 0 of a size known only at run time in the TFLite writer")
        y = graph.add("STRIDED_SLICE", [x, *(graph.int32(v) for v in (b, e, s))], kept, x.dtype,
                      beginMask=masks["begin"], endMask=masks["end"], ellipsisMask=0, newAxisMask=0,
                      shrinkAxisMask=masks["shrink_axis"], offset=False)
        return reshape_to(graph, y, out) if new_axes else y
    if _attr(node, "ellipsis_mask", 0) or _attr(node, "new_axis_mask", 0) or begin.shape != (len(x.shape),):
        raise Uncovered("a strided slice of run-time bounds, an ellipsis or new axes in the TFLite writer")
    masks = {k: _attr(node, f"{k}_mask", 0) for k in ("begin", "end", "shrink_axis")}
    return _out(graph, "STRIDED_SLICE", node, [x, *(_int32(graph, t) for t in bounds)], beginMask=masks["begin"],
                endMask=masks["end"], ellipsisMask=0, newAxisMask=0, shrinkAxisMask=masks["shrink_axis"],
                offset=False)


def _ends_at_zero(e: list, s: list, masks: dict) -> bool:
    """Whether an axis of a constant-bound STRIDED_SLICE ends at 0 with a positive stride (empty,
    whatever its size). LiteRT's XNNPACK delegate reads that end as the axis's end (XNNPACK's 0, which
    it makes of an end mask): x[0:0] of a run-time size came back whole. The recorder, as TF, leaves
    the size unknown, so nothing folds it; TF's path writes a SLICE of size 0, which XNNPACK leaves
    to LiteRT's kernel."""
    return any(end == 0 and stride > 0 and not (masks["end"] | masks["shrink_axis"]) >> i & 1
               for i, (end, stride) in enumerate(zip(e, s)))


@legalizer("Pad", "PadV2", "MirrorPad")
def _pad(graph, node, x, paddings, *value):
    if paddings.is_constant:
        return _STATIC[node.op](graph, node, x, paddings, *value)
    pads = _int32(graph, paddings)
    if node.op == "MirrorPad":
        return _out(graph, "MIRROR_PAD", node, [x, pads], mode={"REFLECT": 0, "SYMMETRIC": 1}[_attr(node, "mode")])
    if value and not (value[0].is_constant and value[0].data == 0 and not np.signbit(value[0].data)):
        return _out(graph, "PADV2", node, [x, pads, reshape(graph, value[0], ())])
    return _out(graph, "PAD", node, [x, pads])


@legalizer("Conv2DBackpropInput")
def _transpose_conv(graph, node, sizes, w, x):
    """To a run-time output shape (a batch of unknown size): TRANSPOSE_CONV reading the computed
    shape, as the converter writes a tf.function's None batch (SHAPE, STRIDED_SLICE, PACK before it)."""
    if sizes.is_constant:
        return _STATIC["Conv2DBackpropInput"](graph, node, sizes, w, x)
    _nhwc(node)
    if _dtype(node) != np.float32 or any(d != 1 for d in _attr(node, "dilations", [1, 1, 1, 1])):
        raise Uncovered(f"a dilated or {_dtype(node)} Conv2DBackpropInput in the TFLite writer")
    strides = _attr(node, "strides")
    weights = legalize_nn._filter(graph, w, (2, 0, 1, 3))   # [h, w, out, in] as [out, h, w, in]
    return _out(graph, "TRANSPOSE_CONV", node, [x, weights, legalize_nn._zero_bias(graph, w.shape[2]),
                                                _int32(graph, sizes)],
                padding=_padding(node), strideH=strides[1], strideW=strides[2], fusedActivationFunction=0)


@legalizer("SplitV")
def _split_v(graph, node, x, sizes, axis):
    """Of run-time sizes: SPLIT_V reading them (LiteRT sizes its outputs when it runs); each piece's
    size on the axis a fresh unknown one, equal to no other."""
    if sizes.is_constant:
        return _STATIC["SplitV"](graph, node, x, sizes, axis)
    a = int(_static(axis, "a split's axis")) % len(x.shape)
    outs = [Tensor(tuple(RunTimeSize() if i == a else d for i, d in enumerate(_shape(node, k))), _dtype(node, k))
            for k in range(len(node.outputs))]
    return _many(graph, "SPLIT_V", [x, _int32(graph, sizes), graph.int32(a)], outs, numSplits=len(outs))


@legalizer("ScatterNd")
def _scatter_nd(graph, node, indices, updates, shape):
    if shape.is_constant:
        return _STATIC["ScatterNd"](graph, node, indices, updates, shape)
    return _out(graph, "SCATTER_ND", node, [indices, updates, _int32(graph, shape)])
