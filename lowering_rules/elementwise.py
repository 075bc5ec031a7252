"""Elementwise primitives: tables where TF has the op, functions where semantics differ.

Every lowering emits only ops that TF, TFLite builtins and TF.js all have, so one
lowering serves every target. Three consequences shape this file:
- TFLite builtins have no float16 kernels (only Cast), so half-precision operands are
  computed in float32 and rounded back, as XLA's CPU backend does.
- Ops missing from TFLite or TF.js (sinh, asinh, log1p, ...) are composed from basic
  arithmetic in small named helpers.
- Where TF's op differs from JAX at the edges (NaN in max/min, integer division by
  zero, float -> int of NaN/inf, rem signs) the rule spells JAX's semantics out.

Bitwise operations and shifts are in ``bitwise.py``, special functions (erf, lgamma, igamma,
zeta, Bessel, ...) in ``special.py``. Each table entry and rule carries its cases.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules import transposed_operand_cases
from lowering_rules.core.cases import boolean, case, f16, f32, i32, u8, u32
from lowering_rules.core.dtype_support import ALL, NUMERIC, dtypes, gap
from lowering_rules.core.float_math import (
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atanh,
    cbrt,
    cosh,
    exp,
    exp2,
    expm1,
    log,
    log1p,
    log_of_finite,
    sinh,
    tan,
)
from lowering_rules.core.helpers import (
    HALF_FLOATS,
    as_int32,
    as_out,
    infinity_like,
    int_info,
    is_nan,
    kernel_dtype,
    where_nan_either,
    wide,
    wrap_to,
    wrapped,
)
from lowering_rules.core.lazy_tensorflow import op, tf
from lowering_rules.core.registry import Target, lowering
from lowering_rules.patterns import fusion, rope
from lowering_rules.patterns.half_scans import rounded_to
from lowering_rules.values import limb_values, words

NAN, INF = float("nan"), float("inf")


# ----------------------------------------------------------------------------- dtype plumbing

def _is_float(x) -> bool:
    return x.dtype.is_floating


def _is_narrow_int(x) -> bool:
    return x.dtype.is_integer and x.dtype.size < 4


def _const_like(value, x):
    return tf.constant(value, dtype=x.dtype)


FAST_LOG = fusion.FastVariant("log(+inf) and log(NaN) may come out finite (float32: XNNPACK's AVX2 LOG "
                              "kernel clamps them to 88.38 and 88.78)", fusion.float32_out)


def lower_log(ctx, x, *, accuracy=None):
    """log; by default without the +inf/NaN pass-through (two ops fewer), see FAST_LOG."""
    x = wide(x)
    return as_out(ctx, log(x) if ctx.strict or x.dtype != tf.float32 else log_of_finite(x))


def _narrow_wrapped(value, dtype: tf.DType):
    """An int32 ``value`` reduced modulo 2^bits into the 8/16-bit integer ``dtype`` (JAX wraps)."""
    return tf.cast(wrapped(value, *int_info(dtype)), dtype)


def negative(x):
    # TF and TFLite have no 8/16-bit integer or uint32 Sub kernels: an int32 result, wrapped (uint32
    # as the int32 with the same bits, whose negation wraps the same way).
    if x.dtype == tf.uint32:
        return tf.cast(tf.zeros_like(x, tf.int32) - tf.cast(x, tf.int32), tf.uint32)
    if _is_narrow_int(x):
        return _narrow_wrapped(-tf.cast(x, tf.int32), x.dtype)
    if x.dtype.is_floating:  # 0 - x would give +0.0 for +0.0, where JAX's negation gives -0.0
        return tf.negative(x)
    # 0 - x: TF.js's wasm Neg goes through float32 and rounds int32 values beyond 2^24.
    return tf.zeros_like(x) - x


def sign(x):
    if x.dtype.is_unsigned:  # TF's Sign has no unsigned kernels, TFLite no unsigned NotEqual: 0 or 1
        return tf.cast(tf.not_equal(tf.cast(x, tf.int32), 0), x.dtype)  # uint32: its int32 bits
    if x.dtype == tf.int64:  # TFLite's SIGN has no int64 kernel
        return tf.cast(x > 0, x.dtype) - tf.cast(x < 0, x.dtype)
    if _is_narrow_int(x):  # nor 8/16-bit ones
        return tf.cast(tf.sign(tf.cast(x, tf.int32)), x.dtype)
    # TF.js's Sign maps NaN to 0.
    return tf.where(is_nan(x), x, tf.sign(x)) if _is_float(x) else tf.sign(x)


def square(x):
    if _is_narrow_int(x):  # TFLite's SQUARE has no 8/16-bit kernels: an int32 product, wrapped
        return _narrow_wrapped(tf.square(tf.cast(x, tf.int32)), x.dtype)
    # A float's as x * x (the same rounding): the TFLite converter fuses Square(x - m) into
    # SQUARED_DIFFERENCE(x, m), so a LayerNorm's x - m, read again, is computed twice; a Mul it
    # leaves alone, and the two x - m become one. 8 of BERT's LayerNorms (128 x 768), with the
    # quotient of _sqrt_kept: 0.90x the LiteRT time at 1 thread, 0.84x at 4 (litert-converter's ops).
    return tf.multiply(x, x) if _is_float(x) else tf.square(x)


def _sqrt_kept(y):
    """A divisor that a Sqrt computes, through a reshape of the Sqrt's operand and back: the TFLite
    converter rewrites x / sqrt(z) as x * rsqrt(z), not JAX's quotient (TFLite's RSQRT gives NaN at
    0 where JAX's x / 0 is +-inf, and the product rounds once more), but not across a reshape. It
    costs a LayerNorm little: 8 of BERT's (128 x 768) 1.06x the rsqrt form's LiteRT time."""
    sqrt = getattr(y, "op", None)  # None in eager mode, where no converter runs
    if sqrt is None or sqrt.type != "Sqrt":
        return y
    flat = [-1] if y.shape.rank >= 2 else [-1, 1]  # a shape other than y's, else the reshape is dropped
    # A symbolic size (polymorphic shapes) reshapes back to y's run-time shape.
    shape = y.shape.as_list() if y.shape.is_fully_defined() else tf.shape(sqrt.inputs[0])
    return tf.reshape(tf.sqrt(tf.reshape(sqrt.inputs[0], flat)), shape)


def rsqrt(x):
    # TFLite's Rsqrt gives NaN at 0: 1 / x there is the infinity of the right sign. Its converter
    # turns 1 / sqrt(z) back into Rsqrt(z), so an x that a Sqrt computes is kept from it.
    return tf.where(tf.equal(x, 0.0), 1.0 / _sqrt_kept(x), tf.math.rsqrt(x))


def lower_rsqrt(ctx, x, *, accuracy=None):
    """rsqrt; plain Rsqrt where the operand cannot be 0 (a norm's variance + epsilon), both modes."""
    x = wide(x)
    return as_out(ctx, tf.math.rsqrt(x) if fusion.positive(ctx, ctx.eqn.invars[0]) else rsqrt(x))


def unary(tf_fn, *, transcendental=False):
    """A rule applying ``tf_fn``; transcendental primitives also carry an ``accuracy`` hint, which
    only asks for a tolerance: TF has one implementation of each, so it is accepted and ignored."""
    if transcendental:
        def lower(ctx, x, *, accuracy=None):
            return as_out(ctx, tf_fn(wide(x)))
    else:
        def lower(ctx, x):
            return as_out(ctx, tf_fn(wide(x)))
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


def binary(tf_fn):
    def lower(ctx, x, y):
        if _is_narrow_int(x):  # TFLite has no 8- or 16-bit integer arithmetic: wrap an int32 result
            bits, signed = int_info(x.dtype)
            return wrap_to(ctx, tf_fn(as_int32(x), as_int32(y)), bits, signed)
        return as_out(ctx, tf_fn(wide(x), wide(y)))
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


# ----------------------------------------------------------------------------- float helpers: core/float_math.py

def _round_half_away(x):
    # trunc(x) keeps x's sign, a zero's too (CEIL(-0.25) is -0.0), where |x| rounded and negated does
    # not: LiteRT's NEG and 0 - x give +0.0 for 0.0, and x < 0 misses -0.0 (found by the fuzzer:
    # round -> round -> atan2 gave pi for JAX's -pi).
    t = tf.where(x < 0, tf.math.ceil(x), tf.floor(x))
    # x - trunc(x) is exact, unlike x + 0.5, which rounds 0.49999997 up to 1.
    return tf.where(tf.abs(x - t) >= 0.5, t + tf.sign(x), t)


def _round_mantissa(x, mantissa_bits: int):
    """x rounded to nearest with ``mantissa_bits`` explicit bits: Veltkamp's splitting
    c = x (2^s + 1), hi = c - (c - x) keeps the top 24 - s bits of a float32."""
    s = 23 - mantissa_bits
    big = tf.abs(x) > 2.0 ** 100  # keep c finite: scale by an exact power of two
    xs = tf.where(big, x * 2.0 ** -30, x)
    c = xs * float(2 ** s + 1)
    hi = c - (c - xs)
    hi = tf.where(big, hi * 2.0 ** 30, hi)
    return tf.where(tf.math.is_finite(x), hi, x)


# ----------------------------------------------------------------------------- unary tables

_SQRT_EDGES = np.array([0.0, -0.0, 4.0, INF, 1e-30, 2.25, NAN, 0.5], np.float32)


def _unary_cases(fn, low=None, high=None, edges=(), f16_case=True, i32_case=False, poly=False, atol=None):
    cases = [case("f32", fn, f32(3, 4, low=low, high=high), atol=atol),
             case("empty", lambda x: jnp.concatenate([fn(x[:0]), x]), f32(2, 3, low=low, high=high))]
    if edges:
        cases.append(case("edges", fn, np.array(edges, np.float32), atol=atol))
    if f16_case:
        cases.append(case("f16", fn, f16(2, 3, low=low, high=high)))
    if i32_case:
        cases.append(case("i32", fn, i32(3, 4)))
    if poly:
        cases.append(case("poly", fn, f32(3, 4, low=low, high=high), polymorphic_shapes=("(b, ...)",)))
    return cases


# Primitive: (TF lowering, cases). Transcendental primitives also carry an ``accuracy`` hint.
UNARY = {
    # The sign of a zero seen through a division (the comparison reads no sign of a zero): LiteRT's
    # NEG gives +0.0 for +0.0, and 0 - x did in every runtime.
    lax.neg_p: (negative, [*_unary_cases(lax.neg, edges=[0.0, -0.0, INF, NAN], i32_case=True),
                           case("signed_zeros", lambda x: 1.0 / -x, np.array([0.0, -0.0, 2.0], np.float32))]),
    lax.sign_p: (sign, _unary_cases(lax.sign, edges=[0.0, -0.0, INF, -INF, NAN, -3.0], i32_case=True)),
    lax.floor_p: (op("floor"), _unary_cases(lax.floor, edges=[-0.5, 0.5, -1.0, INF, NAN, 1e30])),
    lax.ceil_p: (op("math.ceil"), _unary_cases(lax.ceil, edges=[-0.5, 0.5, -1.0, INF, NAN, 1e30])),
    lax.is_finite_p: (op("math.is_finite"), _unary_cases(lax.is_finite, edges=[0.0, INF, -INF, NAN, 3e38])),
    lax.abs_p: (op("abs"), [*_unary_cases(lax.abs, edges=[-0.0, -INF, NAN], i32_case=True, poly=True),
                            # TF.js's Abs rounds int32 through float32 (noxla/writers/tfjs/exact_int32.py)
                            case("i32_wide", lax.abs, np.array([123456789, -987654321, -2 ** 31, 2 ** 31 - 1,
                                                                -16777217, 5], np.int32))]),
    lax.square_p: (square, [*_unary_cases(lax.square, edges=[1e20, -INF, NAN], i32_case=True),
                            # TF.js's cpu Square is float32: wrong from 2^24 (46341^2 wraps past 2^31)
                            case("i32_wide", lax.square, np.array([46341, 2 ** 31 - 1, -70000, 4097], np.int32))]),
    lax.asin_p: (asin, _unary_cases(lax.asin, low=-1, high=1, edges=[1.0, -1.0, 0.0, 1.5, NAN, 1e-20])),
    lax.acos_p: (acos, _unary_cases(lax.acos, low=-1, high=1, edges=[1.0, -1.0, 0.0, 1.5, NAN])),
    lax.atan_p: (atan, _unary_cases(lax.atan, low=-10, high=10, edges=[0.0, INF, -INF, NAN, 1e20])),
    lax.sinh_p: (sinh, _unary_cases(lax.sinh, low=-5, high=5, edges=[0.0, 1e-6, -1e-3, 0.99, 1.0, 89.0, -89.0, 90.0,
                                                              INF, NAN])),
    lax.cosh_p: (cosh, _unary_cases(lax.cosh, low=-5, high=5, edges=[0.0, 1e-6, 89.0, -89.0, 90.0, -INF, NAN])),
    lax.asinh_p: (asinh, _unary_cases(lax.asinh, low=-10, high=10, edges=[0.0, 1e-20, -1e-3, 1e20, -1e30, INF, NAN,
                                                                      3e38, -3e38, -INF])),
    lax.acosh_p: (acosh, _unary_cases(lax.acosh, low=1, high=10, edges=[1.0, 1.0001, 0.5, 1e20, INF, NAN, 3e38])),
    lax.atanh_p: (atanh, _unary_cases(lax.atanh, low=-0.99, high=0.99, edges=[0.0, 1e-20, 1.0, -1.0, 2.0, 0.999, NAN])),
    lax.stop_gradient_p: (op("identity"), [case("f32", lax.stop_gradient, f32(3, 4)),
                                        case("i32", lax.stop_gradient, i32(3))]),
    lax.copy_p: (op("identity"), [case("f32", jnp.copy, f32(3, 4)), case("bool", jnp.copy, boolean(2, 2))]),
}

# Where log1p and expm1 exist for: their relative precision near 0 (an absolute tolerance hid 1e-3).
_NEAR_ZERO = np.array([1e-6, -1e-6, 5e-5, 1e-4, -1e-4, 3e-3, -3e-3, 0.2, -0.3, 0.45, -0.45, 0.49, -0.0], np.float32)

TRANSCENDENTAL = {
    lax.exp_p: (exp, _unary_cases(lax.exp, edges=[0.0, 88.0, 88.5, 88.72, 89.0, -104.0, -INF, INF, NAN], poly=True)),
    lax.exp2_p: (exp2, _unary_cases(lax.exp2, low=-10, high=10, edges=[0.0, 1.0, 10.0, -3.0, 127.0, 128.0, -INF, NAN])),
    lax.log1p_p: (log1p, [*_unary_cases(lax.log1p, low=-0.9, high=10,
                                        edges=[1e-8, -1e-8, 0.0, -1.0, -2.0, INF, -INF, 1e30, NAN, 3e38]),
                          case("near_zero_relative", lax.log1p, _NEAR_ZERO, atol=0.0, rtol=5e-7)]),
    lax.expm1_p: (expm1, [*_unary_cases(lax.expm1, low=-5, high=5,
                                        edges=[1e-8, -1e-8, 0.0, -INF, INF, 88.0, -30.0, NAN, 88.7]),
                          case("near_zero_relative", lax.expm1, _NEAR_ZERO, atol=0.0, rtol=5e-7)]),
    lax.tanh_p: (op("tanh"), _unary_cases(lax.tanh, edges=[0.0, 20.0, -20.0, INF, NAN])),
    lax.logistic_p: (op("sigmoid"), _unary_cases(lax.logistic, edges=[0.0, 50.0, -50.0, INF, -INF, NAN])),
    lax.sin_p: (op("sin"), _unary_cases(lax.sin, edges=[0.0, 3.14159265, 100.0, INF, NAN], poly=True)),
    lax.cos_p: (op("cos"), _unary_cases(lax.cos, edges=[0.0, 3.14159265, 100.0, INF, NAN])),
    lax.tan_p: (tan, _unary_cases(lax.tan, low=-1.5, high=1.5, edges=[0.0, 1.0, -1.0, INF, NAN])),
    lax.sqrt_p: (op("sqrt"), _unary_cases(lax.sqrt, low=0, high=100, edges=[0.0, -1.0, INF, NAN, 1e-30])),
    lax.cbrt_p: (cbrt, _unary_cases(lax.cbrt, low=-100, high=100, edges=[0.0, 8.0, -27.0, INF, -INF, NAN, 1e-30])),
}

# The float series below are built from float32 constants: no float64 version.
FLOAT32_SERIES = dtypes(NUMERIC - {"float64"}, missing=(
    "the lowering evaluates float32 constants and series; float64 results would not have float64 "
    "accuracy"))
_DTYPES = {lax.abs_p: dtypes(gaps=[gap((Target.TFLITE,), {"int8", "int64"},
                                       "TFLite's ABS has no int8 or int64 kernel")])}

for _prim, (_fn, _cases) in UNARY.items():
    lowering(_prim, cases=_cases, dtypes=_DTYPES.get(_prim, ALL))(unary(_fn))
for _prim, (_fn, _cases) in TRANSCENDENTAL.items():
    lowering(_prim, cases=_cases, dtypes=_DTYPES.get(_prim, ALL))(unary(_fn, transcendental=True))
lowering(lax.log_p, fast=FAST_LOG, cases=_unary_cases(
    lax.log, low=0.01, high=100, edges=[0.0, -1.0, INF, 1.0, NAN, 1e-30, 3e38, 2.5e38, -INF, 2.0 ** 64]))(lower_log)
lowering(lax.rsqrt_p, cases=[
    *_unary_cases(lax.rsqrt, low=0.01, high=100, edges=[0.0, -1.0, INF, NAN, 4.0]),
    case("norm_variance_plus_epsilon", lambda x: lax.rsqrt(jnp.maximum(jnp.mean(x * x, axis=1), 0.0) + 1e-6),
         np.array([[0.0, 0.0], [1.0, 3.0], [INF, 1.0]], np.float32)),
    case("difference_plus_epsilon", lambda x, y: lax.rsqrt(x - y + 1e-6), np.array([0.0, 1.0, 2.0], np.float32),
         np.array([1e-6, 0.5, 4.0], np.float32)),
    # Of a sqrt (found by the polymorphic fuzz family as sqrt -> sqrt -> rsqrt): the zero branch's 1 / x
    # was 1 / sqrt(z), which the TFLite converter makes RSQRT(z), NaN at 0 where JAX has +-inf.
    case("of_sqrt", lambda x: lax.rsqrt(lax.sqrt(x)), _SQRT_EDGES),
    case("of_sqrt_polymorphic", lambda x: lax.rsqrt(lax.sqrt(x)), _SQRT_EDGES.reshape(2, 4),
         polymorphic_shapes=("(b, 4)",)),
    # The fuzzed program itself: the chain over a broadcast of a symbolic size 1.
    case("of_sqrt_of_sqrt_broadcast_polymorphic", lambda x: lax.rsqrt(lax.sqrt(lax.sqrt(
        jnp.broadcast_to(x, (x.shape[0], 4))))), _SQRT_EDGES.reshape(8, 1), polymorphic_shapes=("(b, 1)",)),
])(lower_rsqrt)


@lowering(lax.round_p, tfjs_form="TF.js's cpu Round gives +0.0 for x in [-0.5, 0), where JAX gives -0.0", cases=[
    case("half_away", lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
         np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.0, 8388609.0, INF, -INF, NAN, 1e30], np.float32)),
    case("half_even", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
         np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.0, 8388609.0, INF, -INF, NAN, 1e30], np.float32)),
    case("jnp_round_f32", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), f32(3, 4, low=-5, high=5)),
    case("away_f16", lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
         np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.2], np.float16)),
    # The sign of a zero result, seen through a division (the comparison reads no sign of a zero);
    # found by the fuzzer as round -> round -> atan2, a -pi that became pi.
    case("away_signed_zeros", lambda x: 1.0 / lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
         np.array([-0.25, -0.0, 0.25, 0.0, -0.49999997, -0.5, 0.5, -1.25], np.float32)),
    case("away_signed_zeros_f16", lambda x: 1.0 / lax.round(lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
                                                              lax.RoundingMethod.AWAY_FROM_ZERO),
         np.array([-0.25, -0.0, 0.25, 0.0, -0.5, -3.75], np.float16)),
    case("even_signed_zeros", lambda x: 1.0 / lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
         np.array([-0.25, -0.0, 0.25, 0.0, -0.5, 0.5, -1.5], np.float32)),
])
def lower_round(ctx, x, *, rounding_method=lax.RoundingMethod.AWAY_FROM_ZERO):  # lax.round's default
    x = wide(x)
    if rounding_method != lax.RoundingMethod.TO_NEAREST_EVEN:
        return as_out(ctx, _round_half_away(x))
    r = tf.round(x)  # TF, TFLite and TF.js all round half to even
    if ctx.lowering_for.tfjs:  # a zero takes x's sign: x * 0.0 (x is finite there)
        r = tf.where(tf.equal(r, 0.0), x * 0.0, r)
    return as_out(ctx, r)


