"""Elementwise primitives: tables where TF has the op, functions where semantics differ.

Every lowering emits only ops that TF, TFLite builtins and TF.js all have, so one
lowering serves every target. Three consequences shape this file:
- TFLite builtins have no float16 kernels (only Cast), so half-precision operands are
  computed in float32 and rounded back, as XLA's CPU backend does.
- Ops missing from TFLite or TF.js (erf, erf_inv, lgamma, digamma, sinh, ..., every
  bitwise op and shift) are composed from basic arithmetic in small named helpers.
- Where TF's op differs from JAX at the edges (NaN in max/min, integer division by
  zero, float -> int of NaN/inf, rem signs) the rule spells JAX's semantics out.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import tensorflow as tf
import jax
from jax import lax
import jax.numpy as jnp

from limitations.targets import Target
from lowering_rules import fusion, limbs, words
from lowering_rules.cases import boolean, case, f16, f32, i8, i32, u8, u32
from lowering_rules.registry import ALL, NUMERIC, Limitation, add_cases, dtypes, gap, lowering, register

NAN, INF = float("nan"), float("inf")
_HALVES = (tf.float16, tf.bfloat16)


# ----------------------------------------------------------------------------- dtype plumbing

def _wide(x):
    """Half-precision values computed in float32 (TFLite has no float16 kernels)."""
    return tf.cast(x, tf.float32) if x.dtype in _HALVES else x


def _as_out(ctx, y):
    return y if y.dtype == ctx.out_dtype else tf.cast(y, ctx.out_dtype)


def _is_float(x) -> bool:
    return x.dtype.is_floating


def _is_narrow_int(x) -> bool:
    return x.dtype.is_integer and x.dtype.size < 4


def _isnan(x):
    return tf.math.not_equal(x, x)


def _const_like(value, x):
    return tf.constant(value, dtype=x.dtype)


def _is_inf(x):
    # Not x == inf: the TFLite converter stores an infinite constant as the largest float.
    return tf.logical_and(tf.logical_not(tf.math.is_finite(x)), tf.equal(x, x))


def _inf_like(x):
    """+inf everywhere, computed at run time (1 / +0) for the same reason."""
    return 1.0 / (tf.abs(tf.where(tf.math.is_finite(x), x, tf.zeros_like(x))) * 0.0)


def exp(x):
    # TFLite's Exp maps NaN to 0, and XNNPACK's AVX2 kernel overflows to inf above x = 88.38
    # (exp(88.72) is still finite): there, exp(x / 2) squared (x / 2 is exact).
    big = x > 64.0
    half = tf.exp(tf.where(big, 0.5 * x, x))
    return tf.where(_isnan(x), x, tf.where(big, half * half, half))


def log_of_finite(x):
    """log(x) for finite x whatever LOG kernel XNNPACK picked. On AVX2 (measured on an AMD EPYC)
    it clamps x above about 2^127.5 to log = 88.38, inf included, and maps NaN to 88.78; its
    AVX-512 kernel does not. Large x are scaled by an exact 2^-64 first."""
    big = x > 2.0 ** 64
    offset = tf.where(big, tf.constant(64 * math.log(2.0), x.dtype), tf.constant(0.0, x.dtype))
    return tf.math.log(tf.where(big, x * 2.0 ** -64, x)) + offset


def log(x):
    """log(x) whatever LOG kernel XNNPACK picked (see log_of_finite); +inf and NaN are their own log."""
    # x <= max is false exactly at +inf and NaN (an inf constant would become FLT_MAX in TFLite).
    return tf.where(x <= np.finfo(x.dtype.as_numpy_dtype).max, log_of_finite(x), x)


FAST_LOG = fusion.FastVariant("log(+inf) and log(NaN) may come out finite (float32: XNNPACK's AVX2 LOG "
                              "kernel clamps them to 88.38 and 88.78)", fusion.float32_out)


def lower_log(ctx, x, *, accuracy):
    """log; by default without the +inf/NaN pass-through (two ops fewer), see FAST_LOG."""
    x = _wide(x)
    return _as_out(ctx, log(x) if ctx.strict or x.dtype != tf.float32 else log_of_finite(x))


def negative(x):
    if x.dtype in (tf.uint8, tf.uint16):  # TF has no 8/16-bit unsigned Sub kernel: wrap an int32 result
        return tf.cast(-tf.cast(x, tf.int32), x.dtype)
    # 0 - x: TF.js's wasm Neg goes through float32 and rounds int32 values beyond 2^24.
    return tf.zeros_like(x) - x


def sign(x):
    if x.dtype.is_unsigned:  # TF's Sign has no unsigned kernels: 0 or 1
        return tf.cast(tf.not_equal(x, 0), x.dtype)
    # TF.js's Sign maps NaN to 0.
    return tf.where(_isnan(x), x, tf.sign(x)) if _is_float(x) else tf.sign(x)


def rsqrt(x):
    # TFLite's Rsqrt gives NaN at 0 (and its converter turns 1 / sqrt(x) back into Rsqrt):
    # 1 / x there is the infinity of the right sign.
    return tf.where(tf.equal(x, 0.0), 1.0 / x, tf.math.rsqrt(x))


def unary(tf_fn, *, transcendental=False):
    """A rule applying ``tf_fn``; transcendental primitives also carry an ``accuracy`` hint, which
    only asks for a tolerance: TF has one implementation of each, so it is accepted and ignored."""
    if transcendental:
        def lower(ctx, x, *, accuracy):
            return _as_out(ctx, tf_fn(_wide(x)))
    else:
        def lower(ctx, x):
            return _as_out(ctx, tf_fn(_wide(x)))
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


def binary(tf_fn):
    def lower(ctx, x, y):
        if _is_narrow_int(x):  # TFLite has no 8- or 16-bit integer arithmetic: wrap an int32 result
            bits, signed = _int_info(x.dtype)
            return _wrap_to(ctx, tf_fn(_as_int32(x), _as_int32(y)), bits, signed)
        return _as_out(ctx, tf_fn(_wide(x), _wide(y)))
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


# ----------------------------------------------------------------------------- float helpers

def _where_nan_either(x, y, result):
    """JAX propagates a NaN operand; TFLite's and TF.js's max/min may not."""
    return tf.where(tf.math.logical_or(_isnan(x), _isnan(y)), x + y, result)


def log1p(x):
    # Goldberg's trick: log(u) * x / (u - 1) with u = 1 + x cancels the rounding of 1 + x,
    # accurate for tiny x with only Log (TFLite turns Log1p into log(1 + x)).
    u = 1.0 + x
    d = u - 1.0
    safe_d = tf.where(tf.equal(d, 0.0), tf.ones_like(d), d)
    r = tf.where(tf.equal(d, 0.0), x, log(u) * (x / safe_d))
    return tf.where(_is_inf(u), u, r)


def expm1(x):
    # Kahan's trick: (u - 1) * x / log(u) with u = exp(x) cancels the rounding of exp(x).
    u = exp(x)
    log_u = log(u)
    safe_log = tf.where(tf.equal(log_u, 0.0), tf.ones_like(log_u), log_u)
    r = (u - 1.0) * (x / safe_log)
    r = tf.where(tf.equal(u, 1.0), x, r)
    r = tf.where(tf.equal(u - 1.0, -1.0), u - 1.0, r)
    return tf.where(_is_inf(u), u, r)


def _half_exp_abs(x):
    """exp(|x|) / 2 without overflowing before the result does: two factors exp(|x| / 2)."""
    e = exp(0.5 * tf.abs(x))
    return (0.5 * e) * e, e


def sinh(x):
    half_e, e = _half_exp_abs(x)
    large = tf.where(x < 0, -(half_e - 0.5 / (e * e)), half_e - 0.5 / (e * e))
    u = expm1(x)  # small |x|: sinh = (u + u / (u + 1)) / 2 avoids e^x - e^-x cancelling
    small = 0.5 * (u + u / (u + 1.0))
    return tf.where(tf.abs(x) < 1.0, small, large)


def cosh(x):
    half_e, e = _half_exp_abs(x)
    return half_e + 0.5 / (e * e)


def asinh(x):
    a = tf.abs(x)
    # log1p(a + a^2 / (1 + sqrt(1 + a^2))) is exact near 0; log(2a) once a^2 would overflow.
    near = log1p(a + a * a / (1.0 + tf.sqrt(1.0 + a * a)))
    far = log(a) + math.log(2.0)
    r = tf.where(a > 1e18, far, near)
    return tf.where(x < 0, -r, r)


def acosh(x):
    t = x - 1.0
    near = log1p(t + tf.sqrt(t * (t + 2.0)))
    far = log(x) + math.log(2.0)
    return tf.where(x > 1e18, far, near)


def atanh(x):
    a = tf.abs(x)
    r = 0.5 * log1p(2.0 * a / (1.0 - a))
    return tf.where(x < 0, -r, r)


def asin(x):
    return tf.atan2(x, tf.sqrt((1.0 - x) * (1.0 + x)))


def acos(x):
    return tf.atan2(tf.sqrt((1.0 - x) * (1.0 + x)), x)


def atan(x):
    return tf.atan2(x, tf.ones_like(x))


def tan(x):
    return tf.sin(x) / tf.cos(x)


def cbrt(x):
    r = tf.pow(tf.abs(x), 1.0 / 3.0)
    return tf.where(x < 0, -r, r)


def exp2(x):
    # pow(2, x) is exact at integers; exp(x * ln 2) would lose |x| ulps.
    return tf.pow(_const_like(2.0, x), x)


def _polynomial(t, coefficients):
    """Horner's scheme, highest degree first."""
    acc = tf.zeros_like(t) + coefficients[0]
    for c in coefficients[1:]:
        acc = acc * t + c
    return acc


