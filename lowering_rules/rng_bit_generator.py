"""``rng_bit_generator`` (``lax.rng_bit_generator``, and the ``rbg``/``unsafe_rbg`` key types'
random bits): XLA's RngBitGenerator, bit-exact with what XLA computes on CPU.

JAX hands XLA the uint32[4] key as two uint64 words ``s0 = (w0, w1)`` and ``s1 = (w2, w3)`` (low
word first). What XLA's expander then computes (facts read from XLA's RngBitGenerator expander and
its prng library; the cases check them against JAX):

- Philox-4x32-10 (``RNG_PHILOX``, and ``RNG_DEFAULT`` on CPU): the key is ``s0``; the 128-bit
  counter is ``s1`` (low half) and ``s0`` (high half). Block ``i`` hashes counter + i, its four
  output words are interleaved (element ``4 i + j`` is word ``j`` of block ``i``), and the new
  state is ``(s0, s1 + blocks)``.
- Threefry-2x32 (``RNG_THREE_FRY``): the key is ``s0``; the output shape is halved along its first
  even dimension (else its largest), element ``i`` of the half hashes the 64-bit counter
  ``s1 + i``, and the two output words fill the two halves, interleaved along that dimension. The
  new state is ``(s0, s1 + half size)``.
- 8- and 16-bit results are the low bits of the 32-bit ones.

Words are int32 bit patterns and every step is exact on every runtime (``limbs.py``): wrapping
Add, xor of bit vectors, and the 64-bit products Philox needs in 8-bit digits (``mulhi.py``). Not
on TF.js's WebGL backend, whose float32 textures round those whole words: rejected there up front.
"""
from __future__ import annotations

import math

import numpy as np
from jax import lax

from lowering_rules.core.cases import case, u32
from lowering_rules.core.dtype_support import dtypes
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import ALL_TARGETS, Limitation, lowering
from lowering_rules.prng import threefry2x32
from lowering_rules.values.limb_values import webgl_word_limitation
from lowering_rules.values.limbs import as_word, from_bits, to_bits, xor_bits

_INT_MIN = np.int32(-(2 ** 31))
# Philox-4x32 (Salmon et al., SC'11): the round multipliers and the Weyl key increments.
_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)


def _word(value: int) -> tf.Tensor:
    return tf.constant(np.array(value, np.uint32).view(np.int32))


def _add64(low, high, n):
    """(low, high) + n for 0 <= n < 2^31, wrapping modulo 2^64; also the carry out of the top."""
    new_low = low + n
    carry = tf.cast(new_low + _INT_MIN < low + _INT_MIN, tf.int32)  # unsigned new_low < low
    new_high = high + carry
    return new_low, new_high, carry * tf.cast(tf.equal(new_high, 0), tf.int32)


