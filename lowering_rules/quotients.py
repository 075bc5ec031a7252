"""Integer and float quotients and remainders (lax.div, lax.rem): JAX's semantics spelled out.

Integer division truncates toward zero in JAX (TF's FloorDiv floors), x / 0 is -1 and x rem 0 is x,
INT_MIN / -1 wraps: TF's integer kernels trap on the last two and TF.js has no TruncateDiv. A
remainder is the floored one (FloorMod, integer in every runtime) moved to the dividend's sign, so
it never goes through a quotient: TF.js's wasm FloorDiv divides int32 in float32, which its writer
corrects where the graph cannot bound the operands (noxla/writers/tfjs/exact_int32.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules import transposed_operand_cases
from lowering_rules.core.cases import case, f16, f32, i32, u32
from lowering_rules.core.dtype_support import dtypes, gap
from lowering_rules.core.helpers import as_int32, as_out, int_info, wide
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Target, lowering
from lowering_rules.elementwise import _SQRT_EDGES, _U32_EDGES, INF, NAN, _is_float, _sqrt_kept, negative
from lowering_rules.patterns import fusion
from lowering_rules.values import words


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
# Quotients of operands beyond 2^24: TF.js's wasm FloorDiv divides in float32 (noxla/writers/tfjs/exact_int32.py).
_DIV_INT_WIDE = (np.array([2 ** 31 - 1, -2 ** 31 + 1, 1095519806, -797621994, -2 ** 31, 123456789, 65536 * 1000 - 1,
                           -1753117615, 2 ** 31 - 1, -2 ** 31 + 5], np.int32),
                 np.array([3, 3, -61, -288, 3, 1000, 65536, 11, -2 ** 31, -2 ** 31], np.int32))
_REM_FLOAT_EDGES = (np.array([7.5, -7.5, 7.5, -7.5, 5.0, INF, 1.0, -0.0, 3.0, 1e30, NAN], np.float32),
                    np.array([2.0, 2.0, -2.0, -2.0, 0.0, 1.0, INF, 1.0, 1.5, 3.0, 1.0], np.float32))


# TFLite's builtins have no int64 FloorDiv (the converter refuses it); the integer quotient needs it.
# An exact int64 quotient through float estimates would overflow at the ends of the range.
_NO_INT64_QUOTIENT = dtypes(gaps=[gap((Target.TFLITE,), {"int64"},
                                      "TFLite's builtins have no int64 FloorDiv, which the integer quotient needs")])


@lowering(lax.div_p, fast=fusion.SOFTMAX_OR_SCALED_PRODUCT, dtypes=_NO_INT64_QUOTIENT, cases=[
    case("f32", lax.div, f32(3, 4), f32(3, 4, low=0.5, high=2.0)),
    case("f32_edges", lax.div, np.array([1.0, -1.0, 0.0, INF, 1.0, NAN], np.float32),
         np.array([0.0, 0.0, 0.0, INF, -INF, 1.0], np.float32)),
    case("i32_truncates", lax.div, *_DIV_INT_EDGES),
    case("i32_random", lax.div, i32(4, 5, low=-50, high=50), i32(4, 5, low=-7, high=7)),
    case("i32_wide", lax.div, *_DIV_INT_WIDE),
    case("jnp_floor_divide_i32_wide", jnp.floor_divide, *_DIV_INT_WIDE),
    case("u8", lax.div, np.array([7, 5, 255, 0], np.uint8), np.array([0, 2, 16, 3], np.uint8)),
    case("u32_edges", lax.div, *_U32_EDGES),
    case("u32_small_divisors", lax.div, u32(3, 4, low=0, high=2 ** 32 - 1), u32(3, 4, low=1, high=300)),
    case("f16", lax.div, f16(5), f16(5, low=0.5, high=2.0)),
    *transposed_operand_cases.DIV,
    # A divisor from sqrt (a LayerNorm's): the quotient, not a multiple of rsqrt; 0 gives inf.
    case("by_sqrt", lambda x, y: x / jnp.sqrt(y), f32(3, 4), np.array([0.0, 1.0, 2.0, 3.0], np.float32)),
    case("by_sqrt_vector", lambda x, y: x / jnp.sqrt(y), f32(4), np.array([0.0, 1e-30, 2.0, INF], np.float32)),
    case("by_sqrt_polymorphic", lambda x, y: x / jnp.sqrt(y), f32(2, 4), _SQRT_EDGES.reshape(2, 4),
         polymorphic_shapes=("(b, 4)", "(b, 4)")),
    *fusion.SOFTMAX_CASES,
    *fusion.MEAN_CASES,
    *fusion.SCALED_PRODUCT_CASES,
])
def lower_div(ctx, x, y):
    fused = fusion.avg_pool(ctx)
    fused = fusion.softmax(ctx) if fused is None else fused
    fused = fusion.mean(ctx) if fused is None else fused
    fused = fusion.scaled_product(ctx) if fused is None else fused
    if fused is not None:
        return fused
    if _is_float(x):
        return as_out(ctx, tf.math.divide(wide(x), _sqrt_kept(wide(y))))
    if ctx.avals_in[0].dtype == np.uint32:  # TFLite has no uint32 FloorDiv (words.py)
        return tf.cast(words.unsigned_divmod(x, y, ctx.out_shape())[0], ctx.out_dtype)
    bits, signed = int_info(x.dtype)
    if bits < 32:
        x, y = as_int32(x), as_int32(y)
    return as_out(ctx, _truncating_div(x, y, bits, signed))


@lowering(lax.rem_p, dtypes=_NO_INT64_QUOTIENT, cases=[
    case("f32", lax.rem, f32(3, 4, low=-10, high=10), f32(3, 4, low=0.5, high=3)),
    case("f32_signs", lax.rem, *_REM_FLOAT_EDGES),
    case("i32_signs", lax.rem, *_DIV_INT_EDGES),
    case("i32_random", lax.rem, i32(4, 5, low=-50, high=50), i32(4, 5, low=-7, high=7)),
    case("i32_wide", lax.rem, *_DIV_INT_WIDE),
    case("jnp_mod_i32_wide", jnp.remainder, *_DIV_INT_WIDE),
    case("jnp_mod_i32", jnp.remainder, i32(8, low=-20, high=20), i32(8, low=1, high=6)),
    case("u8", lax.rem, np.array([7, 5, 255, 0], np.uint8), np.array([0, 2, 16, 3], np.uint8)),
    case("u32_edges", lax.rem, *_U32_EDGES),
    # uint32 remainders: TF.js computes them by long division on 16-bit limbs (limb_arithmetic.py).
    case("u32_random", lax.rem, u32(4, 5, low=0, high=2 ** 32 - 1), u32(4, 5, low=0, high=2 ** 32 - 1)),
    case("u32_small_divisors", lax.rem, u32(4, 5, low=0, high=2 ** 32 - 1), u32(4, 5, low=0, high=300)),
    case("u32_near_dividend", lax.rem,
         np.array([2 ** 32 - 1, 2 ** 32 - 1, 2 ** 31, 65536 * 255 + 7, 16777215], np.uint32),
         np.array([2 ** 32 - 2, 2 ** 31 - 1, 2 ** 31 - 1, 65536, 16777216], np.uint32)),
    case("randint", lambda k: jax.random.randint(k, (3, 4), -5, 9), np.array([0x12345678, 0x9ABCDEF0], np.uint32)),
    case("f16", lax.rem, f16(5, low=-8, high=8), f16(5, low=0.5, high=2.0)),
])
def lower_rem(ctx, x, y):
    if _is_float(x):
        # C fmod: the sign of the dividend. floormod of magnitudes is exact and equals fmod there.
        x, y = wide(x), wide(y)
        magnitude = tf.math.floormod(tf.abs(x), tf.abs(y))
        return as_out(ctx, tf.where(x < 0, -magnitude, magnitude))
    if ctx.avals_in[0].dtype == np.uint32:  # TFLite has no uint32 FloorMod (words.py)
        return tf.cast(words.unsigned_divmod(x, y, ctx.out_shape())[1], ctx.out_dtype)
    bits, signed = int_info(x.dtype)
    if bits < 32:
        x, y = as_int32(x), as_int32(y)
    # The floored remainder (exact in every runtime: TF.js's wasm divides int32 in float32, but its
    # FloorMod is integer), moved to the dividend's sign; y = 0 gives x, as in JAX. A divisor of 0
    # or -1 is replaced by 1 (TF's integer FloorMod traps on both; x rem -1 is 0).
    zero, one = tf.zeros_like(y), tf.ones_like(y)
    by_zero = tf.equal(y, zero)
    safe_y = tf.where(tf.logical_or(by_zero, tf.equal(y, -one)) if signed else by_zero, one, y)
    r = tf.math.floormod(x, safe_y)
    if signed:
        r = tf.where(tf.logical_and(tf.not_equal(r, zero), tf.not_equal(x < 0, safe_y < 0)), r - safe_y, r)
    return as_out(ctx, tf.where(by_zero, x, r))