# Numerical Recipes' erfcc (Chebyshev fit): erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2),
# fractional error below 1.2e-7 for every z >= 0.
_ERFC_COEFFICIENTS = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                      0.09678418, 0.37409196, 1.00002368, -1.26551223)


def _erfc_nonnegative(z):
    t = 1.0 / (1.0 + 0.5 * z)
    return t * exp(-z * z + _polynomial(t, _ERFC_COEFFICIENTS))


def erfc(x):
    r = _erfc_nonnegative(tf.abs(x))
    return tf.where(x < 0, 2.0 - r, r)


def erf(x):
    # Near 0, 1 - erfc(x) cancels: the Maclaurin series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1))
    # to x^13 is within float32 rounding for |x| < 0.5.
    x2 = x * x
    series = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7)]
    small = (2.0 / math.sqrt(math.pi)) * x * _polynomial(x2, series[::-1])
    large = 1.0 - _erfc_nonnegative(tf.abs(x))
    large = tf.where(x < 0, -large, large)
    return tf.where(tf.abs(x) < 0.5, small, large)


# M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision:
# erfinv(x) = x P(w), w = -log(1 - x^2), one polynomial for the centre and one for the tails.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def erf_inv(x):
    w = -log((1.0 - x) * (1.0 + x))
    central = _polynomial(w - 2.5, _ERFINV_CENTRAL)
    tail = _polynomial(tf.sqrt(tf.where(w < 5.0, tf.fill(tf.shape(w), 5.0), w)) - 3.0, _ERFINV_TAIL)
    r = x * tf.where(w < 5.0, central, tail)
    return tf.where(tf.equal(tf.abs(x), 1.0), x * w, r)  # w = -log(0) = inf


# Numerical Recipes' gammln: Lanczos' approximation with g = 5, six terms, error below 2e-10.
_LANCZOS = (76.18009172947146, -86.50532032941677, 24.01409824083091, -1.231739572450155,
            0.1208650973866179e-2, -0.5395239384953e-5)


def _lgamma_from_half(x):
    """log Gamma(x) for x >= 0.5."""
    series = tf.fill(tf.shape(x), tf.constant(1.000000000190015, x.dtype))
    for k, c in enumerate(_LANCZOS):
        series = series + c / (x + float(k + 1))
    t = x + 5.5
    # log(series) - log(x), not log(series / x): the quotient is subnormal (flushed to 0) for x near
    # float32's max, where lgamma is inf.
    return (x + 0.5) * log(t) - t + (log(2.5066282746310005 * series) - log(x))


def _abs_sin_pi(x):
    """|sin(pi x)| through x - round(x), which is exact: large x keep their fraction, integers give 0."""
    return tf.abs(tf.sin(math.pi * (x - tf.round(x))))


def _cot_pi(x):
    """cot(pi x), of period 1, from the exactly reduced x - round(x)."""
    r = math.pi * (x - tf.round(x))
    return tf.cos(r) / tf.sin(r)


def lgamma(x):
    # Reflection Gamma(x) Gamma(1 - x) = pi / sin(pi x) below 1/2.
    reflected = log(math.pi / _abs_sin_pi(x)) - _lgamma_from_half(1.0 - x)
    r = tf.where(x < 0.5, reflected, _lgamma_from_half(tf.where(x < 0.5, 1.0 - x, x)))
    return tf.where(_is_inf(x), tf.abs(x), r)


def _digamma_from_half(x):
    """psi(x) for x >= 0.5: recurrence up to x + 6, then the asymptotic (Bernoulli) series."""
    shift = tf.zeros_like(x)
    for k in range(6):
        shift = shift + 1.0 / (x + float(k))
    z = x + 6.0
    inv2 = 1.0 / (z * z)
    tail = inv2 * _polynomial(inv2, (1 / 240, -1 / 252, 1 / 120, -1 / 12))
    return log(z) - 0.5 / z + tail - shift


def digamma(x):
    # Reflection psi(1 - x) - psi(x) = pi cot(pi x) below 1/2; JAX gives NaN at the poles.
    reflected = _digamma_from_half(1.0 - x) - math.pi * _cot_pi(x)
    r = tf.where(x < 0.5, reflected, _digamma_from_half(tf.where(x < 0.5, 1.0 - x, x)))
    pole = tf.logical_and(x <= 0.0, tf.equal(x, tf.floor(x)))
    return tf.where(pole, tf.fill(tf.shape(x), NAN), r)


# Abramowitz & Stegun 9.8.1-9.8.4 (as in Numerical Recipes' bessi0/bessi1): polynomials in
# (x / 3.75)^2 below 3.75, and in 3.75 / x for sqrt(x) e^-x I(x) above; errors below 2.2e-7.
_I0_SMALL = (0.0045813, 0.0360768, 0.2659732, 1.2067492, 3.0899424, 3.5156229, 1.0)
_I0_LARGE = (0.00392377, -0.01647633, 0.02635537, -0.02057706, 0.00916281, -0.00157565,
             0.00225319, 0.01328592, 0.39894228)
_I1_SMALL = (0.00032411, 0.00301532, 0.02658733, 0.15084934, 0.51498869, 0.87890594, 0.5)
_I1_LARGE = (-0.00420059, 0.01787654, -0.02895312, 0.02282967, -0.01031555, 0.00163801,
             -0.00362018, -0.03988024, 0.39894228)


def _bessel_ie(x, small_coefficients, large_coefficients, odd):
    a = tf.abs(x)
    t2 = tf.square(a / 3.75)
    small = _polynomial(t2, small_coefficients) * exp(-a)
    if odd:
        small = small * a
    safe_a = tf.maximum(a, 3.75)
    large = _polynomial(3.75 / safe_a, large_coefficients) / tf.sqrt(safe_a)
    r = tf.where(a < 3.75, small, large)
    return tf.where(x < 0, -r, r) if odd else r


def bessel_i0e(x):
    return _bessel_ie(x, _I0_SMALL, _I0_LARGE, odd=False)


def bessel_i1e(x):
    return _bessel_ie(x, _I1_SMALL, _I1_LARGE, odd=True)


def _round_half_away(x):
    t = tf.floor(tf.abs(x))
    # |x| - floor(|x|) is exact, unlike |x| + 0.5, which rounds 0.49999997 up to 1.
    r = t + tf.cast(tf.abs(x) - t >= 0.5, x.dtype)
    return tf.where(x < 0, -r, r)


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


# ----------------------------------------------------------------------------- integer helpers

def _int_info(dtype: tf.DType):
    info = np.iinfo(dtype.as_numpy_dtype)
    return info.bits, info.min < 0


def _bit_pattern_info(dtype: tf.DType):
    """Like _int_info, but a uint32 is handled as the int32 with the same bits (its values do
    not fit an int32, its bit pattern does; bitwise ops and shifts only see the pattern)."""
    bits, signed = _int_info(dtype)
    return bits, signed or bits == 32


def _powers_of_two(n: int):
    return tf.constant([2 ** k for k in range(n)], tf.int32)


def _value_bits(x, bits: int, signed: bool):
    """The bits of x (as int32 0/1 along a new last axis), below the sign bit for signed types:
    floor(x / 2^k) mod 2 is bit k of the two's complement for negative x too."""
    n = bits - 1 if signed else bits
    return tf.math.floormod(tf.math.floordiv(tf.expand_dims(x, -1), _powers_of_two(n)), 2)


def _from_bits(value_bits, sign, bits: int, signed: bool):
    value = tf.reduce_sum(value_bits * _powers_of_two(bits - 1 if signed else bits), axis=-1)
    if signed:
        value = tf.where(sign, value + tf.constant(-(2 ** (bits - 1)), tf.int32), value)
    return value


def _as_int32(x):
    """Integers up to 32 bits are handled as int32 (values fit), then cast back."""
    return tf.cast(x, tf.int32) if x.dtype != tf.int32 else x


def _bitwise(ctx, x, y, combine_bits, combine_bools):
    if x.dtype == tf.bool:
        return combine_bools(x, y)
    bits, signed = _bit_pattern_info(x.dtype)
    if bits == 32:  # exact 32-bit words: TF.js's wasm backend rounds the division below
        return _as_out(ctx, limbs.from_bits(combine_bits(limbs.to_bits(x), limbs.to_bits(y))))
    x, y = _as_int32(x), _as_int32(y)
    value = combine_bits(_value_bits(x, bits, signed), _value_bits(y, bits, signed))
    sign = combine_bools(x < 0, y < 0) if signed else None
    return _as_out(ctx, _from_bits(value, sign, bits, signed))


def _shift_in_range(s, bits: int):
    return tf.logical_and(s >= 0, s < bits)


def _pow2_table(bits: int, s):
    """2^s for s in [0, bits), wrapped to int32 (2^31 is INT_MIN, which multiplies the same mod 2^32)."""
    table = tf.constant(np.array([2 ** k for k in range(bits)], np.int64).astype(np.uint32).view(np.int32))
    return tf.gather(table, tf.clip_by_value(s, 0, bits - 1))


def _wrap_to(ctx, value, bits: int, signed: bool):
    """int32 value reduced modulo 2^bits into the output type (XLA wraps narrow integers)."""
    if bits == 32:
        return _as_out(ctx, value)
    unsigned = tf.math.floormod(value, 2 ** bits)
    if signed:
        unsigned = tf.where(unsigned >= 2 ** (bits - 1), unsigned - 2 ** bits, unsigned)
    return _as_out(ctx, unsigned)


_TFJS_WASM_INT32_BITS = Limitation(
    (Target.TFJS,), "32-bit integer operands",
    "noxla composes this bit operation from FloorDiv/FloorMod and a sum over the bits, and TF.js's wasm "
    "backend rounds int32 values beyond 2^24 there (it computes them in float32); TF.js has no narrower "
    "integer tensors", param="dtype",
    when=lambda eqn: any(np.issubdtype(d, np.integer) and d.itemsize == 4 for d in eqn.dtypes),
    workaround="keep bit manipulation (e.g. PRNG key handling) outside the exported function, or use "
               "values below 2^24")


