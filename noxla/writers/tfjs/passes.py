"""The TF.js converter's graph rewrites, on noxla's graph: what ``noxla.writers.tfjs.optimize`` and
``noxla.writers.tfjs.fusions`` do to a frozen GraphDef on TF's path, under the same conditions, so the
graph path's model.json has no more ops than that path's.

- pruning: only what the outputs read;
- grappler's constant folding of identity operands and constant selects, Mul by ones as Tile,
  Square of a difference as SquaredDifference, trees of adds as AddN (``tfjs_arithmetic``);
- grappler's arithmetic simplifications that TF's path gets: a Transpose by the identity
  permutation, a Reshape or BroadcastTo to the shape it has, an Identity are bypassed; a Reshape
  of a Reshape reads the first one's input; Mul(x, x) is Square(x);
- Reshape(unary(Reshape(x))) back to x's shape is unary(x) (grappler moves value-preserving
  reshapes past elementwise ops and cancels the pair);
- a Mul of a Conv2D by a constant per output channel (or a scalar) scales the Conv2D's constant
  filter instead (grappler's constant folding, MulConvPushDown: a batch norm's scale);
- an AddV2 of a rank-1 constant that alone reads a Conv2D, DepthwiseConv2dNative or MatMul
  becomes a BiasAdd (tfjs_optimize.bias_adds_for_vector_constants);
- a float32 MatMul(transpose_b) whose right-hand side is a Const only it reads reads that
  constant stored transposed (tfjs_fusions._untransposed_weights: TF.js's wasm computes a fused
  transposed MatMul wrong);
- Conv2D/MatMul + BiasAdd (+ Relu, Relu6, Elu, LeakyRelu) into _FusedConv2D/_FusedMatMul
  (tfjs_fusions.portable_fusions), DepthwiseConv2dNative + BiasAdd (+ Relu, Relu6, Elu) into
  FusedDepthwiseConv2dNative (tfjs_optimize.fused_depthwise_convolutions), a 1-D convolution's
  Conv2D + Squeeze + BiasAdd into _FusedConv2D + Squeeze (tfjs_fusions.portable_fusions): float32,
  NHWC, each intermediate read once and not an output, a MatMul not transposed;
- not the converter's, for TF.js's WebGPU: the rules' run-time +inf is a weight (its sign folded);
  int32 and bool transposes (also those TF.js makes inside a reduction over leading axes) move
  float32 values, an ArgMax of a vector is reshaped to its scalar, a rank-5 or rank-6 Pad,
  ReverseV2 or SelectV2 is made at rank 4 or less (``noxla.writers.tfjs.webgpu``); a run-time
  size's FloorMod by a constant as FloorDiv, Mul and Sub, its AddN as AddV2s, an int32 select of
  run-time starts as arithmetic, which WebGPU computes where TF.js reads them
  (``noxla.writers.tfjs.run_time_sizes``).
"""
from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

from noxla.graph import ops
from noxla.graph.core import Graph, Node, Tensor
from noxla.writers.tfjs import arithmetic as tfjs_arithmetic
from noxla.writers.tfjs.exact_int32 import exact_int32_arithmetic
from noxla.writers.tfjs.fusions import PORTABLE_ACTIVATIONS
from noxla.writers.tfjs.run_time_sizes import selects_on_the_cpu, sizes_on_the_cpu
from noxla.writers.tfjs.webgpu import (
    infinities_in_weights,
    int_transposes_through_floats,
    pads_within_rank_four,
    reverses_and_selects_within_rank_four,
    scalar_argmaxes,
)

_BIAS_CONTRACTIONS = ("Conv2D", "DepthwiseConv2dNative", "MatMul")
_DEPTHWISE_ACTIVATIONS = ("Relu", "Relu6", "Elu")
_CONTRACTION_ATTRS = {"Conv2D": ("T", "strides", "padding", "explicit_paddings", "dilations", "data_format",
                                 "use_cudnn_on_gpu"),
                      "MatMul": ("T", "transpose_a", "transpose_b")}


def pruned(graph: Graph, outputs: Sequence[Tensor], keep: Sequence[Tensor] = ()) -> None:
    """Drop the nodes neither ``outputs`` nor ``keep`` (the inputs) read."""
    live = {id(t.node) for t in (*outputs, *keep)}
    for node in reversed(graph.nodes):
        if id(node) in live:
            live.update(id(t.node) for t in node.inputs)
    graph.nodes = [n for n in graph.nodes if id(n) in live]


