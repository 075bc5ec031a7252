"""bfloat16 and float16 inside a TF.js graph model: carried in float32, each result rounded back.

TF.js has float32 tensors only (it reads a DT_HALF or DT_BFLOAT16 node as float32 and would
compute in float32 without a word). ``noxla.writers.half_float_carry`` rewrites the optimised GraphDef
before the writer reads it; each half-float result is rounded by ``rounded_in_float32``, which is
float arithmetic only: TF.js has no Bitcast and no integer shifts to round on the bits as the
.tflite does (``noxla.writers.tflite.converter.bfloat16``).

The rounding is exact round to nearest even for every float32, as ml_dtypes rounds: ties to
even, overflow to infinity (bfloat16 past 0x7F7F8000, float16 from 65520), the half float's own
subnormals (a fixed quantum below its smallest normal), -0.0, infinities and NaN kept: the
emitted graph matches ml_dtypes on all 2^32 float32 bit patterns (``tools/half_float_rounding.py``)
and on a dense set of them on TF.js's cpu and wasm backends (tests/test_tfjs_half_floats.py). It is
float32 adds, subtractions, multiplies by powers of two, comparisons and selects only (26 ops per
bfloat16 result, 23 per float16 one), which every TF.js backend measured computes exactly on normal
floats; WebGL and WebGPU flush subnormal inputs (measured:
docs/testing.md).

How, on a = |x| (the sign is put back at the end):

1. the largest power of two u <= a, exactly (Rump, Ogita and Oishi's NextPowerTwo, "Accurate
   floating-point summation", 2008): t = a * 2^24; n = |(t - a) - t| is the smallest power of
   two >= a, and u = n / 2 unless n == a. It needs t finite, and every quantum below is better normal
   (WebGL and WebGPU flush subnormals): bfloat16 values from 1 are scaled by 2^-32 first and
   those below 1 by 2^32 (exact), and back after (exact, or infinity where bfloat16 overflows,
   or a subnormal);
2. the quantum q = max(u * 2^(1 - p), the half float's smallest subnormal): p is its precision;
3. r = (a + C) - C with C = 3 * 2^22 * q: a + C lies in the binade whose spacing is q and C is a
   multiple of 2q, so float32's own round to nearest even rounds a to a multiple of q, ties to
   even, and the subtraction is exact.
"""
from __future__ import annotations

import numpy as np

from noxla.writers.half_float_carry import BF16, F32, HALF, Rewrite, carry_in_float32


def carry_half_floats_in_float32(graph_def) -> bool:
    """``graph_def`` with bfloat16 and float16 carried in float32, in place: whether it held any."""
    return carry_in_float32(graph_def, {BF16: _bfloat16, HALF: _float16}, "TF.js")


# (precision p, smallest subnormal, scale large values, largest finite) per half float, by dtype name
HALF_FLOATS = {"bfloat16": (8, 2.0 ** -133, True, None), "float16": (11, 2.0 ** -24, False, 65504.0)}


def _bfloat16(rewrite: Rewrite, x: str, scope: str) -> str:
    return rounded_in_float32(rewrite, x, scope, *HALF_FLOATS["bfloat16"])


def _float16(rewrite: Rewrite, x: str, scope: str) -> str:
    return rounded_in_float32(rewrite, x, scope, *HALF_FLOATS["float16"])


def rounded_in_float32(rewrite, x, scope: str, precision: int, quantum: float, scaled: bool,
                       largest: float | None):
    """``x`` (float32) rounded to nearest even at a half float's precision (see the module's doc).
    ``rewrite``: what makes the nodes, ``add(name, op, inputs, out_arg, **attrs)`` returning the new
    node's output and ``constant(np.float32)`` a scalar Const's (``noxla.writers.half_float_carry.Rewrite`` on
    a GraphDef, ``noxla.writers.tfjs.graph_half_floats`` on noxla's graph)."""
    def op(name, kind, *inputs, out_arg="z"):
        attrs = {"T": F32}
        if kind == "SelectV2":
            out_arg = "output"
        elif kind in ("Equal", "NotEqual"):
            attrs["incompatible_shape_error"] = True
        elif kind in ("Abs", "Neg"):
            out_arg = "y"
        return rewrite.add(f"{scope}/{name}", kind, list(inputs), out_arg, **attrs)

    def c(value):
        return rewrite.constant(np.float32(value))

    a = op("abs", "Abs", x)
    if scaled:  # float16 needs no scaling: every value from 2^17 rounds to infinity
        large = op("large", "GreaterEqual", a, c(1))
        down = op("down", "SelectV2", large, c(2.0 ** -32), c(2.0 ** 32))
        up = op("up", "SelectV2", large, c(2.0 ** 32), c(2.0 ** -32))
        b = op("scaled", "Mul", op("finite", "Minimum", a, c(np.finfo(np.float32).max)), down)
        quantum *= 2.0 ** 32  # the smallest subnormal, scaled as the values below 1 are
    else:
        b = op("finite", "Minimum", a, c(2.0 ** 17))
    t = op("t", "Mul", b, c(2.0 ** 24))
    n = op("next_power", "Abs", op("t_less_b_less_t", "Sub", op("t_less_b", "Sub", t, b), t))
    u = op("power", "SelectV2", op("above", "Greater", n, b), op("half", "Mul", n, c(0.5)), n)
    q = op("quantum", "Maximum", op("spacing", "Mul", u, c(2.0 ** (1 - precision))), c(quantum))
    magic = op("magic", "Mul", q, c(3 * 2.0 ** 22))
    r = op("rounded", "Sub", op("shifted", "AddV2", b, magic), magic)
    if scaled:
        r = op("unscaled", "Mul", r, up)
    if largest is not None:
        r = op("overflowed", "SelectV2", op("too_big", "Greater", r, c(largest)), c(np.inf), r)
    signed = op("signed", "SelectV2", op("negative", "Less", x, c(0)), op("neg", "Neg", r), r)
    # x itself where it is a half float already (-0.0 among them: r is +0.0 there) or NaN.
    same = op("same", "Equal", r, a)
    kept = op("kept", "SelectV2", same, x, signed)
    return op("value", "SelectV2", op("is_nan", "NotEqual", x, x), x, kept)