@lowering(lax.reduce_precision_p, dtypes=FLOAT32_SERIES, cases=[
    case("bf16", lambda x: lax.reduce_precision(x, 8, 7),
         np.array([1.00390625, 1.01171875, 1.0078125, 3e38, 3.3e38, 0.1, -7.3, INF, -INF, NAN, 0.0], np.float32)),
    case("f16", lambda x: lax.reduce_precision(x, 5, 10),
         np.array([1.00048828125, 1.0, 65519.0, 65520.0, 7e4, 1e-6, 6.2e-5, -3.14159, INF, NAN], np.float32)),
    case("f16_random", lambda x: lax.reduce_precision(x, 5, 10), f32(4, 5)),
    case("e4m3_like", lambda x: lax.reduce_precision(x, 4, 3), f32(4, 5, low=-300, high=300)),
    case("identity", lambda x: lax.reduce_precision(x, 8, 23), f32(4)),
    case("on_f16", lambda x: lax.reduce_precision(x, 5, 7), f16(3, 4)),
])
def lower_reduce_precision(ctx, x, *, exponent_bits, mantissa_bits):
    x = wide(x)
    if mantissa_bits < 23:
        x = _round_mantissa(x, mantissa_bits)
    if exponent_bits < 8:
        # XLA rounds the mantissa first, then overflows to inf and flushes below the smallest normal.
        max_exponent = 2 ** (exponent_bits - 1) - 1
        min_normal = 2.0 ** (1 - max_exponent)
        max_finite = (2.0 - 2.0 ** -min(mantissa_bits, 23)) * 2.0 ** max_exponent
        x = tf.where(tf.abs(x) < min_normal, x * 0.0, x)
        x = tf.where(tf.abs(x) > max_finite, tf.where(x < 0, -infinity_like(x), infinity_like(x)), x)
    return as_out(ctx, x)


