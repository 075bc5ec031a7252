"""uint32 values inside a lowering as two 16-bit limbs, so that no whole 32-bit word is ever computed.

TF.js's WebGL (and WebGPU) backend keeps int32 tensors in float32 textures, exact only below 2^24
in magnitude: a uint32 carried as an int32 word (random bits, a split key) loses its low bits
there, in every op that reads, computes or stores it. So the PRNG path computes on ``Limbs``: the
high and low 16 bits of each word, each an int32 tensor in [0, 2^16). Every intermediate value of
the operations below stays below 2^24 (sums of limbs, limbs times powers of two that keep them
below 2^16, 8-bit table indices), which every runtime computes exactly.

- ``threefry2x32`` returns ``Limbs``; ``xor``/``or``/``and``/``not``, ``shift_right_logical`` and
  ``shift_left`` by a constant, ``add``, ``convert_element_type`` to float32 or narrower unsigned
  integers and ``bitcast_convert_type`` to float32 take and give them (``LIMB_RULES``): JAX's
  samplers (bits, uniform, normal, bernoulli, categorical, split, fold_in) never form a word.
- Rules that only move values (slice, concatenate, reshape, select_n, ...) are applied to each limb
  (``apply_per_limb``); call-like rules (jit, the key rules) hand them to their body untouched.
- Any other rule, a loop or branch body's results and the program's outputs get the word back
  (``materialize``): exact in every runtime but WebGL/WebGPU, where a uint32 value that leaves the
  limb path is exact only while its int32 carrier is below 2^24 in magnitude. The rules that compute
  on whole words by nature declare a limitation for TF.js on WebGL (``webgl_word_limitation``).

A word enters the limb path (``of``) from a constant (split in numpy) or a tensor (floor modulo and
division by 2^16: exact on WebGL for words whose int32 carrier is below 2^24 in magnitude, such as
the key ``jax.random.key(seed)`` makes from a seed below 2^24).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from lowering_rules.core.helpers import int32_constant, int_info, wrap_to
from lowering_rules.core.key_types import is_key
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.vocabulary import Limitation, Target

_LIMB = 1 << 16


@dataclasses.dataclass(frozen=True)
class Limbs:
    """A uint32 tensor as its high and low 16 bits (int32 tensors in [0, 2^16))."""
    hi: tf.Tensor
    lo: tf.Tensor

    def __post_init__(self):
        for name in ("hi", "lo"):  # per-limb rules may hand back uint32 tensors (TF, TFLite)
            part = getattr(self, name)
            if part.dtype != tf.int32:
                object.__setattr__(self, name, tf.cast(part, tf.int32))


def is_limbs(x) -> bool:
    return isinstance(x, Limbs)


def any_limbs(values) -> bool:
    return any(isinstance(v, Limbs) for v in values)


def of(x) -> Limbs:
    """A uint32 value (Limbs, or a tensor holding the word's bits) as Limbs."""
    if isinstance(x, Limbs):
        return x
    static = tf.get_static_value(x)
    if static is not None:  # split constants in numpy: exact however large the word
        word = np.asarray(static).astype(np.int64) % (1 << 32)
        return Limbs(tf.constant((word >> 16).astype(np.int32)), tf.constant((word & 0xFFFF).astype(np.int32)))
    word = x if x.dtype == tf.int32 else tf.cast(x, tf.int32)
    limb = int32_constant(_LIMB)
    lo = tf.math.floormod(word, limb)
    return Limbs(tf.math.floormod(tf.math.floordiv(word - lo, limb), limb), lo)


def constant(value: int) -> Limbs:
    value = int(value) % (1 << 32)
    return Limbs(tf.constant(value >> 16, tf.int32), tf.constant(value & 0xFFFF, tf.int32))


def materialize(x, word: tf.DType):
    """The uint32 word in its carrier dtype ``word`` (``ctx.tf_dtype(np.uint32)``: uint32, or int32 bits
    for TF.js); other values as they are."""
    if not isinstance(x, Limbs):
        return x
    signed_hi = x.hi - _LIMB * tf.cast(x.hi >= (1 << 15), tf.int32)  # no int32 product overflows
    return tf.cast(signed_hi * _LIMB + x.lo, word)


def broadcast(x: Limbs, shape) -> Limbs:
    return Limbs(tf.broadcast_to(x.hi, shape), tf.broadcast_to(x.lo, shape))


# ----------------------------------------------------------------------------- word arithmetic

def add(a: Limbs, b: Limbs) -> Limbs:
    """a + b modulo 2^32: limb sums below 2^17, the low limb's carry moved into the high one."""
    lo, limb = a.lo + b.lo, int32_constant(_LIMB)
    carry = tf.math.floordiv(lo, limb)
    return Limbs(tf.math.floormod(a.hi + b.hi + carry, limb), lo - carry * limb)


# xor of two bytes x, y at 256 x + y (a 256 KiB int32 table, one per program).
_XOR_TABLE = np.bitwise_xor.outer(np.arange(256), np.arange(256)).astype(np.int32).reshape(-1)


def xor(ctx, a: Limbs, b: Limbs) -> Limbs:
    return unpack(packed_xor(ctx, pack(a), pack(b)))


# ----------------------------------------------------------------------------- packed words

# A chain of word operations (threefry's 20 rounds) runs on words packed as one int32 tensor with a
# last axis of 2 (high limb, low limb): each step is then one op on both limbs, not one per limb
# (40% fewer ops, graphs that build and convert faster and run with fewer kernel launches). Their
# constants are made once per graph (``int32_constant``): a Const costs as much to build as an op.

def pack(x: Limbs):
    return tf.stack([x.hi, x.lo], axis=-1)


def unpack(p) -> Limbs:
    hi, lo = tf.unstack(p, num=2, axis=-1)
    return Limbs(hi, lo)


def packed_constant(value: int):
    value = int(value) % (1 << 32)
    return int32_constant([value >> 16, value & 0xFFFF])


def _swap_limbs(p):
    return tf.reverse(p, int32_constant([-1]))


def packed_add(*terms):
    """The sum of packed words modulo 2^32, normalized once: the low limbs' carry (below n for n
    terms) moves to the high limb by a reverse. The high limbs' sum is below n 2^16 <= 2^(16+k), so
    one division by [2^(16+k), 2^16] gives [0, carry]; every value stays below 2^24."""
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    divisors = int32_constant([1 << (16 + (len(terms) - 1).bit_length()), _LIMB])
    return tf.math.floormod(total + _swap_limbs(tf.math.floordiv(total, divisors)), int32_constant(_LIMB))


def packed_rotate_left(p, r: int):
    """The packed word rotated left by a constant r: limbs swap for r >= 16, and each takes its top
    bits from the other; every product stays below 2^16."""
    swapped = r % 32 >= 16
    r %= 16
    if r == 0:
        return _swap_limbs(p) if swapped else p
    other = _swap_limbs(p)
    kept, moved = (other, p) if swapped else (p, other)
    keep = int32_constant(1 << (16 - r))
    return tf.math.floormod(kept, keep) * int32_constant(1 << r) + tf.math.floordiv(moved, keep)


def packed_xor(ctx, a, b):
    """a ^ b on packed words, both limbs at once: each limb's high bytes and low bytes are looked up
    at 256 x + y (two gathers); every value stays below 2^16. (Fewer ops are possible, but not
    faster ones: a gather_nd of byte pairs or a single gather joined by reduce_sum runs slower in
    LiteRT than these 11 elementwise ops and gathers.)"""
    table, byte, axis = ctx.lowering.constant(_XOR_TABLE), int32_constant(256), int32_constant(0)
    a_low, b_low = tf.math.floormod(a, byte), tf.math.floormod(b, byte)
    high = tf.gather(table, a - a_low + tf.math.floordiv(b, byte), axis=axis)   # 256 (a >> 8) + (b >> 8)
    low = tf.gather(table, a_low * byte + b_low, axis=axis)
    return high * byte + low


_POW16 = np.array([1 << k for k in range(16)], np.int32)


def _combine_limb(a, b, combine):
    """A bitwise combination of two 16-bit limbs through their bits (a new last axis of 16)."""
    powers = tf.constant(_POW16)

    def bits(x):
        return tf.math.floormod(tf.math.floordiv(tf.expand_dims(x, -1), powers), 2)
    return tf.reduce_sum(combine(bits(a), bits(b)) * powers, axis=-1)


def shift_right(x: Limbs, s: int) -> Limbs:
    """x >> s (logical) for a constant s."""
    zero = tf.zeros_like(x.hi)
    if s >= 32:
        return Limbs(zero, zero)
    if s >= 16:
        return Limbs(zero, tf.math.floordiv(x.hi, 1 << (s - 16)))
    if s == 0:
        return x
    return Limbs(tf.math.floordiv(x.hi, 1 << s),
                 tf.math.floormod(x.hi, 1 << s) * (1 << (16 - s)) + tf.math.floordiv(x.lo, 1 << s))


def shift_left(x: Limbs, s: int) -> Limbs:
    """x << s modulo 2^32 for a constant s."""
    zero = tf.zeros_like(x.hi)
    if s >= 32:
        return Limbs(zero, zero)
    if s >= 16:
        return Limbs(tf.math.floormod(x.lo, 1 << (32 - s)) * (1 << (s - 16)), zero)
    if s == 0:
        return x
    return Limbs(tf.math.floormod(x.hi, 1 << (16 - s)) * (1 << s) + tf.math.floordiv(x.lo, 1 << (16 - s)),
                 tf.math.floormod(x.lo, 1 << (16 - s)) * (1 << s))


def to_float32(x: Limbs):
    """The uint32 value as float32, rounded once as a direct conversion rounds (hi 2^16 is exact)."""
    return tf.cast(x.hi, tf.float32) * float(_LIMB) + tf.cast(x.lo, tf.float32)


# ----------------------------------------------------------------------------- rules on Limbs

def _static_shift(s):
    value = tf.get_static_value(s)
    if value is None or np.ndim(value) != 0:
        return None
    value = int(np.asarray(value).astype(np.int64)) % (1 << 32)  # a uint32 amount carried as int32
    return value


def is_u32(aval) -> bool:
    return not is_key(aval) and np.dtype(aval.dtype) == np.uint32


def _binary(ctx, x, y):
    """Both operands as Limbs, when the primitive computes on uint32 words; else None."""
    if not all(map(is_u32, ctx.avals_in)):
        return None
    return of(x), of(y)


def _bitwise_rule(combine_bits, identity: int, absorbing: int):
    """``identity``/``absorbing``: the limb value that leaves the other limb as it is / gives itself
    (or: 0 / 0xFFFF, and: 0xFFFF / 0), so a constant mask such as uniform's exponent costs nothing."""
    def combine(a, b):
        for const, other in ((a, b), (b, a)):
            value = tf.get_static_value(const)
            if value is not None and np.all(value == identity):
                return other
            if value is not None and np.all(value == absorbing):
                return tf.zeros_like(other) + const
        return _combine_limb(a, b, combine_bits)

    def lower(ctx, x, y):
        operands = _binary(ctx, x, y)
        if operands is None:
            return NotImplemented
        a, b = operands
        return broadcast(Limbs(combine(a.hi, b.hi), combine(a.lo, b.lo)), ctx.out_shape())
    return lower


def _lower_xor(ctx, x, y):
    operands = _binary(ctx, x, y)
    return NotImplemented if operands is None else xor(ctx, *operands)


def _lower_not(ctx, x):
    if not is_u32(ctx.avals_in[0]):
        return NotImplemented
    x = of(x)
    return Limbs(_LIMB - 1 - x.hi, _LIMB - 1 - x.lo)


def _lower_add(ctx, x, y):
    operands = _binary(ctx, x, y)
    return NotImplemented if operands is None else add(*operands)


def _shift_rule(shift):
    def lower(ctx, x, s):
        amount = _static_shift(s)
        if not is_u32(ctx.avals_in[0]) or amount is None:
            return NotImplemented
        return broadcast(shift(of(x), amount), ctx.out_shape())
    return lower


def _lower_convert(ctx, x, *, new_dtype, weak_type):
    target = np.dtype(new_dtype)
    if not is_u32(ctx.avals_in[0]):
        return NotImplemented
    x = of(x)
    if target == np.uint32:
        return x
    if target == np.float32:
        return to_float32(x)
    if target in (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.int8), np.dtype(np.int16)):
        bits, signed = int_info(tf.as_dtype(target))
        return wrap_to(ctx, x.lo, bits, signed)  # the low 8 or 16 bits
    if target == np.bool_:
        return tf.logical_or(tf.not_equal(x.hi, 0), tf.not_equal(x.lo, 0))
    return NotImplemented


