"""Special functions: erf, erfc, erf_inv, lgamma, digamma, Bessel i0e/i1e, igamma, igammac,
zeta and polygamma.

TFLite and TF.js have none of them (TF.js lacks Erfinv and Lgamma), so each is composed from
basic arithmetic with a published approximation, named beside it, accurate to float32 rounding.
"""
from __future__ import annotations

import math
from fractions import Fraction

import jax
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32
from lowering_rules.core.dtype_support import ALL
from lowering_rules.core.float_math import exp, log
from lowering_rules.core.helpers import (
    infinity_like,
    is_inf,
    is_nan,
)
from lowering_rules.core.jax_compat import lax_value
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.core.vocabulary import tfjs_webgpu_fails, webgpu_computes_wrong
from lowering_rules.elementwise import FLOAT32_SERIES, _unary_cases, binary, unary

NAN, INF = float("nan"), float("inf")


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
    return tf.where(is_inf(x), tf.abs(x), r)


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
    # Reflection psi(1 - x) - psi(x) = pi cot(pi x) below 1/2; JAX gives NaN at the negative poles,
    # and at each zero the value the installed JAX gives: NaN up to JAX 0.10, -inf for both from
    # 0.11, and the pole's one-sided limits from 0.12.1 (+inf at -0.0, -inf at +0.0).
    reflected = _digamma_from_half(1.0 - x) - math.pi * _cot_pi(x)
    r = tf.where(x < 0.5, reflected, _digamma_from_half(tf.where(x < 0.5, 1.0 - x, x)))
    pole = tf.logical_and(x <= 0.0, tf.equal(x, tf.floor(x)))
    r = tf.where(pole, tf.fill(tf.shape(x), NAN), r)
    at_zero, at_minus_zero = lax_value("digamma", 0.0), lax_value("digamma", -0.0)
    if np.isnan(at_zero) and np.isnan(at_minus_zero):
        return r
    negative = tf.less(1.0 / x, 0.0)   # -0.0 as 1 / x = -inf: TFLite and TF.js have no signbit
    zero = tf.where(negative, tf.fill(tf.shape(x), tf.constant(at_minus_zero, x.dtype)),
                    tf.fill(tf.shape(x), tf.constant(at_zero, x.dtype)))
    return tf.where(tf.equal(x, 0.0), zero, r)


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


# Primitive: (TF lowering, cases).
SPECIAL_UNARY = {
    lax.erf_p: (erf, _unary_cases(lax.erf, low=-4, high=4, edges=[0.0, 1e-8, -0.3, 0.49, 0.51, 3.0, -6.0, INF, NAN])),
    lax.erfc_p: (erfc, [*_unary_cases(lax.erfc, low=-4, high=4, edges=[0.0, 1e-8, 0.5, 3.0, 9.0, -6.0, INF, -INF, NAN]),
                        case("exact_gelu", lambda x: jax.nn.gelu(x, approximate=False), f32(3, 4, low=-5, high=5))]),
    lax.erf_inv_p: (erf_inv, _unary_cases(lax.erf_inv, low=-0.999, high=0.999,
                                edges=[0.0, 1.0, -1.0, 1.5, 0.9999, -0.99999, 1e-8, 0.5, NAN])),
    lax.lgamma_p: (lgamma, _unary_cases(lax.lgamma, low=0.1, high=20,
                               edges=[1.0, 2.0, 0.5, 1e-8, 0.0, -1.0, -2.5, -0.5, 30.0, 1e6, -100.3, INF, NAN,
                                      3e38, -INF],
                               atol=3e-5)),
    lax.digamma_p: (digamma, _unary_cases(lax.digamma, low=0.1, high=20,
                                edges=[1.0, 2.0, 0.5, 1e-3, 0.0, -0.0, -1.0, -2.5, -0.5, 30.0, 1e6, 1.4616321, NAN],
                                atol=3e-5)),
    lax.bessel_i0e_p: (bessel_i0e, _unary_cases(lax.bessel_i0e, low=-10, high=10,
                                   edges=[0.0, 3.74, 3.76, -20.0, 100.0, INF, NAN])),
    lax.bessel_i1e_p: (bessel_i1e, _unary_cases(lax.bessel_i1e, low=-10, high=10,
                                   edges=[0.0, 3.74, 3.76, -20.0, 100.0, INF, NAN])),
}

_DTYPES = {lax.erf_inv_p: FLOAT32_SERIES, lax.digamma_p: FLOAT32_SERIES, lax.polygamma_p: FLOAT32_SERIES}

# JAX 0.11 gave erfc the transcendental functions' accuracy hint (a tolerance request, see unary).
_WITH_ACCURACY = {lax.erfc_p}

