"""Elementwise primitives JAX 0.12.1 added, IEEE 754-2019's recommended operations: sinpi, cospi,
tanpi, asinpi, acospi, atanpi, atan2pi, exp2m1, log2p1, fma (fusedMultiplyAdd), and fmuladd.

JAX computes each for float32 and float64 with its own reductions and polynomials
(``jax/_src/lax/trig.py``, ``exp_log.py``), within about an ulp, and a narrower float in float32,
rounded back. So do these rules, from exact reductions, series and TF's atan2, pow and log: within
5 ulps of JAX's float32 results (measured on 100,000 to 400,000 inputs each, of every magnitude, in
TF, TFLite and TF.js's cpu and wasm backends), bit for bit on the values JAX gives exactly (0,
+-1/4, +-1/2, +-1, +-inf: the ``exact`` cases, atol 0, in every runtime); fma and fmuladd are
exact everywhere. The rules are registered by name under every JAX; their cases run only where the
primitive exists (JAX 0.12.0 and older report them skipped, with the reason).

- ``sinpi``, ``cospi``, ``tanpi``: JAX reduces |x| modulo 2 exactly, to a quarter turn q and a
  remainder r in [-1/4, 1/4] (|x| = q/2 + r, plus an even integer), so an integer, a half-integer
  and a float too large to hold a fraction (|x| >= 2^24 in float32, an even integer) land on r = 0
  exactly: sinpi(n) = 0, cospi(n + 1/2) = 0, tanpi(n) = 0 and tanpi(n + 1/2) = +-inf, for 1e7
  and 3e38 as for 1. The rules reduce the same way (round(2|x|) and |x| - round(2|x|)/2 are exact),
  take sin(pi r) and cos(pi r) by their Taylor series to the dtype's last bit (pi r rounds once,
  |pi r| <= pi/4), not by the runtime's Sin: TF.js's wasm Sin is good to 1e-7 absolute only,
  too coarse where tanpi divides by it. Then they pick by q, with JAX's signs: sinpi and tanpi
  odd, cospi even, tanpi(n + 1/2) = +inf for even n and -inf for odd n, tanpi(n +- 1/4) = +-1
  exactly; inf and NaN give NaN.
- ``asinpi``, ``acospi``, ``atanpi``, ``atan2pi``: asin, acos, atan and atan2 (JAX's operand
  order: atan2pi(x, y) is the angle of the point (y, x); atanpi(x) is atan2pi(x, 1)) divided by pi
  in the same dtype. atan2 gives pi/2 and pi rounded to the dtype, which divided by the rounded pi
  give 1/2 and 1 exactly (halving does not change a rounding), and the signed zeros' and
  infinities' quadrants (atan2pi(+-0, -0) = +-1, atan2pi(+-0, +0) = +-0); +-1/2 on the vertical
  (TF.js's wasm atan2(inf, 1) misses pi/2 by an ulp) and +-1/4, +-3/4 on the diagonals |x| = |y|
  are written out, exact as JAX's. |x| > 1 gives NaN (asinpi, acospi).
- ``exp2m1``: 2^x - 1 without cancellation. JAX: a reduction to x - round(x) and a polynomial.
  Here, for |x| < 1, the series of e^(x ln 2) - 1 to the dtype's last bit; beyond, pow(2, x) - 1,
  at least 1/2 in magnitude there, so the subtraction loses at most a bit. -inf: -1, +inf and
  x >= 128 (float32): inf. (Not expm1(x ln 2): its Kahan form divides by a log near 0, which
  TFLite's kernels give to about 1e-7 absolute only.)
- ``log2p1``: log2(1 + x) without losing x near 0: for |x| < 1/2 the series of
  (2 / ln 2) atanh(x / (2 + x)), beyond it log1p(x) (Goldberg's correction) times 1/ln 2. -1: -inf,
  below: NaN, +inf: inf.
- ``fma``: a * b + c with one rounding, as stablehlo.fma computes it (JAX's CPU refuses float16 and
  bfloat16 fma, "Fma is not supported"; so does this rule: float32 and float64 only). TFLite and
  TF.js have no fused multiply-add, and float64 (TF only) would not help: rounding a*b + c to
  float64 and then to float32 rounds twice. The rule computes the exact result in the operand's own
  float arithmetic, each step an error-free transformation (no rounding is lost):
  1. each operand is scaled by a power of two into [2^-16, 2^16) (three exact steps of 2^64,
     2^32, 2^16), so no product or error term below overflows or becomes subnormal;
  2. c is rescaled to the product's scale; where it lies far below the product's last bit it only
     breaks a tie, and stands in as a tiny value of its sign; where the product lies far below
     c's half-ulp, the result is c;
  3. Dekker's product (Veltkamp's split by 2^12 + 1) gives a*b = p + pe exactly; Knuth's two-sum
     c + p = th + tl, then tl + pe = s + e, then th + s = r + d, each exactly; r is the rounded
     result unless th + s was a tie (d half r's spacing: r + 2d is r's neighbour), where the sign of
     the error e left below decides it (away from r when e has d's sign);
  4. r is scaled back by the operands' powers of two (in two exact steps; overflow gives inf,
     as fma's own rounding does). An infinite or NaN c with finite a and b is the result; an
     infinite or NaN a or b takes a * b + c directly (IEEE's special values are the same).
  Dekker's sum is written as differences, which grappler's arithmetic optimizer leaves in order (it
  regroups a chain of adds into an AddN). About 170 TF ops. Checked bit for bit against JAX's fma:
  the cases ``single_rounding``, ``special`` and ``scaled`` (atol 0) in every runtime, and 200,000
  operands of every magnitude, most built to tie or to cancel, in TF, TFLite (both writers)
  and TF.js (cpu, wasm; where JAX flushes a subnormal result, TF.js keeps it, as everywhere).
- ``fmuladd``: a * b + c where JAX lets the implementation choose: fused (one rounding) or a
  multiply then an add (two roundings, JAX on TPU). JAX on CPU fuses float32 and float64, and
  computes a narrower float as float32's fma, rounded. The rule computes what JAX's CPU does, bit for
  bit, on every input class (a cancelling c, a product beyond the dtype that c brings back): fma's
  construction for float32 and float64, and for float16 and bfloat16 a float32 multiply and add,
  rounded back: the product of two halves is exact in float32, so float32's fma of them is that
  add's one rounding. (The unfused a * b + c, two TFLite ops, would be JAX's TPU result instead.)
"""
from __future__ import annotations