def _readers(graph: Graph) -> collections.Counter:
    return collections.Counter((id(t.node), t.index) for n in graph.nodes for t in n.inputs)


def _is_float32(node: Node) -> bool:
    return node.attrs.get("T") == {"type": "DT_FLOAT"}


def optimize_for_tfjs(graph: Graph, outputs: Sequence[Tensor], inputs: Sequence[Tensor]) -> None:
    """The rewrites above, in place; ``outputs`` are never fused away."""
    pruned(graph, outputs, inputs)
    kept = {id(t.node) for t in outputs}
    infinities_in_weights(graph, kept)
    tfjs_arithmetic.identity_arithmetic(graph, kept)
    tfjs_arithmetic.constant_selects_and_logic(graph, kept)
    _simplified(graph, kept)
    pruned(graph, outputs, inputs)  # the bypassed nodes no longer count as readers
    exact_int32_arithmetic(graph, kept)
    tfjs_arithmetic.negations_removed(graph, kept)
    tfjs_arithmetic.squared_differences(graph, kept)
    pruned(graph, outputs, inputs)
    tfjs_arithmetic.tiles_for_broadcasting_muls(graph, kept)
    tfjs_arithmetic.add_trees_as_add_n(graph, kept)
    _reshapes_around_unary(graph, kept)
    pruned(graph, outputs, inputs)
    _scaled_filters(graph, kept)
    pruned(graph, outputs, inputs)
    _bias_adds(graph)
    _untransposed_weights(graph, kept)
    _fuse(graph, kept)
    int_transposes_through_floats(graph, kept)
    scalar_argmaxes(graph, kept)
    pads_within_rank_four(graph, kept)
    reverses_and_selects_within_rank_four(graph, kept)
    sizes_on_the_cpu(graph)
    selects_on_the_cpu(graph)
    pruned(graph, outputs, inputs)


def _only_reader(graph: Graph, readers, kept) -> callable:
    def source_of(node: Node, op_names) -> Node | None:
        """The producer of ``node``'s first input, when ``node`` alone reads it and it is one of ``op_names``."""
        tensor = node.inputs[0]
        source = tensor.node
        if (tensor.index != 0 or source.op not in op_names or readers[(id(source), 0)] != 1
                or id(source) in kept or len(source.outputs) != 1):
            return None
        return source
    return source_of


def _simplified(graph: Graph, kept) -> None:
    """The arithmetic simplifications above, each exact (the same values, dtype and shape)."""
    moved: dict[tuple[int, int], Tensor] = {}

    def source(t: Tensor) -> Tensor:
        while (id(t.node), t.index) in moved:
            t = moved[(id(t.node), t.index)]
        return t
    for node in graph.nodes:
        node.inputs = [source(t) for t in node.inputs]
        if id(node) in kept:
            continue
        # Two unknown sizes may trade places in a Reshape ((b, c) to (c, b)): equal static shapes with
        # one unknown size at most are the same shape.
        same_shape = (node.outputs[0][1] == node.inputs[0].shape.dims and node.outputs[0][1].count(None) < 2
                      if node.inputs else False)
        if node.op == "Transpose" and node.inputs[1].constant is not None and list(node.inputs[1].constant) == list(
                range(len(node.outputs[0][1]))):
            moved[(id(node), 0)] = node.inputs[0]
        elif node.op in ("Reshape", "BroadcastTo") and same_shape:
            moved[(id(node), 0)] = node.inputs[0]
        elif node.op == "Identity":
            moved[(id(node), 0)] = node.inputs[0]
        elif node.op == "Reshape" and node.inputs[0].node.op == "Reshape":
            node.inputs = [node.inputs[0].node.inputs[0], node.inputs[1]]
        elif node.op == "Mul" and node.inputs[0] is node.inputs[1] or (
                node.op == "Mul" and _same(node.inputs[0], node.inputs[1])):
            node.op, node.inputs = "Square", [node.inputs[0]]


_SHAPE_KEEPING_UNARY = ("Square", "Relu", "Relu6", "Neg", "Abs", "Exp", "Log", "Sqrt", "Rsqrt", "Tanh", "Sigmoid",
                        "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Reciprocal", "Erf", "Erfc", "Elu")


