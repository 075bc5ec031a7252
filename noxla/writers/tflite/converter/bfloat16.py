"""bfloat16 inside a .tflite: carried in float32, each computed value rounded to bfloat16.

TFLite has no bfloat16 kernels (nor tensors its converter takes). ``noxla.writers.half_float_carry``
rewrites the frozen GraphDef before the TFLite converter sees it: bfloat16 becomes float32, and
each op that computes a new bfloat16 value is followed by the rounding below, made of builtins on
the float's bits. The rounding keeps NaN (the input NaN itself), rounds past the largest bfloat16
to infinity as bfloat16 does, and rounds float32 subnormals on their bits as well (integer ops:
LiteRT does not flush them). Program inputs and outputs stay float32 only: a bfloat16 one is
refused up front (``lowering_rules.core.dtype_support``), as TFLite takes no bfloat16 tensor.
"""
from __future__ import annotations

from noxla.writers.half_float_carry import BF16, F32, I32, Rewrite, carry_in_float32


def carry_bfloat16_in_float32(graph_def) -> bool:
    """``graph_def`` with bfloat16 carried in float32, in place: whether it held any."""
    return carry_in_float32(graph_def, {BF16: rounded_on_bits}, "TFLite")


def rounded_on_bits(rewrite: Rewrite, x: str, scope: str) -> str:
    """``x`` (float32) rounded to nearest even at bfloat16's precision: on its bits b (an int32),
    b + 0x7FFF + (bit 16 of b), with the low 16 bits cleared. A negative float's int32 is its
    magnitude's bits less 2^31, so the same integer steps round its magnitude; clearing the low
    bits is floor division (the sign bit stays). A NaN's bits would carry into the exponent or
    overflow the int32: NaNs are set aside before the add (as 0) and returned as they came."""
    def op(name, kind, inputs, out_arg="z", **attrs):
        return rewrite.add(f"{scope}/{name}", kind, inputs, out_arg, **attrs)
    c = rewrite.constant
    bits = op("bits", "Bitcast", [x], "output", T=F32, type=I32)
    nan = op("is_nan", "NotEqual", [x, x], T=F32, incompatible_shape_error=True)
    safe = op("not_nan", "SelectV2", [nan, c(0), bits], "output", T=I32)
    unit = c(1 << 16)
    odd = op("odd", "FloorMod", [op("high", "FloorDiv", [safe, unit], T=I32), c(2)], T=I32)
    up = op("up", "AddV2", [op("half", "AddV2", [safe, c(0x7FFF)], T=I32), odd], T=I32)
    kept = op("cleared", "Mul", [op("kept", "FloorDiv", [up, unit], T=I32), unit], T=I32)
    rounded = op("float", "Bitcast", [kept], "output", T=I32, type=F32)
    return op("value", "SelectV2", [nan, x, rounded], "output", T=F32)
