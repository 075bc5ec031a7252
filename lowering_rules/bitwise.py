"""Bitwise primitives and shifts (not, and, or, xor, population_count, clz, shift_*).

TFLite and TF.js have no bitwise or shift ops (TF.js lacks Bitcast and LeftShift), so every
rule works on the value's bits as int32 0/1 digits (floor division and floor modulo by powers
of two), or on wrapping int32 products; narrow and unsigned integers are handled as int32 and
wrapped back.
"""
from __future__ import annotations

import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, i8, i32, u8
from lowering_rules.core.dtype_support import NUMERIC, dtypes
from lowering_rules.core.helpers import (
    as_int32,
    as_out,
    bit_pattern_info,
    powers_of_two,
    wrap_to,
)
from lowering_rules.core.lazy_tensorflow import op, tf
from lowering_rules.core.registry import Limitation, Target, lowering
from lowering_rules.values import limb_values, limbs

# Bit manipulation is built for integers of at most 32 bits (32-bit masks, powers-of-two tables).
_AT_MOST_32_BITS = dtypes(NUMERIC - {"int64", "uint64"}, missing=(
    "the bit manipulation is built for integers of at most 32 bits"))


def _value_bits(x, bits: int, signed: bool):
    """The bits of x (as int32 0/1 along a new last axis), below the sign bit for signed types:
    floor(x / 2^k) mod 2 is bit k of the two's complement for negative x too."""
    n = bits - 1 if signed else bits
    return tf.math.floormod(tf.math.floordiv(tf.expand_dims(x, -1), powers_of_two(n)), 2)


def _from_bits(value_bits, sign, bits: int, signed: bool):
    value = tf.reduce_sum(value_bits * powers_of_two(bits - 1 if signed else bits), axis=-1)
    if signed:
        value = tf.where(sign, value + tf.constant(-(2 ** (bits - 1)), tf.int32), value)
    return value


def _bitwise(ctx, x, y, combine_bits, combine_bools):
    if x.dtype == tf.bool:
        return combine_bools(x, y)
    bits, signed = bit_pattern_info(x.dtype)
    if bits == 32:  # exact 32-bit words: TF.js's wasm backend rounds the division below
        return as_out(ctx, limbs.from_bits(combine_bits(limbs.to_bits(x), limbs.to_bits(y))))
    x, y = as_int32(x), as_int32(y)
    value = combine_bits(_value_bits(x, bits, signed), _value_bits(y, bits, signed))
    sign = combine_bools(x < 0, y < 0) if signed else None
    return as_out(ctx, _from_bits(value, sign, bits, signed))


def _shift_in_range(s, bits: int):
    return tf.logical_and(s >= 0, s < bits)


def _pow2_table(bits: int, s):
    """2^s for s in [0, bits), wrapped to int32 (2^31 is INT_MIN, which multiplies the same mod 2^32)."""
    table = tf.constant(np.array([2 ** k for k in range(bits)], np.int64).astype(np.uint32).view(np.int32))
    return tf.gather(table, tf.clip_by_value(s, 0, bits - 1))


# TF.js's wasm FloorDiv divides int32 in float32; its writer computes a quotient the graph cannot
# bound from the integer remainder instead (noxla/writers/tfjs/exact_int32.py), so only WebGL's
# float32 textures are left short of these words.
_WEBGL_WORD_BITS = limb_values.webgl_word_limitation(
    "32-bit integer operands",
    "noxla composes this bit operation from FloorDiv/FloorMod of the whole word and a sum over its bits",
    limb_values.has_word, "keep bit manipulation (e.g. PRNG key handling) outside the exported function, or "
    "use values below 2^24, or run the model on TF.js's wasm or cpu backend")


_KEEP_BITS_OUTSIDE = ("keep this bit manipulation outside the exported function, or run the model on "
                      "TF.js's wasm or cpu backend")
_WEBGL_CLZ = limb_values.webgl_word_limitation(
    "32-bit integer operand",
    "a count of leading zeros compares the whole word with powers of two up to 2^31, and WebGL rounds "
    "words beyond 2^24 (2^25 - 1 counts as 2^25)", limb_values.has_word, _KEEP_BITS_OUTSIDE)
_WEBGL_SHIFT = limb_values.webgl_word_limitation(
    "32-bit integer words, except a uint32 shifted by a literal amount",
    "a shift moves bits across the whole word (a left shift multiplies by up to 2^31, a logical right shift "
    "reads a negative int32 as a word near 2^32), so even small operands make words WebGL rounds; noxla "
    "computes a uint32 shifted by a literal amount on 16-bit limbs instead (lowering_rules/values/limb_values.py)",
    lambda eqn: limb_values.has_word(eqn) and not limb_values.shift_on_limbs(eqn),
    "shift uint32 values by literal amounts (x >> 9, as jax.random does), or " + _KEEP_BITS_OUTSIDE)


# ----------------------------------------------------------------------------- unary

