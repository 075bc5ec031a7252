"""JAX's PRNG: key construction, splitting, folding and random bits, bit-exact with JAX.

- ``threefry2x32``, the hash every threefry key operation ends in, is computed in exact
  16-bit limb arithmetic (below). ``iota_2x32_shape`` is the 64-bit counter it hashes.
- ``random_seed``/``random_split``/``random_fold_in``/``random_bits``/``raw_bits`` are lowered the
  way JAX lowers them: the key implementation's own function (``impl.seed``, ``impl.split``, ...) is
  traced on the key data and that jaxpr is lowered (it applies threefry2x32, iota_2x32_shape,
  xor, shifts). It reads ``jax_threefry_partitionable`` as JAX does, so both settings match.
- JAX 0.12.1 gave ``random_bits`` a ``num_streams`` parameter and several results (that many
  independent arrays; for threefry, 2 streams are the two words of the counter hash that one stream
  xors together, 4 are those of two subkeys), and added ``raw_bits`` (the key type's raw uint32
  streams, bound by no public API). Both are traced from JAX's own functions too
  (``jax_compat.random_bits_function``, ``raw_bits_function``), so every stream count matches.
- ``random_wrap``/``random_unwrap`` change only the type: a key flows as its key data
  (``lowering_rules/core/key_types.py``).

The hash runs on exact 32-bit word arithmetic (``lowering_rules/values/limbs.py``): TF.js has no xor or
shifts and its wasm backend divides int32 through float32, and TFLite has no bitwise AND.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, newer_jax, u32
from lowering_rules.core.dtype_support import NUMERIC, dtypes
from lowering_rules.core.jax_compat import RANDOM_BITS_STREAMS, random_bits_function, raw_bits_function, raw_bits_p
from lowering_rules.core.jax_compat import prng as jax_prng
from lowering_rules.core.jax_compat import threefry2x32 as jax_threefry
from lowering_rules.core.key_types import physical_aval
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.values import limb_values
from lowering_rules.values.limb_values import Limbs, packed_add, packed_rotate_left, packed_xor
from lowering_rules.values.limbs import from_bits, rotate_left_bits, to_bits, xor_bits

# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"):
# the rotation schedule, and the key-schedule parity constant.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def threefry2x32_limbs(ctx, k1: Limbs, k2: Limbs, x1: Limbs, x2: Limbs) -> tuple[Limbs, Limbs]:
    """The Threefry-2x32 block function on words held as 16-bit limbs (limb_values.py), packed
    (``limb_values.pack``: one op per step for both limbs): additions carry between limbs,
    rotations move bits between them, xor looks bytes up; no intermediate value reaches 2^24, so
    WebGL's float32 textures hold every one exactly. A key injection into x0 is summed with the
    next round's x0 + x1 (one carry for three words); into x1, with its constant likewise."""
    k1, k2, x1, x2 = map(limb_values.pack, (k1, k2, x1, x2))
    keys = (k1, k2, packed_xor(ctx, packed_xor(ctx, k1, k2), limb_values.packed_constant(_PARITY)))
    x0_terms, x1 = (x1, keys[0]), packed_add(x2, keys[1])
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x0 = packed_add(*x0_terms, x1)
            x0_terms = (x0,)
            x1 = packed_xor(ctx, x0, packed_rotate_left(x1, r))
        x0_terms = (x0, keys[(block + 1) % 3])
        x1 = packed_add(x1, keys[(block + 2) % 3], limb_values.packed_constant(block + 1))
    return limb_values.unpack(packed_add(*x0_terms)), limb_values.unpack(x1)


def threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 block function on int32 words (exact in every runtime but WebGL/WebGPU;
    the rule uses ``threefry2x32_limbs``). A round is x0 += x1; x1 = rotl(x1, r) ^ x0:
    x0 stays a word (int32 Add wraps exactly), x1 stays a bit vector (rotation and xor are exact)."""
    parity = tf.constant(np.array(_PARITY, np.uint32).view(np.int32))
    keys = (k1, k2, from_bits(xor_bits(xor_bits(to_bits(k1), to_bits(k2)), to_bits(parity))))
    x0, x1 = x1 + keys[0], x2 + keys[1]
    for block in range(5):
        bits1 = to_bits(x1)
        for r in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            bits1 = xor_bits(to_bits(x0), rotate_left_bits(bits1, r))
            x1 = from_bits(bits1)
        x0 = x0 + keys[(block + 1) % 3]
        x1 = x1 + keys[(block + 2) % 3] + (block + 1)
    return x0, x1


def _as_uniform(bits):
    """JAX's uniform sampler on 32 random bits: 23 of them as the mantissa of a float in [1, 2)."""
    return lax.bitcast_convert_type(lax.shift_right_logical(bits, np.uint32(9)) | np.uint32(0x3F800000),
                                    np.float32) - 1.0