# ----------------------------------------------------------------------------- unary tables

UNARY = {
    lax.neg_p: negative,
    lax.sign_p: sign,
    lax.floor_p: tf.floor,
    lax.ceil_p: tf.math.ceil,
    lax.is_finite_p: tf.math.is_finite,
    lax.abs_p: tf.abs,
    lax.square_p: tf.square,
    lax.asin_p: asin,
    lax.acos_p: acos,
    lax.atan_p: atan,
    lax.sinh_p: sinh,
    lax.cosh_p: cosh,
    lax.asinh_p: asinh,
    lax.acosh_p: acosh,
    lax.atanh_p: atanh,
    lax.erf_p: erf,
    lax.erfc_p: erfc,
    lax.erf_inv_p: erf_inv,
    lax.lgamma_p: lgamma,
    lax.digamma_p: digamma,
    lax.bessel_i0e_p: bessel_i0e,
    lax.bessel_i1e_p: bessel_i1e,
    lax.stop_gradient_p: tf.identity,
    lax.copy_p: tf.identity,
}

TRANSCENDENTAL = {
    lax.exp_p: exp,
    lax.exp2_p: exp2,
    lax.log1p_p: log1p,
    lax.expm1_p: expm1,
    lax.tanh_p: tf.tanh,
    lax.logistic_p: tf.sigmoid,
    lax.sin_p: tf.sin,
    lax.cos_p: tf.cos,
    lax.tan_p: tan,
    lax.sqrt_p: tf.sqrt,
    lax.rsqrt_p: rsqrt,
    lax.cbrt_p: cbrt,
}

# The float special functions are built from float32 constants and series: no float64 version.
_FLOAT32_SERIES = dtypes(NUMERIC - {"float64"}, missing=(
    "the lowering evaluates float32 constants and series; float64 results would not have float64 "
    "accuracy"))
# Bit manipulation is built for integers of at most 32 bits (32-bit masks, powers-of-two tables).
_AT_MOST_32_BITS = dtypes(NUMERIC - {"int64", "uint64"}, missing=(
    "the bit manipulation is built for integers of at most 32 bits"))
_DTYPES = {lax.abs_p: dtypes(gaps=[gap((Target.TFLITE,), {"int8", "int64"}, "TFLite's ABS has no int8 or int64 kernel")]),
           lax.erf_inv_p: _FLOAT32_SERIES, lax.digamma_p: _FLOAT32_SERIES, lax.polygamma_p: _FLOAT32_SERIES,
           lax.nextafter_p: _FLOAT32_SERIES, lax.reduce_precision_p: _FLOAT32_SERIES,
           lax.and_p: _AT_MOST_32_BITS, lax.or_p: _AT_MOST_32_BITS, lax.xor_p: _AT_MOST_32_BITS,
           lax.population_count_p: _AT_MOST_32_BITS, lax.clz_p: _AT_MOST_32_BITS,
           lax.shift_left_p: _AT_MOST_32_BITS, lax.shift_right_arithmetic_p: _AT_MOST_32_BITS,
           lax.shift_right_logical_p: _AT_MOST_32_BITS,
           lax.not_p: dtypes(NUMERIC - {"uint64"}, missing="uint64's all-ones mask does not convert to an int64 constant")}

for _prim, _fn in UNARY.items():
    register(_prim, unary(_fn), dtypes=_DTYPES.get(_prim, ALL))
for _prim, _fn in TRANSCENDENTAL.items():
    register(_prim, unary(_fn, transcendental=True), dtypes=_DTYPES.get(_prim, ALL))
register(lax.log_p, lower_log, fast=FAST_LOG)


@lowering(lax.round_p, cases=[
    case("half_away", lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
         np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.0, 8388609.0, INF, -INF, NAN, 1e30], np.float32)),
    case("half_even", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
         np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.0, 8388609.0, INF, -INF, NAN, 1e30], np.float32)),
    case("jnp_round_f32", lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), f32(3, 4, low=-5, high=5)),
    case("away_f16", lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
         np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.2], np.float16)),
])
def lower_round(ctx, x, *, rounding_method):
    x = _wide(x)
    if rounding_method == lax.RoundingMethod.TO_NEAREST_EVEN:
        return _as_out(ctx, tf.round(x))  # TF, TFLite and TF.js all round half to even
    return _as_out(ctx, _round_half_away(x))


@lowering(lax.not_p, dtypes=_DTYPES[lax.not_p], cases=[
    case("bool", lax.bitwise_not, boolean(3, 4)),
    case("i32", lax.bitwise_not, np.array([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 12345], np.int32)),
    case("u8", lax.bitwise_not, np.array([0, 1, 255, 128], np.uint8)),
    case("i8", lax.bitwise_not, i8(7)),
    case("u32", lax.bitwise_not, np.array([0, 2 ** 32 - 1, 2 ** 31, 0x9E3779B9], np.uint32)),
])
def lower_not(ctx, x):
    if x.dtype == tf.bool:
        return tf.logical_not(x)
    bits, signed = _bit_pattern_info(x.dtype)
    # Two's complement: ~x = -x - 1 (wrapping at INT_MIN); unsigned: ~x = max - x.
    x = _as_int32(x)
    return _as_out(ctx, (-1 if signed else 2 ** bits - 1) - x)


@lowering(lax.population_count_p, limitations=[_TFJS_WASM_INT32_BITS], dtypes=_AT_MOST_32_BITS, cases=[
    case("i32", lax.population_count, np.array([0, 1, -1, 7, 2 ** 31 - 1, -(2 ** 31), 255, -256], np.int32)),
    case("i32_random", lax.population_count, i32(4, 5, low=-(2 ** 31), high=2 ** 31 - 1)),
    case("u8", lax.population_count, np.array([0, 1, 255, 128, 85], np.uint8)),
    case("u32", lax.population_count, np.array([0, 2 ** 32 - 1, 2 ** 31, 0x9E3779B9], np.uint32)),
])
def lower_population_count(ctx, x):
    bits, signed = _bit_pattern_info(x.dtype)
    x = _as_int32(x)
    count = tf.reduce_sum(_value_bits(x, bits, signed), axis=-1)
    if signed:
        count = count + tf.cast(x < 0, tf.int32)
    return _as_out(ctx, count)


@lowering(lax.clz_p, dtypes=_AT_MOST_32_BITS, cases=[
    case("i32", lax.clz, np.array([0, 1, -1, 2, 2 ** 30, 2 ** 31 - 1, -(2 ** 31), 255, 256, 2 ** 30 - 1,
                                   2 ** 24 + 1, 2 ** 25 - 1], np.int32)),
    case("i32_random", lax.clz, i32(3, 4, low=-100, high=2 ** 31 - 1)),
    case("u8", lax.clz, np.array([0, 1, 255, 128, 15], np.uint8)),
])
def lower_clz(ctx, x):
    bits, signed = _bit_pattern_info(x.dtype)
    x = _as_int32(x)
    # bit_length(x) = #{k : x >= 2^k}; a negative signed value has its top bit set.
    bit_length = tf.reduce_sum(tf.cast(tf.expand_dims(x, -1) >= _powers_of_two(bits - 1 if signed else bits),
                                       tf.int32), axis=-1)
    leading = bits - bit_length
    if signed:
        leading = tf.where(x < 0, tf.zeros_like(leading), leading)
    return _as_out(ctx, leading)