import math

import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32, newer_primitive
from lowering_rules.core.dtype_support import dtypes
from lowering_rules.core.float_math import acos, asin, exp2, horner, log1p
from lowering_rules.core.helpers import HALF_FLOATS, as_out, infinity_like, is_inf, wide
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.elementwise import unary

NAN, INF = float("nan"), float("inf")


def _cases(name, *cases_):
    return newer_primitive(name, "0.12.1", *cases_)


def _lax(name):
    """``lax.<name>``, looked up when a case runs (JAX before 0.12.1 has none of these)."""
    return lambda *args: getattr(lax, name)(*args)


def _finfo(x):
    return np.finfo(x.dtype.as_numpy_dtype)


def _nan_like(x):
    return tf.fill(tf.shape(x), tf.constant(NAN, x.dtype))


def _broadcast(ctx, *operands):
    """Operands of the result's shape: the primitives take broadcast-compatible operands of one rank."""
    out = tuple(ctx.aval_out.shape)
    return [x if tuple(aval.shape) == out else tf.broadcast_to(x, ctx.out_shape())
            for x, aval in zip(operands, ctx.avals_in)]


def _unary_cases(name, low, high, edges, exact=()):
    """``exact``: inputs whose results JAX gives exactly (0, +-1/2, +-inf, ...): matched bit for bit."""
    fn = _lax(name)
    return _cases(
        name,
        case("f32", fn, f32(3, 4, low=low, high=high)),
        case("edges", fn, np.array(edges, np.float32)),
        *([case("exact", fn, np.array(exact, np.float32), atol=0.0, rtol=0.0)] if exact else []),
        case("f16", fn, f16(2, 3, low=low, high=high)),
        case("poly", fn, f32(3, 4, low=low, high=high), polymorphic_shapes=("(b, ...)",)),
    )


# ----------------------------------------------------------------------------- sinpi, cospi, tanpi