@lowering(lax.optimization_barrier_p, cases=[
    case("pair", lambda x, y: lax.optimization_barrier((x, y)), f32(3), i32(2, 2)),
])
def lower_optimization_barrier(ctx, *operands):
    # TF has no scheduling barrier to keep; the values pass through unchanged.
    return [tf.identity(x) for x in operands]


# ----------------------------------------------------------------------------- binary

# uint32 operands at the edges of the word: wraps, a zero divisor, divisors above 2^31.
_U32_EDGES = (np.array([0, 1, 7, 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 31, 3000000000, 123456789, 5, 0x9E3779B9], np.uint32),
              np.array([3, 0, 7, 1, 2 ** 32 - 1, 2 ** 31 + 1, 65535, 10, 0, 0x1BD11BDA], np.uint32))

def _atan2(y, x):
    # TFLite's ATAN2 takes operands of the result's shape only (the converter refuses others):
    # broadcast them explicitly. Broadcasting keeps each value, the sign of a zero too.
    if y.shape != x.shape:
        shape = tf.broadcast_dynamic_shape(tf.shape(y), tf.shape(x))
        y, x = tf.broadcast_to(y, shape), tf.broadcast_to(x, shape)
    return tf.atan2(y, x)


# Primitive: (TF lowering, cases).
BINARY = {
    lax.add_p: (op("math.add"), [
        case("f32", lax.add, f32(3, 4), f32(3, 4)),
        case("i32_wraps", lax.add, np.array([2 ** 31 - 1, -5], np.int32), np.array([1, 3], np.int32)),
        case("f16", lax.add, f16(3, 4), f16(3, 4)),
        case("edges", lax.add, np.array([INF, INF, NAN, -0.0], np.float32),
             np.array([-INF, 1.0, 1.0, -0.0], np.float32)),
        case("poly", lax.add, f32(3, 4), f32(3, 4), polymorphic_shapes=("(b, 4)", "(b, 4)")),
        case("scalar_literal", lambda x: x + 1.0, f32(1, 3))]),
    # The sum of two cotangents in every gradient (jax._src.ad_util).
    "add_any": (op("math.add"), [
        case("grad_of_product", jax.grad(lambda x: (jnp.sin(x) * x).sum()), f32(3, 4)),
        case("grad_of_square", jax.grad(lambda x: (x * x * 3.0).sum()), f32(5))]),
    lax.sub_p: (op("math.subtract"), [
        case("f32", lax.sub, f32(3, 4), f32(3, 4)),
        case("i32_wraps", lax.sub, np.array([-(2 ** 31), 5], np.int32), np.array([1, 3], np.int32)),
        case("f16", lax.sub, f16(3, 4), f16(3, 4)),
        case("u8", lax.sub, u8(5), u8(5)),
        # 8/16-bit unsigned differences wrap (computed in int32, reduced modulo 2^bits).
        case("u8_wraps", lax.sub, np.array([0, 1, 255, 0, 5], np.uint8), np.array([1, 255, 0, 255, 3], np.uint8)),
        case("u16_wraps", lax.sub, np.array([0, 1, 65535, 0, 5], np.uint16),
             np.array([1, 65535, 0, 65535, 3], np.uint16)),
        case("u32_wraps", lax.sub, *_U32_EDGES),
        *transposed_operand_cases.SUB]),
    lax.atan2_p: (lambda y, x: _atan2(y, x), [
        case("f32", lax.atan2, f32(3, 4), f32(3, 4)),
        # lax.atan2 broadcasts size-1 dimensions inside the primitive (no broadcast_in_dim).
        case("broadcast_rows", lax.atan2, f32(4, 5), f32(1, 5)),
        case("broadcast_columns", lax.atan2, f32(1, 5), f32(4, 5)),
        case("edges", lax.atan2, np.array([0.0, -0.0, 0.0, -0.0, 1.0, INF, INF, NAN], np.float32),
             np.array([-0.0, -0.0, 1.0, 1.0, 0.0, INF, -1.0, 1.0], np.float32)),
        case("f16", lax.atan2, f16(5), f16(5))]),
}


