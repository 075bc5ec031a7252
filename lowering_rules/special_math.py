"""regularized_incomplete_beta (betainc) and igamma_grad_a, by JAX's own algorithms
(jax._src.lax.special, ported there from XLA's math library): a continued fraction evaluated by the
Lentz-Thompson-Barnett method, and the incomplete gamma series / continued fraction carrying their
derivatives in a. The loops stop where JAX's stop (every element converged, or the iteration cap):
a data-dependent tf.while_loop, one WHILE op in TFLite, so the results agree to rounding.
Half-precision operands compute in float32 and round back, as JAX's own lowering does.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32
from lowering_rules.core.dtype_support import NUMERIC, dtypes
from lowering_rules.core.float_math import exp, log, log1p
from lowering_rules.core.helpers import as_out, is_inf, is_nan, wide
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.special import digamma, lgamma

_EPS = float(np.finfo(np.float32).eps)
_TINY = float(np.finfo(np.float32).tiny)
_LOG_MAX = float(np.log(np.finfo(np.float32).max))
_BETAINC_ITERATIONS = 200   # JAX's cap for float32
_IGAMMA_FRACTION_CAP = 2000  # JAX's cap for the continued fraction (its series has none)
NAN = float("nan")

# Built from float32 constants (eps, tiny, iteration caps): float64 would not get float64 accuracy.
_FLOAT32_ALGORITHM = dtypes(NUMERIC - {"float64"}, missing=(
    "the lowering runs JAX's float32 algorithm (float32 eps, tiny and iteration caps); float64 "
    "results would not have float64 accuracy"))


def _fill(x, value):
    return tf.fill(tf.shape(x), tf.constant(value, x.dtype))


def _any(mask):
    return tf.reduce_any(mask)


# ----------------------------------------------------------------------------- betainc

def _lentz_betainc(a, b, x):
    """The continued fraction of DLMF 8.17.22 (partial numerators 8.17.23, denominators 1), until
    every |delta - 1| < eps / 2 or 200 iterations."""
    small = _EPS / 2

    def numerator(i):
        m = tf.cast(tf.math.floordiv(i - 1, 2), a.dtype)
        zero_m = -(a + b) * x / (a + 1.0)   # m = 0 (JAX: exact for tiny a under FTZ)
        even = tf.where(tf.equal(m, 0.0), zero_m, -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)))
        odd = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
        return tf.where(tf.equal(i, 1), tf.ones_like(x), tf.where(tf.equal(tf.math.floormod(i, 2), 0), even, odd))

    def body(i, _, c, d, h):
        pn = numerator(i)
        c = 1.0 + pn / c
        c = tf.where(tf.abs(c) < small, _fill(c, small), c)
        d = 1.0 + pn * d
        d = 1.0 / tf.where(tf.abs(d) < small, _fill(d, small), d)
        delta = c * d
        return i + 1, _any(tf.abs(delta - 1.0) >= small), c, d, h * delta

    h = _fill(x, small)   # the 0th partial denominator is 0, below `small`
    state = [tf.constant(1), tf.constant(True), h, tf.zeros_like(h), h]
    return tf.while_loop(lambda i, unconverged, *_: tf.logical_and(i < _BETAINC_ITERATIONS, unconverged),
                         body, state)[4]


def betainc(a, b, x):
    a_is_zero = tf.logical_or(tf.equal(a, 0.0), is_inf(b))
    b_is_zero = tf.logical_or(tf.equal(b, 0.0), is_inf(a))
    x_is_zero, x_is_one = tf.equal(x, 0.0), tf.equal(x, 1.0)
    nan_in = tf.logical_or(tf.logical_or(is_nan(a), is_nan(b)), is_nan(x))
    result_is_zero = tf.logical_or(tf.logical_and(b_is_zero, tf.logical_not(x_is_one)),
                                   tf.logical_and(a_is_zero, x_is_zero))
    result_is_one = tf.logical_or(tf.logical_and(a_is_zero, tf.logical_not(x_is_zero)),
                                  tf.logical_and(b_is_zero, x_is_one))
    out_of_domain = tf.logical_or(tf.logical_or(a < 0.0, b < 0.0), tf.logical_or(x < 0.0, x > 1.0))
    result_is_nan = tf.logical_or(out_of_domain, tf.logical_or(tf.logical_and(a_is_zero, b_is_zero), nan_in))
    # The fraction converges fast for x < (a + 1) / (a + b + 2); elsewhere I_x(a, b) = 1 - I_{1-x}(b, a).
    direct = x < (a + 1.0) / (a + b + 2.0)
    a, b, x = tf.where(direct, a, b), tf.where(direct, b, a), tf.where(direct, x, 1.0 - x)
    fraction = _lentz_betainc(a, b, x)
    # For tiny a, a Gamma(a) = Gamma(a + 1) -> 1 avoids dividing by a.
    lbeta_small_a = lgamma(b) - lgamma(a + b)
    lbeta = lgamma(a) + lbeta_small_a
    factor = tf.where(a < 2 * _TINY, exp(log1p(-x) * b - lbeta_small_a),
                      exp(log(x) * a + log1p(-x) * b - lbeta) / a)
    result = fraction * factor
    result = tf.where(direct, result, 1.0 - result)
    result = tf.where(result_is_zero, tf.zeros_like(result), result)
    result = tf.where(result_is_one, tf.ones_like(result), result)
    return tf.where(result_is_nan, _fill(result, NAN), result)


_BETA_A = np.array([0.0, 1.0, 0.0, np.inf, 2.0, -1.0, 2.0, 2.0, np.nan, 1e-30, 0.5, 3.0], np.float32)
_BETA_B = np.array([1.0, 0.0, 0.0, 1.0, np.inf, 1.0, 3.0, 3.0, 1.0, 2.0, 0.5, 3.0], np.float32)
_BETA_X = np.array([0.5, 0.5, 0.5, 0.5, 0.3, 0.5, 0.0, 1.0, 0.5, 0.5, 1.5, 0.999], np.float32)


def _betainc(a, b, x):
    return jax.scipy.special.betainc(a, b, x)  # imported on first use: jax.scipy.special jits on import


@lowering(lax.regularized_incomplete_beta_p, dtypes=_FLOAT32_ALGORITHM, cases=[
    case("f32", _betainc, f32(3, 4, low=0.1, high=8), f32(3, 4, low=0.1, high=8), f32(3, 4, low=0.0, high=1.0)),
    case("edges", _betainc, _BETA_A, _BETA_B, _BETA_X),
    case("f16", _betainc, f16(4, low=0.5, high=4), f16(4, low=0.5, high=4), f16(4, low=0.05, high=0.95)),
])
def lower_regularized_incomplete_beta(ctx, a, b, x):
    return as_out(ctx, betainc(wide(a), wide(b), wide(x)))


# ----------------------------------------------------------------------------- igamma_grad_a

def _series_derivative(ax, x, a, enabled):
    """d/da of P(a, x) from the series sum x^n / (a+1)...(a+n) and its derivative, each element
    frozen once its derivative term is below eps (JAX's _igamma_series, DERIVATIVE mode)."""
    def body(enabled, r, c, ans, dc_da, dans_da):
        r1 = r + 1.0
        dc_da1 = dc_da * (x / r1) - (c * x) / (r1 * r1)
        dans_da1 = dans_da + dc_da1
        c1 = c * (x / r1)
        ans1 = ans + c1
        keep = tf.logical_and(enabled, tf.abs(dc_da1 / dans_da1) > _EPS)
        pick = lambda new, old: tf.where(enabled, new, old)
        return keep, pick(r1, r), pick(c1, c), pick(ans1, ans), pick(dc_da1, dc_da), pick(dans_da1, dans_da)

    one, zero = tf.ones_like(a), tf.zeros_like(a)
    _, _, _, ans, _, dans_da = tf.while_loop(lambda enabled, *_: _any(enabled), body,
                                             [enabled, a, one, one, zero, zero])
    dlogax_da = log(x) - digamma(a + 1.0)
    return ax * (ans * dlogax_da + dans_da) / a


def _fraction_derivative(ax, x, a, enabled):
    """d/da of Q(a, x) from Legendre's continued fraction (Cephes' recurrence, rescaled by eps when
    it grows) and its derivative in a (JAX's _igammac_continued_fraction, DERIVATIVE mode)."""
    def body(enabled, count, ans, y, z, pkm1, qkm1, pkm2, qkm2, dpkm2, dqkm2, dpkm1, dqkm1, dans):
        count = count + 1
        c = tf.cast(count, x.dtype)
        y1, z1 = y + 1.0, z + 2.0
        yc = y1 * c
        pk = pkm1 * z1 - pkm2 * yc
        qk = qkm1 * z1 - qkm2 * yc
        nonzero = tf.not_equal(qk, 0.0)
        r = pk / tf.where(nonzero, qk, tf.ones_like(qk))
        ans1 = tf.where(nonzero, r, ans)
        dpk = dpkm1 * z1 - pkm1 - dpkm2 * yc + pkm2 * c
        dqk = dqkm1 * z1 - qkm1 - dqkm2 * yc + qkm2 * c
        dans1 = tf.where(nonzero, (dpk - ans1 * dqk) / tf.where(nonzero, qk, tf.ones_like(qk)), dans)
        change = tf.where(nonzero, tf.abs(dans1 - dans), tf.ones_like(dans))
        rescale = tf.abs(pk) > 1.0 / _EPS
        scaled = lambda v: tf.where(rescale, v * _EPS, v)
        new = [scaled(pk), scaled(qk), scaled(pkm1), scaled(qkm1), scaled(dpkm1), scaled(dqkm1),
               scaled(dpk), scaled(dqk)]
        old = [pkm1, qkm1, pkm2, qkm2, dpkm2, dqkm2, dpkm1, dqkm1]
        pick = lambda n, o: tf.where(enabled, n, o)
        (pkm1, qkm1, pkm2, qkm2, dpkm2, dqkm2, dpkm1, dqkm1) = (pick(n, o) for n, o in zip(new, old))
        keep = tf.logical_and(enabled, change > _EPS)
        return (keep, count, pick(ans1, ans), pick(y1, y), pick(z1, z), pkm1, qkm1, pkm2, qkm2,
                dpkm2, dqkm2, dpkm1, dqkm1, pick(dans1, dans))

    y = 1.0 - a
    z = x + y + 1.0
    pkm1, qkm1 = x + 1.0, z * x
    ans = pkm1 / qkm1
    zero = tf.zeros_like(x)
    dqkm1 = -x
    dans = (zero - ans * dqkm1) / qkm1
    state = [enabled, tf.constant(0), ans, y, z, pkm1, qkm1, tf.ones_like(x), x, zero, zero, zero, dqkm1, dans]
    out = tf.while_loop(lambda enabled, count, *_: tf.logical_and(count < _IGAMMA_FRACTION_CAP, _any(enabled)),
                        body, state)
    ans, dans = out[2], out[13]
    return ax * (ans * (log(x) - digamma(a)) + dans)


def igamma_grad_a(a, x):
    nan_in = tf.logical_or(is_nan(a), is_nan(x))
    x_is_zero = tf.equal(x, 0.0)
    domain_error = tf.logical_or(x < 0.0, a <= 0.0)
    use_fraction = tf.logical_and(x > 1.0, x > a)
    ax = a * log(x) - x - lgamma(a)
    underflow = ax < -_LOG_MAX
    ax = exp(ax)
    enabled = tf.logical_not(tf.logical_or(tf.logical_or(x_is_zero, domain_error), tf.logical_or(underflow, nan_in)))
    out = tf.where(use_fraction,
                   -_fraction_derivative(ax, x, a, tf.logical_and(enabled, use_fraction)),
                   _series_derivative(ax, x, a, tf.logical_and(enabled, tf.logical_not(use_fraction))))
    out = tf.where(x_is_zero, tf.zeros_like(out), out)
    return tf.where(tf.logical_or(domain_error, nan_in), _fill(out, NAN), out)


_GRAD_A = np.array([1.0, 1.0, 0.0, -1.0, 2.0, np.nan, 1.0, 0.5, 3.0, 20.0, 1e-3], np.float32)
_GRAD_X = np.array([0.0, -1.0, 1.0, 1.0, np.inf, 1.0, np.nan, 40.0, 2.9, 21.0, 1e-3], np.float32)


@lowering(lax.igamma_grad_a_p, dtypes=_FLOAT32_ALGORITHM, cases=[
    case("series_and_fraction", lax.igamma_grad_a, f32(3, 4, low=0.2, high=6), f32(3, 4, low=0.05, high=10)),
    case("edges", lax.igamma_grad_a, _GRAD_A, _GRAD_X),
    case("gamma_sample_grad", lambda a: lax.igamma_grad_a(a, 2.0 * a), f16(4, low=0.5, high=4)),
])
def lower_igamma_grad_a(ctx, a, x):
    return as_out(ctx, igamma_grad_a(wide(a), wide(x)))