def _half_turns(x):
    """(r, q, finite): |x| = q/2 + r + an even integer, q in {0, 1, 2, 3} (a float), |r| <= 1/4,
    every step exact. Finite floats too large to hold a fraction are even integers: r = q = 0."""
    integral = 2.0 ** (_finfo(x).nmant + 1)
    a = tf.abs(x)
    finite = tf.math.is_finite(x)
    a = tf.where(a < integral, a, tf.zeros_like(a))  # NaN too (its result is NaN below)
    k = tf.round(2.0 * a)  # half to even in every runtime; 2a is exact
    r = a - 0.5 * k
    q = k - 4.0 * tf.floor(0.25 * k)
    return r, q, finite


def _sin_cos_pi(r):
    """sin(pi r) and cos(pi r) for |r| <= 1/4 by their Taylor series in t = pi r, to the term below
    the dtype's last bit (|t| <= pi/4: float32 to t^9 and t^10, float64 to t^17 and t^18): runtimes'
    Sin kernels differ (TF.js's wasm Sin of 1e-7 is off by a factor 3, a pole of tanpi's)."""
    t = tf.constant(math.pi, r.dtype) * r
    u = t * t
    terms = 5 if r.dtype == tf.float32 else 9
    s = tf.zeros_like(u)
    for n in range(terms - 1, 0, -1):  # sin t = t + t u (-1/3! + u (1/5! - ...))
        s = (-1) ** n / math.factorial(2 * n + 1) + u * s
    c = tf.zeros_like(u)
    for n in range(terms, 0, -1):  # cos t = 1 + u (-1/2! + u (1/4! - ...))
        c = (-1) ** n / math.factorial(2 * n) + u * c
    return t + t * (u * s), 1.0 + u * c


def _odd(q):
    return tf.logical_or(tf.equal(q, 1.0), tf.equal(q, 3.0))


def sinpi(x):
    r, q, finite = _half_turns(x)
    s, c = _sin_cos_pi(r)
    v = tf.where(_odd(q), c, s)  # q: 0 -> s, 1 -> c, 2 -> -s, 3 -> -c
    v = tf.where(q >= 2.0, -v, v)
    v = tf.where(x < 0, -v, v)
    return tf.where(finite, v, _nan_like(x))


def cospi(x):
    r, q, finite = _half_turns(x)
    s, c = _sin_cos_pi(r)
    v = tf.where(_odd(q), s, c)  # q: 0 -> c, 1 -> -s, 2 -> -c, 3 -> s
    v = tf.where(tf.logical_or(tf.equal(q, 1.0), tf.equal(q, 2.0)), -v, v)
    return tf.where(finite, v, _nan_like(x))


def tanpi(x):
    r, q, finite = _half_turns(x)
    s, c = _sin_cos_pi(r)
    # Odd q: tan(pi (q/2 + r)) = -cot(pi r). At r = 0 that is -1/+0 = -inf, JAX's value for q = 3
    # (an odd integer + 1/2); for q = 1 JAX gives +inf.
    v = tf.where(_odd(q), -c / s, s / c)
    # r = +-1/4: +-1 exactly, as JAX gives (sin and cos of pi/4 need not round alike).
    v = tf.where(tf.equal(tf.abs(r), 0.25), tf.where(tf.equal(_odd(q), r > 0), -tf.ones_like(v), tf.ones_like(v)), v)
    v = tf.where(tf.logical_and(tf.equal(r, 0.0), tf.equal(q, 1.0)), infinity_like(x), v)
    v = tf.where(x < 0, -v, v)
    return tf.where(finite, v, _nan_like(x))


_PERIODIC_EDGES = [0.0, -0.0, 0.25, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, 2.5, 3.0, -3.5, 1 / 3, 0.75, 1e-30,
                   0.49999997, 1.0000001, 4194304.5, 4194305.5, -4194303.5, 8388609.0, 8388607.5, 16777216.0,
                   16777218.0, 1e7, -1e7, 1e7 + 2.0, 3e38, -3e38, 1e20, INF, -INF, NAN]

# Integers and half-integers (0, +-1, +-inf), at every magnitude; tanpi's quarters too (+-1).
_PERIODIC_EXACT = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.0, 2.5, -3.5, 7.0, 4194304.5, -4194305.5,
                   8388609.0, 8388607.5, 16777216.0, 1e7, -1e7 - 1, 3e38, -3e38, 1e20]
_QUARTERS = [0.25, -0.25, 0.75, -0.75, 1.25, 2.75, -3.25, 4194303.75]