@lowering(lax.not_p, dtypes=dtypes(NUMERIC - {"uint64"}, missing=(
    "uint64's all-ones mask does not convert to an int64 constant")), cases=[
    case("bool", lax.bitwise_not, boolean(3, 4)),
    case("i32", lax.bitwise_not, np.array([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 12345], np.int32)),
    case("u8", lax.bitwise_not, np.array([0, 1, 255, 128], np.uint8)),
    case("i8", lax.bitwise_not, i8(7)),
    case("u32", lax.bitwise_not, np.array([0, 2 ** 32 - 1, 2 ** 31, 0x9E3779B9], np.uint32)),
])
def lower_not(ctx, x):
    if x.dtype == tf.bool:
        return tf.logical_not(x)
    bits, signed = bit_pattern_info(x.dtype)
    # Two's complement: ~x = -x - 1 (wrapping at INT_MIN); unsigned: ~x = max - x.
    x = as_int32(x)
    return as_out(ctx, (-1 if signed else 2 ** bits - 1) - x)


# Measured in headless Chromium (tests/test_litertjs.py's rule-case sample): on LiteRT.js's WebGPU
# delegate the bit decomposition these rules share comes out wrong; on its wasm it matches.
WEBGPU_BITS = Limitation(
    (Target.LITERTJS_WEBGPU,), "integer operands",
    "noxla composes integer bit operations from the operands' bits (FloorDiv/FloorMod, a sum over the "
    "bits), and LiteRT.js 2.5.3's WebGPU delegate computes that wrong, silently (uint32 OR gave 0, "
    "population_count of 1 gave 31)",
    when=lambda eqn: any(np.issubdtype(d, np.integer) for d in eqn.dtypes),
    workaround="run the model on LiteRT.js wasm")


@lowering(lax.population_count_p, limitations=[_WEBGL_WORD_BITS, WEBGPU_BITS], dtypes=_AT_MOST_32_BITS, cases=[
    case("i32", lax.population_count, np.array([0, 1, -1, 7, 2 ** 31 - 1, -(2 ** 31), 255, -256], np.int32)),
    case("i32_random", lax.population_count, i32(4, 5, low=-(2 ** 31), high=2 ** 31 - 1)),
    case("u8", lax.population_count, np.array([0, 1, 255, 128, 85], np.uint8)),
    case("u32", lax.population_count, np.array([0, 2 ** 32 - 1, 2 ** 31, 0x9E3779B9], np.uint32)),
])
def lower_population_count(ctx, x):
    bits, signed = bit_pattern_info(x.dtype)
    x = as_int32(x)
    count = tf.reduce_sum(_value_bits(x, bits, signed), axis=-1)
    if signed:
        count = count + tf.cast(x < 0, tf.int32)
    return as_out(ctx, count)


@lowering(lax.clz_p, dtypes=_AT_MOST_32_BITS, limitations=[_WEBGL_CLZ, WEBGPU_BITS], cases=[
    case("i32", lax.clz, np.array([0, 1, -1, 2, 2 ** 30, 2 ** 31 - 1, -(2 ** 31), 255, 256, 2 ** 30 - 1,
                                   2 ** 24 + 1, 2 ** 25 - 1], np.int32)),
    case("i32_random", lax.clz, i32(3, 4, low=-100, high=2 ** 31 - 1)),
    case("u8", lax.clz, np.array([0, 1, 255, 128, 15], np.uint8)),
])
def lower_clz(ctx, x):
    bits, signed = bit_pattern_info(x.dtype)
    x = as_int32(x)
    # bit_length(x) = #{k : x >= 2^k}; a negative signed value has its top bit set.
    bit_length = tf.reduce_sum(tf.cast(tf.expand_dims(x, -1) >= powers_of_two(bits - 1 if signed else bits),
                                       tf.int32), axis=-1)
    leading = bits - bit_length
    if signed:
        leading = tf.where(x < 0, tf.zeros_like(leading), leading)
    return as_out(ctx, leading)


# ----------------------------------------------------------------------------- bitwise and shifts

def _and_bits(a, b):
    return a * b


def _or_bits(a, b):
    return a + b - a * b


def _xor_bits(a, b):
    return tf.abs(a - b)


def _logical_xor(a, b):
    return tf.not_equal(a, b)


def _bitwise_rule(combine_bits, combine_bools):
    def lower(ctx, x, y):
        return _bitwise(ctx, x, y, combine_bits, combine_bools)
    lower.__name__ = f"lower_bitwise{combine_bits.__name__.removesuffix('_bits')}"
    return lower