@lowering(lax.reduce_precision_p, dtypes=_FLOAT32_SERIES, cases=[
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
    x = _wide(x)
    if mantissa_bits < 23:
        x = _round_mantissa(x, mantissa_bits)
    if exponent_bits < 8:
        # XLA rounds the mantissa first, then overflows to inf and flushes below the smallest normal.
        max_exponent = 2 ** (exponent_bits - 1) - 1
        min_normal = 2.0 ** (1 - max_exponent)
        max_finite = (2.0 - 2.0 ** -min(mantissa_bits, 23)) * 2.0 ** max_exponent
        x = tf.where(tf.abs(x) < min_normal, x * 0.0, x)
        x = tf.where(tf.abs(x) > max_finite, tf.where(x < 0, -_inf_like(x), _inf_like(x)), x)
    return _as_out(ctx, x)


@lowering(lax.optimization_barrier_p, cases=[
    case("pair", lambda x, y: lax.optimization_barrier((x, y)), f32(3), i32(2, 2)),
])
def lower_optimization_barrier(ctx, *operands):
    # TF has no scheduling barrier to keep; the values pass through unchanged.
    return [tf.identity(x) for x in operands]


# ----------------------------------------------------------------------------- binary

BINARY = {
    lax.add_p: tf.math.add,
    "add_any": tf.math.add,  # the sum of two cotangents in every gradient (jax._src.ad_util)
    lax.sub_p: tf.math.subtract,
    lax.atan2_p: tf.atan2,
}


def _compare(tf_fn):
    def lower(ctx, x, y):
        if x.dtype == tf.bool:  # TF orders no booleans
            x, y = tf.cast(x, tf.int32), tf.cast(y, tf.int32)
        return tf_fn(_wide(x), _wide(y))
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


COMPARISONS = {
    lax.eq_p: (tf.equal, lax.eq),
    lax.ne_p: (tf.not_equal, lax.ne),
    lax.lt_p: (tf.less, lax.lt),
    lax.le_p: (tf.less_equal, lax.le),
    lax.gt_p: (tf.greater, lax.gt),
    lax.ge_p: (tf.greater_equal, lax.ge),
}

def lower_add(ctx, x, y):
    fused = fusion.bias_add(ctx, x, y)
    return binary(tf.math.add)(ctx, x, y) if fused is None else fused


def lower_sub(ctx, x, y):
    if ctx.avals_in[0].dtype == np.uint32:  # TFLite has no uint32 Sub (words.py)
        return tf.cast(words.unsigned_sub(x, y), ctx.out_dtype)
    fused = fusion.log_softmax(ctx)
    return binary(tf.math.subtract)(ctx, x, y) if fused is None else fused


for _prim, _fn in BINARY.items():
    if _prim is lax.sub_p:
        register(_prim, lower_sub, fast=fusion.LOG_SOFTMAX, cases=fusion.LOG_SOFTMAX_CASES)
    elif _prim is lax.add_p:
        register(_prim, lower_add, cases=fusion.BIAS_ADD_CASES)
    else:
        register(_prim, binary(_fn))
for _prim, (_fn, _jax_fn) in COMPARISONS.items():
    register(_prim, _compare(_fn), cases=[
        case("f32", _jax_fn, f32(3, 4), f32(3, 4)),
        case("f32_edges", _jax_fn, np.array([0.0, -0.0, NAN, INF, -INF, 1.0, NAN], np.float32),
             np.array([-0.0, 0.0, NAN, INF, 1.0, NAN, 1.0], np.float32)),
        case("i32", _jax_fn, i32(12, low=-2, high=2), i32(12, low=-2, high=2)),
        case("bool", _jax_fn, np.array([True, True, False, False]), np.array([True, False, True, False])),
        case("f16", _jax_fn, f16(6), f16(6)),
        case("scalar_literal", lambda x, f=_jax_fn: f(x, 0.5), f32(5)),
    ])


@lowering(lax.mul_p, cases=[
    case("f32", lax.mul, f32(3, 4), f32(3, 4)),
    case("i32_wraps", lax.mul, np.array([2 ** 30, 65537, -3], np.int32), np.array([4, 65537, 7], np.int32)),
    case("f16", lax.mul, f16(3, 4), f16(3, 4)),
    case("poly", lax.mul, f32(3, 4), f32(3, 4), polymorphic_shapes=("(b, 4)", "(b, 4)")),
    case("i8_wraps", lax.mul, np.array([100, -128, 7, 127], np.int8), np.array([3, -1, -20, 127], np.int8)),
    case("u8_wraps", lax.mul, np.array([100, 255, 7, 16], np.uint8), np.array([3, 255, 20, 16], np.uint8)),
])
def lower_mul(ctx, x, y, *, out_dtype):
    # out_dtype asks for the product in a wider type (e.g. int8 x int8 -> int32): widen first.
    if out_dtype is not None:
        x, y = tf.cast(x, ctx.out_dtype), tf.cast(y, ctx.out_dtype)
    return binary(tf.math.multiply)(ctx, x, y)


def _truncating_div(x, y, bits: int, signed: bool):
    """lax.div on integers: rounds toward zero; x / 0 is -1 (all ones); INT_MIN / -1 wraps.
    TF.js has no TruncateDiv, and TF's integer division by 0 or INT_MIN / -1 would trap."""
    zero, one = tf.zeros_like(y), tf.ones_like(y)
    special = tf.equal(y, zero)
    if signed:
        special = tf.logical_or(special, tf.equal(y, -one))
    safe_y = tf.where(special, one, y)
    q = tf.math.floordiv(x, safe_y)
    if signed:
        inexact = tf.not_equal(tf.math.floormod(x, safe_y), zero)
        q = q + tf.cast(tf.logical_and(inexact, tf.not_equal(x < 0, safe_y < 0)), q.dtype)
        q = tf.where(tf.equal(y, -one), negative(x), q)
    all_ones = -one if signed else tf.fill(tf.shape(y), tf.constant(2 ** bits - 1, y.dtype))
    return tf.where(tf.equal(y, zero), all_ones, q)


_DIV_INT_EDGES = (np.array([7, -7, 7, -7, 5, -(2 ** 31), 0, -5, 2 ** 31 - 1], np.int32),
                  np.array([2, 2, -2, -2, 0, -1, 0, 3, -1], np.int32))
_U32_EDGES = (np.array([0, 1, 7, 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 31, 3000000000, 123456789, 5, 0x9E3779B9], np.uint32),
               np.array([3, 0, 7, 1, 2 ** 32 - 1, 2 ** 31 + 1, 65535, 10, 0, 0x1BD11BDA], np.uint32))
_REM_FLOAT_EDGES = (np.array([7.5, -7.5, 7.5, -7.5, 5.0, INF, 1.0, -0.0, 3.0, 1e30, NAN], np.float32),
                    np.array([2.0, 2.0, -2.0, -2.0, 0.0, 1.0, INF, 1.0, 1.5, 3.0, 1.0], np.float32))


@lowering(lax.div_p, fast=fusion.SOFTMAX, cases=[
    case("f32", lax.div, f32(3, 4), f32(3, 4, low=0.5, high=2.0)),
    case("f32_edges", lax.div, np.array([1.0, -1.0, 0.0, INF, 1.0, NAN], np.float32),
         np.array([0.0, 0.0, 0.0, INF, -INF, 1.0], np.float32)),
    case("i32_truncates", lax.div, *_DIV_INT_EDGES),
    case("i32_random", lax.div, i32(4, 5, low=-50, high=50), i32(4, 5, low=-7, high=7)),
    case("u8", lax.div, np.array([7, 5, 255, 0], np.uint8), np.array([0, 2, 16, 3], np.uint8)),
    case("u32_edges", lax.div, *_U32_EDGES),
    case("u32_small_divisors", lax.div, u32(3, 4, low=0, high=2 ** 32 - 1), u32(3, 4, low=1, high=300)),
    case("f16", lax.div, f16(5), f16(5, low=0.5, high=2.0)),
    *fusion.SOFTMAX_CASES,
])
def lower_div(ctx, x, y):
    fused = fusion.avg_pool(ctx)
    fused = fusion.softmax(ctx) if fused is None else fused
    if fused is not None:
        return fused
    if _is_float(x):
        return _as_out(ctx, tf.math.divide(_wide(x), _wide(y)))
    if ctx.avals_in[0].dtype == np.uint32:  # TFLite has no uint32 FloorDiv (words.py)
        return tf.cast(words.unsigned_divmod(x, y, ctx.out_shape())[0], ctx.out_dtype)
    bits, signed = _int_info(x.dtype)
    if bits < 32:
        x, y = _as_int32(x), _as_int32(y)
    return _as_out(ctx, _truncating_div(x, y, bits, signed))


@lowering(lax.rem_p, cases=[
    case("f32", lax.rem, f32(3, 4, low=-10, high=10), f32(3, 4, low=0.5, high=3)),
    case("f32_signs", lax.rem, *_REM_FLOAT_EDGES),
    case("i32_signs", lax.rem, *_DIV_INT_EDGES),
    case("i32_random", lax.rem, i32(4, 5, low=-50, high=50), i32(4, 5, low=-7, high=7)),
    case("jnp_mod_i32", jnp.remainder, i32(8, low=-20, high=20), i32(8, low=1, high=6)),
    case("u8", lax.rem, np.array([7, 5, 255, 0], np.uint8), np.array([0, 2, 16, 3], np.uint8)),
    case("u32_edges", lax.rem, *_U32_EDGES),
    case("randint", lambda k: jax.random.randint(k, (3, 4), -5, 9), np.array([0x12345678, 0x9ABCDEF0], np.uint32)),
    case("f16", lax.rem, f16(5, low=-8, high=8), f16(5, low=0.5, high=2.0)),
])
def lower_rem(ctx, x, y):
    if _is_float(x):
        # C fmod: the sign of the dividend. floormod of magnitudes is exact and equals fmod there.
        x, y = _wide(x), _wide(y)
        magnitude = tf.math.floormod(tf.abs(x), tf.abs(y))
        return _as_out(ctx, tf.where(x < 0, -magnitude, magnitude))
    if ctx.avals_in[0].dtype == np.uint32:  # TFLite has no uint32 FloorMod (words.py)
        return tf.cast(words.unsigned_divmod(x, y, ctx.out_shape())[1], ctx.out_dtype)
    bits, signed = _int_info(x.dtype)
    if bits < 32:
        x, y = _as_int32(x), _as_int32(y)
    # x - trunc(x / y) y is exact in wrapping integer arithmetic; y = 0 gives x, as in JAX.
    r = x - _truncating_div(x, y, bits, signed) * y
    if signed:  # exactly 0, not through -x (which TF.js's wasm backend rounds)
        r = tf.where(tf.equal(y, -tf.ones_like(y)), tf.zeros_like(r), r)
    return _as_out(ctx, r)


@lowering(lax.pow_p, cases=[
    case("f32", lax.pow, f32(3, 4, low=0.1, high=4), f32(3, 4, low=-3, high=3)),
    case("f32_edges", lax.pow, np.array([0.0, -2.0, -2.0, 2.0, 0.0, INF, 1.0, NAN, -8.0], np.float32),
         np.array([0.0, 0.5, 3.0, -1.0, -1.0, -2.0, NAN, 0.0, 1 / 3], np.float32)),
    case("int_exponent", lax.pow, f32(6, low=-3, high=3), i32(6, low=-3, high=3)),
    case("f16", lax.pow, f16(5, low=0.5, high=2), f16(5, low=-2, high=2)),
])
def lower_pow(ctx, x, y):
    x = _wide(x)
    # C's pow(1, y) is 1 even for a NaN y; JavaScript's Math.pow (TF.js) gives NaN.
    result = tf.pow(x, tf.cast(y, x.dtype))
    return _as_out(ctx, tf.where(tf.equal(x, 1.0), x, result))


def _fast_or(fast, exact):
    """The rule: ``fast`` (a fusion, None in strict mode or when it does not apply), else ``exact``."""
    def lower(ctx, x, y):
        fused = fast(ctx, x, y)
        return exact(ctx, x, y) if fused is None else fused
    lower.__name__ = exact.__name__
    return lower


_EXACT_WIDER = {tf.int8: tf.int32, tf.int16: tf.int32, tf.uint8: tf.int32, tf.uint16: tf.int32,
                tf.uint32: tf.int64}


def _extremum(tf_fn, bool_fn):
    def lower(ctx, x, y):
        if x.dtype == tf.bool:
            return bool_fn(x, y)
        if x.dtype in _EXACT_WIDER:  # TFLite's MAXIMUM/MINIMUM lack narrow and unsigned ints
            x, y = tf.cast(x, _EXACT_WIDER[x.dtype]), tf.cast(y, _EXACT_WIDER[x.dtype])
        x, y = _wide(x), _wide(y)
        result = tf_fn(x, y)
        return _as_out(ctx, _where_nan_either(x, y, result) if _is_float(x) else result)
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


for _prim, _tf_fn, _bool_fn, _jax_fn, _fast, _variant in (
        (lax.max_p, tf.maximum, tf.logical_or, lax.max, fusion.maximum, fusion.MAXIMUM),
        (lax.min_p, tf.minimum, tf.logical_and, lax.min, fusion.minimum, fusion.MINIMUM)):
    register(_prim, _fast_or(_fast, _extremum(_tf_fn, _bool_fn)), fast=_variant, cases=[
        case("f32", _jax_fn, f32(3, 4), f32(3, 4)),
        case("nan", _jax_fn, np.array([NAN, 1.0, NAN, INF, -INF, 2.0], np.float32),
             np.array([1.0, NAN, NAN, 1.0, NAN, -INF], np.float32)),
        case("i32", _jax_fn, i32(10), i32(10)),
        case("bool", _jax_fn, np.array([True, True, False, False]), np.array([True, False, True, False])),
        case("f16", _jax_fn, f16(6), f16(6)),
        case("relu_empty", lambda x, f=_jax_fn: jnp.concatenate([f(x[:, :0], 0.0), x], axis=1), f32(2, 3)),
    ])


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
    return _as_out(ctx, lower_min(ctx, lower_max(ctx, x, lo), hi))


def _float_format(dtype):
    """(explicit mantissa bits, smallest normal exponent, largest finite) of a float dtype."""
    info = jnp.finfo(dtype)
    return int(info.nmant), int(info.minexp), float(info.max)


# 2^k for every k a float32 ulp or power of two can have, from the smallest subnormal up: a float
# table gathered by integer exponent is exact in every runtime, where pow(2, k) need not be.
_POW2_MIN_EXPONENT = -149
_POW2_F32 = np.array([2.0 ** k for k in range(_POW2_MIN_EXPONENT, 128)], np.float32)


def _pow2(k):
    return tf.gather(tf.constant(_POW2_F32), k - _POW2_MIN_EXPONENT)


def _exponent(a, min_exponent: int):
    """floor(log2 a) for finite a > 0, at least ``min_exponent``: the log's estimate, corrected
    by one either way against exact powers of two (log may round across a power of two)."""
    a = tf.maximum(a, float(2.0 ** min_exponent))  # subnormals share the smallest normal's ulp
    e = tf.cast(tf.floor(log(a) * (1.0 / math.log(2.0))), tf.int32)
    e = tf.clip_by_value(e, min_exponent, 127)
    e = tf.where(a < _pow2(e), e - 1, e)
    return tf.where(a >= 2.0 * _pow2(e), e + 1, e)


def _next_float(x, y, dtype):
    """nextafter without the bit pattern: x moves by one ulp of its format, which is exact.
    Away from zero the step is ulp(|x|); toward zero from an exact power of two it is half that.
    Subnormal operands and results are exact where the runtime keeps subnormals (TF.js); TF and
    TFLite on CPU flush them to zero in every op, this one included."""
    mantissa_bits, min_exponent, largest = _float_format(dtype)
    a = tf.abs(x)
    finite_a = tf.where(tf.math.is_finite(a), a, tf.ones_like(a))
    e = _exponent(finite_a, min_exponent)
    ulp_exponent = e - mantissa_bits
    toward_zero = tf.equal(y > x, x < 0)  # up (y > x) shrinks a negative x, grows a positive one
    halved = tf.logical_and(tf.logical_and(toward_zero, tf.equal(finite_a, _pow2(e))), e > min_exponent)
    step_exponent = tf.where(halved, ulp_exponent - 1, ulp_exponent)
    # TF and TFLite on CPU flush subnormal operands to zero, so a subnormal step would vanish:
    # tiny magnitudes take the step scaled up by 2^64 (exact) and scale back.
    scale_exponent = tf.where(a < 2.0 ** -100, 64, 0)
    a_scaled, step = a * _pow2(scale_exponent), _pow2(step_exponent + scale_exponent)
    magnitude = tf.where(toward_zero, a_scaled - step, a_scaled + step) * _pow2(-scale_exponent)
    result = tf.where(x < 0, -magnitude, magnitude)
    smallest = _pow2(tf.fill(tf.shape(x), min_exponent - mantissa_bits))
    result = tf.where(tf.equal(x, 0.0), tf.where(y > 0, smallest, -smallest), result)
    # From an infinity toward anything else: the largest finite float (a finite constant survives
    # the TFLite converter; the infinities themselves never appear as constants).
    largest = largest + tf.zeros_like(x)
    result = tf.where(_is_inf(x), tf.where(x < 0, -largest, largest), result)
    result = tf.where(tf.equal(x, y), y, result)
    return tf.where(tf.logical_or(_isnan(x), _isnan(y)), x + y, result)


_NEXTAFTER_X = np.array([1.0, 1.0, -1.0, -1.0, 2.0, -2.0, 0.0, -0.0, 0.0, 0.0, INF, -INF, INF, -INF, NAN, 1.0,
                         3.0, 0.75, 2.0 ** -126, -2.0 ** -125, 2.0 ** -125, 1.5e-38, 3e-36, -2e-31,
                         3.4028235e38, 3.4028235e38, 2.0 ** 127, 1e10, -7.5e-20, 0.1, 16777216.0, 1.0],
                        np.float32)
_NEXTAFTER_Y = np.array([2.0, 0.0, -2.0, 0.0, 0.0, 0.0, 1.0, 1.0, -1.0, -0.0, 0.0, 0.0, INF, 5.0, 1.0, NAN,
                         3.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, -1.0, INF, 0.0, INF, -INF, 1.0, 0.2, 0.0, INF],
                        np.float32)
_NEXTAFTER_F16_X = np.array([1.0, 1.0, -2.0, 0.0, 0.0, 6.1035e-05, 6e-8, 65504.0, INF, -INF, NAN, 0.1, 1024.0],
                            np.float16)
_NEXTAFTER_F16_Y = np.array([2.0, 0.0, 0.0, -1.0, 1.0, 0.0, 0.0, INF, 0.0, 0.0, 1.0, 1.0, 0.0], np.float16)


# The result is one ulp from x: the cases compare exactly (atol = rtol = 0).
@lowering(lax.nextafter_p, dtypes=_FLOAT32_SERIES, cases=[
    case("f32_edges", lax.nextafter, _NEXTAFTER_X, _NEXTAFTER_Y, atol=0.0, rtol=0.0),
    case("f32_random", lax.nextafter, f32(4, 6, low=-100, high=100), f32(4, 6, low=-100, high=100),
         atol=0.0, rtol=0.0),
    # Normal operands whose ulp is subnormal (TF and TFLite flush subnormal operands and results,
    # which the cases therefore avoid).
    case("f32_tiny", lax.nextafter, f32(8, low=1.2e-38, high=1e-35), f32(8), atol=0.0, rtol=0.0),
    case("f16_edges", lax.nextafter, _NEXTAFTER_F16_X, _NEXTAFTER_F16_Y, atol=0.0, rtol=0.0),
    case("f16_random", lax.nextafter, f16(3, 4), f16(3, 4), atol=0.0, rtol=0.0),
    case("poly", lax.nextafter, f32(3, 4), f32(3, 4), atol=0.0, rtol=0.0,
         polymorphic_shapes=("(b, 4)", "(b, 4)")),
])
def lower_nextafter(ctx, x, y):
    return _as_out(ctx, _next_float(_wide(x), _wide(y), ctx.avals_in[0].dtype))


# ----------------------------------------------------------------------------- bitwise and shifts

def _and_bits(a, b):
    return a * b


def _or_bits(a, b):
    return a + b - a * b


def _xor_bits(a, b):
    return tf.abs(a - b)


def _logical_xor(a, b):
    return tf.not_equal(a, b)


def _bitwise_rule(combine_bits, combine_bools):
    def lower(ctx, x, y):
        return _bitwise(ctx, x, y, combine_bits, combine_bools)
    lower.__name__ = f"lower_bitwise{combine_bits.__name__.removesuffix('_bits')}"
    return lower


for _prim, _combine_bits, _combine_bools, _jax_fn in (
        (lax.and_p, _and_bits, tf.logical_and, lax.bitwise_and),
        (lax.or_p, _or_bits, tf.logical_or, lax.bitwise_or),
        (lax.xor_p, _xor_bits, _logical_xor, lax.bitwise_xor)):
    register(_prim, _bitwise_rule(_combine_bits, _combine_bools), dtypes=_AT_MOST_32_BITS, cases=[
        case("bool", _jax_fn, np.array([True, True, False, False]), np.array([True, False, True, False])),
        case("i32", _jax_fn, np.array([0, -1, 12, -12, 2 ** 31 - 1, -(2 ** 31), 0x5555], np.int32),
             np.array([5, 7, 10, -1, -(2 ** 31), -(2 ** 31), 0x0FF0], np.int32)),
        case("i32_random", _jax_fn, i32(3, 4, low=-(2 ** 31), high=2 ** 31 - 1),
             i32(3, 4, low=-(2 ** 31), high=2 ** 31 - 1)),
        case("u8", _jax_fn, u8(6, low=0, high=255), u8(6, low=0, high=255)),
        case("i8", _jax_fn, i8(6, low=-128, high=127), i8(6, low=-128, high=127)),
        case("u32", _jax_fn, np.array([0, 2 ** 32 - 1, 2 ** 31, 0x9E3779B9, 7], np.uint32),
             np.array([5, 2 ** 31, 2 ** 31 + 1, 0x1BD11BDA, 2 ** 32 - 2], np.uint32)),
    ])


def _shift_operands(ctx, x, s):
    bits, signed = _bit_pattern_info(x.dtype)
    return _as_int32(x), _as_int32(s), bits, signed


def lower_shift_left(ctx, x, s):
    x, s, bits, signed = _shift_operands(ctx, x, s)
    # x * 2^s wraps exactly like the shift (a product by a power of two is exact even in TF.js's
    # float64 arithmetic); JAX gives 0 for shift amounts outside [0, bits).
    shifted = x * _pow2_table(32, s)
    shifted = tf.where(_shift_in_range(s, bits), shifted, tf.zeros_like(shifted))
    return _wrap_to(ctx, shifted, bits, signed)


def lower_shift_right_arithmetic(ctx, x, s):
    x, s, bits, signed = _shift_operands(ctx, x, s)
    if not signed:  # the top bit of an unsigned value is extended too
        x = tf.where(x >= 2 ** (bits - 1), x - 2 ** bits, x)
    # floor(x / 2^s) is the sign-extending shift; out-of-range amounts leave only sign bits.
    shifted = tf.math.floordiv(x, _pow2_table(31, s))
    sign_fill = tf.where(x < 0, -tf.ones_like(x), tf.zeros_like(x))
    in_range = tf.logical_and(_shift_in_range(s, bits), s < 31)
    return _wrap_to(ctx, tf.where(in_range, shifted, sign_fill), bits, signed)


def lower_shift_right_logical(ctx, x, s):
    x, s, bits, signed = _shift_operands(ctx, x, s)
    if bits < 32:
        unsigned = tf.math.floormod(x, 2 ** bits)  # the bit pattern as a non-negative int32
        shifted = tf.math.floordiv(unsigned, _pow2_table(31, s))
    else:
        shifted = limbs.shift_right_logical(x, s)
    shifted = tf.where(_shift_in_range(s, bits), shifted, tf.zeros_like(shifted))
    return _wrap_to(ctx, shifted, bits, signed)


_SHIFT_X = np.array([1, 1, 1, -1, 5, -8, -8, -8, 8, -1, -(2 ** 31), 2 ** 31 - 1, 12345, -12345], np.int32)
_SHIFT_S = np.array([31, 32, -1, 3, 0, 1, 32, -1, 40, 31, 1, 30, 7, 4], np.int32)

# shift_left multiplies by a power of two, which TF.js's wasm backend keeps exact; the arithmetic
# right shift divides, which it rounds beyond 2^24; the logical one works on exact 16-bit limbs.
for _prim, _lower, _jax_fn, _limitations in (
        (lax.shift_left_p, lower_shift_left, lax.shift_left, ()),
        (lax.shift_right_arithmetic_p, lower_shift_right_arithmetic, lax.shift_right_arithmetic,
         (_TFJS_WASM_INT32_BITS,)),
        (lax.shift_right_logical_p, lower_shift_right_logical, lax.shift_right_logical, ())):
    register(_prim, _lower, limitations=_limitations, dtypes=_AT_MOST_32_BITS, cases=[
        case("i32_edges", _jax_fn, _SHIFT_X, _SHIFT_S),
        case("i32_random", _jax_fn, i32(4, 5, low=-(2 ** 31), high=2 ** 31 - 1), i32(4, 5, low=0, high=31)),
        case("i8", _jax_fn, np.array([1, 3, -1, -128, 127, -7, 64], np.int8),
             np.array([7, 8, 2, 1, 3, 9, -1], np.int8)),
        case("u8", _jax_fn, np.array([1, 3, 255, 128, 127, 200, 64], np.uint8),
             np.array([7, 8, 2, 1, 3, 9, 0], np.uint8)),
        case("u32_threefry_rotation", _jax_fn, np.array([0x9E3779B9, 2 ** 32 - 1, 2 ** 31, 1, 12345], np.uint32),
             np.array([13, 19, 31, 32, 0], np.uint32)),
    ])


# ----------------------------------------------------------------------------- integer_pow, select, convert

@lowering(lax.integer_pow_p, cases=[
    case("cube", lambda x: x ** 3, f32(3, 4)),
    case("square", lambda x: lax.integer_pow(x, 2), f32(3, 4)),
    case("negative", lambda x: lax.integer_pow(x, -2), np.array([2.0, 0.0, -0.5, INF, NAN], np.float32)),
    case("minus_one", lambda x: lax.integer_pow(x, -1), f32(5, low=0.5, high=2)),
    case("zero", lambda x: lax.integer_pow(x, 0) + x, np.array([2.0, 0.0, INF, NAN], np.float32)),
    case("one", lambda x: lax.integer_pow(x, 1), f32(4)),
    case("large", lambda x: lax.integer_pow(x, 13), f32(4, low=-2, high=2)),
    case("i32", lambda x: lax.integer_pow(x, 3), i32(3, 4)),
    case("f16", lambda x: lax.integer_pow(x, 3), f16(6)),
])
def lower_integer_pow(ctx, x, *, y):
    # Square-and-multiply, as XLA expands it, then one reciprocal for negative exponents.
    x = _wide(x)
    result, base, n = None, x, abs(y)
    while n:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if n:
            base = base * base
    if result is None:
        result = tf.ones_like(x)
    if y < 0:
        result = 1.0 / result
    return _as_out(ctx, result)


@lowering(lax.select_n_p, cases=[
    case("bool", lambda p, x, y: lax.select_n(p, x, y), boolean(3, 4), f32(3, 4), f32(3, 4)),
    case("where", lambda x: jnp.where(x > 0, x, 0.0), f32(3, 4)),
    case("int32_three", lambda p, x, y, z: lax.select_n(p, x, y, z),
         i32(3, 4, low=0, high=2), f32(3, 4), f32(3, 4), f32(3, 4)),
    case("int32_two", lambda p, x, y: lax.select_n(p, x, y), i32(6, low=0, high=1), i32(6), i32(6)),
    case("scalar_predicate", lambda x, y: lax.select_n(x[0] > 0, x, y), f32(3), f32(3)),
    case("bool_values", lambda p, x, y: lax.select_n(p, x, y), boolean(5), boolean(5), boolean(5)),
    case("f16", lambda p, x, y: lax.select_n(p, x, y), boolean(5), f16(5), f16(5)),
    case("one_case", lambda p, x: lax.select_n(p, x), i32(4, low=0, high=0), f32(4)),
    case("empty", lambda p, x, y: jnp.concatenate([lax.select_n(p[:0], x[:0], y[:0]), x]),
         boolean(2, 3), f32(2, 3), f32(2, 3)),
])
def lower_select_n(ctx, which, *cases):
    # Booleans are selected as int32: TF.js's wasm Select mixes up boolean values.
    cases = [tf.cast(c, tf.int32) if c.dtype == tf.bool else _wide(c) for c in cases]
    if which.dtype == tf.bool:
        return _as_out(ctx, tf.where(which, cases[1], cases[0]))
    result = cases[0]
    for i, c in enumerate(cases[1:], start=1):
        result = tf.where(tf.equal(which, i), c, result)
    return _as_out(ctx, result)


def _float_to_int(x, dtype: tf.DType):
    """XLA's float -> integer conversion on CPU: truncate, saturate at the type's bounds, NaN -> 0.
    A plain TF cast of NaN, inf or an out-of-range value is undefined."""
    info = np.iinfo(dtype.as_numpy_dtype)
    x = tf.cast(x, tf.float32) if x.dtype != tf.float32 and x.dtype != tf.float64 else x
    lo, hi = float(info.min), float(info.max)
    work = tf.int32 if info.bits < 32 else dtype  # TFLite selects no narrow integers
    # float32(hi) may round above hi (2^31 - 1 -> 2^31): compare with a bound that is exact.
    too_high, too_low = x >= hi + 1.0, x <= lo - 1.0
    in_range = tf.logical_not(tf.logical_or(tf.logical_or(too_high, too_low), _isnan(x)))
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
    case("weak_type", lambda x: x + 1.5, i32(3)),
])
def lower_convert_element_type(ctx, x, *, new_dtype, weak_type, sharding):
    # weak_type only steers JAX's type promotion at trace time; the values are the same.
    target = ctx.out_dtype
    if target == tf.bool:
        return tf.not_equal(x, tf.zeros_like(x))  # NaN is true, as in JAX
    if x.dtype.is_floating and target.is_integer:
        return _float_to_int(x, target)
    if x.dtype.is_integer and target.is_integer and target.size < x.dtype.size:
        bits, signed = _int_info(target)
        return _wrap_to(ctx, tf.cast(x, tf.int32), bits, signed)
    return tf.cast(x, target)