# Each PRNG rule's first case (the one tests/test_rules.py also runs on Chromium's WebGL) draws
# samples as WebGL users must: from inputs below 2^24 (WebGL stores int32 in float32 textures and
# rounds larger ones on upload), to float outputs, on enough elements to run on the GPU.
_U32_EDGES = np.array([0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 0x9E3779B9, 0x1BD11BDA, 65535, 65536],
                      np.uint32)


def _threefry(k1, k2, x1, x2):
    return jax_threefry.threefry2x32_p.bind(k1, k2, x1, x2)


@lowering(jax_threefry.threefry2x32_p, cases=[
    case("uniform_small_words", lambda k, x: jnp.stack([_as_uniform(y) for y in _threefry(k[0], k[1], x[0], x[1])]),
         np.array([7, 42], np.uint32), u32(2, 256, low=0, high=2 ** 24 - 1)),
    case("edges", _threefry, _U32_EDGES, np.roll(_U32_EDGES, 1), np.roll(_U32_EDGES, 3), np.roll(_U32_EDGES, 5)),
    case("scalar_key", lambda k, x: _threefry(k[0], k[1], x[0], x[1]),
         np.array([0, 42], np.uint32), u32(2, 5, low=0, high=2 ** 32 - 1)),
    # The non-partitionable threefry's bits of an odd count: both words joined, the padding cut off
    # (a slice of one joined part, which the hash leaves as 16-bit limbs).
    case("joined_then_sliced", lambda k, x: jnp.concatenate(_threefry(k[0], k[1], x[0], x[1]))[:1],
         np.array([7, 42], np.uint32), np.array([[0], [1]], np.uint32)),
])
def lower_threefry2x32(ctx, k1, k2, x1, x2):
    # Operands (words or Limbs) broadcast against each other (a scalar key with a counter array, ...).
    shape = ctx.out_shape(0)
    k1, k2, x1, x2 = map(limb_values.of, (k1, k2, x1, x2))
    return list(threefry2x32_limbs(ctx, k1, k2, limb_values.broadcast(x1, shape), limb_values.broadcast(x2, shape)))


@lowering(jax_prng.iota_2x32_shape_p, cases=[
    case("matrix", lambda x: jax_prng.iota_2x32_shape((3, 4))[1] + x, u32(3, 4)),
])
def lower_iota_2x32_shape(ctx, *, shape):
    # The 64-bit counter's high word is 0: a tensor has fewer than 2^32 elements.
    dims = [ctx.dim(d) for d in shape]
    size = 1
    for d in dims:
        size = size * d
    low = tf.reshape(tf.range(size, dtype=tf.int32), ctx.out_shape(1))
    return [tf.cast(tf.zeros_like(low), ctx.out_dtype), tf.cast(low, ctx.out_dtype)]


# ----------------------------------------------------------------------------- key operations

def _lower_through_impl(ctx, fn, *operands):
    """Lower ``fn`` (a key implementation's function on key data) as JAX does: trace it on the
    operands' physical avals, then lower that jaxpr like any sub-program (a list of its results)."""
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in map(physical_aval, ctx.avals_in)]
    return ctx.sub_program(jax.make_jaxpr(fn)(*specs))(*operands)


_SEED = np.array(20260522, np.int32)
_SMALL_SEED = np.array(9_876_543, np.int32)  # below 2^24: exact in WebGL's float32 textures
_KEY = np.array([0x12345678, 0x9ABCDEF0], np.uint32)


# 64-bit seeds would need the implementation's 64-bit shifts, which noxla's bit rules do not lower.
@lowering(jax_prng.random_seed_p, dtypes=dtypes(NUMERIC - {"int64", "uint64"}, missing=(
    "seeds are split into 32-bit words by shifts noxla lowers for integers of at most 32 bits")), cases=[
    # Negative seeds above -2^24 too: the key word's int32 carrier is the seed itself.
    case("normal_from_seeds", lambda s: jax.vmap(lambda k: jax.random.normal(jax.random.key(k), (64,)))(s),
         np.array([0, 1, -5, 9_876_543, -(2 ** 24 - 1)], np.int32)),
    case("edges", lambda s: jax.random.key_data(jax.vmap(jax.random.key)(s)),
         np.array([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 123456789], np.int32)),
    case("legacy_uniform", lambda s: jax.random.uniform(jax.random.PRNGKey(s), (5,)), _SEED),
])
def lower_random_seed(ctx, seeds, *, impl):
    fn = jax_prng.iterated_vmap_unary(len(ctx.avals_in[0].shape), impl.seed)
    return _lower_through_impl(ctx, fn, seeds)[0]