def _reshapes_around_unary(graph: Graph, kept) -> None:
    readers = _readers(graph)
    moved: dict[tuple[int, int], Tensor] = {}
    for node in graph.nodes:
        node.inputs = [moved.get((id(t.node), t.index), t) for t in node.inputs]
        if node.op != "Reshape" or id(node) in kept:
            continue
        unary = node.inputs[0].node
        if unary.op not in _SHAPE_KEEPING_UNARY or readers[(id(unary), 0)] != 1 or id(unary) in kept:
            continue
        inner = unary.inputs[0].node
        if (inner.op != "Reshape" or readers[(id(inner), 0)] != 1 or id(inner) in kept
                or inner.inputs[0].shape.dims != node.outputs[0][1] or node.outputs[0][1].count(None) > 1):
            continue
        unary.inputs = [inner.inputs[0]]
        unary.outputs = [(unary.outputs[0][0], node.outputs[0][1])]
        moved[(id(node), 0)] = unary.output(0)


def _scaled_filters(graph: Graph, kept) -> None:
    readers = _readers(graph)
    moved: dict[tuple[int, int], Tensor] = {}
    for node in list(graph.nodes):
        node.inputs = [moved.get((id(t.node), t.index), t) for t in node.inputs]
        if node.op != "Mul" or id(node) in kept or not _is_float32(node):
            continue
        for conv_out, scale in (node.inputs, node.inputs[::-1]):
            conv = conv_out.node
            c = scale.constant
            if (conv.op != "Conv2D" or c is None or readers[(id(conv), 0)] != 1 or id(conv) in kept
                    or conv.inputs[1].constant is None or node.outputs[0][1] != conv.outputs[0][1]):
                continue
            cout = conv.outputs[0][1][-1]
            if not (c.ndim == 0 or (c.ndim <= 4 and c.shape[-1] == cout and all(d == 1 for d in c.shape[:-1]))):
                continue
            weights = conv.inputs[1].constant * (c if c.ndim == 0 else c.reshape(-1))
            filter_node = Node(graph.unique_name(conv.name + "/merged_input"), "Const", [],
                               {"dtype": ops.type_attr(conv.outputs[0][0])},
                               [(conv.outputs[0][0], weights.shape)], weights.astype(np.float32))
            graph.nodes.insert(graph.nodes.index(conv), filter_node)
            conv.inputs = [conv.inputs[0], filter_node.output(0)]
            moved[(id(node), 0)] = conv_out
            break


def _same(a: Tensor, b: Tensor) -> bool:
    return a.node is b.node and a.index == b.index


def _bias_adds(graph: Graph) -> None:
    readers = _readers(graph)
    for node in graph.nodes:
        if node.op not in ("Add", "AddV2") or len(node.inputs) != 2:
            continue
        source, addend = node.inputs[0], node.inputs[1]
        if (source.index == 0 and source.node.op in _BIAS_CONTRACTIONS and readers[(id(source.node), 0)] == 1
                and addend.constant is not None and addend.constant.ndim == 1):
            node.op = "BiasAdd"
            node.attrs = {"T": node.attrs["T"], "data_format": ops.str_attr("NHWC")}


def _untransposed_weights(graph: Graph, kept) -> None:
    readers = collections.Counter(id(t.node) for n in graph.nodes for t in n.inputs)
    for node in graph.nodes:
        if node.op != "MatMul" or not node.attrs["transpose_b"]["b"] or not _is_float32(node):
            continue
        weight = node.inputs[1].node
        if weight.op != "Const" or readers[id(weight)] != 1 or id(weight) in kept:
            continue
        weight.value = np.ascontiguousarray(weight.value.T)
        weight.outputs = [(weight.outputs[0][0], weight.value.shape)]
        node.attrs["transpose_b"] = ops.bool_attr(False)