# ----------------------------------------------------------------------------- rare special functions

# Fixed trip counts stand in for JAX's run-until-converged loops. Both expansions converge fastest
# away from x ~ a, and there in about sqrt(a) steps: the counts reach float32 rounding for a up to
# about 100 (checked against scipy), far beyond the usual shape parameters.
_IGAMMA_SERIES_TERMS = 64
_IGAMMA_FRACTION_STEPS = 64
_LENTZ_TINY = 1e-30  # stands in for a zero denominator (a normal float32)


def _igamma_series(a, x):
    """sum_n x^n / (a (a+1) ... (a+n)): P(a, x) = e^(a log x - x) / Gamma(a) times this (x <= a)."""
    term = 1.0 / a
    total = term
    for n in range(1, _IGAMMA_SERIES_TERMS + 1):
        term = term * (x / (a + float(n)))
        total = total + term
    return total


def _igammac_fraction(a, x):
    """Legendre's continued fraction for Q(a, x) Gamma(a) e^(x - a log x) (x > a), by the modified
    Lentz algorithm (Numerical Recipes' gcf)."""
    b = x + 1.0 - a
    c = tf.fill(tf.shape(b), tf.constant(1.0 / _LENTZ_TINY, b.dtype))
    d = 1.0 / b
    h = d
    for i in range(1, _IGAMMA_FRACTION_STEPS + 1):
        an = -float(i) * (float(i) - a)
        b = b + 2.0
        d = an * d + b
        d = tf.where(tf.abs(d) < _LENTZ_TINY, _LENTZ_TINY + tf.zeros_like(d), d)
        c = b + an / c
        c = tf.where(tf.abs(c) < _LENTZ_TINY, _LENTZ_TINY + tf.zeros_like(c), c)
        d = 1.0 / d
        h = h * (d * c)
    return h


