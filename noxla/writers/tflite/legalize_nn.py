"""Convolutions, pools and products legalized as TF's converter legalizes them: the filter moved
to TFLite's layout, a zero bias that ``fuse`` folds the following bias add or batch-norm scale into."""
from __future__ import annotations

import numpy as np

from noxla.graph.core import Node
from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite.legalize import _attr, _dtype, _int32, _nhwc, _out, _padding, _shape, legalizer, reshape
from noxla.writers.tflite.model import VALID, Graph, Tensor


def _zero_bias(graph: Graph, channels: int) -> Tensor:
    return graph.constant(np.zeros(channels, np.float32))


def _filter(graph: Graph, w: Tensor, perm: tuple) -> Tensor:
    """A filter moved to TFLite's layout: folded where it is a constant, else a TRANSPOSE at run time
    (as the converter writes a filter computed by the program)."""
    if w.is_constant:
        return graph.constant(np.ascontiguousarray(np.transpose(w.data, perm)))
    return graph.add("TRANSPOSE", [w, graph.int32(perm)], [w.shape[a] for a in perm], w.dtype)


def _float32(node: Node) -> None:
    if _dtype(node) != np.float32:
        raise Uncovered(f"{node.op} of {_dtype(node)} in the TFLite writer")


@legalizer("Conv2D")
def _conv2d(graph, node, x, w):
    _nhwc(node)
    _float32(node)
    strides, dilations = _attr(node, "strides"), _attr(node, "dilations", [1, 1, 1, 1])   # w: HWIO
    if _attr(node, "padding") == "EXPLICIT":
        pads = np.asarray(_attr(node, "explicit_paddings"), np.int32).reshape(4, 2)
        padded = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads))
        x, mode = graph.add("PAD", [x, graph.constant(pads)], padded, x.dtype), VALID
    else:
        mode = _padding(node)
    ohwi = _filter(graph, w, (3, 0, 1, 2))
    return _out(graph, "CONV_2D", node, [x, ohwi, _zero_bias(graph, w.shape[3])], padding=mode,
                strideH=strides[1], strideW=strides[2], dilationHFactor=dilations[1],
                dilationWFactor=dilations[2], fusedActivationFunction=0)


@legalizer("DepthwiseConv2dNative")
def _depthwise(graph, node, x, w):
    _nhwc(node)
    _float32(node)
    kh, kw, cin, multiplier = w.shape
    strides, dilations = _attr(node, "strides"), _attr(node, "dilations", [1, 1, 1, 1])
    weights = reshape(graph, w, (1, kh, kw, cin * multiplier))
    return _out(graph, "DEPTHWISE_CONV_2D", node, [x, weights, _zero_bias(graph, cin * multiplier)],
                padding=_padding(node), strideH=strides[1], strideW=strides[2], dilationHFactor=dilations[1],
                dilationWFactor=dilations[2], depthMultiplier=multiplier, fusedActivationFunction=0)


@legalizer("Conv2DBackpropInput")
def _transpose_conv(graph, node, sizes, w, x):
    """Kept as [input, weights, bias, output shape], as the other linear operators' passes read them;
    ``serialize`` writes TFLite's order."""
    _nhwc(node)
    _float32(node)
    strides, dilations = _attr(node, "strides"), _attr(node, "dilations", [1, 1, 1, 1])   # w: [h, w, out, in]
    if any(d != 1 for d in dilations):
        raise Uncovered("a dilated Conv2DBackpropInput")
    weights = _filter(graph, w, (2, 0, 1, 3))
    return _out(graph, "TRANSPOSE_CONV", node, [x, weights, _zero_bias(graph, w.shape[2]),
                                                _int32(graph, _shape(node))],
                padding=_padding(node), strideH=strides[1], strideW=strides[2], fusedActivationFunction=0)


@legalizer("MaxPool", "AvgPool")
def _pool(graph, node, x):
    _nhwc(node)
    _float32(node)
    ksize, strides = _attr(node, "ksize"), _attr(node, "strides")
    if ksize[0] != 1 or ksize[3] != 1 or strides[0] != 1 or strides[3] != 1:
        raise Uncovered(f"a {node.op} over the batch or channels")
    kind = "MAX_POOL_2D" if node.op == "MaxPool" else "AVERAGE_POOL_2D"
    return _out(graph, kind, node, [x], padding=_padding(node), strideH=strides[1], strideW=strides[2],
                filterHeight=ksize[1], filterWidth=ksize[2], fusedActivationFunction=0)


def _constant_transposed(graph: Graph, y: Tensor) -> Tensor:
    """A matrix that is a TRANSPOSE of a constant one (left unfolded when recorded: larger than
    grappler folds, e.g. a tied embedding table read as the logits' weights) as that constant
    transposed, a view: the FULLY_CONNECTED then reads the table itself, stored once, where a
    BATCH_MATMUL of it stays float32 past a quantizer (Gemma 3 1B: 1.2 GB read per token)."""
    if y.is_constant or len(y.shape) != 2:
        return y
    source = graph.producers().get(y.id)
    if source is None or source.kind != "TRANSPOSE" or not source.inputs[0].is_constant:
        return y
    return graph.constant(source.inputs[0].data.T)


@legalizer("MatMul", "BatchMatMulV2", "BatchMatMulV3", "BatchMatMul")
def _matmul(graph, node, x, y):
    """A product by a constant matrix is a FULLY_CONNECTED of it as [out, in] (the converter's
    form: a zero bias that ``fuse`` folds the following bias add into); any other a BATCH_MATMUL."""
    _float32(node)
    names = ("transpose_a", "transpose_b") if node.op == "MatMul" else ("adj_x", "adj_y")
    adj_x, adj_y = (_attr(node, n, False) for n in names)
    y = _constant_transposed(graph, y)
    if y.is_constant and len(y.shape) == 2 and not adj_x:
        # A view, not a copy: the writer stores it transposed when it writes it (an LLM's weights
        # are read by every signature, and a copy per signature took 2 GB at Gemma 3 1B's shapes).
        kernel = graph.constant(np.asarray(y.data if adj_y else y.data.T, np.float32))
        return _out(graph, "FULLY_CONNECTED", node, [x, kernel, _zero_bias(graph, kernel.shape[0])],
                    fusedActivationFunction=0, keepNumDims=True)
    return _out(graph, "BATCH_MATMUL", node, [x, y], adjX=adj_x, adjY=adj_y, asymmetricQuantizeInputs=False)
