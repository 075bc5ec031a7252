"""``jnp.frexp`` and ``jnp.ldexp`` as JAX 0.12.1 made them: hijax primitives (classes ``Frexp`` and
``Ldexp``, bound as ``call_hi_primitive``), whose expansions read and write the float's bit pattern
(``bitcast_convert_type`` to and from unsigned words), which noxla cannot lower (TF.js has no
Bitcast). ``calls.lower_call_hi_primitive`` sends them here (``hi_primitive_rule``); these rules
compute the same values with arithmetic only.

JAX 0.12.1's semantics, for a float16, bfloat16 or float32 ``x`` (flush-to-zero throughout):

- A subnormal input is first flushed to the zero of its sign; +-0, +-inf and NaN are then special.
- ``frexp(x) -> (m, e)``: for a normal x, ``x = m 2^e`` with ``0.5 <= |m| < 1`` (m keeps x's sign and
  significand; e = floor(log2 |x|) + 1, int32). For +-0 (and flushed subnormals) m is the zero of x's
  sign, for +-inf and NaN m is x itself; e is 0 for all of these.
- ``ldexp(x, n)``: the exponent n (any integer dtype; ``jnp.ldexp`` turns a bool into int32) is first
  clamped to +-2^(exponent bits + 1) (+-512 for float32 and bfloat16, +-64 for float16), which
  already sends every normal x out of range, so no integer wraps. For a normal x the result is
  x 2^n exactly (same significand) while it is normal; when x 2^n falls below the smallest normal it
  is the zero of x's sign (no subnormal result, no rounding), and when it reaches 2^(max exponent + 1)
  it is the infinity of x's sign. +-0 (and flushed subnormals) give the zero of x's sign; +-inf and
  NaN are returned as they are.

Both rules compute in float32 (exact for the half floats: every value involved is one of theirs).
The exponent comes from ``nextafter._exponent`` (the log's floor, corrected against exact powers of
two) and every scaling multiplies by powers of two gathered from a float32 table
(``nextafter._pow2``), each factor a normal float32 and each product normal, so every step is exact in
every runtime, including those that flush subnormal operands (TF and TFLite on CPU). A NaN comes out
as a NaN (its payload is the runtime's).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lowering_rules.core.cases import case, f32, i32
from lowering_rules.core.helpers import wide
from lowering_rules.core.jax_compat import FREXP_HI_PRIMITIVE, FREXP_LDEXP_ARE_HIJAX, LDEXP_HI_PRIMITIVE
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.nextafter import _exponent, _pow2

# Any bound of at least (max exponent - min exponent + 1) gives JAX's results (every normal x then
# over- or underflows); this one does for every float format JAX's ldexp takes, and keeps e + n small.
_SHIFT_BOUND = 1024


def _normal_range(dtype):
    """(smallest normal exponent, largest exponent, largest finite) of a float dtype."""
    info = np.finfo(dtype)
    return int(info.minexp), int(info.maxexp) - 1, float(info.max)


def _times_pow2(x, k):
    """x 2^k for int32 k in [-252, 254], exact where x and x 2^k are normal float32: two factors,
    2^floor(k/2) and 2^ceil(k/2), each a normal float32 (a single 2^k may be subnormal, which TF
    and TFLite on CPU flush to zero), of k's sign, so the product in between is normal too."""
    half = tf.math.floordiv(k, 2)
    return x * _pow2(half) * _pow2(k - half)


def _decompose(x, dtype):
    """(x in float32, whether x is a normal number of ``dtype``, floor(log2 |x|) where it is)."""
    min_exponent, _, largest = _normal_range(dtype)
    x = wide(x)
    a = tf.abs(x)
    normal = tf.logical_and(a >= 2.0 ** min_exponent, a <= largest)   # false at NaN and +-inf
    return x, normal, _exponent(tf.where(normal, a, tf.ones_like(a)), min_exponent)


def _flushed_or_kept(x, dtype):
    """JAX's result for a non-normal x: the zero of x's sign below the smallest normal (a subnormal
    is flushed; x 0 keeps the sign where the runtime flushes subnormal operands too), x itself at
    +-inf and NaN."""
    min_exponent, _, _ = _normal_range(dtype)
    return tf.where(tf.abs(x) < 2.0 ** min_exponent, x * 0.0, x)


def lower_frexp(ctx, x):
    dtype = ctx.avals_in[0].dtype
    x, normal, e = _decompose(x, dtype)
    # x 2^-(e + 1) has x's sign and significand and a magnitude in [0.5, 1): k = -(e + 1) lies in
    # [-128, 125] for float32, and x and the result are normal.
    mantissa = tf.where(normal, _times_pow2(x, -1 - e), _flushed_or_kept(x, dtype))
    exponent = tf.where(normal, e + 1, tf.zeros_like(e))
    return [tf.cast(mantissa, ctx.out_dtype), exponent]