for _name, _fn in (("sinpi", sinpi), ("cospi", cospi), ("tanpi", tanpi)):
    _exact = _PERIODIC_EXACT + (_QUARTERS if _name == "tanpi" else [])
    lowering(_name, cases=_unary_cases(_name, -4.0, 4.0, _PERIODIC_EDGES, _exact) + _cases(
        _name, case("large", _lax(_name), f32(3, 4, low=-1e6, high=1e6))))(unary(_fn))


# ----------------------------------------------------------------------------- asinpi, acospi, atanpi, atan2pi

def _over_pi(angle):
    return angle / tf.constant(math.pi, angle.dtype)


def atan2pi(x, y):
    r = _over_pi(tf.atan2(x, y))
    # The vertical (an infinite x against a finite y, a nonzero x against a zero y): +-1/2, which
    # TF.js's wasm atan2(inf, 1) misses by an ulp. The diagonals |x| = |y| (both infinite too):
    # +-1/4 or +-3/4. Exactly, as JAX gives them.
    ax, ay = tf.abs(x), tf.abs(y)
    vertical = tf.logical_or(tf.logical_and(is_inf(x), tf.math.is_finite(y)),
                             tf.logical_and(tf.equal(y, 0.0), ax > 0.0))
    diagonal = tf.logical_and(tf.equal(ax, ay), ax > 0.0)
    const = lambda v: tf.constant(v, r.dtype)  # noqa: E731  (scalars: where broadcasts them)
    exact = tf.where(vertical, const(0.5), tf.where(y < 0, const(0.75), const(0.25)))
    return tf.where(tf.logical_or(vertical, diagonal), tf.where(x < 0, -exact, exact), r)


def asinpi(x):
    return _over_pi(asin(x))


def acospi(x):
    return _over_pi(acos(x))


def atanpi(x):
    return atan2pi(x, tf.ones_like(x))


_ARC_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.70710677, 0.99999994, -0.99999994, 1e-30, -1e-20, 1.0000001,
              1.5, -2.0, 3e38, INF, -INF, NAN]
for _name, _fn in (("asinpi", asinpi), ("acospi", acospi)):
    lowering(_name, cases=_unary_cases(_name, -1.0, 1.0, _ARC_EDGES, [0.0, -0.0, 1.0, -1.0, 2.0, NAN]))(unary(_fn))

lowering("atanpi", cases=_unary_cases(
    "atanpi", -10.0, 10.0, [0.0, -0.0, 1.0, -1.0, 0.41421357, 2.4142137, 1e-30, -1e-20, 1e7, 1e30, -3e38, INF, -INF,
                            NAN], [0.0, -0.0, INF, -INF, NAN]))(
    unary(atanpi))

# Every quadrant of the signed zeros and infinities, a finite value against each, and NaNs.
_QUADRANT = [0.0, -0.0, 1.0, -1.0, INF, -INF]
_ATAN2PI_X = np.array([x for x in _QUADRANT for _ in _QUADRANT] + [NAN, 1.0, NAN, 1e-30, 3e38, 1e30, -1e-30],
                      np.float32)
_ATAN2PI_Y = np.array([y for _ in _QUADRANT for y in _QUADRANT] + [1.0, NAN, NAN, 3e38, 1e-30, -1e-30, -1e30],
                      np.float32)


@lowering("atan2pi", cases=_cases(
    "atan2pi",
    case("f32", _lax("atan2pi"), f32(3, 4), f32(3, 4)),
    case("edges", _lax("atan2pi"), _ATAN2PI_X, _ATAN2PI_Y),
    # The quadrants' exact angles: 0, +-1/2, +-1, and +-1/4, +-3/4 on the diagonals.
    case("exact", _lax("atan2pi"), _ATAN2PI_X[:36], _ATAN2PI_Y[:36], atol=0.0, rtol=0.0),
    case("diagonals", _lax("atan2pi"), np.array([1.0, -2.0, 3e38, -1e-30, 5.0], np.float32),
         np.array([1.0, -2.0, -3e38, 1e-30, -5.0], np.float32), atol=0.0, rtol=0.0),
    case("broadcast_rows", _lax("atan2pi"), f32(4, 5), f32(1, 5)),
    case("f16", _lax("atan2pi"), f16(2, 3), f16(2, 3)),
    case("poly", _lax("atan2pi"), f32(3, 4), f32(3, 4), polymorphic_shapes=("(b, 4)", "(b, 4)")),
))
def lower_atan2pi(ctx, x, y):
    x, y = _broadcast(ctx, wide(x), wide(y))
    return as_out(ctx, atan2pi(x, y))


