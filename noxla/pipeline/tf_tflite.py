"""TF's TFLite converter on a lowered function (``tflite_bytes``): the frozen GraphDef given
straight to the converter's last step with noxla's GraphDef passes and quantization settings,
then finished by TF's path's flatbuffer passes (``noxla.pipeline.tf_tflite_finish``). The
pipeline (``noxla.pipeline.tf_path``) calls it per output and per signature."""
from __future__ import annotations

import dataclasses
import gc
import warnings
from typing import Callable

import numpy as np
import tensorflow as tf

from noxla.errors import ExportError, QuantizationError
from noxla.front.interpreter import Weights
from noxla.pipeline.tf_function import Handoff, frozen_graph_def, module_for
from noxla.pipeline.tf_tflite_finish import finish_tflite
from noxla.writers import quantize as quantization
from noxla.writers.tf.weight_stubs import WeightStubs
from noxla.writers.tflite.converter import graph_passes as tflite_graph_passes
from noxla.writers.tflite.converter import infinities as tflite_infinities


@dataclasses.dataclass(frozen=True)
class _Endpoint:
    """What ``convert_graphdef`` reads of an input or output tensor, without its graph."""
    name: str
    dtype: object
    shape: object


def tflite_bytes(concrete, allow_flex: bool = False, quantize: str | None = None,
                 samples: Callable | None = None, webgpu: bool = False,
                 stubs: WeightStubs | None = None, weights: Weights | None = None) -> bytes:
    """The converted model. ``concrete``: the lowered function, or a ``Handoff`` of it (released
    before converting). ``webgpu``: with the rewrites LiteRT.js's WebGPU delegate needs
    (``noxla.writers.tflite.flatbuffer.webgpu``), for a concrete function lowered for it. ``stubs``: convert with the
    large weights as stand-ins (``noxla.writers.tf.weight_stubs``); the result is then the unpacked model,
    whose weights ``large_tflite.serialized`` writes. ``weights``: those the function was lowered
    with, its values (``frozen_graph_def``)."""
    from tensorflow.core.framework.graph_debug_info_pb2 import GraphDebugInfo
    from tensorflow.lite.python import convert as tflite_convert
    handoff = isinstance(concrete, Handoff)
    if handoff:
        concrete = concrete.take()
    trackable = module_for(concrete)
    # Without debug info the converter collects every op's Python stack for its error messages
    # (10-15% of a conversion); the model comes out byte for byte the same, and an error still
    # names the op by its name-scope path, which holds the primitive's name.
    trackable.graph_debug_info = GraphDebugInfo()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], trackable)
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if allow_flex:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    converter.target_spec.supported_ops = ops
    quantization.configure_tflite(converter, quantize, samples)
    graph_def, inputs = frozen_graph_def(concrete, stubs, weights)
    if not allow_flex:
        tflite_graph_passes.for_builtins(graph_def, calibrated=quantize == "int8")
    # int8's calibration runs the model with its constants inside (an input it is not given would
    # not be fed), and int8 activations hold no infinity: the converter's FLT_MAX stays.
    infinite = tflite_infinities.take(graph_def) if quantize != "int8" else {}
    in_names = [t.name.split(":")[0] for t in inputs]
    out_names = sorted(concrete.structured_outputs)
    constants = _outputs_of_a_constant_program(concrete, inputs, out_names)
    # The converter's own entry point for a concrete function saves it as a SavedModel, loads it
    # back and converts that (or, without a trackable object, re-imports the graph to freeze it):
    # most of its time on a model without loops (mobilenet_v2: 0.51 of 0.65 CPU s). A noxla graph
    # has no variables, so it is frozen already and its GraphDef goes straight to the converter
    # step both of those paths end in; the ops and weights come out the same. That step writes no
    # signature, which LiteRT's signature runner reads the names from: ``finish_tflite`` adds it.
    try:
        # ``TFLiteConverterBaseV2.convert`` without its last step, ``_optimize_tflite_model``: for the
        # other modes (no calibration, no sparsity) that step only unpacks the flatbuffer
        # into Python objects twice and packs it once, to share equal constant buffers (0.2-0.35 CPU s
        # of a sampling model's 690-op export). ``finish_tflite`` shares them in its own single pass.
        # int8 runs that step: its calibration is there.
        converter._validate_inputs(graph_def, inputs)
        flags = converter._get_base_converter_args()
        flags.update(converter._quant_mode.converter_flags())
        # The converter serializes the GraphDef it is given; given it serialized, the proto (a copy
        # of the weights) is freed before the conversion's own copies are made.
        serialized = _SerializedGraphDef(graph_def.SerializeToString())
        del graph_def
        inputs, outputs = ([_Endpoint(t.name, t.dtype, t.shape) for t in tensors]
                           for tensors in (inputs, concrete.outputs))
        if handoff and quantize != "int8":  # the graph is cyclic: collected, not just dereferenced
            del concrete, converter, trackable
            gc.collect()
        stand_ins = stubs.input_specs() if stubs is not None else []
        data = tflite_convert.convert_graphdef(serialized, inputs + stand_ins + tflite_infinities.input_specs(infinite),
                                               outputs, **flags)
        if quantize == "int8":
            from tensorflow.lite.python.lite import _build_conversion_flags
            with warnings.catch_warnings():  # "Statistics for quantized inputs were expected": calibration's
                warnings.simplefilter("ignore", UserWarning)
                debug_options = _build_conversion_flags(**flags).debug_options
            data = quantization.float_divisions(quantization.calibrated_int8(converter, data, debug_options))
    except QuantizationError:
        raise
    except Exception as e:  # the converter raises several private error types
        raise ExportError(f"the TFLite converter rejected the lowered program: {e}") from e
    return finish_tflite(data, in_names, out_names, stubs, webgpu, constants, infinite)


def _outputs_of_a_constant_program(concrete, inputs, out_names) -> list[np.ndarray] | None:
    """The outputs, in ``out_names`` order, of a program whose inputs hold no elements (or that has
    none): its outputs are constants, which the converter folds, and it writes an infinite constant
    as the largest finite float. Their values, computed here in TF (a polymorphic size as 1: an output
    whose shape depends on it is not folded, and ``_write_constant_outputs`` passes it by), are
    written back exactly."""
    if not all(0 in t.shape.as_list() for t in inputs):  # a polymorphic size times 0 is 0 too
        return None
    outputs = concrete(*(tf.zeros([1 if d is None else d for d in t.shape.as_list()], t.dtype) for t in inputs))
    return [np.asarray(outputs[name]) for name in out_names]


class _SerializedGraphDef:
    """A GraphDef already serialized, as ``convert_graphdef`` reads it (``SerializeToString`` only)."""

    def __init__(self, data: bytes):
        self.data = data

    def SerializeToString(self) -> bytes:  # noqa: N802  (protobuf's name)
        return self.data