for _prim, _combine_bits, _combine_bools, _jax_fn in (
        (lax.and_p, _and_bits, op("logical_and"), lax.bitwise_and),
        (lax.or_p, _or_bits, op("logical_or"), lax.bitwise_or),
        (lax.xor_p, _xor_bits, _logical_xor, lax.bitwise_xor)):
    lowering(_prim, dtypes=_AT_MOST_32_BITS, limitations=[WEBGPU_BITS], cases=[
        case("bool", _jax_fn, np.array([True, True, False, False]), np.array([True, False, True, False])),
        case("i32", _jax_fn, np.array([0, -1, 12, -12, 2 ** 31 - 1, -(2 ** 31), 0x5555], np.int32),
             np.array([5, 7, 10, -1, -(2 ** 31), -(2 ** 31), 0x0FF0], np.int32)),
        case("i32_random", _jax_fn, i32(3, 4, low=-(2 ** 31), high=2 ** 31 - 1),
             i32(3, 4, low=-(2 ** 31), high=2 ** 31 - 1)),
        case("u8", _jax_fn, u8(6, low=0, high=255), u8(6, low=0, high=255)),
        case("i8", _jax_fn, i8(6, low=-128, high=127), i8(6, low=-128, high=127)),
        case("u32", _jax_fn, np.array([0, 2 ** 32 - 1, 2 ** 31, 0x9E3779B9, 7], np.uint32),
             np.array([5, 2 ** 31, 2 ** 31 + 1, 0x1BD11BDA, 2 ** 32 - 2], np.uint32)),
    ])(_bitwise_rule(_combine_bits, _combine_bools))


def _shift_operands(ctx, x, s):
    bits, signed = bit_pattern_info(x.dtype)
    return as_int32(x), as_int32(s), bits, signed


def lower_shift_left(ctx, x, s):
    x, s, bits, signed = _shift_operands(ctx, x, s)
    # x * 2^s wraps exactly like the shift (a product by a power of two is exact even in TF.js's
    # float64 arithmetic); JAX gives 0 for shift amounts outside [0, bits).
    shifted = x * _pow2_table(32, s)
    shifted = tf.where(_shift_in_range(s, bits), shifted, tf.zeros_like(shifted))
    return wrap_to(ctx, shifted, bits, signed)


def lower_shift_right_arithmetic(ctx, x, s):
    x, s, bits, signed = _shift_operands(ctx, x, s)
    if not signed:  # the top bit of an unsigned value is extended too
        x = tf.where(x >= 2 ** (bits - 1), x - 2 ** bits, x)
    # floor(x / 2^s) is the sign-extending shift; out-of-range amounts leave only sign bits.
    shifted = tf.math.floordiv(x, _pow2_table(31, s))
    sign_fill = tf.where(x < 0, -tf.ones_like(x), tf.zeros_like(x))
    in_range = tf.logical_and(_shift_in_range(s, bits), s < 31)
    return wrap_to(ctx, tf.where(in_range, shifted, sign_fill), bits, signed)


def lower_shift_right_logical(ctx, x, s):
    x, s, bits, signed = _shift_operands(ctx, x, s)
    if bits < 32:
        unsigned = tf.math.floormod(x, 2 ** bits)  # the bit pattern as a non-negative int32
        shifted = tf.math.floordiv(unsigned, _pow2_table(31, s))
    else:
        shifted = limbs.shift_right_logical(x, s)
    shifted = tf.where(_shift_in_range(s, bits), shifted, tf.zeros_like(shifted))
    return wrap_to(ctx, shifted, bits, signed)


_SHIFT_X = np.array([1, 1, 1, -1, 5, -8, -8, -8, 8, -1, -(2 ** 31), 2 ** 31 - 1, 12345, -12345], np.int32)
_SHIFT_S = np.array([31, 32, -1, 3, 0, 1, 32, -1, 40, 31, 1, 30, 7, 4], np.int32)

# shift_left multiplies by a power of two, which TF.js's wasm backend keeps exact; the arithmetic
# right shift divides (TF.js's writer makes the quotient exact); the logical one works on 16-bit limbs.
for _prim, _lower, _jax_fn, _limitations in (
        (lax.shift_left_p, lower_shift_left, lax.shift_left, (_WEBGL_SHIFT,)),
        (lax.shift_right_arithmetic_p, lower_shift_right_arithmetic, lax.shift_right_arithmetic,
         (_WEBGL_WORD_BITS,)),
        (lax.shift_right_logical_p, lower_shift_right_logical, lax.shift_right_logical, (_WEBGL_SHIFT,))):
    lowering(_prim, limitations=_limitations, dtypes=_AT_MOST_32_BITS, cases=[
        case("i32_edges", _jax_fn, _SHIFT_X, _SHIFT_S),
        case("i32_random", _jax_fn, i32(4, 5, low=-(2 ** 31), high=2 ** 31 - 1), i32(4, 5, low=0, high=31)),
        case("i8", _jax_fn, np.array([1, 3, -1, -128, 127, -7, 64], np.int8),
             np.array([7, 8, 2, 1, 3, 9, -1], np.int8)),
        case("u8", _jax_fn, np.array([1, 3, 255, 128, 127, 200, 64], np.uint8),
             np.array([7, 8, 2, 1, 3, 9, 0], np.uint8)),
        # Literal amounts of words: TF.js's writer shifts them on exact halves (exact_int32.py).
        case("i32_literal_amounts", lambda x, f=_jax_fn: (f(x, 3), f(x, 7), f(x, 20)),
             np.array([2 ** 31 - 1, -(2 ** 31), 123456789, -987654321, 16777217, -7], np.int32)),
        case("u32_threefry_rotation", _jax_fn, np.array([0x9E3779B9, 2 ** 32 - 1, 2 ** 31, 1, 12345], np.uint32),
             np.array([13, 19, 31, 32, 0], np.uint32)),
    ])(_lower)