# ----------------------------------------------------------------------------- exp2m1, log2p1

def exp2m1(x):
    # |x| < 1: the series sum (x ln 2)^n / n!, to the term below the dtype's last bit (float32 to
    # x^11, float64 to x^17): expm1's Kahan form divides by a log near 0, which TFLite's kernels
    # (XNNPACK's) give to about 1e-7 absolute only (2^-1.7e-7 - 1 came out 2x off).
    terms = 11 if x.dtype == tf.float32 else 17
    near = x * horner(x, [math.log(2.0) ** n / math.factorial(n) for n in range(1, terms + 1)])
    return tf.where(tf.abs(x) < 1.0, near, exp2(x) - 1.0)


def log2p1(x):
    # |x| < 1/2: log2(1 + x) = (2 / ln 2) atanh(z), z = x / (2 + x), |z| <= 1/3: the series
    # z (1 + z^2/3 + z^4/5 + ...) to the term below the last bit (float32 to z^17, float64 to z^35),
    # for log1p's log near 1, which TFLite's kernels give to about 1e-7 absolute only.
    terms = 9 if x.dtype == tf.float32 else 18
    z = x / (2.0 + x)
    near = z * horner(z * z, [2.0 / ((2 * k + 1) * math.log(2.0)) for k in range(terms)])
    return tf.where(tf.abs(x) < 0.5, near, log1p(x) * tf.constant(1.0 / math.log(2.0), x.dtype))


lowering("exp2m1", cases=_unary_cases(
    "exp2m1", -5.0, 5.0, [0.0, -0.0, 1e-30, 1e-7, -1e-7, 0.25, 0.49999997, 0.5, -0.5, 1.0, -1.0, 10.0, -24.0, -30.0,
                          -150.0, 100.5, 127.0, 127.99, 128.0, 3e38, INF, -INF, NAN],
    [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, 10.0, 127.0, -150.0, 128.0, INF, -INF, NAN]))(
    unary(exp2m1))
lowering("log2p1", cases=_unary_cases(
    "log2p1", -0.9, 10.0, [0.0, -0.0, 1e-30, 1e-7, -1e-7, -0.29289323, 0.41421357, -0.5, 1.0, 3.0, -1.0, -2.0, 1e10,
                           3e38, -0.99999994, INF, -INF, NAN], [0.0, -0.0, 1.0, 3.0, -0.5, -1.0, -2.0, INF, NAN]))(
    unary(log2p1))


# ----------------------------------------------------------------------------- fma

def _scaled(x, tiers):
    """(x 2^-k, k): x scaled by whole tiers of powers of two into [2^-tiers[-1], 2^tiers[-1]), exactly
    (0 stays 0, with k = -sum(tiers)). k is a float, a multiple of the last tier."""
    const = lambda v: tf.constant(v, x.dtype)  # noqa: E731  (scalars: where broadcasts them)
    k = tf.zeros_like(x)
    for t in tiers:
        a = tf.abs(x)
        big, small = a >= 2.0 ** t, a < 2.0 ** -t
        x = x * tf.where(big, const(2.0 ** -t), tf.where(small, const(2.0 ** t), const(1.0)))
        k = k + tf.where(big, const(float(t)), tf.where(small, const(float(-t)), const(0.0)))
    return x, k