for _prim, (_fn, _cases) in SPECIAL_UNARY.items():
    lowering(_prim, cases=_cases, dtypes=_DTYPES.get(_prim, ALL))(unary(_fn, transcendental=_prim in _WITH_ACCURACY))


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
    x_zero, x_inf = tf.equal(x, 0.0), is_inf(x)
    p = tf.where(x_zero, zero, tf.where(x_inf, one, p))
    q = tf.where(x_zero, one, tf.where(tf.logical_or(x_inf, tf.equal(a, 0.0)), zero, q))
    if not np.isnan(lax_value("igamma", INF, 2.0)):
        # JAX 0.11: P(inf, x) = 0 for every finite x (JAX 0.10, as the formulas above: NaN for
        # x >= 1), and P(inf, inf) is NaN (JAX 0.10: 1, as for any a).
        a_inf = tf.logical_and(is_inf(a), a > 0.0)
        nan = tf.fill(tf.shape(x), tf.constant(NAN, x.dtype))
        p = tf.where(a_inf, tf.where(x_inf, nan, zero), p)
        q = tf.where(a_inf, tf.where(x_inf, nan, one), q)
    domain_error = tf.logical_or(tf.logical_or(x < 0.0, a < 0.0),
                                 tf.logical_or(tf.logical_and(tf.equal(a, 0.0), x_zero),
                                               tf.logical_or(is_nan(a), is_nan(x))))
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
    # The integral term w^(1-s) / (s-1). JAX 0.12.1 takes w^(1-s) as a power of its own: a normal
    # float, the whole value, where w^-s underflows (q = 1e20, s = 2: 1e-20) or w / (s-1) overflows
    # (q = 3e38, s = 1.0001: 9910). JAX 0.10 formed it as w * w^-s: 0 once w^-s is subnormal (XLA
    # flushes it to zero, as TF and TFLite do; TF.js keeps it, so the rule flushes it itself).
    if lax_value("zeta", 2.0, 1e20) > 0.0:
        integral = tf.pow(w, 1.0 - s)
    else:
        normal = tf.abs(w_power) >= float(np.finfo(np.float32).tiny)
        integral = w * tf.where(normal, w_power, tf.zeros_like(w_power))
    tail = integral / (s - 1.0) + w_power * (0.5 + (s / w) * horner)
    # Where the partial sum already holds every digit the tail is skipped: for large s the
    # corrections overflow while w^-s underflows (0 * inf).
    r = tf.where(tf.abs(w_power) < tf.abs(partial) * float(np.finfo(np.float32).eps), partial, partial + tail)
    # JAX's edges: a pole at s = 1 (for any q, NaN too), NaN below and at s = +inf; for q <= 0
    # only integer s are defined, and at the poles q = 0, -1, ..., -inf the value is +inf for even
    # s (0 and negative ones too), NaN otherwise.
    inf, nan = infinity_like(q), tf.fill(tf.shape(q), tf.constant(NAN, q.dtype))
    s_integer = tf.equal(s, tf.floor(s))
    s_even = tf.logical_and(s_integer, tf.equal(s - 2.0 * tf.floor(0.5 * s), 0.0))
    r = tf.where(tf.logical_or(s < 1.0, is_inf(s)), nan, r)
    r = tf.where(tf.logical_and(q <= 0.0, tf.logical_not(s_integer)), nan, r)
    q_pole = tf.logical_and(q <= 0.0, tf.equal(q, tf.floor(q)))
    r = tf.where(q_pole, tf.where(s_even, inf, nan), r)
    q_inf = tf.logical_and(is_inf(q), q > 0.0)
    if lax_value("zeta", 2.0, INF) == 0.0:
        # JAX 0.12.1: zeta(s, +inf) = 0 for every s > 1 (the limit); up to JAX 0.12.0, NaN.
        r = tf.where(tf.logical_and(q_inf, tf.logical_and(s > 1.0, tf.logical_not(is_inf(s)))), tf.zeros_like(r), r)
    else:
        r = tf.where(q_inf, nan, r)
    return tf.where(tf.equal(s, 1.0), inf, r)


def polygamma(n, x):
    # psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 1; n = 0 is digamma. NaN unless n is a
    # natural number. n! as exp(lgamma(n + 1)), as in JAX (it overflows where JAX's does).
    n_odd = tf.equal(n - 2.0 * tf.floor(0.5 * n), 1.0)
    sign = tf.where(n_odd, tf.ones_like(n), -tf.ones_like(n))
    r = sign * exp(lgamma(n + 1.0)) * zeta(n + 1.0, x)
    r = tf.where(tf.equal(n, 0.0), digamma(x), r)
    # polygamma(0, 0), either zero's sign: NaN under JAX 0.10, -inf under 0.12.1; read from JAX's
    # polygamma, not digamma (JAX 0.12.1's lax.digamma(-0.0) is +inf, its polygamma(0, -0.0) -inf).
    nan = tf.fill(tf.shape(r), tf.constant(NAN, r.dtype))
    pole = nan if np.isnan(lax_value("polygamma", 0.0, 0.0)) else -infinity_like(x)
    r = tf.where(tf.logical_and(tf.equal(n, 0.0), tf.equal(x, 0.0)), pole, r)
    natural = tf.logical_and(tf.logical_and(n >= 0.0, tf.equal(n, tf.floor(n))), tf.logical_not(is_inf(n)))
    return tf.where(natural, r, nan)


