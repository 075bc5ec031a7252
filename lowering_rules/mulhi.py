"""``mulhi`` (``lax.mulhi``): the high half of the double-width product of two integers.

No runtime has a double-width multiply for int32 (TF.js has no int64 at all, and its wasm backend
computes int32 products through float32, exact only below 2^24). So every partial product here
stays below 2^24:

- 8-bit operands: the full product fits in 16 bits; its high byte is a floor division by 2^8.
- 16-bit operands: ``b = 2^8 bh + bl``; ``floor(a b / 2^16) = floor((a bh + floor(a bl / 2^8)) / 2^8)``,
  and both partial products have at most 24 significant bits.
- 32-bit operands: the unsigned 64-bit product, schoolbook in 8-bit digits (column sums below
  2^19, carries propagated digit by digit), of which the top four digits are the result; a
  signed high word is the unsigned one minus ``b`` where ``a < 0`` and minus ``a`` where ``b < 0``
  (modulo 2^32, which int32 Add and Sub give exactly).

TF.js's WebGL backend rounds the operand words themselves (float32 textures): 32-bit mulhi is
rejected there up front (``webgl_word_limitation``).
"""
from __future__ import annotations

import numpy as np
from jax import lax

from lowering_rules.core.cases import case, i8, i32, u8
from lowering_rules.core.dtype_support import INTEGERS, dtypes
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.values.limb_values import has_word, webgl_word_limitation
from lowering_rules.values.limbs import as_word, to_limbs

_I32_EDGES = np.array([0, 1, -1, 2 ** 31 - 1, -2 ** 31, 65535, -65536, 123456789, -987654321, 46341], np.int32)
_U32_EDGES = np.array([0, 1, 2 ** 32 - 1, 2 ** 31, 2 ** 31 - 1, 65535, 65536, 0x9E3779B9, 3000000000, 77777],
                      np.uint32)
_I16_EDGES = np.array([0, 1, -1, 32767, -32768, 255, 256, -257, 12345, -23456], np.int16)
_U16_EDGES = np.array([0, 1, 65535, 32768, 255, 256, 40000, 65280, 12345, 511], np.uint16)


def _digits(word):
    """The four bytes of a 32-bit word (int32 bits), least significant first, each in [0, 256)."""
    hi, lo = to_limbs(word)
    hi = tf.math.floormod(hi, 1 << 16)
    return [tf.math.floormod(lo, 256), tf.math.floordiv(lo, 256),
            tf.math.floormod(hi, 256), tf.math.floordiv(hi, 256)]


def unsigned_product(a, b):
    """(high, low): the words of the unsigned 64-bit product of two 32-bit words (int32 bits)."""
    da, db = _digits(a), _digits(b)
    carry, digits = None, []
    for k in range(7):
        column = [da[i] * db[k - i] for i in range(max(0, k - 3), min(3, k) + 1)]
        total = column[0]
        for term in column[1:]:
            total = total + term
        if carry is not None:
            total = total + carry
        carry = tf.math.floordiv(total, 256)
        digits.append(tf.math.floormod(total, 256))
    top = carry - 256 * tf.cast(carry >= 128, tf.int32)  # the top byte as the int32's signed top
    high = digits[4] + digits[5] * 256 + digits[6] * 65536 + top * (1 << 24)
    low_top = digits[3] - 256 * tf.cast(digits[3] >= 128, tf.int32)
    return high, digits[0] + digits[1] * 256 + digits[2] * 65536 + low_top * (1 << 24)


def _high_word(a, b, signed: bool):
    a, b = as_word(a), as_word(b)
    high, _ = unsigned_product(a, b)
    if signed:
        zero = tf.zeros_like(a)
        high = high - tf.where(a < 0, b, zero) - tf.where(b < 0, a, zero)
    return high


@lowering(lax.mulhi_p, dtypes=dtypes(INTEGERS - {"int64", "uint64"}, missing=(
    "the high half of a 64-bit product needs 128-bit arithmetic, which no target has")), limitations=[
    webgl_word_limitation(
        "32-bit integer operands", "mulhi's operands are whole words (a hash's constants, a divisor's 32-bit "
        "reciprocal), which WebGL rounds before the exact 8-bit digit products see them", has_word,
        "compute the high word outside the exported function, or run the model on TF.js's wasm or cpu backend"),
], cases=[
    case("i32_edges", lax.mulhi, _I32_EDGES, np.roll(_I32_EDGES, 3)),
    case("i32_random", lax.mulhi, i32(4, 5, low=-2 ** 31, high=2 ** 31 - 1), i32(4, 5, low=-2 ** 31, high=2 ** 31 - 1)),
    case("u32_edges", lax.mulhi, _U32_EDGES, np.roll(_U32_EDGES, 4)),
    case("i16_edges", lax.mulhi, _I16_EDGES, np.roll(_I16_EDGES, 2)),
    case("u16_edges", lax.mulhi, _U16_EDGES, np.roll(_U16_EDGES, 5)),
    case("i8", lax.mulhi, i8(3, 4, low=-128, high=127), i8(3, 4, low=-128, high=127)),
    case("u8", lax.mulhi, u8(6, low=0, high=255), u8(6, low=0, high=255)),
    case("scalar_operand", lambda x: lax.mulhi(x, np.int32(-7)), i32(5, low=-2 ** 31, high=2 ** 31 - 1)),
])
def lower_mulhi(ctx, x, y):
    shape = ctx.out_shape()
    dtype = np.dtype(ctx.avals_out[0].dtype)
    signed = np.issubdtype(dtype, np.signedinteger)
    a, b = (tf.broadcast_to(v, shape) for v in (x, y))
    if dtype.itemsize == 4:
        return tf.cast(_high_word(a, b, signed), ctx.out_dtype)
    a, b = tf.cast(a, tf.int32), tf.cast(b, tf.int32)
    if dtype.itemsize == 1:
        return tf.cast(tf.math.floordiv(a * b, 256), ctx.out_dtype)
    b_high, b_low = tf.math.floordiv(b, 256), tf.math.floormod(b, 256)
    high = tf.math.floordiv(a * b_high + tf.math.floordiv(a * b_low, 256), 256)
    return tf.cast(high, ctx.out_dtype)