def _compare(tf_fn):
    ordering = tf_fn.__name__ not in ("equal", "not_equal")

    def lower(ctx, x, y):
        dtype = np.dtype(ctx.avals_in[0].dtype)
        # TF orders no booleans, and LiteRT has no 8/16-bit integer comparisons (it aborts): int32
        # holds them exactly. uint32: no TFLite kernel either; equality reads the int32 with the same
        # bits (as TF.js carries it), an order needs int64.
        if x.dtype == tf.bool or (dtype.kind in "iu" and dtype.itemsize < 4):
            x, y = tf.cast(x, tf.int32), tf.cast(y, tf.int32)
        elif dtype == np.uint32:
            x, y = (tf.cast(v, tf.int64 if ordering else tf.int32) for v in (x, y))
        return tf_fn(wide(x), wide(y))
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


COMPARISONS = {
    lax.eq_p: (op("equal"), lax.eq),
    lax.ne_p: (op("not_equal"), lax.ne),
    lax.lt_p: (op("less"), lax.lt),
    lax.le_p: (op("less_equal"), lax.le),
    lax.gt_p: (op("greater"), lax.gt),
    lax.ge_p: (op("greater_equal"), lax.ge),
}

def lower_add(ctx, x, y):
    fused = rope.rotate_half(ctx)
    fused = fusion.batch_norm(ctx, x, y) if fused is None else fused
    fused = fusion.bias_add(ctx, x, y) if fused is None else fused
    return binary(tf.math.add)(ctx, x, y) if fused is None else fused


