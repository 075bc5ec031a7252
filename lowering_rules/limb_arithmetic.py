"""uint32 products and remainders on 16-bit limbs (``limb_values.Limbs``), exact in every runtime.

``jax.random.randint`` reduces random words modulo the range (``rem``) and combines two draws with
a product (``mul``). TF.js has neither uint32 nor int64, its wasm backend computes int32 division
in float32, and its WebGL backend holds every int32 in float32: no whole word may be divided or
multiplied there. On limbs every intermediate value stays below 2^24 in magnitude:

- a product splits one factor's limbs into bytes: a byte times a 16-bit limb is below 2^24;
- a remainder is long division by bytes of the dividend (Knuth's algorithm D in radix 2^8): with
  ``r < b``, ``x = 256 r + byte`` has a quotient below 256, which a float32 estimate gets within
  one (relative error below 2^-20 on a quotient below 2^8); ``x - q b`` is computed exactly on
  limbs (``q`` times a limb is below 2^24) and one correction by ``b`` either way makes it the
  remainder. A zero divisor leaves the dividend, as in JAX.

Only TF.js's lowering takes this path (``ctx.lowering_for.tfjs``): TF and TFLite compute on uint32 and
int64 directly (words.py), in a third of the ops (jax.random.randint's TFLite graph: 1560 ops
instead of 2199).
"""
from __future__ import annotations

from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.values import limb_values
from lowering_rules.values.limb_values import Limbs

_LIMB = 1 << 16
_BYTE = 256


def _split(x, base: int):
    """(x // base, x % base) for non-negative int32 x below 2^24."""
    low = tf.math.floormod(x, base)
    return tf.math.floordiv(x - low, base), low


def _low16_product(x, y):
    """(x * y) mod 2^16 for limbs x, y in [0, 2^16): x's bytes times y, each below 2^24."""
    x1, x0 = _split(x, _BYTE)
    return tf.math.floormod(x0 * y + tf.math.floormod(x1 * y, _BYTE) * _BYTE, _LIMB)


def mul(a: Limbs, b: Limbs) -> Limbs:
    """a * b modulo 2^32."""
    a1, a0 = _split(a.lo, _BYTE)
    carry0, low0 = _split(a0 * b.lo, _LIMB)        # a0 blo < 2^24
    carry1, low1 = _split(a1 * b.lo, _BYTE)        # a1 blo 2^8 = carry1 2^16 + low1 2^8
    carry2, lo = _split(low0 + low1 * _BYTE, _LIMB)
    hi = carry0 + carry1 + carry2 + _low16_product(a.hi, b.lo) + _low16_product(b.hi, a.lo)
    return Limbs(tf.math.floormod(hi, _LIMB), lo)


def _normalized(hi, lo) -> Limbs:
    """hi 2^16 + lo with lo moved into [0, 2^16) (lo in (-2^17, 2^17)); hi keeps its sign."""
    carry, lo = _split(lo + 2 * _LIMB, _LIMB)
    return Limbs(hi + carry - 2, lo)


def _at_least(x: Limbs, b: Limbs):
    return tf.logical_or(x.hi > b.hi, tf.logical_and(tf.equal(x.hi, b.hi), x.lo >= b.lo))


def _select(condition, x: Limbs, y: Limbs) -> Limbs:
    return Limbs(tf.where(condition, x.hi, y.hi), tf.where(condition, x.lo, y.lo))


def rem(a: Limbs, b: Limbs) -> Limbs:
    """a mod b (a for b = 0), of the broadcast shape of a and b."""
    shape = tf.broadcast_dynamic_shape(tf.shape(a.hi + a.lo), tf.shape(b.hi + b.lo))
    a, b = limb_values.broadcast(a, shape), limb_values.broadcast(b, shape)
    # The estimate's divisor: 1 for b = 0 (no NaN), where q b is 0 whatever q is.
    divisor = tf.maximum(tf.cast(b.hi, tf.float32) * float(_LIMB) + tf.cast(b.lo, tf.float32), 1.0)
    a3, a2 = _split(a.hi, _BYTE)
    a1, a0 = _split(a.lo, _BYTE)
    r = Limbs(tf.zeros_like(a.hi), tf.zeros_like(a.hi))
    for byte in (a3, a2, a1, a0):
        carry, x_lo = _split(r.lo * _BYTE + byte, _LIMB)   # x = 256 r + byte < 256 b
        x_hi = r.hi * _BYTE + carry                         # below 2^24
        estimate = (tf.cast(x_hi, tf.float32) * float(_LIMB) + tf.cast(x_lo, tf.float32)) / divisor
        q = tf.cast(tf.clip_by_value(tf.floor(estimate), 0.0, _BYTE - 1.0), tf.int32)
        q_carry, q_lo = _split(q * b.lo, _LIMB)
        d = _normalized(x_hi - q * b.hi - q_carry, x_lo - q_lo)   # x - q b, in [-b, 2b)
        below = _normalized(d.hi + b.hi, d.lo + b.lo)
        above = _normalized(d.hi - b.hi, d.lo - b.lo)
        r = _select(d.hi < 0, below, _select(_at_least(d, b), above, d))
    return r


def _u32_operands(ctx, x, y):
    if not ctx.lowering_for.tfjs or not all(limb_values.is_u32(a) for a in ctx.avals_in):
        return None
    return limb_values.of(x), limb_values.of(y)


def _lower_mul(ctx, x, y, **params):
    operands = _u32_operands(ctx, x, y)
    return NotImplemented if operands is None else limb_values.broadcast(mul(*operands), ctx.out_shape())


def _lower_rem(ctx, x, y):
    operands = _u32_operands(ctx, x, y)
    return NotImplemented if operands is None else rem(*operands)


limb_values.LIMB_RULES.update(mul=_lower_mul, rem=_lower_rem)
