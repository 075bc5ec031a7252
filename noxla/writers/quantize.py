"""Quantized exports: the TFLite converter's post-training modes and TF.js's weight quantization,
configured from noxla's export options, and the checks of those options every path shares.

Where LiteRT's quantizer is installed and noxla's graph writes the float .tflite, the quantizer
quantizes it in the same three modes, without TensorFlow (``noxla.writers.tflite.quantize``); TF's converter
(``configure_tflite``) quantizes the rest.

TFLite (``quantize=``):
- ``"float16"``: weights stored as float16, dequantized at load (half the size).
- ``"dynamic_int8"``: weights stored as int8; kernels that support it quantize activations on the
  fly (about a quarter of the size).
- ``"int8"``: weights and activations int8, the activations' ranges calibrated by running the
  model on ``representative_data`` (the converter's post-training integer quantization). Inputs and
  outputs stay float32, and an op without an int8 kernel stays float (TFLITE_BUILTINS after
  TFLITE_BUILTINS_INT8), so any model that converts in float converts in int8.

TF.js (``quantize=``): ``"uint8"``, ``"uint16"`` or ``"float16"`` weight storage, dequantized to
float32 when the model loads (``tfjs_quantized``, applied by ``noxla.writers.tfjs.writer``);
``weight_shard_size_bytes`` splits the weights into files.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from noxla.errors import QuantizationError

TFLITE_MODES = ("float16", "dynamic_int8", "int8")
TFJS_MODES = ("uint8", "uint16", "float16")


def check_mode(quantize: str | None, modes: tuple[str, ...], target: str) -> None:
    """Refuse a bad mode before any work."""
    if quantize is not None and quantize not in modes:
        raise QuantizationError(f"{target} quantize={quantize!r}: expected one of {', '.join(modes)} (or None)")


def representative_samples(quantize: str | None, data, example_args: Sequence) -> Callable | None:
    """``data`` as the converter's representative dataset (a callable yielding one list of input
    arrays per sample), checked against the example inputs before any work.

    ``data``: a callable returning an iterable of samples (each a sequence of arrays, one per input,
    shaped like the example inputs; a single array for a one-input function), or one array per input
    with an extra leading axis of samples (a single array for a one-input function)."""
    if quantize != "int8":
        if data is not None:
            raise QuantizationError(f"representative_data calibrates quantize='int8' only (got quantize={quantize!r})")
        return None
    if data is None:
        raise QuantizationError("quantize='int8' needs representative_data: samples of the model's inputs, whose "
                         "activation ranges calibrate the int8 scales (or use 'dynamic_int8', which needs none)")
    shapes = [(tuple(x.shape), np.dtype(x.dtype)) for x in example_args]

    def as_sample(sample, where: str) -> list:
        arrays = [sample] if len(shapes) == 1 and not isinstance(sample, (list, tuple)) else list(sample)
        got = [(tuple(np.shape(a)), np.asarray(a).dtype) for a in arrays]
        if got != shapes:
            raise QuantizationError(f"representative_data {where}: expected inputs shaped {shapes}, got {got}")
        return [np.asarray(a) for a in arrays]

    if callable(data):
        def samples():
            for i, sample in enumerate(data()):
                yield as_sample(sample, f"sample {i}")
        return samples
    stacked = [data] if len(shapes) == 1 and not isinstance(data, (list, tuple)) else list(data)
    if len(stacked) != len(shapes) or len({len(a) for a in stacked}) != 1:
        raise QuantizationError(f"representative_data: expected {len(shapes)} array(s), one per input, with the same "
                         f"number of samples on their first axis")
    checked = [as_sample([a[k] for a in stacked], f"sample {k}") for k in range(len(stacked[0]))]
    return lambda: iter(checked)


def configure_tflite(converter, quantize: str | None, samples: Callable | None = None) -> None:
    import tensorflow as tf
    check_mode(quantize, TFLITE_MODES, "TFLite")
    if quantize is None:
        return
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantize == "int8":
        converter.representative_dataset = samples
        # int8 kernels first; an op without one (a float-only builtin) stays float between
        # (de)quantize ops instead of failing the conversion.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                               *converter.target_spec.supported_ops]


def _exact_table(data: np.ndarray) -> bool:
    """Whether every value is a whole number or a power of two (mantissa exactly 1/2 in frexp)."""
    return bool(np.all((data == np.round(data)) | (np.abs(np.frexp(data)[0]) == 0.5)))


def tfjs_quantized(data: np.ndarray, quantize: str | None) -> tuple[np.ndarray, dict | None]:
    """A TF.js weight as it is stored under ``quantize``, and the ``quantization`` entry of its
    manifest (None: stored as it is), as TF.js's loader reads them back: ``value * scale + min``
    for uint8/uint16, float16 widened to float32.

    Only float32 weights are quantized. uint8/uint16 rescale each weight linearly between its min
    and max, nudged so that 0 is one of the levels when the range holds it (TF Lite's nudging, as
    TF.js's own converter does it). In every mode, weights holding inf or NaN stay float32 (for
    uint8/uint16 the range would be infinite and every value NaN), and so do weights made only of
    whole numbers and powers of two: they are a lowering's exact tables, never trained weights (the
    PRNG's bitcast table of float32 powers of two, rounded to 8 or 16 bits, gave wrong samples;
    float16 holds neither float32's largest values nor its smallest powers of two).
    """
    check_mode(quantize, TFJS_MODES, "TF.js")
    if quantize is None or data.dtype != np.float32 or not np.all(np.isfinite(data)) or _exact_table(data):
        return data, None
    if quantize == "float16":
        return data.astype(np.float16), {"dtype": "float16", "original_dtype": "float32"}
    dtype = np.dtype(quantize)
    low, high = (float(data.min()), float(data.max())) if data.size else (0.0, 0.0)
    if low == high:
        return np.zeros(data.shape, dtype), {"dtype": quantize, "min": low, "scale": 1.0, "original_dtype": "float32"}
    levels = np.iinfo(dtype).max
    scale = (high - low) / levels
    if low <= 0 <= high:  # nudge the range so that 0 falls on a level
        low = -float(np.round(-low / scale)) * scale
        high = levels * scale + low
    stored = np.round((np.clip(data.astype(np.float64), low, high) - low) / scale).astype(dtype)
    return stored, {"dtype": quantize, "min": low, "scale": scale, "original_dtype": "float32"}


def float_divisions(data: bytes) -> bytes:
    """The int8 model ``data`` with each int8 DIV computed in float32 between DEQUANTIZE and QUANTIZE
    ops. TF 2.21's converter quantizes DIV, and LiteRT's int8 DIV refuses a divisor equal to its
    zero point ("div.cc: data[i] != zero_point"): a divisor whose calibrated range holds 0 (a
    sampling head's normalizer, a VAE's scale) failed at run time, after the export had passed."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code, opcode_index
    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model, schema
    model = read_model(bytearray(data))
    B, INT8, FLOAT32 = schema.BuiltinOperator, schema.TensorType.INT8, schema.TensorType.FLOAT32

    def float_twin(graph, index: int) -> int:
        twin = schema.TensorT()
        twin.name = (graph.tensors[index].name or b"") + b"/float"
        twin.shape, twin.type, twin.buffer = graph.tensors[index].shape, FLOAT32, 0
        graph.tensors.append(twin)
        return len(graph.tensors) - 1

    def operator(code: int, inputs, outputs):
        new = schema.OperatorT()
        new.opcodeIndex, new.inputs, new.outputs = opcode_index(model, code), list(inputs), list(outputs)
        return new

    changed = False
    for graph in model.subgraphs:
        operators = []
        for op in graph.operators or []:
            tensors = [graph.tensors[t] for t in (*op.inputs, *op.outputs)]
            if builtin_code(model, op) != B.DIV or any(t.type != INT8 for t in tensors):
                operators.append(op)
                continue
            quantized_in, quantized_out = [int(t) for t in op.inputs], int(op.outputs[0])
            inputs, result = [float_twin(graph, t) for t in quantized_in], float_twin(graph, quantized_out)
            operators += [operator(B.DEQUANTIZE, [q], [f]) for q, f in zip(quantized_in, inputs)]
            op.inputs, op.outputs = inputs, [result]
            operators += [op, operator(B.QUANTIZE, [result], [quantized_out])]
            changed = True
        graph.operators = operators
    return model_bytes(model) if changed else data