def lower_sub(ctx, x, y):
    if ctx.avals_in[0].dtype == np.uint32:  # TFLite has no uint32 Sub (words.py)
        return tf.cast(words.unsigned_sub(x, y), ctx.out_dtype)
    fused = fusion.log_softmax(ctx)
    return binary(tf.math.subtract)(ctx, x, y) if fused is None else fused


def _webgl_wide_literal(dtypes, what: str):
    # uint32 sums take the limb path (limb_values.py), which splits constants exactly.
    return limb_values.webgl_word_limitation(
        f"an {what} literal operand that float32 cannot hold (more than 24 significant bits, e.g. a hash "
        "constant)", "the literal is rounded, and the result lies beyond 2^24", limb_values.wide_literal(dtypes),
        "run the model on TF.js's wasm or cpu backend, or keep the constant (and the values) within +-2^24")


_WEBGL_WIDE_ADD = _webgl_wide_literal([np.int32], "int32")
_WEBGL_WIDE_MUL = _webgl_wide_literal([np.int32, np.uint32], "int32 or uint32")

for _prim, (_fn, _cases) in BINARY.items():
    if _prim is lax.sub_p:
        lowering(_prim, fast=fusion.LOG_SOFTMAX, cases=[*_cases, *fusion.LOG_SOFTMAX_CASES])(lower_sub)
    elif _prim is lax.add_p:
        lowering(_prim, fast=fusion.BATCH_NORM, limitations=[_WEBGL_WIDE_ADD], cases=[
            *_cases, *fusion.BIAS_ADD_CASES, *fusion.BATCH_NORM_CASES, *rope.ROTATE_HALF_CASES,
            case("i32_wide_literal", lambda x: x + np.int32(16777217), np.array([0, 1, -5, 2 ** 20], np.int32)),
        ])(lower_add)
    else:
        lowering(_prim, cases=_cases)(binary(_fn))
