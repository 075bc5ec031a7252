"""The graph replayed as real TF ops (``tf.raw_ops``, one call per node): the TF writer, and the
oracle of the recording. Each replayed output must have the dtype and static shape the recorder
inferred (``ReplayMismatch`` otherwise), and the outputs must be JAX's (tests/test_graph.py).
``noxla.writers.tf.forward`` makes it ``noxla.convert``'s and SavedModels' computation, its weights
captured (``CapturedWeights``) rather than written into each graph as Consts."""
from __future__ import annotations

import base64
import functools
import json
from typing import Sequence

import numpy as np

from noxla.front.interpreter import WEIGHT_BYTES, weight_constant
from noxla.graph.core import Graph, Tensor


class ReplayMismatch(AssertionError):
    """TF computes another dtype or shape for a node than the recorder inferred."""


def _attr_proto(value: dict):
    """The AttrValue of a recorded attribute (its JSON form), parsed once per distinct value: a
    graph repeats a few (``T``, ``padding``), and protobuf's JSON parser took a tenth of a replay."""
    return _parsed_attr(json.dumps(value, sort_keys=True))


@functools.lru_cache(maxsize=4096)
def _parsed_attr(text: str):
    from google.protobuf import json_format
    from tensorflow.core.framework import attr_value_pb2
    return json_format.Parse(text, attr_value_pb2.AttrValue())  # only copied into NodeDefs: shared


def _dtype(json_name: str):
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2
    return tf.as_dtype(types_pb2.DataType.Value(json_name))


def replay(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Tensor], args: Sequence) -> list:
    """The values of ``outputs`` with ``inputs`` (Placeholders) fed ``args``, computed by TF: each
    node made as the NodeDef it is (op, inputs, every attribute: TF checks them against the op's
    definition), in one ``tf.function``."""
    import tensorflow as tf
    feeds = [tf.convert_to_tensor(a, _dtype(t.dtype.json_name)) for t, a in zip(inputs, args)]
    return replay_function(graph, inputs, outputs)(*feeds)


class CapturedWeights:
    """The large constants of replayed graphs (``WEIGHT_BYTES`` on), each one eager tensor that the
    graphs capture instead of a Const node of its own: a Const's value is copied into the graph, its
    function definition and TF's function library (a converted 64 MiB MLP held 10x its weights after
    one eager call), and SavedModel writes it once per function that holds it, while a captured
    tensor is stored once however many functions capture it. The tensor is made on the array's own
    memory where TF can use it (``interpreter.weight_constant``); arrays on the same memory (the
    same weight in several signatures' or a VJP's recordings) share it.

    ``variables``: each weight a (non-trainable) ``tf.Variable`` instead, for a SavedModel noxla
    writes (``variables()`` then go on its module): TF's saver streams variables into the checkpoint,
    while it copies captured tensors into the SavedModel's protocol buffer (600 MiB of weights: 20 s
    and 2.4 GB more at the peak as captured tensors, 2.4 s and nothing more as variables)."""

    def __init__(self, adds: bool = True, tensors: dict | None = None, variables: bool = False):
        self.adds, self.as_variables = adds, variables
        self._tensors: dict[tuple, tuple] = {} if tensors is None else tensors  # memory -> (array kept alive, tensor)

    def existing(self) -> CapturedWeights:
        """The same table, taking only the tensors already in it: a custom gradient's (the VJP's),
        whose captures TF's SavedModel saves only where the saved functions capture them too (else
        "Found invalid capture ... when saving custom gradients"); its other large constants stay Consts."""
        return CapturedWeights(adds=False, tensors=self._tensors, variables=self.as_variables)

    def variables(self) -> list:
        import tensorflow as tf
        return [t for _, t in self._tensors.values() if isinstance(t, tf.Variable)]

    def tensor(self, array: np.ndarray, dtype):
        """The eager tensor of ``array`` as ``dtype``; None where TF would hold other values (a
        dtype it reads through another carrier) or this table takes no new one: a Const then."""
        import tensorflow as tf
        key = (array.__array_interface__["data"][0], array.dtype.str, array.shape, array.strides)
        if key not in self._tensors:
            if not self.adds:
                return None
            with tf.init_scope():
                tensor = weight_constant(array)
                if tensor.dtype != dtype:
                    tensor = None
                elif self.as_variables:
                    tensor = tf.Variable(tensor, trainable=False, name=f"weight_{len(self._tensors)}")
            self._tensors[key] = (array, tensor)
        return self._tensors[key][1]


def replay_function(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Tensor], exact: bool = True,
                    weights: CapturedWeights | None = None):
    """``graph`` as a ``tf.function`` of its ``inputs`` (Placeholders, a symbolic size None in its
    signature) returning ``outputs``; every node's dtype and shape checked when it is traced (``exact``:
    see ``replay_onto``; ``weights``: its large constants captured, see there)."""
    import tensorflow as tf

    def build(*fed):
        return [tf.identity(v) for v in replay_onto(graph, inputs, outputs, fed, exact, weights)]
    signature = [tf.TensorSpec(t.shape.dims, _dtype(t.dtype.json_name)) for t in inputs]  # None: a symbolic size
    return tf.function(build, input_signature=signature, autograph=False)