def _igamma_pair(a, x):
    """(P, Q) of the regularized incomplete gamma function, each computed where it is not close to 1:
    the series gives P (Q = 1 - P) when x < 1 or x <= a, the continued fraction gives Q otherwise.
    JAX's edges: NaN for a < 0, x < 0, a = x = 0 or a NaN operand; P(a, 0) = 0, P(a, inf) = 1."""
    scale = exp(a * log(x) - x - lgamma(a))  # x^a e^-x / Gamma(a); NaN as in JAX at a = inf
    use_series = tf.logical_or(x < 1.0, x <= a)
    p_series = _igamma_series(a, x) * scale  # a = 0: inf * 0 = NaN for x < 1, as in JAX
    q_fraction = _igammac_fraction(a, x) * scale
    p = tf.where(use_series, p_series, 1.0 - q_fraction)
    q = tf.where(use_series, 1.0 - p_series, q_fraction)
    zero, one = tf.zeros_like(x), tf.ones_like(x)
    x_zero, x_inf = tf.equal(x, 0.0), _is_inf(x)
    p = tf.where(x_zero, zero, tf.where(x_inf, one, p))
    q = tf.where(x_zero, one, tf.where(tf.logical_or(x_inf, tf.equal(a, 0.0)), zero, q))
    domain_error = tf.logical_or(tf.logical_or(x < 0.0, a < 0.0),
                                 tf.logical_or(tf.logical_and(tf.equal(a, 0.0), x_zero),
                                               tf.logical_or(_isnan(a), _isnan(x))))
    nan = tf.fill(tf.shape(x), tf.constant(NAN, x.dtype))
    return tf.where(domain_error, nan, p), tf.where(domain_error, nan, q)


