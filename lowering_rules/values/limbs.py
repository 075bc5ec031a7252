"""Exact 32-bit word arithmetic for runtimes without exact 32-bit bit operations.

TF.js has no xor or shift ops and its wasm backend computes int32 FloorDiv through float32 (it
rounds beyond 2^24); TFLite has no bitwise AND. What every runtime does exactly on int32 (checked
in TF, LiteRT, TF.js cpu and wasm): Add, Sub and Mul by a power of two wrap modulo 2^32, FloorMod
by a power of two, Sum of disjoint powers of two, and FloorDiv whose quotient has at most 24
significant bits. From those:

- a word is an int32 holding the uint32's bits (Cast between uint32 and int32 wraps);
- ``to_bits`` splits a word into 16-bit limbs (``lo = w mod 2^16``; ``(w - lo) / 2^16`` has 16
  significant bits) and the limbs into bits, an int32 0/1 vector on a new last axis, LSB first;
- ``from_bits`` sums the bits with weights 2^k (bit 31 weighs -2^31: no partial sum overflows);
- addition is int32 Add, xor of bit vectors is (a - b)^2, a rotation is a gather of bits.
"""
from __future__ import annotations

import numpy as np

from lowering_rules.core.lazy_tensorflow import tf

_LIMB = 1 << 16


def as_word(x):
    """uint32 (or any 32-bit integer) as the int32 with the same bits."""
    return x if x.dtype == tf.int32 else tf.cast(x, tf.int32)


def to_limbs(word):
    """(hi, lo): the word's high and low 16 bits; hi is in [-2^15, 2^15) (the int32's sign is
    kept), and floor division and modulo by powers of two still read its two's complement bits."""
    word = as_word(word)
    lo = tf.math.floormod(word, _LIMB)
    return tf.math.floordiv(word - lo, _LIMB), lo


def to_bits(word):
    hi, lo = to_limbs(word)
    limbs = tf.stack([lo, hi], axis=-1)
    weights = tf.constant([1 << k for k in range(16)], tf.int32)
    bits = tf.math.floormod(tf.math.floordiv(tf.expand_dims(limbs, -1), weights), 2)
    shape = lo.shape.as_list() + [32] if lo.shape.is_fully_defined() else \
        tf.concat([tf.shape(lo), [32]], 0)
    return tf.reshape(bits, shape)


def from_bits(bits):
    weights = tf.constant(np.array([1 << k for k in range(32)], np.uint32).view(np.int32))
    return tf.reduce_sum(bits * weights, axis=-1)


def xor_bits(a, b):
    diff = a - b
    return diff * diff


def rotate_left_bits(bits, r: int):
    """Bit k of the result is bit (k - r) mod 32 of the word."""
    return tf.gather(bits, [(k - r) % 32 for k in range(32)], axis=-1)


def xor(a, b):
    """Words a ^ b."""
    return from_bits(xor_bits(to_bits(a), to_bits(b)))


def shift_right_logical(word, s):
    """word >>> s for shift amounts s in [0, 32) (int32 tensors); other amounts give garbage.

    Limbs keep every quotient small: for s < 16 the result is (hi >> s, lo >> s) with hi's low s
    bits moved into lo's top; for s >= 16 it is hi >> (s - 16)."""
    hi, lo = to_limbs(word)
    hi = tf.math.floormod(hi, _LIMB)
    powers = tf.constant([1 << k for k in range(17)], tf.int32)
    low_shift = tf.clip_by_value(s, 0, 15)
    div = tf.gather(powers, low_shift)
    high_part = tf.math.floordiv(hi, div)
    moved = (hi - high_part * div) * tf.gather(powers, 16 - low_shift)
    below16 = high_part * _LIMB + moved + tf.math.floordiv(lo, div)
    above16 = tf.math.floordiv(hi, tf.gather(powers, tf.clip_by_value(s - 16, 0, 15)))
    return tf.where(s < 16, below16, above16)