@lowering(jax_prng.random_split_p, cases=[
    case("uniform_after_split", lambda s: jax.random.uniform(jax.random.split(jax.random.key(s), 3)[2], (256,)),
         _SMALL_SEED),
    case("typed", lambda s: jax.random.key_data(jax.random.split(jax.random.key(s), 3)), _SEED),
    case("batched_keys", lambda k: jax.vmap(jax.random.split)(k), u32(4, 2, low=0, high=2 ** 32 - 1)),
])
def lower_random_split(ctx, keys, *, shape):
    impl = ctx.avals_in[0].dtype._impl
    fn = jax_prng.iterated_vmap_unary(len(ctx.avals_in[0].shape), lambda k: impl.split(k, shape))
    return _lower_through_impl(ctx, fn, keys)[0]


@lowering(jax_prng.random_fold_in_p, cases=[
    case("normal_after_fold_in", lambda s, m: jax.random.normal(jax.random.fold_in(jax.random.key(s), m), (256,)),
         _SMALL_SEED, np.array(77, np.int32)),
    case("typed", lambda s, m: jax.random.key_data(jax.random.fold_in(jax.random.key(s), m)),
         _SEED, np.array(-5, np.int32)),
    case("legacy_big_message", lambda k, m: jax.random.fold_in(k, m), _KEY, np.array(4_000_000_000, np.uint32)),
])
def lower_random_fold_in(ctx, keys, msgs):
    keys_aval, msgs_aval = ctx.avals_in
    fn = jax_prng.iterated_vmap_binary_bcast(keys_aval.shape, msgs_aval.shape, keys_aval.dtype._impl.fold_in)
    return _lower_through_impl(ctx, fn, keys, msgs)[0]


@lowering(jax_prng.random_bits_p, cases=[
    case("uniform_from_seed", lambda s: jax.random.uniform(jax.random.key(s), (16, 16)), _SMALL_SEED),
    case("u32", lambda k: jax.random.bits(k, (3, 5)), _KEY),
    case("u8", lambda k: jax.random.bits(k, (4, 3), jnp.uint8), _KEY),
    case("bernoulli", lambda k: jax.random.bernoulli(k, 0.3, (10,)), _KEY),
    case("categorical", lambda k, logits: jax.random.categorical(k, logits), _KEY, np.log(
        np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], np.float32))),
    case("batched_keys", lambda k: jax.vmap(lambda k: jax.random.bits(k, (3,)))(k),
         u32(2, 2, low=0, high=2 ** 32 - 1)),
    # randint reduces the bits modulo the range with uint32 products and remainders, which noxla
    # computes on 16-bit limbs for TF.js (limb_arithmetic.py): exact there too, and on WebGL.
    case("randint_from_seed", lambda s: jax.random.randint(jax.random.key(s), (4, 5), -7, 1000), _SMALL_SEED),
    case("randint_key_data", lambda k: jax.random.randint(jax.random.wrap_key_data(k), (3, 4), 0, 10), _KEY),
    # A key as its words' 16-bit halves (int32 inputs), as the README advises for WebGL.
    case("randint_from_halves", lambda hi, lo: jax.random.randint(jax.random.wrap_key_data(
        lax.shift_left(hi.astype(jnp.uint32), np.uint32(16)) | lo.astype(jnp.uint32)), (3, 4), -3, 50000),
         np.array([0x1234, 0x9ABC], np.int32), np.array([0x5678, 0xDEF0], np.int32)),
    case("randint_wide_range", lambda s: jax.random.randint(jax.random.PRNGKey(s), (16,), -2 ** 31, 2 ** 31 - 1),
         _SMALL_SEED),
    case("randint_traced_bounds", lambda s, lo, hi: jax.random.randint(jax.random.key(s), (6,), lo, hi),
         _SMALL_SEED, np.array([-3, 5, 0, 100000, -50, 7], np.int32),
         np.array([4, 6, 3000000, 100007, 50, 7], np.int32)),
    # The rbg key types draw their bits with rng_bit_generator (lowering_rules/rng_bit_generator.py).
    case("rbg_normal", lambda s: jax.random.normal(jax.random.key(s, impl="rbg"), (3, 4)), _SEED),
    case("unsafe_rbg_split_uniform", lambda s: jax.random.uniform(
        jax.random.split(jax.random.key(s, impl="unsafe_rbg"))[1], (5,)), _SEED),
    # JAX 0.12.1's num_streams: several independent arrays from one key (threefry's two counter-hash
    # words unmixed; four from the words of two subkeys; rbg, one stream a key, from subkeys).
    *newer_jax(
        RANDOM_BITS_STREAMS, "JAX before 0.12.1 has no random_bits num_streams",
        case("two_streams", lambda k: jnp.stack(jax.random.bits(k, (3, 5), num_streams=2)), _KEY),
        case("four_streams_u8", lambda s: jnp.stack(
            jax.random.bits(jax.random.key(s), (4, 3), jnp.uint8, num_streams=4)), _SEED),
        case("one_stream_u16", lambda k: jax.random.bits(k, (6,), jnp.uint16, num_streams=1)[0], _KEY),
        case("batched_two_streams", lambda k: jnp.stack(
            jax.vmap(lambda k: jax.random.bits(k, (3,), num_streams=2))(k)), u32(2, 2, low=0, high=2 ** 32 - 1)),
        case("rbg_two_streams", lambda s: jnp.stack(
            jax.random.bits(jax.random.key(s, impl="rbg"), (3, 4), num_streams=2)), _SEED),
    ),
])
def lower_random_bits(ctx, keys, *, bit_width, shape, num_streams=1):
    # num_streams: JAX 0.12.1's (always 1 before); from 0.12.1 the rule returns one array a stream.
    fn = jax_prng.iterated_vmap_unary(len(ctx.avals_in[0].shape), random_bits_function(
        ctx.avals_in[0].dtype._impl, bit_width, shape, num_streams))
    outs = _lower_through_impl(ctx, fn, keys)
    return outs if RANDOM_BITS_STREAMS else outs[0]


