"""Float functions composed from the ops every runtime has, exact where the runtime's own kernel is
not: exp and log around XNNPACK's kernels, log1p and expm1 (series near 0), the hyperbolic and
inverse trigonometric functions, cbrt and exp2. The elementwise rules and the special functions
lower with them."""
from __future__ import annotations

import math

import numpy as np

from lowering_rules.core.helpers import is_inf, is_nan
from lowering_rules.core.lazy_tensorflow import tf


def exp(x):
    # TFLite's Exp maps NaN to 0, and XNNPACK's AVX2 kernel overflows to inf above x = 88.38
    # (exp(88.72) is still finite): there, exp(x / 2) squared (x / 2 is exact).
    big = x > 64.0
    half = tf.exp(tf.where(big, 0.5 * x, x))
    return tf.where(is_nan(x), x, tf.where(big, half * half, half))


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


def horner(u, coefficients):
    """sum coefficients[n] u^n, highest degree first."""
    acc = tf.zeros_like(u)
    for c in reversed(coefficients):
        acc = c + u * acc
    return acc


# Near 0, log1p and expm1 are series: the Goldberg and Kahan forms below divide by a log near 1,
# which LiteRT's LOG (XNNPACK) gives to about 1e-7 absolute only: expm1(1e-4) and log1p(1e-4)
# came out 1.2e-3 off, relatively. Each series runs to the term below the dtype's last bit.
def _single(x) -> bool:
    return x.dtype == tf.float32


def log1p(x):
    # |x| < 1/2: log(1 + x) = 2 atanh(z), z = x / (2 + x), |z| <= 1/3, as a series in z.
    z = x / (2.0 + x)
    near = z * horner(z * z, [2.0 / (2 * k + 1) for k in range(9 if _single(x) else 18)])  # to z^17 / z^35
    # Elsewhere Goldberg's trick: log(u) * x / (u - 1) with u = 1 + x cancels the rounding of 1 + x
    # (TFLite turns Log1p into log(1 + x)).
    u = 1.0 + x
    d = u - 1.0
    safe_d = tf.where(tf.equal(d, 0.0), tf.ones_like(d), d)
    r = tf.where(tf.equal(d, 0.0), x, log(u) * (x / safe_d))
    r = tf.where(tf.abs(x) < 0.5, near, r)
    # +inf stays; -inf, like every x below -1, has no logarithm: r is already NaN there.
    return tf.where(tf.logical_and(is_inf(u), u > 0.0), u, r)


def expm1(x):
    # |x| < 1/2: the series sum x^n / n!.
    near = x * horner(x, [1.0 / math.factorial(n) for n in range(1, 11 if _single(x) else 17)])  # x^10 / x^16
    # Elsewhere Kahan's trick: (u - 1) * x / log(u) with u = exp(x) cancels the rounding of exp(x).
    u = exp(x)
    log_u = log(u)
    safe_log = tf.where(tf.equal(log_u, 0.0), tf.ones_like(log_u), log_u)
    r = (u - 1.0) * (x / safe_log)
    r = tf.where(tf.equal(u, 1.0), x, r)
    r = tf.where(tf.equal(u - 1.0, -1.0), u - 1.0, r)
    r = tf.where(tf.abs(x) < 0.5, near, r)
    return tf.where(is_inf(u), u, r)


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
    return tf.pow(tf.constant(2.0, dtype=x.dtype), x)