def _shift(n, dtype):
    """The exponent operand as int32, clamped to [-_SHIFT_BOUND, _SHIFT_BOUND] (JAX clamps it to a
    smaller bound past which every result is already an infinity or a zero: the same results)."""
    dtype = np.dtype(dtype)
    if dtype.itemsize == 8:   # 64-bit integers (jax_enable_x64): clamp before narrowing
        n = tf.clip_by_value(n, tf.constant(-_SHIFT_BOUND, n.dtype), tf.constant(_SHIFT_BOUND, n.dtype))
    n = tf.cast(n, tf.int32)
    if dtype == np.uint32:
        # A uint32 from 2^31 up has a negative int32 carrier (the bits, as TF.js carries it; a cast
        # of tf.uint32 wraps the same way): it is beyond the bound.
        n = tf.where(n < 0, tf.fill(tf.shape(n), _SHIFT_BOUND), n)
    return tf.clip_by_value(n, -_SHIFT_BOUND, _SHIFT_BOUND)


def lower_ldexp(ctx, x, n):
    dtype = ctx.avals_in[0].dtype
    min_exponent, max_exponent, _ = _normal_range(dtype)
    x, normal, e = _decompose(x, dtype)
    target = e + _shift(n, ctx.avals_in[1].dtype)   # floor(log2 |x 2^n|) for a normal x
    # x 2^-e in [1, 2) (k = -e in [-127, 126]), then times 2^target, a normal float32 whenever the
    # result is in range: each product exact. Out of range, the target is clamped (harmless, as
    # the result is replaced).
    fraction = _times_pow2(x, -e)
    scaled = fraction * _pow2(tf.clip_by_value(target, min_exponent, max_exponent))
    overflowed = fraction * ctx.runtime_infinity()   # the infinity of x's sign
    underflowed = x * 0.0   # the zero of x's sign (no subnormal result)
    out_of_range = tf.where(target > max_exponent, overflowed, underflowed)
    in_range = tf.logical_and(target >= min_exponent, target <= max_exponent)
    result = tf.where(normal, tf.where(in_range, scaled, out_of_range), _flushed_or_kept(x, dtype))
    return [tf.cast(result, ctx.out_dtype)]


# The rules by the hi primitive's class (the classes JAX has: none before 0.12.1).
_RULES = {cls: rule for cls, rule in ((FREXP_HI_PRIMITIVE, lower_frexp), (LDEXP_HI_PRIMITIVE, lower_ldexp))
          if cls is not None}
_FLOATS = (np.dtype(np.float16), np.dtype(jnp.bfloat16), np.dtype(np.float32))


def hi_primitive_rule(prim):
    """The rule of its own for a ``call_hi_primitive``'s primitive ``prim``, or None where it lowers as
    its expansion: JAX's Frexp and Ldexp on float16, bfloat16 and float32 values (a float64 one, under
    jax_enable_x64, keeps its expansion, whose 64-bit bitcasts the check rejects)."""
    rule = _RULES.get(type(prim))
    return rule if rule is not None and np.dtype(prim.in_avals[0].dtype) in _FLOATS else None


# ----------------------------------------------------------------------------- cases

_SKIP = "" if FREXP_LDEXP_ARE_HIJAX else "JAX before 0.12.1 traces frexp and ldexp to lax primitives"
_NAN, _INF = float("nan"), float("inf")
_F32_MAX, _F32_TINY = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)


def _around_powers_of_two(exponents, dtype):
    """2^k and its neighbours one ulp below and above, of either sign."""
    powers = np.array([2.0 ** k for k in exponents], dtype)
    near = np.concatenate([powers, np.nextafter(powers, dtype(0)), np.nextafter(powers, dtype(np.inf))])
    return np.concatenate([near, -near])


# Zeros of either sign, subnormals (flushed), the smallest normal and its neighbours, powers of two
# and their neighbours, the largest finite, infinities and NaN.
_F32_EDGES = np.concatenate([
    np.array([0.0, -0.0, 1e-40, -1e-40, 1e-45, -_F32_TINY * (1 - 2 ** -23), _F32_TINY, -_F32_TINY, 1.0, 0.5, 3.0,
              -3.0, 0.1, -7.5e-20, 16777215.0, 3e38, -3e38, _F32_MAX, -_F32_MAX, _INF, -_INF, _NAN], np.float32),
    _around_powers_of_two([-126, -125, -64, -1, 0, 1, 23, 24, 64, 126, 127], np.float32),
])
# float32 over its whole exponent range (log-uniform magnitudes, either sign).
_F32_WIDE = (np.random.default_rng(7).choice([-1.0, 1.0], 96)
             * 2.0 ** np.random.default_rng(8).uniform(-126, 128, 96)).astype(np.float32).reshape(8, 12)