def _raw_bits(key, shape):
    """JAX 0.12.1's raw_bits, which no public API binds: the key type's raw uint32 streams."""
    return tuple(raw_bits_p.bind(key, shape=tuple(shape)))


# Registered by name: JAX before 0.12.1 has no raw_bits primitive (its cases are skipped there).
@lowering("raw_bits", cases=newer_jax(
    raw_bits_p is not None, "JAX before 0.12.1 has no raw_bits primitive",
    case("uniform_from_seed", lambda s: jnp.stack([_as_uniform(b) for b in _raw_bits(jax.random.key(s), (16, 16))]),
         _SMALL_SEED),
    case("legacy_key", lambda k: jnp.stack(_raw_bits(jax.random.wrap_key_data(k), (3, 5))), _KEY),
    case("batched_keys", lambda k: jnp.stack(jax.vmap(lambda k: _raw_bits(jax.random.wrap_key_data(k), (3,)))(k)),
         u32(4, 2, low=0, high=2 ** 32 - 1)),
    case("scalar", lambda s: jnp.stack(_raw_bits(jax.random.key(s), ())), _SEED),
    case("rbg", lambda s: _raw_bits(jax.random.key(s, impl="rbg"), (3, 4))[0], _SEED),
))
def lower_raw_bits(ctx, keys, *, shape):
    fn = jax_prng.iterated_vmap_unary(len(ctx.avals_in[0].shape),
                                      raw_bits_function(ctx.avals_in[0].dtype._impl, shape))
    return _lower_through_impl(ctx, fn, keys)


def _uniform_from_halves(hi, lo):
    """A legacy key passed as its words' 16-bit halves (int32 inputs, exact on WebGL), joined in the graph."""
    words = lax.shift_left(hi.astype(jnp.uint32), np.uint32(16)) | lo.astype(jnp.uint32)
    return jax.random.uniform(jax.random.wrap_key_data(words), (256,))


@lowering(jax_prng.random_wrap_p, cases=[
    case("uniform_from_halves", _uniform_from_halves, np.array([0x1234, 0x9ABC], np.int32),
         np.array([0x5678, 0xDEF0], np.int32)),
    case("legacy_key", lambda k: jax.random.key_data(jax.random.wrap_key_data(k)), _KEY),
])
def lower_random_wrap(ctx, data, *, impl):
    return data  # a key flows as its key data


@lowering(jax_prng.random_unwrap_p, cases=[
    case("typed_key", lambda s: jax.random.key_data(jax.random.key(s)), _SEED),
])
def lower_random_unwrap(ctx, keys):
    return keys


# These rules take uint32 values as Limbs and hand them to their bodies (lowering_rules/values/limb_values.py).
limb_values.register_native("threefry2x32", "random_seed", "random_split", "random_fold_in", "random_bits",
                            "raw_bits", "random_wrap", "random_unwrap")