def calibrated_int8(converter, model: bytes, debug_options) -> bytes:
    """TF's post-training int8 step (``_optimize_tflite_model``) on the converted float ``model``, split
    where TF's is whole: calibration, then a check that every calibrated range is finite, then the
    quantizer. A value that turned infinite or NaN on a sample (``log(0)``, an inf in the samples)
    gave the quantizer an infinite scale: "scale out of expressed type range", then a segmentation
    fault that ended the Python process."""
    import tensorflow as tf
    from tensorflow.lite.python import lite
    converter._experimental_calibrate_only = True
    try:
        calibrated = converter._optimize_tflite_model(model, converter._quant_mode, debug_options,
                                                      quant_io=converter.experimental_new_quantizer)
    finally:
        converter._experimental_calibrate_only = False
    _require_finite_ranges(calibrated)
    return lite._mlir_quantize(
        calibrated, converter._experimental_disable_per_channel, input_data_type=tf.float32,
        output_data_type=tf.float32,
        enable_variable_quantization=converter._quant_mode.enable_mlir_variable_quantization,
        disable_per_channel_for_dense_layers=converter._experimental_disable_per_channel_quantization_for_dense_layers,
        debug_options_str=debug_options.SerializeToString())


def _require_finite_ranges(calibrated: bytes) -> None:
    from noxla.writers.tflite.flatbuffer.schema import read_model
    model = read_model(bytearray(calibrated))
    bad = [(t.name or b"").decode() for graph in model.subgraphs for t in graph.tensors
           if t.quantization is not None and any(v is not None and not np.all(np.isfinite(v))
                                                 for v in (t.quantization.min, t.quantization.max))]
    if bad:
        raise QuantizationError(
            f"int8 calibration: {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} took an infinite or NaN value on "
            "the representative data, and an int8 range must be finite: give samples on which the model's values "
            "stay finite, or quantize='dynamic_int8' or 'float16', which keep activations float")