for _prim, (_fn, _jax_fn) in COMPARISONS.items():
    lowering(_prim, cases=[
        case("f32", _jax_fn, f32(3, 4), f32(3, 4)),
        case("f32_edges", _jax_fn, np.array([0.0, -0.0, NAN, INF, -INF, 1.0, NAN], np.float32),
             np.array([-0.0, 0.0, NAN, INF, 1.0, NAN, 1.0], np.float32)),
        case("i32", _jax_fn, i32(12, low=-2, high=2), i32(12, low=-2, high=2)),
        case("bool", _jax_fn, np.array([True, True, False, False]), np.array([True, False, True, False])),
        case("f16", _jax_fn, f16(6), f16(6)),
        case("u8", _jax_fn, np.array([0, 255, 7, 128, 1], np.uint8), np.array([255, 255, 8, 127, 0], np.uint8)),
        case("u32_edges", _jax_fn, *_U32_EDGES),
        case("scalar_literal", lambda x, f=_jax_fn: f(x, 0.5), f32(5)),
        # jnp.where(jnp.abs(x) == jnp.inf, 0.0, x): TFLite's converter read the infinite literal as
        # FLT_MAX (inf came out for x = inf), until noxla.writers.tflite.converter.infinities handed it over exactly.
        case("inf_literal", lambda x, f=_jax_fn: jnp.where(f(jnp.abs(x), jnp.inf), 0.0, x),
             np.array([INF, -INF, 1.0, NAN, 0.0, 3.4028235e38, -3.4028235e38, -2.0], np.float32)),
    ])(_compare(_fn))


@lowering(lax.mul_p, fast=fusion.GELU, limitations=[_WEBGL_WIDE_MUL], cases=[
    *fusion.GELU_CASES,
    # Products beyond 2^53: TF.js's cpu Mul computes them in float64 (noxla/writers/tfjs/exact_int32.py).
    case("i32_hash_literal", lambda x: x * np.int32(-1640531535), np.array([0, 1, 2, 3, -7, 2 ** 31 - 1, 123456789],
                                                                            np.int32)),
    case("i32_wide", lax.mul, np.array([2 ** 31 - 1, -2 ** 31, 123456789, -987654321], np.int32),
         np.array([2 ** 31 - 1, 12345678, -987654321, 46341], np.int32)),
    case("f32", lax.mul, f32(3, 4), f32(3, 4)),
    case("i32_wraps", lax.mul, np.array([2 ** 30, 65537, -3], np.int32), np.array([4, 65537, 7], np.int32)),
    case("f16", lax.mul, f16(3, 4), f16(3, 4)),
    case("poly", lax.mul, f32(3, 4), f32(3, 4), polymorphic_shapes=("(b, 4)", "(b, 4)")),
    case("i8_wraps", lax.mul, np.array([100, -128, 7, 127], np.int8), np.array([3, -1, -20, 127], np.int8)),
    case("u8_wraps", lax.mul, np.array([100, 255, 7, 16], np.uint8), np.array([3, 255, 20, 16], np.uint8)),
    # uint32 products: TF.js computes them on 16-bit limbs (limb_arithmetic.py).
    case("u32_wraps", lax.mul, *_U32_EDGES),
    case("u32_random", lax.mul, u32(4, 5, low=0, high=2 ** 32 - 1), u32(4, 5, low=0, high=2 ** 32 - 1)),
    case("u32_hash_literal", lambda x: x * np.uint32(0x9E3779B9), u32(6, low=0, high=2 ** 32 - 1)),
])
def lower_mul(ctx, x, y, *, out_dtype=None):
    fused = fusion.gelu(ctx)
    if fused is not None:
        return fused
    # out_dtype asks for the product in a wider type (e.g. int8 x int8 -> int32): widen first.
    if out_dtype is not None:
        x, y = tf.cast(x, ctx.out_dtype), tf.cast(y, ctx.out_dtype)
    return binary(tf.math.multiply)(ctx, x, y)


@lowering(lax.pow_p, cases=[
    case("f32", lax.pow, f32(3, 4, low=0.1, high=4), f32(3, 4, low=-3, high=3)),
    case("f32_edges", lax.pow, np.array([0.0, -2.0, -2.0, 2.0, 0.0, INF, 1.0, NAN, -8.0], np.float32),
         np.array([0.0, 0.5, 3.0, -1.0, -1.0, -2.0, NAN, 0.0, 1 / 3], np.float32)),
    case("int_exponent", lax.pow, f32(6, low=-3, high=3), i32(6, low=-3, high=3)),
    # keras's x ** 2 (a literal int exponent): no guard for a NaN exponent; 1, inf and NaN bases.
    case("int_literal_square", lambda x: lax.pow(x, 2), np.array([1.0, -1.0, INF, -INF, NAN, 0.0, -3.0], np.float32)),
    case("float_literal", lambda x: lax.pow(x, np.float32(1.5)), np.array([1.0, 0.0, INF, NAN, 4.0], np.float32)),
    case("norm_of_squares", lambda x: lax.rsqrt(jnp.mean(lax.pow(x, 2), axis=-1) + 1e-6), f32(2, 8)),
    case("f16", lax.pow, f16(5, low=0.5, high=2), f16(5, low=-2, high=2)),
])
def lower_pow(ctx, x, y):
    x = wide(x)
    result = tf.pow(x, tf.cast(y, x.dtype))
    exponent = ctx.eqn.invars[1]
    if np.issubdtype(exponent.aval.dtype, np.integer) or (
            fusion.literal(exponent) is not None and not np.isnan(fusion.literal(exponent))):
        return as_out(ctx, result)  # no NaN exponent: pow(1, y) is 1 everywhere
    # C's pow(1, y) is 1 even for a NaN y; JavaScript's Math.pow (TF.js) gives NaN.
    return as_out(ctx, tf.where(tf.equal(x, 1.0), x, result))