def igamma(a, x):
    return _igamma_pair(a, x)[0]


def igammac(a, x):
    return _igamma_pair(a, x)[1]


# Hurwitz zeta by Euler-Maclaurin summation (as Cephes' zeta and XLA do): ten terms summed, the
# rest as an integral, half a term and twelve Bernoulli corrections B_2j / (2j)! s (s+1) ...
# (s+2j-2) w^(-s-2j+1) at w = q + 10, summed by Horner's rule in 1 / w^2.
_ZETA_TERMS = 10
_BERNOULLI = (Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66),
              Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510), Fraction(43867, 798),
              Fraction(-174611, 330), Fraction(854513, 138), Fraction(-236364091, 2730))
_ZETA_CORRECTIONS = tuple(float(b / math.factorial(2 * j)) for j, b in enumerate(_BERNOULLI, start=1))


def zeta(s, q):
    partial = tf.zeros_like(q)
    for k in range(_ZETA_TERMS):
        partial = partial + tf.pow(q + float(k), -s)  # negative q: pow handles integer s
    w = q + float(_ZETA_TERMS)
    w_power = tf.pow(w, -s)
    inv_w2 = 1.0 / (w * w)
    horner = tf.zeros_like(q) + _ZETA_CORRECTIONS[-1]
    for j in range(len(_ZETA_CORRECTIONS) - 1, 0, -1):  # step j -> j + 1 gains (s+2j-1)(s+2j) / w^2
        horner = _ZETA_CORRECTIONS[j - 1] + inv_w2 * (s + float(2 * j - 1)) * (s + float(2 * j)) * horner
    tail = w_power * (w / (s - 1.0) + 0.5 + (s / w) * horner)
    # Where the partial sum already holds every digit the tail is skipped: for large s the
    # corrections overflow while w^-s underflows (0 * inf).
    r = tf.where(tf.abs(w_power) < tf.abs(partial) * float(np.finfo(np.float32).eps), partial, partial + tail)
    # JAX's edges: a pole at s = 1, NaN below; for q <= 0 only integer s are defined, and at the
    # poles q = 0, -1, ... the value is +inf for even s, NaN otherwise.
    inf, nan = _inf_like(q), tf.fill(tf.shape(q), tf.constant(NAN, q.dtype))
    s_integer = tf.equal(s, tf.floor(s))
    s_even = tf.logical_and(s_integer, tf.equal(s - 2.0 * tf.floor(0.5 * s), 0.0))
    q_pole = tf.logical_and(q <= 0.0, tf.equal(q, tf.floor(q)))
    r = tf.where(q_pole, tf.where(s_even, inf, nan), r)
    r = tf.where(tf.logical_and(q <= 0.0, tf.logical_not(s_integer)), nan, r)
    r = tf.where(s < 1.0, nan, r)
    return tf.where(tf.equal(s, 1.0), inf, r)


def polygamma(n, x):
    # psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 1; n = 0 is digamma. NaN unless n is a
    # natural number. n! as exp(lgamma(n + 1)), as in JAX (it overflows where JAX's does).
    n_odd = tf.equal(n - 2.0 * tf.floor(0.5 * n), 1.0)
    sign = tf.where(n_odd, tf.ones_like(n), -tf.ones_like(n))
    r = sign * exp(lgamma(n + 1.0)) * zeta(n + 1.0, x)
    r = tf.where(tf.equal(n, 0.0), digamma(x), r)
    natural = tf.logical_and(n >= 0.0, tf.equal(n, tf.floor(n)))
    return tf.where(natural, r, tf.fill(tf.shape(r), tf.constant(NAN, r.dtype)))


_IGAMMA_A = np.array([1.0, 1.0, 0.0, -1.0, 2.0, NAN, 1.0, INF, 0.0, 0.0, 0.0, INF, INF, 1e-3, 5.0, 1e-30, 0.5,
                      20.0, 20.0, 3.0, 100.0, 1.0, 0.1], np.float32)
_IGAMMA_X = np.array([0.0, -1.0, 1.0, 1.0, INF, 1.0, NAN, 1.0, 0.5, 2.0, 0.0, 0.5, 2.0, 1e-3, 1e-30, 1.0, 1e10,
                      20.0, 21.0, 1e-6, 90.0, 30.0, 50.0], np.float32)
def _igamma_cases(fn):
    return [
        case("f32", fn, f32(8, 16, low=0.1, high=20), f32(8, 16, low=0.0, high=30)),
        case("small_a", fn, f32(4, 8, low=0.01, high=1.0), f32(4, 8, low=0.0, high=3.0)),
        case("edges", fn, _IGAMMA_A, _IGAMMA_X),
        case("f16", fn, f16(3, 4, low=0.5, high=5), f16(3, 4, low=0.1, high=6)),
        case("broadcast_scalar", lambda x, f=fn: f(2.5, x), f32(2, 5, low=0.0, high=8)),
        case("poly", fn, f32(3, 4, low=0.5, high=5), f32(3, 4, low=0.1, high=6),
             polymorphic_shapes=("(b, 4)", "(b, 4)")),
    ]


_ZETA_S = np.array([1.0, 0.5, 2.0, 2.0, 2.0, 2.0, INF, 3.0, NAN, 2.0, 2.0, 1.0001, 30.0, 3.0, 3.0, 2.5, 2.5, 4.0,
                    2.0, 3.0, 1e4], np.float32)
_ZETA_Q = np.array([1.0, 1.0, 0.0, -1.0, -1.5, INF, 2.0, 1e-3, 1.0, NAN, 1e6, 1.0, 0.5, 0.0, -1e-3, -1.5, 1e-3,
                    -2.0, -INF, -2.5, 2.0], np.float32)
_POLYGAMMA_N = np.array([0.0, 1.0, 2.0, 3.0, 1.0, 1.0, -1.0, 1.5, 1.0, 2.0, 10.0, 1.0, 4.0, 0.0, 2.0, 5.0, NAN],
                        np.float32)
_POLYGAMMA_X = np.array([1.0, 0.0, 0.0, -1.0, -1.5, INF, 1.0, 1.0, NAN, 1e-3, 2.0, 1e6, -2.5, -0.5, -1e-3, 30.0,
                         1.0], np.float32)

