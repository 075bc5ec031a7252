"""A lowered ``tf.function`` in the forms TF's tools read it: its GraphDef frozen (every captured
constant a Const node, without re-importing the graph), wrapped in a ``tf.Module``, or handed to
its last user (``Handoff``). Shared by TF's path's TFLite converter (``noxla.pipeline.tf_tflite``),
its TF.js writer (``noxla.pipeline.tf_tfjs``) and its SavedModel (``noxla.pipeline.tf_path``)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from noxla.errors import ExportError
from noxla.front.interpreter import Weights
from noxla.writers.tf.weight_stubs import WeightStubs


def module_for(concrete) -> tf.Module:
    module = tf.Module()
    module.serve = concrete
    return module


class Handoff:
    """A lowered function given to its last user, which drops it once it has read the graph: the
    TF graph and the weights it holds (2-3x the weights' size) are then freed before the TFLite
    converter, whose own copies make an export's peak memory, starts (BERT-base-shaped, 2 layers:
    376 of 2,639 MB)."""

    def __init__(self, concrete):
        self._concrete = concrete

    def take(self):
        concrete, self._concrete = self._concrete, None
        return concrete


# The dtypes whose values ``make_tensor_proto`` writes as raw ``tensor_content`` (more than one element).
_CONTENT_DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                         np.int64, np.uint8, np.uint16)}


def frozen_graph_def(concrete, stubs: WeightStubs | None = None, weights: Weights | None = None) -> tuple:
    """The function's GraphDef with every captured eager tensor (a rule's module-level constant)
    as a Const node, and its inputs without those captures: what freezing it would give, as it
    holds no variables, without re-importing the graph in Python. ``stubs``: the weights it takes
    become stand-ins (``noxla.writers.tf.weight_stubs``). ``weights``: the function's, whose values are read
    from their arrays, not from the eager tensors (see ``interpreter.Weights``)."""
    graph_def = concrete.graph.as_graph_def()
    captured = {internal.op.name: external for external, internal in concrete.graph.captures}
    for node in graph_def.node:
        if node.name in captured:
            value = captured.pop(node.name)
            if value.dtype == tf.resource:
                raise ExportError(f"the lowered program captures a resource ({node.name}); noxla emits none")
            node.op = "Const"
            node.ClearField("attr")
            node.attr["dtype"].type = value.dtype.as_datatype_enum
            array = weights.array_of(value) if weights is not None else None
            if array is None:
                array = np.asarray(value)  # a view: ``numpy()`` would copy every weight
            if stubs is not None and stubs.takes(array):
                stubs.stub(node, value.ref(), array)
            else:
                _write_const(node, array)
    if stubs is not None:
        stubs.finish_graph_def(graph_def, _write_const)
    internal = {t.ref() for _, t in concrete.graph.captures}
    return graph_def, [t for t in concrete.inputs if t.ref() not in internal]


def _write_const(node, array: np.ndarray) -> None:
    tensor = node.attr["value"].tensor
    if array.dtype in _CONTENT_DTYPES and array.size > 1:
        # A weight's bytes written straight into the node: ``make_tensor_proto`` would
        # build a second proto of the same size to copy from.
        tensor.dtype = tf.as_dtype(array.dtype).as_datatype_enum
        tensor.tensor_shape.CopyFrom(tf.TensorShape(array.shape).as_proto())
        tensor.tensor_content = np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
    else:
        tensor.CopyFrom(tf.make_tensor_proto(array))
