"""bitcast_convert_type between 32-bit types, through arithmetic on 16-bit limbs.

TF.js has no Bitcast op, so one lowering serving every target reads the IEEE fields with exact
limb arithmetic (``lowering_rules/values/limbs.py``). JAX's uniform sampler ends in such a bitcast
(``random_bits >> 9 | 0x3F800000``, viewed as float32).
"""
from __future__ import annotations

import numpy as np
from jax import lax

from lowering_rules.core.cases import case, u32
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Limitation, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS
from lowering_rules.values import limb_values

_INTS32 = (np.dtype(np.int32), np.dtype(np.uint32))


def _integer_to_float32(ctx, x):
    # From the word's 16-bit limbs (limb_values.py): every value below stays under 2^24, so WebGL's
    # float32 textures hold it exactly.
    x = limb_values.of(x)
    hi, lo = x.hi, x.lo
    negative = hi >= (1 << 15)
    exponent = tf.math.floordiv(tf.math.floormod(hi, 1 << 15), 1 << 7)   # bits 23..30
    mantissa = tf.math.floormod(hi, 1 << 7) * (1 << 16) + lo                # bits 0..22, < 2^23
    # 2^(e - 127) for a normal exponent e, 2^-126 for e = 0 (subnormal): exact float32 powers.
    scale = tf.gather(tf.constant([2.0 ** (max(e, 1) - 127) for e in range(255)], tf.float32),
                      tf.minimum(exponent, 254))
    fraction = tf.cast(mantissa, tf.float32) * 2.0 ** -23                  # exact: < 2^23 integers
    magnitude = tf.where(exponent > 0, 1.0 + fraction, fraction) * scale
    infinity = ctx.runtime_infinity()
    special = tf.where(tf.equal(mantissa, 0), tf.broadcast_to(infinity, tf.shape(magnitude)),
                       tf.broadcast_to(infinity - infinity, tf.shape(magnitude)))   # inf or NaN
    magnitude = tf.where(tf.equal(exponent, 255), special, magnitude)
    return tf.where(negative, -magnitude, magnitude)


_BIT_PATTERNS = np.array([0, 0x80000000, 0x3F800000, 0x3FFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000,
                          0x7F800000, 0xFF800000, 0x7FC00000, 0x12345678, 0xC0490FDB], np.uint32)


@lowering(lax.bitcast_convert_type_p, limitations=[
    Limitation(ALL_TARGETS, "anything but a 32-bit integer viewed as float32 or as the other 32-bit "
               "integer type", "noxla lowers these bitcasts through arithmetic (TF.js has no Bitcast op) "
               "and implements only the ones JAX's samplers use", param="new_dtype",
               when=lambda eqn: not (eqn.dtype_in in _INTS32 and np.dtype(eqn.params["new_dtype"])
                                     in (np.dtype(np.float32), *_INTS32)),
               workaround="compute the value with arithmetic instead of reinterpreting its bits"),
], cases=[
    # A word joined from 16-bit halves in the graph: how a WebGL user passes bit patterns (WebGL
    # rounds int32 inputs above 2^24; the limbs never form the word, lowering_rules/values/limb_values.py).
    case("u32_halves_to_f32", lambda hi, lo: lax.bitcast_convert_type(lax.shift_left(hi, np.uint32(16)) | lo,
                                                                      np.float32),
         _BIT_PATTERNS >> 16, _BIT_PATTERNS & 0xFFFF),
    case("u32_to_f32_fields", lambda x: lax.bitcast_convert_type(x, np.float32), _BIT_PATTERNS),
    case("u32_to_i32", lambda x: lax.bitcast_convert_type(x, np.int32), _BIT_PATTERNS),
    case("uniform_pattern", lambda x: lax.bitcast_convert_type(
        lax.shift_right_logical(x, np.uint32(9)) | np.uint32(0x3F800000), np.float32) - 1.0,
        u32(3, 4, low=0, high=2 ** 32 - 1), atol=0.0, rtol=0.0),
    case("f32_to_i32_rejected", lambda x: lax.bitcast_convert_type(x, np.int32), np.float32([1.0])),
])
def lower_bitcast_convert_type(ctx, x, *, new_dtype):
    if np.dtype(new_dtype) == np.float32:
        return _integer_to_float32(ctx, x)
    # int32 <-> uint32: Cast wraps modulo 2^32 in every runtime.
    return tf.cast(limb_values.materialize(x, ctx.tf_dtype(np.uint32)), ctx.out_dtype)


limb_values.register_native("bitcast_convert_type")
