"""Convolutions, products and pooling as TFLite's fused-kernel operators (NHWC, constant weights).

Each takes the layout JAX's NHWC/HWIO convolutions and ``x @ w`` products have, and gives the
operator a zero bias that ``fuse`` folds the following bias add and batch-norm scale into."""
from __future__ import annotations

import numpy as np

from noxla.direct_tflite.emit import Uncovered, emitter, full, out_type
from noxla.direct_tflite.graph import Graph

_NHWC = ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))   # lhs, rhs (HWIO) and out specs of an NHWC convolution
SAME, VALID = 0, 1   # schema.Padding


def same_pads(size: int, window: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """The padding TFLite's SAME applies on one spatial axis (the smaller half first)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (window - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def window_padding(padding, sizes, windows, strides, dilations=(1, 1)) -> int | None:
    """VALID or SAME when ``padding`` (one (low, high) per spatial axis) is one of them, else None."""
    padding = [tuple(p) for p in padding]
    if all(p == (0, 0) for p in padding):
        return VALID
    if padding == [same_pads(*a) for a in zip(sizes, windows, strides, dilations)]:
        return SAME
    return None


@emitter("conv_general_dilated")
def _conv(graph: Graph, eqn, x, w, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
          feature_group_count, batch_group_count, precision=None, preferred_element_type=None):
    spec = (dimension_numbers.lhs_spec, dimension_numbers.rhs_spec, dimension_numbers.out_spec)
    if (not w.is_constant or tuple(map(tuple, spec)) != _NHWC or len(window_strides) != 2
            or any(d != 1 for d in lhs_dilation) or batch_group_count != 1 or x.dtype != np.float32):
        raise Uncovered("a convolution other than a 2-D NHWC one of constant float32 HWIO weights")
    x = full(graph, x, eqn.invars[0].aval.shape)
    shape, dtype = out_type(eqn)
    kh, kw, cin, cout = w.shape
    mode = window_padding(padding, x.shape[1:3], (kh, kw), window_strides, rhs_dilation)
    if mode is None:
        if any(p < 0 for pair in padding for p in pair):
            raise Uncovered("a convolution that crops (negative padding)")
        pads = np.asarray([(0, 0), *padding, (0, 0)], np.int32)
        padded = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads))
        x, mode = graph.add("PAD", [x, graph.constant(pads)], padded, dtype), VALID
    data = np.asarray(w.data, np.float32)
    options = dict(padding=mode, strideH=window_strides[0], strideW=window_strides[1],
                   dilationHFactor=rhs_dilation[0], dilationWFactor=rhs_dilation[1], fusedActivationFunction=0)
    bias = graph.constant(np.zeros(cout, np.float32))
    if feature_group_count == 1:
        kernel = graph.constant(np.ascontiguousarray(data.transpose(3, 0, 1, 2)))   # OHWI
        return graph.add("CONV_2D", [x, kernel, bias], shape, dtype, **options)
    if feature_group_count == x.shape[3] and cin == 1:
        kernel = graph.constant(np.ascontiguousarray(data.reshape(1, kh, kw, cout)))
        return graph.add("DEPTHWISE_CONV_2D", [x, kernel, bias], shape, dtype,
                         depthMultiplier=cout // feature_group_count, **options)
    raise Uncovered("a grouped convolution that is not depthwise")


@emitter("dot_general")
def _dot_general(graph: Graph, eqn, x, w, *, dimension_numbers, precision=None, preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers
    if (not w.is_constant or lb or rb or len(w.shape) != 2 or len(x.shape) < 2 or tuple(lc) != (len(x.shape) - 1,)
            or x.dtype != np.float32 or np.dtype(eqn.outvars[0].aval.dtype) != np.float32):
        raise Uncovered("a product other than x @ w of a float32 matrix x and a constant matrix w")
    x = full(graph, x, eqn.invars[0].aval.shape)
    shape, dtype = out_type(eqn)
    data = np.asarray(w.data, np.float32)
    kernel = np.ascontiguousarray(data.T if tuple(rc) == (0,) else data)   # (out, in)
    bias = graph.constant(np.zeros(kernel.shape[0], np.float32))
    return graph.add("FULLY_CONNECTED", [x, graph.constant(kernel), bias], shape, dtype,
                     fusedActivationFunction=0, keepNumDims=True)


@emitter("reduce_window_max")
def _max_pool(graph: Graph, eqn, x, *, window_dimensions, window_strides, padding, base_dilation,
              window_dilation):
    if (len(window_dimensions) != 4 or window_dimensions[0] != 1 or window_dimensions[3] != 1
            or window_strides[0] != 1 or window_strides[3] != 1 or tuple(padding[0]) != (0, 0)
            or tuple(padding[3]) != (0, 0) or any(d != 1 for d in (*base_dilation, *window_dilation))
            or x.dtype != np.float32):
        raise Uncovered("a max window other than a 2-D NHWC pool")
    x = full(graph, x, eqn.invars[0].aval.shape)
    mode = window_padding(padding[1:3], x.shape[1:3], window_dimensions[1:3], window_strides[1:3])
    if mode is None:
        raise Uncovered("a max pool padded other than SAME or VALID")
    shape, dtype = out_type(eqn)
    return graph.add("MAX_POOL_2D", [x], shape, dtype, padding=mode, strideH=window_strides[1],
                     strideW=window_strides[2], filterHeight=window_dimensions[1], filterWidth=window_dimensions[2],
                     fusedActivationFunction=0)