def replay_onto(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Tensor], fed: Sequence,
                exact: bool = True, weights: CapturedWeights | None = None) -> list:
    """The tensors of ``outputs``, ``graph``'s nodes made in TF's current graph with ``inputs``
    (Placeholders or a body's ``_Arg``s) given ``fed`` (tensors there). ``exact`` (the recording's
    oracle): every output's static shape must be the recorded one. Else (what ``noxla.convert``
    computes) TF may know more of it (``fed`` of more static sizes than the Placeholders hold) or less
    (its shape inference does not see through every op the recorder folds, e.g. in a loop body: a
    cache's static batch of 1 read as unknown), never otherwise; where it knows less, the recorded
    sizes (JAX's) are set on the tensor, so that the ops after it are inferred as recorded.
    ``weights``: where TF's current graph is a function's, its large Consts are captured from there
    (a loop or branch body's stay Consts: a body takes its inputs from the op, not captures)."""
    values: dict[tuple[int, int], object] = {(id(t.node), t.index): f for t, f in zip(inputs, fed)}
    _build(graph, values, exact, weights)
    return [values[(id(t.node), t.index)] for t in outputs]


def _build(graph: Graph, values: dict, exact: bool = True, weights: CapturedWeights | None = None) -> None:
    """Each node of ``graph`` made in TF's current graph, its outputs into ``values``."""
    import tensorflow as tf
    graph_tf = tf.compat.v1.get_default_graph()
    if not hasattr(graph_tf, "capture"):  # a TF1 graph captures nothing
        weights = None
    # ``Graph.create_op`` is a deprecation wrapper that inspects its arguments on every call (a
    # tenth of a replay); the method it wraps, where TF has it by that name (2.2 to 2.21 at least).
    create_op = getattr(graph_tf, "_create_op_internal", graph_tf.create_op)
    for node in graph.nodes:
        if node.op in ("Placeholder", "_Arg"):
            continue
        if node.op == "Const":
            results = [_constant(node, graph_tf, weights)]
        elif _dilated_depthwise(node):
            results = [_depthwise_through_space_to_batch(node, *(values[(id(t.node), t.index)] for t in node.inputs))]
        else:
            attrs = dict(node.attrs)
            for key, function in node.functions.items():  # While/If bodies, made as TF functions
                attrs[key] = {"func": {"name": _function(function, graph_tf, exact)}}
            operation = create_op(
                node.op, [values[(id(t.node), t.index)] for t in node.inputs],
                attrs={k: _attr_proto(v) for k, v in attrs.items()}, name=node.name.replace("/", "_"))
            results = list(operation.outputs)
        if len(results) != len(node.outputs):
            raise ReplayMismatch(f"{node.name} ({node.op}): TF makes {len(results)} outputs, recorded "
                                 f"{len(node.outputs)}")
        for index, (result, (dtype, shape)) in enumerate(zip(results, node.outputs)):
            if result.dtype.name != dtype.name or not _same_shape(result.shape, shape, exact):
                raise ReplayMismatch(f"{node.name} ({node.op}) output {index}: TF infers {result.dtype.name} "
                                     f"{result.shape.as_list()}, recorded {dtype.name} {list(shape)}")
            if not exact:
                result.set_shape(shape)  # merged: a size TF does not know is given the recorded one
            values[(id(node), index)] = result


def _constant(node, graph_tf, weights: CapturedWeights | None):
    import tensorflow as tf
    dtype = _dtype(node.attrs["dtype"]["type"])
    if weights is not None and node.value.nbytes >= WEIGHT_BYTES:
        tensor = weights.tensor(node.value, dtype)
        if isinstance(tensor, tf.Variable):
            return tensor.read_value()
        if tensor is not None:
            return graph_tf.capture(tensor)
    return tf.constant(node.value, dtype)


def _same_shape(inferred, recorded: tuple, exact: bool) -> bool:
    if inferred.rank is None:
        return not exact
    if inferred.rank != len(recorded):
        return False
    inferred = inferred.as_list()
    return tuple(inferred) == recorded or not exact and all(
        r is None or i is None or r == i for i, r in zip(inferred, recorded))


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


def _function(function, graph_tf, exact: bool = True) -> str:
    """``function`` (a body) as a TF function added to ``graph_tf``; its name there."""
    concrete = replay_function(function.graph, function.args, function.rets, exact).get_concrete_function()
    concrete.add_to_graph(graph_tf)
    return concrete.name.decode() if isinstance(concrete.name, bytes) else concrete.name


def replay_numpy(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Tensor], args: Sequence) -> list:
    return [np.asarray(v.numpy()) for v in replay(graph, inputs, outputs, args)]