def _fuse(graph: Graph, kept) -> None:
    readers = _readers(graph)
    source_of = _only_reader(graph, readers, kept)

    def contraction_of(bias_add: Node) -> Node | None:
        c = source_of(bias_add, ("Conv2D", "MatMul"))
        if c is None or c.attrs.get("T") != bias_add.attrs.get("T"):
            return None
        if c.op == "Conv2D" and (c.attrs["T"]["type"] not in ("DT_FLOAT", "DT_DOUBLE")
                                 or c.attrs["data_format"] != ops.str_attr("NHWC")):
            return None
        if c.op == "MatMul" and (not _is_float32(c) or c.attrs["transpose_a"]["b"] or c.attrs["transpose_b"]["b"]):
            return None
        return c

    def fuse_into(last: Node, contraction: Node, bias_add: Node, activation: Node | None) -> None:
        attrs = {k: contraction.attrs[k] for k in _CONTRACTION_ATTRS[contraction.op] if k in contraction.attrs}
        attrs["fused_ops"] = {"list": {"s": [ops.str_attr("BiasAdd")["s"]] + (
            [ops.str_attr(activation.op)["s"]] if activation is not None else [])}}
        attrs["num_args"] = ops.int_attr(1)
        if contraction.op == "Conv2D":
            attrs["TArgs"] = {"list": {"type": [contraction.attrs["T"]["type"]]}}
        attrs["epsilon"] = ops.float_attr(0.0)
        if activation is not None and activation.op == "LeakyRelu":
            attrs["leakyrelu_alpha"] = activation.attrs["alpha"]
        last.op, last.attrs = "_Fused" + contraction.op, attrs
        last.inputs = [*contraction.inputs[:2], bias_add.inputs[1]]

    def fuse_depthwise(last: Node, conv: Node, bias_add: Node, activation: Node | None) -> None:
        attrs = dict(conv.attrs)
        attrs["fused_ops"] = {"list": {"s": [ops.str_attr("BiasAdd")["s"]] + (
            [ops.str_attr(activation.op)["s"]] if activation is not None else [])}}
        attrs["num_args"] = ops.int_attr(1)
        last.op, last.attrs = "FusedDepthwiseConv2dNative", attrs
        last.inputs = [*conv.inputs[:2], bias_add.inputs[1]]

    done = set()
    for last in list(graph.nodes):  # contraction + BiasAdd + activation first
        if last.op not in PORTABLE_ACTIVATIONS:
            continue
        bias_add = source_of(last, ("BiasAdd",))
        if bias_add is None or bias_add.attrs.get("T") != last.attrs.get("T"):
            continue
        contraction = contraction_of(bias_add)
        if contraction is not None:
            fuse_into(last, contraction, bias_add, last)
            done.update((id(bias_add), id(contraction)))
            continue
        conv = source_of(bias_add, ("DepthwiseConv2dNative",))
        if conv is not None and last.op in _DEPTHWISE_ACTIVATIONS and _is_float32(conv):
            fuse_depthwise(last, conv, bias_add, last)
            done.update((id(bias_add), id(conv)))
    for last in list(graph.nodes):  # contraction + BiasAdd
        if last.op != "BiasAdd" or id(last) in done:
            continue
        contraction = contraction_of(last)
        if contraction is not None:
            fuse_into(last, contraction, last, None)
            continue
        conv = source_of(last, ("DepthwiseConv2dNative",))
        if conv is not None and _is_float32(conv):
            fuse_depthwise(last, conv, last, None)
            continue
        squeeze = source_of(last, ("Squeeze",))
        if squeeze is not None and squeeze.attrs.get("T") == last.attrs.get("T") and _squeezes_no_channel(squeeze):
            conv = contraction_of(squeeze)
            if conv is not None and conv.op == "Conv2D":
                _bias_into_squeezed_conv(graph, conv, squeeze, last)
                fuse_into(conv, conv, last, None)
                last.op, last.attrs, last.inputs = "Squeeze", dict(squeeze.attrs), [conv.output(0)]


def _squeezes_no_channel(squeeze: Node) -> bool:
    dims = [int(d) for d in squeeze.attrs.get("squeeze_dims", {}).get("list", {}).get("i", [])]
    return bool(dims) and not ({3, -1} & set(dims))


def _bias_into_squeezed_conv(graph: Graph, conv: Node, squeeze: Node, bias_add: Node) -> None:
    """A 1-D convolution's Conv2D + Squeeze + BiasAdd as _FusedConv2D + Squeeze (``noxla.writers.tfjs.fusions``:
    the bias moves into the convolution, the Squeeze takes the BiasAdd's place): the convolution moves
    to just before the BiasAdd, after the bias it will read (the nodes stay in reading order)."""
    graph.nodes.remove(conv)
    graph.nodes.insert(graph.nodes.index(bias_add), conv)
