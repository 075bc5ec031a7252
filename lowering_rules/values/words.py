"""uint32 subtraction, division and remainder for TFLite, whose builtins have no uint32 Sub,
FloorDiv, FloorMod or comparisons (measured with TF 2.19's converter). JAX computes on uint32 in
common programs: ``jax.random.randint`` takes remainders of random bits, ``jnp.searchsorted``
halves uint32 intervals. The ``sub``, ``div`` and ``rem`` rules send uint32 operands here.

- Subtraction: int32 Sub on the same bits wraps exactly.
- Remainder: int64 FloorMod, which TFLite has (every uint32 is a non-negative int64).
- Quotient: TFLite has no int64 FloorDiv, but ``n = a - r`` is an exact multiple of ``b``. A float32
  estimate of ``n / b`` is off by at most ``q 2^-23 + 1/2 < 2^9 + 1``; the error ``e = n - est b``
  (exact in int64) is then a multiple of ``b`` whose quotient, at most 513 in magnitude, float32
  division rounds exactly.
- A zero divisor gives JAX's results: the quotient is all ones and the remainder the dividend.

TF.js has no int64 (nor uint32 beyond bit patterns): uint32 division stays rejected there.
"""
from __future__ import annotations

from lowering_rules.core.lazy_tensorflow import tf


def unsigned_sub(a, b):
    """a - b modulo 2^32 for uint32 tensors (or their int32 carriers)."""
    return tf.cast(a, tf.int32) - tf.cast(b, tf.int32)


def unsigned_divmod(a, b, shape):
    """(a // b, a % b) as int64 tensors of ``shape`` for uint32 operands; x // 0 is 2^32 - 1 and
    x % 0 is x."""
    a, b = (tf.broadcast_to(tf.cast(v, tf.int64), shape) for v in (a, b))
    zero = tf.equal(b, 0)
    divisor = tf.where(zero, tf.ones_like(b), b)
    r = tf.math.floormod(a, divisor)
    n = a - r

    def rounded_quotient(x):
        return tf.cast(tf.round(tf.cast(x, tf.float32) / tf.cast(divisor, tf.float32)), tf.int64)

    estimate = rounded_quotient(n)
    q = estimate + rounded_quotient(n - estimate * divisor)
    q = tf.where(zero, tf.fill(tf.shape(q), tf.constant(2 ** 32 - 1, tf.int64)), q)
    return q, tf.where(zero, a, r)
