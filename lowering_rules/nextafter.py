"""nextafter without reading bit patterns (TF.js has no Bitcast): one ulp of the operand's format,
found from its exponent, which is exact in every runtime."""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32
from lowering_rules.core.float_math import log
from lowering_rules.core.helpers import as_out, is_inf, is_nan, wide
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.elementwise import FLOAT32_SERIES

NAN, INF = float("nan"), float("inf")

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
    result = tf.where(is_inf(x), tf.where(x < 0, -largest, largest), result)
    result = tf.where(tf.equal(x, y), y, result)
    return tf.where(tf.logical_or(is_nan(x), is_nan(y)), x + y, result)


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
@lowering(lax.nextafter_p, dtypes=FLOAT32_SERIES, cases=[
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
    # jnp broadcasts y: the rule's select of two splats under a (1, 4) condition kept its (3, 4)
    # shape only while the splats did (the graph's TFLite writer read them as scalars: LiteRT refused).
    case("f32_broadcast_operand", jnp.nextafter, f32(3, 4), f32(1, 4), atol=0.0, rtol=0.0),
])
def lower_nextafter(ctx, x, y):
    return as_out(ctx, _next_float(wide(x), wide(y), ctx.avals_in[0].dtype))