for _prim, _fn, _cases in (
        (lax.igamma_p, igamma, _igamma_cases(lax.igamma)),
        (lax.igammac_p, igammac, _igamma_cases(lax.igammac) + [
            # Q far in the tail, computed directly rather than as 1 - P
            case("tail", lax.igammac, f32(12, low=0.5, high=3), f32(12, low=20, high=60))]),
        (lax.zeta_p, zeta, [
            case("f32", lax.zeta, f32(6, 8, low=1.1, high=12), f32(6, 8, low=0.05, high=20)),
            case("edges", lax.zeta, _ZETA_S, _ZETA_Q),
            case("negative_q_integer_s", lax.zeta, np.array([2.0, 3.0, 4.0, 6.0], np.float32),
                 f32(4, low=-5, high=-0.1)),
            case("f16", lax.zeta, f16(3, 4, low=1.5, high=5), f16(3, 4, low=0.5, high=4)),
            case("poly", lax.zeta, f32(3, 4, low=1.5, high=5), f32(3, 4, low=0.5, high=4),
                 polymorphic_shapes=("(b, 4)", "(b, 4)"))]),
        (lax.polygamma_p, polygamma, [
            case("f32", lax.polygamma, np.array([0.0, 1.0, 2.0, 3.0], np.float32), f32(4, low=0.5, high=5)),
            case("orders", lax.polygamma, np.repeat(np.arange(6, dtype=np.float32), 8).reshape(6, 8),
                 f32(6, 8, low=0.1, high=15)),
            case("edges", lax.polygamma, _POLYGAMMA_N, _POLYGAMMA_X),
            case("f16", lax.polygamma, np.array([1.0, 2.0, 1.0, 0.0], np.float16), f16(4, low=1, high=4))])):
    register(_prim, binary(_fn), cases=_cases, dtypes=_DTYPES.get(_prim, ALL))


# ----------------------------------------------------------------------------- cases for the tables

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


_UNARY_CASES = {
    lax.neg_p: _unary_cases(lax.neg, edges=[0.0, -0.0, INF, NAN], i32_case=True),
    lax.sign_p: _unary_cases(lax.sign, edges=[0.0, -0.0, INF, -INF, NAN, -3.0], i32_case=True),
    lax.floor_p: _unary_cases(lax.floor, edges=[-0.5, 0.5, -1.0, INF, NAN, 1e30]),
    lax.ceil_p: _unary_cases(lax.ceil, edges=[-0.5, 0.5, -1.0, INF, NAN, 1e30]),
    lax.is_finite_p: _unary_cases(lax.is_finite, edges=[0.0, INF, -INF, NAN, 3e38]),
    lax.abs_p: _unary_cases(lax.abs, edges=[-0.0, -INF, NAN], i32_case=True, poly=True),
    lax.square_p: _unary_cases(lax.square, edges=[1e20, -INF, NAN], i32_case=True),
    lax.exp_p: _unary_cases(lax.exp, edges=[0.0, 88.0, 88.5, 88.72, 89.0, -104.0, -INF, INF, NAN], poly=True),
    lax.exp2_p: _unary_cases(lax.exp2, low=-10, high=10, edges=[0.0, 1.0, 10.0, -3.0, 127.0, 128.0, -INF, NAN]),
    lax.log_p: _unary_cases(lax.log, low=0.01, high=100, edges=[0.0, -1.0, INF, 1.0, NAN, 1e-30, 3e38, 2.5e38,
                                                                  -INF, 2.0 ** 64]),
    lax.log1p_p: _unary_cases(lax.log1p, low=-0.9, high=10,
                              edges=[1e-8, -1e-8, 0.0, -1.0, -2.0, INF, 1e30, NAN, 3e38]),
    lax.expm1_p: _unary_cases(lax.expm1, low=-5, high=5, edges=[1e-8, -1e-8, 0.0, -INF, INF, 88.0, -30.0, NAN,
                                                                    88.7]),
    lax.tanh_p: _unary_cases(lax.tanh, edges=[0.0, 20.0, -20.0, INF, NAN]),
    lax.logistic_p: _unary_cases(lax.logistic, edges=[0.0, 50.0, -50.0, INF, -INF, NAN]),
    lax.sin_p: _unary_cases(lax.sin, edges=[0.0, 3.14159265, 100.0, INF, NAN], poly=True),
    lax.cos_p: _unary_cases(lax.cos, edges=[0.0, 3.14159265, 100.0, INF, NAN]),
    lax.tan_p: _unary_cases(lax.tan, low=-1.5, high=1.5, edges=[0.0, 1.0, -1.0, INF, NAN]),
    lax.asin_p: _unary_cases(lax.asin, low=-1, high=1, edges=[1.0, -1.0, 0.0, 1.5, NAN, 1e-20]),
    lax.acos_p: _unary_cases(lax.acos, low=-1, high=1, edges=[1.0, -1.0, 0.0, 1.5, NAN]),
    lax.atan_p: _unary_cases(lax.atan, low=-10, high=10, edges=[0.0, INF, -INF, NAN, 1e20]),
    lax.sinh_p: _unary_cases(lax.sinh, low=-5, high=5, edges=[0.0, 1e-6, -1e-3, 0.99, 1.0, 89.0, -89.0, 90.0,
                                                              INF, NAN]),
    lax.cosh_p: _unary_cases(lax.cosh, low=-5, high=5, edges=[0.0, 1e-6, 89.0, -89.0, 90.0, -INF, NAN]),
    lax.asinh_p: _unary_cases(lax.asinh, low=-10, high=10, edges=[0.0, 1e-20, -1e-3, 1e20, -1e30, INF, NAN,
                                                                      3e38, -3e38, -INF]),
    lax.acosh_p: _unary_cases(lax.acosh, low=1, high=10, edges=[1.0, 1.0001, 0.5, 1e20, INF, NAN, 3e38]),
    lax.atanh_p: _unary_cases(lax.atanh, low=-0.99, high=0.99, edges=[0.0, 1e-20, 1.0, -1.0, 2.0, 0.999, NAN]),
    lax.sqrt_p: _unary_cases(lax.sqrt, low=0, high=100, edges=[0.0, -1.0, INF, NAN, 1e-30]),
    lax.rsqrt_p: _unary_cases(lax.rsqrt, low=0.01, high=100, edges=[0.0, -1.0, INF, NAN, 4.0]),
    lax.cbrt_p: _unary_cases(lax.cbrt, low=-100, high=100, edges=[0.0, 8.0, -27.0, INF, -INF, NAN, 1e-30]),
    lax.erf_p: _unary_cases(lax.erf, low=-4, high=4, edges=[0.0, 1e-8, -0.3, 0.49, 0.51, 3.0, -6.0, INF, NAN]),
    lax.erfc_p: _unary_cases(lax.erfc, low=-4, high=4, edges=[0.0, 1e-8, 0.5, 3.0, 9.0, -6.0, INF, -INF, NAN]),
    lax.erf_inv_p: _unary_cases(lax.erf_inv, low=-0.999, high=0.999,
                                edges=[0.0, 1.0, -1.0, 1.5, 0.9999, -0.99999, 1e-8, 0.5, NAN]),
    lax.lgamma_p: _unary_cases(lax.lgamma, low=0.1, high=20,
                               edges=[1.0, 2.0, 0.5, 1e-8, 0.0, -1.0, -2.5, -0.5, 30.0, 1e6, -100.3, INF, NAN,
                                      3e38, -INF],
                               atol=3e-5),
    lax.digamma_p: _unary_cases(lax.digamma, low=0.1, high=20,
                                edges=[1.0, 2.0, 0.5, 1e-3, 0.0, -1.0, -2.5, -0.5, 30.0, 1e6, 1.4616321, NAN],
                                atol=3e-5),
    lax.bessel_i0e_p: _unary_cases(lax.bessel_i0e, low=-10, high=10,
                                   edges=[0.0, 3.74, 3.76, -20.0, 100.0, INF, NAN]),
    lax.bessel_i1e_p: _unary_cases(lax.bessel_i1e, low=-10, high=10,
                                   edges=[0.0, 3.74, 3.76, -20.0, 100.0, INF, NAN]),
    lax.stop_gradient_p: [case("f32", lax.stop_gradient, f32(3, 4)), case("i32", lax.stop_gradient, i32(3))],
    lax.copy_p: [case("f32", jnp.copy, f32(3, 4)), case("bool", jnp.copy, boolean(2, 2))],
}

for _prim, _cases in _UNARY_CASES.items():
    add_cases(_prim, *_cases)

add_cases(lax.add_p, case("f32", lax.add, f32(3, 4), f32(3, 4)),
          case("i32_wraps", lax.add, np.array([2 ** 31 - 1, -5], np.int32), np.array([1, 3], np.int32)),
          case("f16", lax.add, f16(3, 4), f16(3, 4)),
          case("edges", lax.add, np.array([INF, INF, NAN, -0.0], np.float32), np.array([-INF, 1.0, 1.0, -0.0],
                                                                                        np.float32)),
          case("poly", lax.add, f32(3, 4), f32(3, 4), polymorphic_shapes=("(b, 4)", "(b, 4)")),
          case("scalar_literal", lambda x: x + 1.0, f32(1, 3)))
add_cases(lax.sub_p, case("f32", lax.sub, f32(3, 4), f32(3, 4)),
          case("i32_wraps", lax.sub, np.array([-(2 ** 31), 5], np.int32), np.array([1, 3], np.int32)),
          case("f16", lax.sub, f16(3, 4), f16(3, 4)),
          case("u8", lax.sub, u8(5), u8(5)),
          case("u32_wraps", lax.sub, *_U32_EDGES))
add_cases(lax.atan2_p, case("f32", lax.atan2, f32(3, 4), f32(3, 4)),
          case("edges", lax.atan2, np.array([0.0, -0.0, 0.0, -0.0, 1.0, INF, INF, NAN], np.float32),
               np.array([-0.0, -0.0, 1.0, 1.0, 0.0, INF, -1.0, 1.0], np.float32)),
          case("f16", lax.atan2, f16(5), f16(5)))
add_cases("add_any",
          case("grad_of_product", jax.grad(lambda x: (jnp.sin(x) * x).sum()), f32(3, 4)),
          case("grad_of_square", jax.grad(lambda x: (x * x * 3.0).sum()), f32(5)))
