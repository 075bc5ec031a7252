"""Quantized exports: the TFLite converter's post-training modes and the TF.js converter's weight
quantization, configured from noxla's export options.

TFLite (``quantize=``):
- ``"float16"``: weights stored as float16, dequantized at load (half the size).
- ``"dynamic_int8"``: weights stored as int8; kernels that support it quantize activations on the
  fly (about a quarter of the size).

Full int8 (activations calibrated on representative data) is refused for now: the converter's
full-int8 model of a noxla graph (TF 2.19) aborts LiteRT in allocate_tensors, with either quantizer
and with or without per-channel weights (measured on the zoo's CNN).

TF.js (``quantize=``): ``"uint8"``, ``"uint16"`` or ``"float16"`` weight storage, dequantized to
float32 when the model loads; ``weight_shard_size_bytes`` splits the weights into files.
"""
from __future__ import annotations

import contextlib

import numpy as np

TFLITE_MODES = ("float16", "dynamic_int8")
TFJS_MODES = ("uint8", "uint16", "float16")


def check_mode(quantize: str | None, modes: tuple[str, ...], target: str) -> None:
    """Refuse a bad mode before any work."""
    if quantize == "int8" and target == "TFLite":
        raise ValueError('TFLite quantize="int8" is not supported yet: LiteRT aborts on the converter\'s '
                         'full-int8 model of a noxla graph; use "dynamic_int8" (int8 weights)')
    if quantize is not None and quantize not in modes:
        raise ValueError(f"{target} quantize={quantize!r}: expected one of {', '.join(modes)} (or None)")


def configure_tflite(converter, quantize: str | None) -> None:
    import tensorflow as tf
    check_mode(quantize, TFLITE_MODES, "TFLite")
    if quantize is None:
        return
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]


@contextlib.contextmanager
def tfjs_finite_weights_only():
    """Keep weights holding inf or NaN out of the TF.js converter's uint8/uint16 quantization.

    It rescales each float32 weight linearly between its min and max; a lowering's infinity
    constant would make that range infinite and every value NaN.
    """
    from noxla.tfjs_converter_fixes import tfjs_module
    write_weights = tfjs_module("tensorflowjs.write_weights")
    original = write_weights._quantize_entry

    def quantize_entry(entry, dtype):
        data = entry["data"]
        if data.dtype == np.float32 and not np.all(np.isfinite(data)):
            return entry
        return original(entry, dtype)

    write_weights._quantize_entry = quantize_entry
    try:
        yield
    finally:
        write_weights._quantize_entry = original


def tfjs_dtype_map(quantize: str | None) -> dict | None:
    check_mode(quantize, TFJS_MODES, "TF.js")
    return None if quantize is None else {quantize: True}  # True: every float32 weight