def _digit_columns(multiplier: int) -> np.ndarray:
    """[32, 7]: a word's bits (LSB first) times this matrix are the seven 8-bit-digit columns of
    its product with ``multiplier`` (column k sums digit i of the word times digit k - i)."""
    digits = [(multiplier >> (8 * i)) & 255 for i in range(4)]
    columns = np.zeros((32, 7), np.float32)
    for bit in range(32):
        for j, m in enumerate(digits):
            columns[bit, bit // 8 + j] = (1 << (bit % 8)) * m
    return columns


# Both Philox products of a round in one float32 MatMul: every column is an integer below 2^18
# (at most 32 terms, each below 2^15), so any summation order is exact.
_PRODUCT_COLUMNS = np.zeros((64, 14), np.float32)
_PRODUCT_COLUMNS[:32, :7], _PRODUCT_COLUMNS[32:, 7:] = (_digit_columns(m) for m in _MULTIPLIERS)
_BYTE_BITS = np.array([1 << k for k in range(8)], np.int32)


def _products(x0, x2):
    """The 64-bit products x0 * M0 and x2 * M1 of bit vectors [n, 32]: (low0, high0, low1, high1)."""
    columns = tf.cast(tf.matmul(tf.cast(tf.concat([x0, x2], -1), tf.float32), _PRODUCT_COLUMNS), tf.int32)
    columns = tf.reshape(columns, [-1, 2, 7])
    carry, digits = 0, []
    for k in range(7):  # carries stay below 2^11, so every quotient is small
        total = columns[:, :, k] + carry
        digits.append(tf.math.floormod(total, 256))
        carry = tf.math.floordiv(total, 256)
    bytes_ = tf.stack(digits + [carry], axis=-1)
    bits = tf.reshape(tf.math.floormod(tf.math.floordiv(bytes_[..., None], _BYTE_BITS), 2), [-1, 2, 64])
    return bits[:, 0, :32], bits[:, 0, 32:], bits[:, 1, :32], bits[:, 1, 32:]


def _philox(counter, key):
    """Philox-4x32-10 on words [n]: its four output words. Words flow as bit vectors, where xor is
    exact and cheap; the products read them as digits."""
    x = [to_bits(c) for c in counter]
    steps = [tf.constant(np.array([r * s for r in range(10)], np.uint64).astype(np.uint32).view(np.int32))
             for s in _KEY_STEPS]
    keys = [to_bits(k + step) for k, step in zip(key, steps)]  # [10, 32]: the key of every round
    for r in range(10):
        low0, high0, low1, high1 = _products(x[0], x[2])
        x = [xor_bits(xor_bits(high1, x[1]), keys[0][r]), low1, xor_bits(xor_bits(high0, x[3]), keys[1][r]), low0]
    return [from_bits(b) for b in x]


def _philox_bits(w, shape):
    size = math.prod(shape)
    blocks = -(-size // 4)
    low, high, carry = _add64(w[2], w[3], tf.range(blocks, dtype=tf.int32))
    top_low, top_high, _ = _add64(w[0], w[1], carry)
    words = _philox([low, high, top_low, top_high], (w[0], w[1]))
    bits = tf.reshape(tf.stack(words, axis=1), [4 * blocks])[:size]
    state_low, state_high, _ = _add64(w[2], w[3], blocks)
    return tf.reshape(bits, shape), (state_low, state_high)


def _halves(shape):
    """Where XLA's Threefry splits the output: (split axis, half shape)."""
    even = [i for i, d in enumerate(shape) if d % 2 == 0]
    axis = even[0] if even else int(np.argmax(shape))
    return axis, (*shape[:axis], -(-shape[axis] // 2), 1, *shape[axis + 1:])


def _threefry_bits(w, shape):
    if not shape:
        half_size, axis, half = 1, None, (1,)
    else:
        axis, half = _halves(shape)
        half_size = math.prod(half)
    low, high, _ = _add64(w[2], w[3], tf.reshape(tf.range(half_size, dtype=tf.int32), half))
    x0, x1 = threefry2x32(w[0], w[1], low, high)
    if axis is None:
        bits = tf.reshape(x0, [])
    else:
        bits = tf.concat([x0, x1], axis=axis + 1)
        rounded = (*shape[:axis], 2 * half[axis], *shape[axis + 1:])
        bits = tf.reshape(bits, rounded)[tuple(slice(0, d) for d in shape)]
    state_low, state_high, _ = _add64(w[2], w[3], half_size)
    return bits, (state_low, state_high)


_GENERATORS = {lax.RandomAlgorithm.RNG_DEFAULT: _philox_bits, lax.RandomAlgorithm.RNG_PHILOX: _philox_bits,
               lax.RandomAlgorithm.RNG_THREE_FRY: _threefry_bits}
_KEY = np.array([0x12345678, 0x9ABCDEF0, 0xFFFFFFFE, 0xFFFFFFFF], np.uint32)  # the counter carries


def _bits(shape, dtype=np.uint32, algorithm=lax.RandomAlgorithm.RNG_DEFAULT):
    return lambda key: lax.rng_bit_generator(key, shape, dtype, algorithm)


@lowering(lax.rng_bit_generator_p, dtypes=dtypes({"uint8", "uint16", "uint32"}, missing=(
    "64-bit random bits and uint64 keys need 64-bit words, which TFLite and TF.js do not have")), limitations=[
    Limitation(ALL_TARGETS, "the output shape is symbolic", "XLA's layout of the random bits depends on "
               "the shape's parity and size, which noxla fixes when it lowers", param="shape",
               when=lambda eqn: not all(isinstance(d, int) for d in eqn.params["shape"]),
               workaround="draw the bits at a fixed shape and slice them"),
    webgl_word_limitation(
        "always", "XLA's generators compute on whole 32-bit words (a 128-bit counter with carries, Philox's "
        "products of words), not on the 16-bit limbs noxla's threefry uses", lambda eqn: True,
        "draw with jax.random's default threefry keys (jax.random.key(seed)), which noxla computes on 16-bit "
        "limbs exactly on WebGL"),
], cases=[
    case("philox", _bits((3, 5)), u32(4, low=0, high=2 ** 32 - 1)),
    case("philox_counter_carries", _bits((2, 7), algorithm=lax.RandomAlgorithm.RNG_PHILOX), _KEY),
    case("philox_u8_scalar", _bits((), np.uint8), _KEY),
    case("threefry_even", _bits((4, 3), algorithm=lax.RandomAlgorithm.RNG_THREE_FRY), _KEY),
    case("threefry_odd_u16", _bits((3, 5), np.uint16, lax.RandomAlgorithm.RNG_THREE_FRY),
         u32(4, low=0, high=2 ** 32 - 1)),
    case("threefry_scalar", _bits((), algorithm=lax.RandomAlgorithm.RNG_THREE_FRY), _KEY),
    case("symbolic_shape_rejected", lambda k, x: lax.rng_bit_generator(k, x.shape)[1], _KEY, np.zeros(3, np.float32),
         polymorphic_shapes=(None, "b")),
])
def lower_rng_bit_generator(ctx, key, *, shape, dtype, algorithm):
    w = tf.unstack(as_word(key))
    bits, (low, high) = _GENERATORS[algorithm](w, tuple(int(d) for d in shape))
    if np.dtype(dtype).itemsize < 4:
        bits = tf.math.floormod(bits, 1 << (8 * np.dtype(dtype).itemsize))
    new_key = tf.stack([w[0], w[1], low, high])
    return [tf.cast(new_key, ctx.tf_dtype(ctx.avals_out[0].dtype)), tf.cast(bits, ctx.tf_dtype(ctx.avals_out[1].dtype))]