_IGAMMA_A = np.array([1.0, 1.0, 0.0, -1.0, 2.0, NAN, 1.0, INF, 0.0, 0.0, 0.0, INF, INF, 1e-3, 5.0, 1e-30, 0.5,
                      20.0, 20.0, 3.0, 100.0, 1.0, 0.1, INF, INF], np.float32)
_IGAMMA_X = np.array([0.0, -1.0, 1.0, 1.0, INF, 1.0, NAN, 1.0, 0.5, 2.0, 0.0, 0.5, 2.0, 1e-3, 1e-30, 1.0, 1e10,
                      20.0, 21.0, 1e-6, 90.0, 30.0, 50.0, INF, 1e30], np.float32)
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
                    2.0, 3.0, 1e4, 0.0, -2.0, -1.0, INF, INF, 30.0, 1.0, 0.5, 1.0, 2.0], np.float32)
_ZETA_Q = np.array([1.0, 1.0, 0.0, -1.0, -1.5, INF, 2.0, 1e-3, 1.0, NAN, 1e6, 1.0, 0.5, 0.0, -1e-3, -1.5, 1e-3,
                    -2.0, -INF, -2.5, 2.0, 0.0, -3.0, 0.0, 1.0, 0.5, INF, INF, INF, NAN, 1e20], np.float32)
# Where the tail is the integral alone, w^-s underflowing: 0 under JAX 0.10, the integral from 0.12.1 (zeta).
_ZETA_LARGE_Q_S = np.array([1.0001, 1.01, 1.2, 1.5, 2.0, 2.5, 3.0, 1.0001], np.float32)
_ZETA_LARGE_Q_Q = np.array([3e38, 3.4e38, 1e35, 1e30, 1e25, 1e20, 1e15, 1e10], np.float32)
_POLYGAMMA_N = np.array([0.0, 1.0, 2.0, 3.0, 1.0, 1.0, -1.0, 1.5, 1.0, 2.0, 10.0, 1.0, 4.0, 0.0, 2.0, 5.0, NAN,
                         INF, 0.0, 0.0, 1.0, 3.0, 35.0], np.float32)
_POLYGAMMA_X = np.array([1.0, 0.0, 0.0, -1.0, -1.5, INF, 1.0, 1.0, NAN, 1e-3, 2.0, 1e6, -2.5, -0.5, -1e-3, 30.0,
                         1.0, 1.0, 0.0, -0.0, 1e20, INF, 3.0], np.float32)

# Measured (tests/browser_sweep.py, headless Chromium): their series and reflections run through sin,
# log and division, which WebGPU computes approximately (sin 2e-4 off); the errors grow past 1e-3
# relative (zeta:negative_q_integer_s changed sign). TF.js's cpu, wasm and WebGL match JAX.
_WEBGPU_SPECIAL = tfjs_webgpu_fails("any incomplete gamma, zeta or polygamma",
                                    "1e-3 to 100% off: the GPU's approximate sin, amplified", "dtype")
# Measured (zeta:negative_q_integer_s): a sign flipped on LiteRT.js's WebGPU.
_LITERTJS_WEBGPU_ZETA = webgpu_computes_wrong("any zeta", "a sign flipped for a negative q", "dtype")
for _prim, _fn, _cases in (
        (lax.igamma_p, igamma, _igamma_cases(lax.igamma)),
        (lax.igammac_p, igammac, _igamma_cases(lax.igammac) + [
            # Q far in the tail, computed directly rather than as 1 - P
            case("tail", lax.igammac, f32(12, low=0.5, high=3), f32(12, low=20, high=60))]),
        (lax.zeta_p, zeta, [
            case("f32", lax.zeta, f32(6, 8, low=1.1, high=12), f32(6, 8, low=0.05, high=20)),
            case("edges", lax.zeta, _ZETA_S, _ZETA_Q),
            case("large_q", lax.zeta, _ZETA_LARGE_Q_S, _ZETA_LARGE_Q_Q),
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
    limitations = [_WEBGPU_SPECIAL, *([_LITERTJS_WEBGPU_ZETA] if _prim is lax.zeta_p else [])]
    lowering(_prim, cases=_cases, dtypes=_DTYPES.get(_prim, ALL), limitations=limitations)(binary(_fn))