# The Limbs variants of rules that compute on uint32 words (more are added by the rules that
# produce Limbs: threefry2x32, bitcast_convert_type, the key rules). Each returns NotImplemented
# for what it does not cover, which then gets the materialized words.
LIMB_RULES = {
    "xor": _lower_xor,
    "or": _bitwise_rule(lambda a, b: a + b - a * b, 0, _LIMB - 1),
    "and": _bitwise_rule(lambda a, b: a * b, _LIMB - 1, 0),
    "not": _lower_not,
    "add": _lower_add,
    "shift_right_logical": _shift_rule(shift_right),
    "shift_left": _shift_rule(shift_left),
    "convert_element_type": _lower_convert,
}

# Rules that take Limbs themselves, and whose sub-programs may return them: call-like rules, whose
# operands go to their body untouched, and the rules that register (threefry2x32, the key rules,
# bitcast_convert_type).
NATIVE = {"jit", "pjit", "closed_call", "remat2"}


def register_native(*names: str) -> None:
    NATIVE.update(names)


def keeps_limbs(name: str) -> bool:
    return name in NATIVE


def apply_per_limb(lower_part, avals_in, avals_out, invals) -> list:
    """A rule that only moves values, applied to the high limbs and to the low limbs of its uint32
    operands (other operands unchanged); its uint32 results are Limbs again. Plain uint32 avals are
    handed to the rule as int32 ones (limbs are int32); key avals stay (key data are per-word)."""
    def part_aval(aval):
        return aval.update(dtype=np.dtype(np.int32)) if is_u32(aval) else aval

    def carried(aval) -> bool:
        return is_key(aval) or is_u32(aval)

    parts = []
    for part in ("hi", "lo"):
        operands = [getattr(of(x), part) if carried(a) else x for a, x in zip(avals_in, invals)]
        parts.append(lower_part([part_aval(a) for a in avals_in], [part_aval(a) for a in avals_out], operands))
    return [Limbs(h, lo) if carried(a) else h for a, h, lo in zip(avals_out, *parts)]


