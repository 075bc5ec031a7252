"""The graph replayed as real TF ops (``tf.raw_ops``, one call per node): the TF writer, and the
oracle of the recording. Each replayed output must have the dtype and static shape the recorder
inferred (``ReplayMismatch`` otherwise), and the outputs must be JAX's (tests/test_graph.py).
The only module of ``noxla.graph`` that imports TensorFlow."""
from __future__ import annotations

import base64
from typing import Sequence

import numpy as np

from noxla.graph.core import Graph, Tensor


class ReplayMismatch(AssertionError):
    """TF computes another dtype or shape for a node than the recorder inferred."""


def _attr_proto(value: dict):
    from google.protobuf import json_format
    from tensorflow.core.framework import attr_value_pb2
    return json_format.ParseDict(value, attr_value_pb2.AttrValue())


def _dtype(json_name: str):
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2
    return tf.as_dtype(types_pb2.DataType.Value(json_name))


def replay(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Tensor], args: Sequence) -> list:
    """The values of ``outputs`` with ``inputs`` (Placeholders) fed ``args``, computed by TF: each
    node made as the NodeDef it is (op, inputs, every attribute: TF checks them against the op's
    definition), in one ``tf.function``."""
    import tensorflow as tf
    feeds = [tf.convert_to_tensor(a, _dtype(t.node.attrs["dtype"]["type"])) for t, a in zip(inputs, args)]

    def build(*fed):
        values: dict[tuple[int, int], object] = {(id(t.node), 0): f for t, f in zip(inputs, fed)}
        _build(graph, values)
        return [tf.identity(values[(id(t.node), t.index)]) for t in outputs]
    signature = [tf.TensorSpec(t.shape.dims, f.dtype) for t, f in zip(inputs, feeds)]  # None: a symbolic size
    return tf.function(build, input_signature=signature, autograph=False)(*feeds)


def _build(graph: Graph, values: dict) -> None:
    """Each node of ``graph`` made in TF's current graph, its outputs into ``values``."""
    import tensorflow as tf
    graph_tf = tf.compat.v1.get_default_graph()
    for node in graph.nodes:
        if node.op in ("Placeholder", "_Arg"):
            continue
        if node.op == "Const":
            results = [tf.constant(node.value, _dtype(node.attrs["dtype"]["type"]))]
        elif _dilated_depthwise(node):
            results = [_depthwise_through_space_to_batch(node, *(values[(id(t.node), t.index)] for t in node.inputs))]
        else:
            attrs = dict(node.attrs)
            for key, function in node.functions.items():  # While/If bodies, made as TF functions
                attrs[key] = {"func": {"name": _function(function, graph_tf)}}
            operation = graph_tf.create_op(
                node.op, [values[(id(t.node), t.index)] for t in node.inputs],
                attrs={k: _attr_proto(v) for k, v in attrs.items()}, name=node.name.replace("/", "_"))
            results = list(operation.outputs)
        if len(results) != len(node.outputs):
            raise ReplayMismatch(f"{node.name} ({node.op}): TF makes {len(results)} outputs, recorded "
                                 f"{len(node.outputs)}")
        for index, (result, (dtype, shape)) in enumerate(zip(results, node.outputs)):
            if result.dtype.name != dtype.name or tuple(result.shape.as_list()) != tuple(shape):
                raise ReplayMismatch(f"{node.name} ({node.op}) output {index}: TF infers {result.dtype.name} "
                                     f"{result.shape.as_list()}, recorded {dtype.name} {list(shape)}")
            values[(id(node), index)] = result


def _ints(node, key: str) -> list[int]:
    return [int(i) for i in node.attrs[key]["list"].get("i", [])]


def _dilated_depthwise(node) -> bool:
    return node.op == "DepthwiseConv2dNative" and any(d != 1 for d in _ints(node, "dilations"))


def _depthwise_through_space_to_batch(node, x, w):
    """A dilated DepthwiseConv2dNative as TF runs one: ``tf.nn.depthwise_conv2d`` writes the
    undilated op between SpaceToBatchND and BatchToSpaceND (TF's CPU kernel takes no dilation)."""
    import tensorflow as tf
    padding = base64.b64decode(node.attrs["padding"]["s"]).decode()
    return tf.nn.depthwise_conv2d(x, w, _ints(node, "strides"), padding, dilations=_ints(node, "dilations")[1:3])


def _function(function, graph_tf) -> str:
    """``function`` (a body) as a TF function added to ``graph_tf``; its name there."""
    import tensorflow as tf

    def body(*fed):
        values = {(id(a.node), a.index): f for a, f in zip(function.args, fed)}
        _build(function.graph, values)
        return [tf.identity(values[(id(t.node), t.index)]) for t in function.rets]
    signature = [tf.TensorSpec(a.shape.dims, _dtype(a.dtype.json_name)) for a in function.args]
    concrete = tf.function(body, input_signature=signature, autograph=False).get_concrete_function()
    concrete.add_to_graph(graph_tf)
    return concrete.name.decode() if isinstance(concrete.name, bytes) else concrete.name


def replay_numpy(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Tensor], args: Sequence) -> list:
    return [np.asarray(v.numpy()) for v in replay(graph, inputs, outputs, args)]