def _two_sum(a, b):
    """(s, e): s = a + b rounded, s + e = a + b exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(x, factor):
    """Veltkamp's split: x = hi + lo exactly, each with half x's significand bits."""
    t = factor * x
    hi = t - (t - x)
    return hi, x - hi


def fma(a, b, c):
    info = np.finfo(a.dtype.as_numpy_dtype)
    bits, emax = info.nmant + 1, info.maxexp  # float32: 24, 128; float64: 53, 1024
    tiers = (emax // 2, emax // 4, emax // 8)
    unit = tiers[-1]  # operands land in [2^-unit, 2^unit); every k is a multiple of unit
    as_x = lambda v: tf.constant(v, a.dtype)  # noqa: E731
    # 2^(unit j) for j in -7..7: every scale below, gathered by j (exact in every runtime).
    powers = tf.constant(np.array([2.0 ** (unit * j) for j in range(-7, 8)], a.dtype.as_numpy_dtype))

    def power(k):
        return tf.gather(powers, tf.cast(k * (1.0 / unit), tf.int32) + 7)

    a2, ka = _scaled(a, tiers)
    b2, kb = _scaled(b, tiers)
    c2, kc = _scaled(c, tiers)
    # c's place against the product's: d = log2 of the scale c2 must take to join a2 * b2 (in
    # [2^-2 unit, 2^2 unit)). d <= -5 unit: the product is below 2^-2 unit times c, far below its half
    # ulp, and the result is c. d >= 6 unit: c is below 2^-3 unit times the product, below the exact
    # product's last bit (of 2 bits significant ones), and only breaks a tie: a tiny value of its sign
    # stands in (2^-(2 unit + 2 bits + 8), below every product's last bit). Between, c2 2^-d is normal.
    d = (ka + kb) - kc
    sticky = tf.sign(c2) * as_x(2.0 ** -(2 * unit + 2 * bits + 8))
    c3 = tf.where(d >= 6 * unit, sticky, c2 * power(-tf.clip_by_value(d, -4.0 * unit, 5.0 * unit)))
    factor = as_x(2.0 ** ((bits + 1) // 2) + 1.0)
    p = a2 * b2
    ah, al = _split(a2, factor)
    bh, bl = _split(b2, factor)
    # Dekker: a2 b2 = p + pe exactly, each partial sum exact in this order. Written as differences
    # (x - y (-z) is x + y z, bit for bit): grappler's arithmetic optimizer regroups a chain of adds
    # into an AddN, whose order loses the exactness, and leaves subtractions alone.
    nbh, nbl = -bh, -bl
    pe = (((ah * bh - p) - ah * nbl) - al * nbh) - al * nbl
    th, tl = _two_sum(c3, p)
    s, e = _two_sum(tl, pe)
    r, rd = _two_sum(th, s)
    # th + s = r + rd, and e lies below every bit of s: r is the rounding of the whole sum unless
    # th + s was a tie, |rd| half the spacing to r's neighbour r + 2 rd, which e then decides.
    tie = tf.logical_and(tf.not_equal(rd, 0.0), tf.equal((r + 2.0 * rd) - r, 2.0 * rd))
    away = tf.logical_and(tie, tf.logical_and(tf.not_equal(e, 0.0), tf.equal(e > 0, rd > 0)))
    r = tf.where(away, r + 2.0 * rd, r)
    k = ka + kb
    k1 = tf.clip_by_value(k, -7.0 * unit, 7.0 * unit)  # two steps of one sign: never out of range
    r = (r * power(k1)) * power(k - k1)
    r = tf.where(d <= -5 * unit, c, r)
    # Special values: a finite product (even one beyond the dtype) leaves an infinite or NaN c as it
    # is; an infinite or NaN factor gives a * b + c (inf * 0 and inf - inf: NaN).
    finite_ab = tf.logical_and(tf.math.is_finite(a), tf.math.is_finite(b))
    special = tf.where(finite_ab, c, a * b + c)
    return tf.where(tf.logical_and(finite_ab, tf.math.is_finite(c)), r, special)


_ULP = 2.0 ** -23
_H = 2.0 ** -12
# Operands where one rounding differs from two: c cancels a * b rounded (the product's rounding error
# is the result), ties of a * b broken by a c below its last bit, products beyond float32 that c
# brings back, c far above or below the product, and the special values.
_FMA = np.array([
    (1 + _H, 1 + _H, -(1 + 2 * _H)), (1 + _H, 1 + _H, 1e-30), (1 + _H, 1 + _H, -1e-30), (1 + _H, 1 + _H, 0.0),
    (1 + _H, 1 + _H, 1e-35), (1 + _H, 1 - _H, 0.0), (1 + _ULP, 1 - _ULP, -1.0), (1 + 3 * _ULP, 1 - 3 * _ULP, -1.0),
    (0.1, 0.1, -0.01), (3.0, 1 / 3, -1.0), (-7.0, 1 / 7, 1.0), (1 - 2 ** -24, 1 - 2 ** -24, -1.0),
    (16777215.0, 16777215.0, -2.8147495e14), (1.5, 1 + _ULP, -1.5), (3e38, 2.0, -3e38), (-3e38, 2.0, 3e38),
    (3e38, 3e38, -1e38), (1e20, 1e20, -1e38), (1e19, 1e19, -1e38), (3e-20, 4e-19, 1.5e-37), (1e30, 1e8, -1e38),
    (1.0, 1.0, 1e-8), (2.0, 1e-30, 1.0), (1e-30, 1e-30, -2e-38), (1e-30, 1e30, -1.0), (3.0, 5.0, 1e30),
    (3.0, 5.0, -1e-30), (0.0, 5.0, 3.0), (0.0, 0.0, 0.0), (-2.0, 0.5, 1.0)], np.float32).T
_FMA_SPECIAL = np.array([
    (INF, 0.0, 1.0), (INF, 1.0, -INF), (1.0, 1.0, INF), (NAN, 1.0, 1.0), (1.0, NAN, 1.0), (1.0, 1.0, NAN),
    (3e38, 3e38, 0.0), (-3e38, 3e38, 1.0), (INF, -2.0, 3.0), (0.0, 1.0, -INF)], np.float32).T
# Products at every scale the operands are brought to, each a tie (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24
# that c, one product's rounding away, turns into its last bit: 2^(i + j - 24).
_SCALES = np.float32(2.0) ** np.arange(-48, 49, 12, dtype=np.float32)
_SCALED = (_SCALES.reshape(-1, 1) * np.float32(1 + _H), _SCALES[::-1].reshape(1, -1) * np.float32(1 + _H),
           -(_SCALES.reshape(-1, 1) * _SCALES[::-1].reshape(1, -1)) * np.float32(1 + 2 * _H))
_FMA_CASES = (
    ("single_rounding", _FMA), ("special", _FMA_SPECIAL))


def _fused(ctx, a, b, c):
    a, b, c = _broadcast(ctx, a, b, c)
    return as_out(ctx, fma(a, b, c))


@lowering("fma", dtypes=dtypes({"float32", "float64"}, missing=(
    "fma's single rounding is computed in float32 and float64 only (JAX's CPU refuses float16 and "
    "bfloat16 fma too: \"Fma is not supported for element type\")")), cases=_cases(
    "fma",
    case("f32", _lax("fma"), f32(3, 4), f32(3, 4), f32(3, 4)),
    *[case(name, _lax("fma"), *args, atol=0.0, rtol=0.0) for name, args in _FMA_CASES],
    case("scaled", _lax("fma"), *_SCALED, atol=0.0, rtol=0.0),
    case("broadcast", _lax("fma"), f32(3, 4), f32(1, 4), f32(3, 1)),
    case("poly", _lax("fma"), f32(3, 4), f32(3, 4), f32(3, 4), polymorphic_shapes=("(b, 4)", "(b, 4)", "(b, 4)")),
))
def lower_fma(ctx, a, b, c):
    return _fused(ctx, a, b, c)


# ----------------------------------------------------------------------------- fmuladd

@lowering("fmuladd", cases=_cases(
    "fmuladd",
    case("f32", _lax("fmuladd"), f32(3, 4), f32(3, 4), f32(3, 4)),
    *[case(name, _lax("fmuladd"), *args, atol=0.0, rtol=0.0) for name, args in _FMA_CASES],
    case("f16", _lax("fmuladd"), f16(4, 5), f16(4, 5), f16(4, 5), atol=0.0, rtol=0.0),
    # What a float16 product would lose and JAX's float32 fma keeps: the residual 2^-12 of
    # (1 + 2^-6)^2 - (1 + 2^-5), 65504 * 2 beyond float16.
    case("f16_edges", _lax("fmuladd"), np.array([1 + 2 ** -6, 1 + 2 ** -6, 65504.0, 0.1], np.float16),
         np.array([1 + 2 ** -6, 1 - 2 ** -6, 2.0, 0.1], np.float16),
         np.array([-(1 + 2 ** -5), -1.0, -65504.0, -0.01], np.float16), atol=0.0, rtol=0.0),
    case("broadcast", _lax("fmuladd"), f32(3, 4), f32(1, 4), f32(3, 1)),
    case("poly", _lax("fmuladd"), f32(3, 4), f32(3, 4), f32(3, 4), polymorphic_shapes=("(b, 4)", "(b, 4)", "(b, 4)")),
))
def lower_fmuladd(ctx, a, b, c):
    if a.dtype in HALF_FLOATS:
        # JAX (CPU) computes fma in float32 and rounds: the product of two halves is exact in float32,
        # so that fma is float32's sum of it and c, rounded once, as here.
        return as_out(ctx, wide(a) * wide(b) + wide(c))
    return _fused(ctx, a, b, c)