# Bit operations on uint32 words take the limb path even from plain words (a key's halves joined
# by ``(hi << 16) | lo``, a mask): their results are then exact on WebGL too. So do products and
# remainders in TF.js (limb_arithmetic.py), which has no other exact way to compute them.
_WORD_OPS = frozenset({"xor", "or", "and", "not", "shift_left", "shift_right_logical", "mul", "rem"})


def computes_on_limbs(name: str, avals_in) -> bool:
    return name in _WORD_OPS and any(is_u32(a) for a in avals_in)


def lower_with_limbs(name: str, ctx, invals, params):
    """The Limbs variant of a rule for these operands, or NotImplemented."""
    rule = LIMB_RULES.get(name)
    return NotImplemented if rule is None else rule(ctx, *invals, **params)


# ----------------------------------------------------------------------------- what WebGL cannot run

# What noxla promises on TF.js's WebGL backend: an int32 value (a uint32 carried as its int32 bits
# too) is exact while it is within +-2^24, since WebGL keeps it in a float32 texture. Values are data,
# so the check cannot see them at the program's inputs or in arithmetic; it rejects the rules that
# compute on whole 32-bit words by nature, where the limb path above does not keep them in 16 bits.
WEBGL_WORDS = ("TF.js's WebGL backend keeps int32 tensors in float32 textures, exact only within "
               "+-2^24 (24-bit significands)")