_F16_EDGES = np.concatenate([
    np.array([0.0, -0.0, 6e-8, -6e-8, 3e-5, 6.1035e-5, -6.1035e-5, 1.0, 0.5, 3.0, -3.0, 0.1, 65504.0, -65504.0, 1000.0,
              _INF, -_INF, _NAN], np.float16),
    _around_powers_of_two([-14, -13, -1, 0, 1, 10, 15], np.float16),
])
# bfloat16 values (float32 programs' inputs and outputs: TFLite takes no bfloat16 at the boundary).
_BF16_EDGES = np.array([0.0, -0.0, 1e-40, -1e-40, _F32_TINY, 1.0, 0.5, 3.0, -3.0, 0.1, 3e38, -3.38e38, _INF, -_INF,
                        _NAN], np.float32).astype(jnp.bfloat16).astype(np.float32)
# Exponents through every boundary of float32's and the half floats' ranges, and int32's extremes.
_SHIFTS = np.array([0, 1, -1, 2, -2, 14, -14, 15, -15, 16, -24, 23, -23, 64, -64, 65, -65, 126, -126, 127, -127,
                    128, -128, 149, -149, 200, -200, 253, -253, 254, -254, 255, -255, 300, -300, 511, -511, 512,
                    -512, 513, -513, 2 ** 24 + 1, -(2 ** 24 + 1), 2 ** 31 - 1, -(2 ** 31 - 1), -(2 ** 31)], np.int32)
_U32_SHIFTS = np.array([0, 1, 5, 126, 127, 253, 254, 512, 513, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1], np.uint32)
_I8_SHIFTS = np.array([0, 1, -1, 14, -14, 15, -15, 16, -25, 63, -64, 127, -128], np.int8)


def _outer(x, n):
    """jnp.ldexp of every value against every exponent (given as a row of exponents per value, so
    that only the float operand is broadcast)."""
    return jnp.ldexp(x[:, None], n)


def _grid(x, n):
    """The exponents' row repeated for each value of x."""
    return np.tile(n, (len(x), 1))


def _bf16(fn):
    """fn on bfloat16 values, given and returned as float32."""
    def on_bf16(x, *args):
        return jax.tree.map(lambda y: y.astype(np.float32) if y.dtype == jnp.bfloat16 else y,
                            fn(x.astype(jnp.bfloat16), *args))
    return on_bf16


def _signed_zeros(y):
    """y, with each zero shown as 1/y (+-inf): the comparison sees a zero's sign."""
    return jnp.where(y == 0, 1.0 / y, y)


def _case(name, fn, *args, **kwargs):
    # Exact results: no tolerance (an output holding 3e38 would otherwise scale it past everything).
    kwargs.setdefault("atol", 0.0)
    kwargs.setdefault("rtol", 0.0)
    return case(name, fn, *args, skip=_SKIP, **kwargs)


CASES = [
    _case("frexp_f32_edges", jnp.frexp, _F32_EDGES),
    _case("frexp_f32_wide", jnp.frexp, _F32_WIDE),
    _case("frexp_f32_random", jnp.frexp, f32(4, 6, low=-100, high=100)),
    _case("frexp_signed_zeros", lambda x: _signed_zeros(jnp.frexp(x)[0]), _F32_EDGES),
    _case("frexp_f16_edges", jnp.frexp, _F16_EDGES),
    _case("frexp_bf16_edges", _bf16(jnp.frexp), _BF16_EDGES),
    _case("frexp_poly", jnp.frexp, f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    _case("ldexp_f32_edges", _outer, _F32_EDGES, _grid(_F32_EDGES, _SHIFTS)),
    _case("ldexp_signed_zeros", lambda x, n: _signed_zeros(_outer(x, n)), _F32_EDGES, _grid(_F32_EDGES, _SHIFTS)),
    _case("ldexp_f32_random", jnp.ldexp, f32(4, 6, low=-100, high=100), i32(4, 6, low=-140, high=140)),
    _case("ldexp_scalar_exponent", lambda x: jnp.ldexp(x, -3), _F32_WIDE),
    _case("ldexp_f16_edges", _outer, _F16_EDGES, _grid(_F16_EDGES, _SHIFTS)),
    _case("ldexp_bf16_edges", _bf16(_outer), _BF16_EDGES, _grid(_BF16_EDGES, _SHIFTS)),
    _case("ldexp_u32_exponents", _outer, _F32_EDGES, _grid(_F32_EDGES, _U32_SHIFTS)),
    _case("ldexp_i8_exponents", _outer, _F16_EDGES, _grid(_F16_EDGES, _I8_SHIFTS)),
    _case("ldexp_of_frexp", lambda x: jnp.ldexp(*jnp.frexp(x)), _F32_WIDE),
    _case("ldexp_grad", jax.grad(lambda x, n: jnp.sum(jnp.ldexp(x, n) ** 2)), f32(6), i32(6, low=-20, high=20)),
]