def _fast_or(fast, exact):
    """The rule: ``fast`` (a fusion, None in strict mode or when it does not apply), else ``exact``."""
    def lower(ctx, x, y):
        fused = fast(ctx, x, y)
        return exact(ctx, x, y) if fused is None else fused
    lower.__name__ = exact.__name__
    return lower


_EXACT_WIDER = {"int8": "int32", "int16": "int32", "uint8": "int32", "uint16": "int32", "uint32": "int64"}


def _extremum(tf_fn, bool_fn):
    def lower(ctx, x, y):
        if x.dtype == tf.bool:
            return bool_fn(x, y)
        if x.dtype.name in _EXACT_WIDER:  # TFLite's MAXIMUM/MINIMUM lack narrow and unsigned ints
            x, y = tf.cast(x, _EXACT_WIDER[x.dtype.name]), tf.cast(y, _EXACT_WIDER[x.dtype.name])
        x, y = wide(x), wide(y)
        result = tf_fn(x, y)
        return as_out(ctx, where_nan_either(x, y, result) if _is_float(x) else result)
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


for _prim, _tf_fn, _bool_fn, _jax_fn, _fast, _variant in (
        (lax.max_p, op("maximum"), op("logical_or"), lax.max, fusion.maximum, fusion.MAXIMUM),
        (lax.min_p, op("minimum"), op("logical_and"), lax.min, fusion.minimum, fusion.MINIMUM)):
    lowering(_prim, fast=_variant, cases=[
        case("f32", _jax_fn, f32(3, 4), f32(3, 4)),
        case("nan", _jax_fn, np.array([NAN, 1.0, NAN, INF, -INF, 2.0], np.float32),
             np.array([1.0, NAN, NAN, 1.0, NAN, -INF], np.float32)),
        case("i32", _jax_fn, i32(10), i32(10)),
        case("bool", _jax_fn, np.array([True, True, False, False]), np.array([True, False, True, False])),
        case("f16", _jax_fn, f16(6), f16(6)),
        case("relu_empty", lambda x, f=_jax_fn: jnp.concatenate([f(x[:, :0], 0.0), x], axis=1), f32(2, 3)),
    ])(_fast_or(_fast, _extremum(_tf_fn, _bool_fn)))


@lowering(lax.clamp_p, cases=[
    case("f32", lambda x: lax.clamp(-0.5, x, 0.5), f32(3, 4)),
    case("nan", lambda x: lax.clamp(0.0, x, 1.0), np.array([NAN, -1.0, 2.0, 0.5, INF], np.float32)),
    case("nan_bound", lambda x: lax.clamp(np.float32(NAN), x, np.float32(1.0)), f32(3)),
    case("arrays", lax.clamp, f32(5, low=-1, high=0), f32(5, low=-2, high=2), f32(5, low=0, high=1)),
    case("i32", lambda x: lax.clamp(-3, x, 4), i32(3, 4)),
    case("f16", lambda x: lax.clamp(np.float16(-0.5), x, np.float16(0.5)), f16(6)),
])
def lower_clamp(ctx, lo, x, hi):
    lower_max, lower_min = _extremum(tf.maximum, tf.logical_or), _extremum(tf.minimum, tf.logical_and)
    return as_out(ctx, lower_min(ctx, lower_max(ctx, x, lo), hi))


# ----------------------------------------------------------------------------- integer_pow, select, convert

_HALF_POW_X = np.random.default_rng(7).uniform(0.5, 3.0, 48) * np.resize([1.0, -1.0], 48)


@lowering(lax.integer_pow_p, cases=[
    case("cube", lambda x: x ** 3, f32(3, 4)),
    case("square", lambda x: lax.integer_pow(x, 2), f32(3, 4)),
    case("negative", lambda x: lax.integer_pow(x, -2), np.array([2.0, 0.0, -0.5, INF, NAN], np.float32)),
    case("minus_one", lambda x: lax.integer_pow(x, -1), f32(5, low=0.5, high=2)),
    case("zero", lambda x: lax.integer_pow(x, 0) + x, np.array([2.0, 0.0, INF, NAN], np.float32)),
    # Found by tests/fuzz.py: x**0 is a constant 1, atanh(1) = inf, which TF's TFLite converter folded
    # and wrote as the largest finite float (noxla.writers.tflite.converter.infinities now computes and keeps it).
    case("zero_then_atanh", lambda x: jnp.arctanh(lax.integer_pow(x, 0)), f32(2)),
    case("one", lambda x: lax.integer_pow(x, 1), f32(4)),
    case("large", lambda x: lax.integer_pow(x, 13), f32(4, low=-2, high=2)),
    case("i32", lambda x: lax.integer_pow(x, 3), i32(3, 4)),
    case("f16", lambda x: lax.integer_pow(x, 3), f16(6)),
    # Each product and the reciprocal rounded to the half float, as JAX on CPU computes them
    # (rounding once at the end differed from JAX in 407 of 600 bfloat16 x ** 7, by up to 2^15).
    case("bf16_rounded_each_product", lambda x: lax.integer_pow(x, 7), _HALF_POW_X.astype(jnp.bfloat16),
         atol=0.0, rtol=0.0),
    case("f16_rounded_each_product", lambda x: lax.integer_pow(x, -5), _HALF_POW_X.astype(np.float16),
         atol=0.0, rtol=0.0),
])
def lower_integer_pow(ctx, x, *, y):
    # Square-and-multiply, as XLA expands it, then one reciprocal for negative exponents. 8/16-bit
    # integers multiply in int32 (TFLite has no narrow MUL) and wrap at the end.
    if _is_narrow_int(x):
        return _narrow_wrapped(_power(tf.cast(x, tf.int32), abs(y)), ctx.out_dtype)
    rounded = rounded_to(ctx.out_dtype) if ctx.out_dtype in HALF_FLOATS else (lambda v: v)
    result = _power(wide(x), abs(y), rounded)
    if y < 0:
        result = rounded(1.0 / result)
    return as_out(ctx, result)