def webgl_word_limitation(condition: str, why: str, when, workaround: str) -> Limitation:
    """A limitation of TF.js on WebGL only (``Target.TFJS_WEBGL``): the rule forms whole 32-bit words."""
    return Limitation((Target.TFJS_WEBGL,), condition, f"{WEBGL_WORDS}; {why}", when=when, param="dtype",
                      workaround=workaround)


def has_word(eqn) -> bool:
    """Whether an application has a 32-bit integer operand or result (key data count as uint32)."""
    return any(np.issubdtype(d, np.integer) and d.itemsize == 4 for d in eqn.dtypes)


def _float32_rounds(value) -> bool:
    """Whether float32 cannot hold this integer exactly (more than 24 significant bits)."""
    value = int(np.asarray(value).astype(np.int64))
    return int(np.float32(value)) != value


def wide_literal(dtypes):
    """A predicate: some operand of one of ``dtypes`` is a literal that float32 rounds (a hash constant:
    WebGL rounds it on upload, and a sum or product with it lies beyond 2^24)."""
    names = {np.dtype(d) for d in dtypes}

    def when(eqn) -> bool:
        return any(lit is not None and np.dtype(a.dtype) in names and np.ndim(lit) == 0 and _float32_rounds(lit)
                   for a, lit in zip(eqn.avals_in, eqn.literals))
    return when


def shift_on_limbs(eqn) -> bool:
    """Whether a shift takes the limb path: a uint32 operand shifted by a literal amount (``_shift_rule``
    needs the amount statically; the check sees it when the jaxpr spells it as a literal)."""
    return is_u32(eqn.avals_in[0]) and eqn.literal(1) is not None


__all__ = ["WEBGL_WORDS", "webgl_word_limitation", "has_word", "shift_on_limbs", "wide_literal",
           "Limbs", "is_limbs", "any_limbs", "of", "constant", "materialize", "add", "xor",
           "shift_right", "shift_left", "to_float32", "pack", "unpack", "packed_constant", "packed_add",
           "packed_rotate_left", "packed_xor", "LIMB_RULES", "NATIVE", "register_native", "keeps_limbs",
           "apply_per_limb", "lower_with_limbs", "computes_on_limbs", "is_u32"]