def _power(x, n: int, rounded=lambda v: v):
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else rounded(result * base)
        n >>= 1
        if n:
            base = rounded(base * base)
    return tf.ones_like(x) if result is None else result


def _float_to_int(x, dtype: tf.DType):
    """XLA's float -> integer conversion on CPU: truncate, saturate at the type's bounds, NaN -> 0.
    A plain TF cast of NaN, inf or an out-of-range value is undefined."""
    info = np.iinfo(dtype.as_numpy_dtype)
    x = tf.cast(x, tf.float32) if x.dtype != tf.float32 and x.dtype != tf.float64 else x
    lo, hi = float(info.min), float(info.max)
    work = tf.int32 if info.bits < 32 else dtype  # TFLite selects no narrow integers
    # float32(hi) may round above hi (2^31 - 1 -> 2^31): compare with a bound that is exact.
    too_high, too_low = x >= hi + 1.0, x <= lo - 1.0
    in_range = tf.logical_not(tf.logical_or(tf.logical_or(too_high, too_low), is_nan(x)))
    truncated = tf.cast(tf.where(in_range, x, tf.zeros_like(x)), work)
    result = tf.where(too_high, tf.constant(info.max, work), truncated)
    return tf.cast(tf.where(too_low, tf.constant(info.min, work), result), dtype)


_CONVERT_EDGES = np.array([NAN, INF, -INF, 3e9, -3e9, 2.9, -2.9, 2147483520.0, 300.0, -200.0, 127.9,
                           255.9, -0.5, 0.0], np.float32)


@lowering(lax.convert_element_type_p, cases=[
    case("f32_to_i32", lambda x: x.astype(jnp.int32), f32(3, 4, low=-100, high=100)),
    case("f32_to_i32_edges", lambda x: x.astype(jnp.int32), _CONVERT_EDGES),
    case("f32_to_i8_edges", lambda x: x.astype(jnp.int8), _CONVERT_EDGES),
    case("f32_to_u8_edges", lambda x: x.astype(jnp.uint8), _CONVERT_EDGES),
    case("f32_to_bool", lambda x: x.astype(jnp.bool_), np.array([NAN, 0.0, -0.0, 1.0, -INF, 0.25], np.float32)),
    case("i32_to_bool", lambda x: x.astype(jnp.bool_), i32(8, low=-2, high=2)),
    case("bool_to_f32", lambda x: x.astype(jnp.float32), boolean(3, 4)),
    case("bool_to_i32", lambda x: x.astype(jnp.int32), boolean(3, 4)),
    case("i32_to_f32", lambda x: x.astype(jnp.float32), i32(3, 4, low=-(2 ** 31), high=2 ** 31 - 1)),
    case("i32_to_i8_wraps", lambda x: x.astype(jnp.int8), np.array([300, -200, 127, 128, -129], np.int32)),
    case("i32_to_u8_wraps", lambda x: x.astype(jnp.uint8), np.array([300, -200, 127, 255, 256, -1], np.int32)),
    case("f32_to_f16", lambda x: x.astype(jnp.float16), np.array([1.0, 1e5, 65519.0, 1e-8, NAN, -INF, 0.1],
                                                                   np.float32)),
    case("f16_to_f32", lambda x: x.astype(jnp.float32), f16(3, 4)),
    case("f16_to_i32", lambda x: x.astype(jnp.int32), np.array([NAN, INF, -2.5, 300.0, 65504.0], np.float16)),
    case("f16_to_bool", lambda x: x.astype(jnp.bool_), np.array([NAN, 0.0, -0.0, 6e-8, -INF, 0.25], np.float16)),
    case("i8_to_bool", lambda x: x.astype(jnp.bool_), np.array([0, 1, -128, 127, -1], np.int8)),
    case("u16_to_bool", lambda x: x.astype(jnp.bool_), np.array([0, 1, 65535, 256], np.uint16)),
    case("u32_to_bool", lambda x: x.astype(jnp.bool_), np.array([0, 1, 2 ** 32 - 1, 2 ** 31], np.uint32)),
    case("weak_type", lambda x: x + 1.5, i32(3)),
])
def lower_convert_element_type(ctx, x, *, new_dtype, weak_type):
    # weak_type only steers JAX's type promotion at trace time; the values are the same.
    target = ctx.out_dtype
    if target == tf.bool:
        # NaN is true, as in JAX. TFLite's NOT_EQUAL has no float16, 8/16-bit or uint32 kernel: compare
        # in the kernel dtype (a uint32 as the int32 with the same bits, nonzero exactly when it is).
        x = tf.cast(x, kernel_dtype(x.dtype, ordered=False)) if x.dtype != tf.bool else x
        return tf.not_equal(x, tf.zeros_like(x))
    if x.dtype.is_floating and target.is_integer:
        return _float_to_int(x, target)
    if x.dtype.is_integer and target.is_integer and target.size < x.dtype.size:
        bits, signed = int_info(target)
        return wrap_to(ctx, tf.cast(x, tf.int32), bits, signed)
    return tf.cast(x, target)
