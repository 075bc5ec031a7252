"""Shape-manipulating primitives: reshapes, broadcasts, transposes, joins and splits (slicing and
padding: ``slicing.py``), and the dtype carriers both use.

Sizes may be symbolic (polymorphic shapes), so every size is taken from the avals through
``ctx.dim``/``ctx.shape`` and combined with ``size_vector`` into a TF shape operand.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules import linalg
from lowering_rules.core.cases import boolean, case, f16, f32, i32
from lowering_rules.core.dtype_support import dtypes, gap
from lowering_rules.core.helpers import (
    DtypeNames,
    size_vector,
    transpose,
)
from lowering_rules.core.jax_compat import device_put_p, dim_as_value_p
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Target, lowering
from lowering_rules.patterns import rope


def reshape_to(ctx, x, sizes):
    """tf.reshape to ``sizes``; a single symbolic size becomes -1 so converters keep the others static."""
    symbolic = [i for i, s in enumerate(sizes) if not isinstance(s, int)]
    static_product = int(np.prod([s for s in sizes if isinstance(s, int)]))
    if len(symbolic) == 1 and static_product != 0:  # -1 cannot be inferred for an empty tensor
        sizes = list(sizes)
        sizes[symbolic[0]] = -1
    return tf.reshape(x, size_vector(sizes))


# Exact stand-ins for dtypes some TFLite data-movement kernels lack (every kernel lacks float16;
# PAD and SPLIT_V also lack bool). Moving values around in a wider type is lossless.
# TFLite's SplitV (and most of its kernels) have no uint32: Cast to int32 and back wraps exactly.
_CARRIERS = {"float16": "float32", "bool": "int32", "uint32": "int32", "uint16": "int32", "int16": "int32",
             "uint8": "int32", "int8": "int32"}


def carried(*names, float16_bits: bool = False):
    """Runs the rule on operands of the dtypes ``names`` converted to their carriers, and converts back.
    ``float16_bits``: a float16 is carried as its bits (a bitcast to int16, in int32): TF 2.21's TFLite
    converter folds a float32 carrier's casts around a BROADCAST_TO or GATHER, which has no float16
    kernel, and then refuses the model; the casts of integer bits it folds only to kernels that exist.
    TF.js has no Bitcast: its own lowering (every TF.js program with float16 values gets one) moves
    float16 in float32, which its writer carries all half floats in anyway (``noxla.writers.tfjs.half_floats``)."""
    dtypes = DtypeNames(names)

    def widen(t, tfjs):
        if t.dtype not in dtypes:
            return t
        if float16_bits and t.dtype == tf.float16 and not tfjs:
            return tf.cast(tf.bitcast(t, tf.int16), tf.int32)
        return tf.cast(t, _CARRIERS[t.dtype.name])

    def narrow(t, dtype, tfjs):
        if float16_bits and dtype == tf.float16 and not tfjs:
            return tf.bitcast(tf.cast(t, tf.int16), tf.float16)
        return tf.cast(t, dtype)

    def decorate(lower):
        @functools.wraps(lower)  # keeps the signature: the registry reads the understood parameters
        def carried_lower(ctx, *operands, **params):
            if not any(t.dtype in dtypes for t in operands):
                return lower(ctx, *operands, **params)
            tfjs = ctx.lowering_for.tfjs
            outs = lower(ctx, *(widen(t, tfjs) for t in operands), **params)
            narrowed = [narrow(out, ctx.tf_dtype(aval.dtype), tfjs) for out, aval in
                        zip(outs if isinstance(outs, list) else [outs], ctx.avals_out)]
            return narrowed if isinstance(outs, list) else narrowed[0]
        return carried_lower
    return decorate


# Runtime quirks outside the rules shape some cases: the LiteRT Python interpreter cannot hand back
# an empty output, the TF.js converter records a zero-size input dimension as NaN, and the TF.js
# runner sends a scalar input as shape [1]. So empty arrays are made inside the program and joined
# to a non-empty one, and scalars are read out of a vector.

def beside(empty, other, axis=0):
    """An empty result joined to a non-empty one: its shape must still be right."""
    return jnp.concatenate([empty, other], axis=axis)


def emptied(x, axis=0):
    """``x`` with ``axis`` cut to size 0, made inside the program."""
    return lax.slice_in_dim(x, 0, 0, axis=axis)


def _broadcast_to(ctx, x):
    """tf.broadcast_to the result's shape. TF.js broadcasts to size 1 where asked for size 0, so
    an empty result is built directly: it has no values to get wrong."""
    if 0 in ctx.aval_out.shape:
        return tf.zeros(ctx.out_shape(), ctx.out_dtype)
    return tf.broadcast_to(x, ctx.out_shape())


# ---------------------------------------------------------------- broadcast, reshape


BROADCAST_IN_DIM_CASES = [
    case("scalar", lambda x: jnp.broadcast_to(x[1], (3, 4)), f32(2)),
    case("row", lambda x: jnp.broadcast_to(x, (3, 4)), f32(4)),
    case("middle_axis", lambda x: lax.broadcast_in_dim(x, (3, 2, 4), (0, 2)), f32(3, 4)),
    case("size1_i32", lambda x: lax.broadcast_in_dim(x, (2, 5, 3), (1, 2)), i32(1, 3)),
    case("bool", lambda x: jnp.broadcast_to(x, (2, 3)), boolean(3)),
    case("f16", lambda x: jnp.broadcast_to(x, (2, 3)), f16(1, 3)),
    case("to_empty", lambda x, y: beside(jnp.broadcast_to(x, (0, 3)), y), f32(3), f32(2, 3)),
    case("expand_dims", lambda x: jnp.expand_dims(x, 1), f32(3, 4)),
    case("to_symbolic", lambda x, y: jnp.broadcast_to(y, x.shape), f32(3, 4), f32(4),
         polymorphic_shapes=("(b, 4)", None)),
]


@lowering(lax.broadcast_in_dim_p, cases=BROADCAST_IN_DIM_CASES)
@carried("float16", "int16", "uint16", float16_bits=True)  # TFLite's SLICE/CONCATENATION lack 16-bit ints
def lower_broadcast_in_dim(ctx, x, *, shape, broadcast_dimensions):
    operand_shape = ctx.avals_in[0].shape
    # Put each operand dimension at its place in the result, size 1 elsewhere; then broadcast.
    aligned = [1] * len(shape)
    for operand_axis, out_axis in enumerate(broadcast_dimensions):
        aligned[out_axis] = ctx.dim(operand_shape[operand_axis])
    if len(operand_shape) != len(shape):
        x = reshape_to(ctx, x, aligned)
    if tuple(operand_shape) == tuple(shape):
        return x
    return _broadcast_to(ctx, x)


RESHAPE_CASES = [
    case("flatten", lambda x: jnp.reshape(x, (-1,)), f32(3, 4)),
    case("split_dim_i32", lambda x: x.reshape(2, 3, 2), i32(3, 4)),
    case("dimensions", lambda x: lax.reshape(x, (4, 3), dimensions=(1, 0)), f32(3, 4)),
    # Found by tests/fuzz_grad.py (a grouped convolution's transpose): TFLite has no float16 TRANSPOSE.
    case("dimensions_f16", lambda x: lax.reshape(x, (6,), dimensions=(1, 0)), f16(2, 3)),
    case("bool", lambda x: jnp.reshape(x, (3, 2)), boolean(2, 3)),
    case("f16", lambda x: jnp.reshape(x, (2, 3)), f16(6)),
    case("to_scalar", lambda x: jnp.reshape(x, ()), f32(1, 1)),
    case("empty", lambda x, y: beside(jnp.reshape(emptied(x), (4, 0)), y, axis=1), f32(2, 4), f32(4, 1)),
    case("flatten_symbolic", lambda x: jnp.reshape(x, (-1,)), f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    case("split_symbolic", lambda x: jnp.reshape(x, (2, -1)), f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    case("two_symbolic", lambda x: jnp.reshape(x, (x.shape[1], x.shape[0])), f32(3, 2),
         polymorphic_shapes=("(b, c)",)),
    *rope.PAIRS_CASES,
]


@lowering(lax.reshape_p, cases=RESHAPE_CASES)
def lower_reshape(ctx, x, *, new_sizes, dimensions):
    rotated = rope.pairs_rotation(ctx)
    if rotated is not None:
        return rotated
    if dimensions is not None:  # reshape reads the operand in this dimension order
        x = _transpose(ctx, x, permutation=dimensions)
    return reshape_to(ctx, x, [ctx.dim(d) for d in new_sizes])


SQUEEZE_CASES = [
    case("all", lambda x: jnp.squeeze(x), f32(1, 3, 1)),
    case("axis0_i32", lambda x: jnp.squeeze(x, axis=0), i32(1, 4)),
    case("bool", lambda x: jnp.squeeze(x, axis=1), boolean(3, 1)),
    case("to_scalar", lambda x: jnp.squeeze(x), f32(1)),
    case("empty", lambda x, y: beside(jnp.squeeze(emptied(x), axis=1), y), f32(2, 1), f32(2)),
    case("symbolic", lambda x: jnp.squeeze(x, axis=1), f32(3, 1), polymorphic_shapes=("(b, 1)",)),
]


@lowering(lax.squeeze_p, cases=SQUEEZE_CASES)
def lower_squeeze(ctx, x, *, dimensions):
    if not dimensions:
        return x
    return tf.squeeze(x, axis=list(dimensions))


TRANSPOSE_CASES = [
    case("matrix", lambda x: jnp.transpose(x), f32(3, 4)),
    case("perm_i32", lambda x: jnp.transpose(x, (1, 2, 0)), i32(2, 3, 4)),
    case("bool", lambda x: x.T, boolean(2, 3)),
    case("f16", lambda x: jnp.swapaxes(x, 0, 3), f16(2, 1, 3, 2)),
    case("empty", lambda x, y: beside(jnp.transpose(emptied(x)), y, axis=1), f32(2, 3), f32(3, 1)),
    case("symbolic", lambda x: jnp.transpose(x), f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    # A product's transpose as one matmul of the swapped operands (linalg.transposed_product): one
    # decoded token's attention scores and values, as jnp.einsum spells them.
    case("product_scores", lambda q, k: jnp.einsum("tkgd,kcd->kgtc", q, k), f32(1, 2, 3, 4), f32(2, 5, 4)),
    case("product_values", lambda p, v: jnp.einsum("kgtc,kdc->tkgd", p, v), f32(2, 3, 1, 5), f32(2, 4, 5)),
    case("product_no_batch", lambda a, b: jnp.transpose(a @ b), f32(3, 4), f32(4, 5)),
    # Two tokens: (k, g, t, c) is k q^T with q transposed to (k, g, t, d), fewer elements than the
    # scores (a prefill); the values' (t, k, g, d) is p v transposed with d kept innermost.
    case("product_two_tokens", lambda q, k: jnp.einsum("tkgd,kcd->kgtc", q, k), f32(2, 2, 3, 4), f32(2, 5, 4)),
    case("product_two_tokens_values", lambda p, v: jnp.einsum("kgtc,kdc->tkgd", p, v),
         f32(2, 3, 2, 5), f32(2, 4, 5)),
    # q read as is (adj_y) and larger than the scores: the scores are transposed, as before.
    case("product_scores_transposed", lambda q, k: jnp.einsum("ktgd,kcd->kgtc", q, k),
         f32(2, 2, 3, 16), f32(2, 5, 16)),
    # Batch axes reordered, both operands' free axes permuted among themselves.
    case("product_batch_and_free_permuted", lambda a, b: jnp.transpose(
        lax.dot_general(a, b, (((4,), (4,)), ((0, 1), (1, 0)))), (1, 0, 3, 2, 5, 4)),
         f32(2, 3, 2, 3, 4), f32(3, 2, 2, 3, 4)),
    case("product_read_twice", lambda a, b: (lambda p: (p.T, p))(a @ b), f32(3, 4), f32(4, 5)),
    case("product_f16", lambda a, b: jnp.transpose(jnp.einsum("bij,bjk->bik", a, b), (0, 2, 1)),
         f16(2, 3, 4, low=-1, high=1), f16(2, 4, 5, low=-1, high=1)),
    case("product_i32", lambda a, b: (a @ b).T, i32(3, 4), i32(4, 2)),
    # Found by tests/fuzz.py: the product's Transpose in float32, before the cast (TFLite has no
    # float16 TRANSPOSE).
    case("product_values_f16", lambda p, v: jnp.einsum("kgtc,kdc->tkgd", p, v),
         f16(2, 3, 2, 5, low=-1, high=1), f16(2, 4, 5, low=-1, high=1)),
    # Found by the batched fuzz family: vmap adds a seventh axis, beyond TFLite's TRANSPOSE (the
    # converter failed). Axes 1-2 stay together (merged); the reversal has no such run (moved one by one).
    case("rank7_merged_axes", lambda x: jnp.transpose(x, (3, 1, 2, 0, 6, 5, 4)), f32(2, 3, 2, 1, 2, 3, 2)),
    case("rank7_reversed", lambda x: jnp.transpose(x, tuple(range(6, -1, -1))), i32(2, 3, 1, 2, 3, 2, 2)),
    case("rank7_symbolic", lambda x: jnp.transpose(x, (6, 5, 4, 3, 2, 1, 0)), f32(3, 1, 2, 1, 2, 1, 2),
         polymorphic_shapes=("(b, 1, 2, 1, 2, 1, 2)",)),
    case("rank7_batched_product", jax.vmap(lambda a, b: jnp.transpose(
        lax.dot_general(a, b, (((3,), (4,)), ((0, 1), (1, 3)))), (3, 0, 4, 2, 5, 1)), in_axes=(2, 2)),
         f32(3, 3, 2, 2, 4, 3), f32(4, 3, 2, 2, 3, 4)),
    # Found by the batched fuzz family (vmap of an empty result, out_axes=-1): TF.js's wasm Transpose
    # divides by zero on an empty tensor whose empty first axis stays first. It is a Reshape now.
    case("empty_first_axis_kept", lambda x, y: beside(jnp.transpose(emptied(x), (0, 2, 1)), y),
         f32(2, 3, 5), f32(1, 5, 3)),
    case("empty_input_rank4", lambda x, y: jnp.concatenate([jnp.transpose(x, (0, 2, 1, 3)).ravel(), y]),
         np.zeros((0, 2, 3, 4), np.float32), f32(3)),
]


_TRANSPOSE_CARRIED = ("float16", "int16", "uint16", "uint32")  # TFLite's TRANSPOSE has none of them


@carried(*_TRANSPOSE_CARRIED)
def _transpose(ctx, x, *, permutation):
    return transpose(x, permutation)


@lowering(lax.transpose_p, cases=TRANSPOSE_CASES)
@carried(*_TRANSPOSE_CARRIED)
def lower_transpose(ctx, x, *, permutation):
    fused = linalg.transposed_product(ctx, permutation)
    return transpose(x, permutation) if fused is None else fused


REV_CASES = [
    case("axis0", lambda x: lax.rev(x, (0,)), f32(3, 4)),
    case("all_axes_i32", lambda x: lax.rev(x, (0, 1, 2)), i32(2, 3, 4)),
    case("last_axis_bool", lambda x: x[:, ::-1], boolean(2, 5)),
    case("f16", lambda x: x[::-1], f16(4)),
    case("no_axes", lambda x: lax.rev(x, ()), f32(3)),
    case("empty", lambda x, y: beside(lax.rev(emptied(x, 1), (1,)), y, axis=1), f32(2, 3), f32(2, 1)),
    case("jnp_flip", lambda x: jnp.flip(x, 1), f32(2, 3)),
    case("symbolic", lambda x: lax.rev(x, (0,)), f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    case("non_adjacent_axes", lambda x: lax.rev(x, (0, 2)), f32(3, 4, 5)),
    case("runs_of_axes_i32", lambda x: lax.rev(x, (3, 0, 1)), i32(2, 3, 2, 4, 3)),
]


def _runs(axes):
    """Sorted ``axes`` split into runs of adjacent axes: (0, 1, 3) -> [[0, 1], [3]]."""
    runs: list[list[int]] = []
    for a in sorted(axes):
        if runs and runs[-1][-1] == a - 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    return runs


@lowering(lax.rev_p, cases=REV_CASES)
@carried("float16", "bool", "int8", "uint16", "uint32")  # TF.js wasm garbles bool Reverse
def lower_rev(ctx, x, *, dimensions):
    # LiteRT's REVERSE_V2 reverses adjacent axes only ("Non-contiguous `axes` not supported" at run
    # time): one Reverse per run of adjacent axes (reversals of different axes commute).
    for run in _runs(dimensions):
        x = tf.reverse(x, axis=run)
    return x


TILE_CASES = [
    case("rows", lambda x: jnp.tile(x, (2, 1)), f32(3, 4)),
    case("i32", lambda x: jnp.tile(x, (2, 3)), i32(2, 2)),
    case("bool", lambda x: jnp.tile(x, 3), boolean(2)),
    case("more_reps_than_dims", lambda x: jnp.tile(x, (2, 1, 3)), f32(2, 2)),
    case("empty", lambda x, y: beside(jnp.tile(emptied(x), (2, 1)), y), f32(3, 2), f32(1, 2)),
]


@lowering(lax.tile_p, cases=TILE_CASES)
@carried("float16", "uint16", "int8", "int16", "uint32")  # TF's CPU Tile has no uint16 kernel
def lower_tile(ctx, x, *, reps):
    return tf.tile(x, [int(r) for r in reps])


# Iotas are added to an input: a TF.js graph whose output is a folded constant returns the model's
# own weight tensor, which noxla/runtimes/tfjs_runner/runner.js disposes after the first run.
IOTA_CASES = [
    case("arange_i32", lambda x: x + jnp.arange(5), i32(5)),
    case("arange_f32", lambda x: x + jnp.arange(5, dtype=jnp.float32), f32(5)),
    case("dim1_f32", lambda x: x + lax.broadcasted_iota(jnp.float32, (3, 4), 1), f32(3, 4)),
    case("dim0_3d_i32", lambda x: x - lax.broadcasted_iota(jnp.int32, (2, 3, 4), 0), i32(2, 3, 4)),
    case("f16_no_input", lambda: lax.broadcasted_iota(jnp.float16, (2, 3), 1)),
    case("empty", lambda x: beside(jnp.arange(0, dtype=jnp.float32), x), f32(2)),
    case("symbolic_length", lambda x: jnp.arange(x.shape[0]), f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    case("symbolic_shape", lambda x: lax.broadcasted_iota(jnp.float32, x.shape, 0), f32(3, 4),
         polymorphic_shapes=("(b, 4)",)),
]


@lowering(lax.iota_p, cases=IOTA_CASES)
def lower_iota(ctx, *, dtype, shape, dimension):
    # Counted in int32 (TFLite's RANGE has no float16) and converted once.
    values = tf.range(ctx.dim(shape[dimension]), dtype=tf.int32)
    values = tf.cast(values, ctx.out_dtype) if ctx.out_dtype != tf.int32 else values
    aligned = [1] * len(shape)
    aligned[dimension] = ctx.dim(shape[dimension])
    if len(shape) == 1:
        return values
    return _broadcast_to(ctx, reshape_to(ctx, values, aligned))


DEVICE_PUT_CASES = [
    case("one", lambda x: jax.device_put(x), f32(3, 4)),
    case("several", lambda x, y: jax.device_put((x, y)), i32(2), boolean(3)),
]


@lowering(device_put_p, cases=DEVICE_PUT_CASES)
def lower_device_put(ctx, *xs, devices, srcs, copy_semantics):
    # One device and immutable tensors: placement and copy semantics have nothing to do.
    return list(xs)


DIM_AS_VALUE_CASES = [
    case("scale_by_batch", lambda x: x * x.shape[0], f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    case("mean_over_batch", lambda x: jnp.mean(x, axis=0), f32(3, 4), polymorphic_shapes=("(b, 4)",)),
    case("product_i32", lambda x: x + x.shape[0] * x.shape[1], i32(2, 3), polymorphic_shapes=("(b, c)",)),
]


@lowering(dim_as_value_p, cases=DIM_AS_VALUE_CASES)
def lower_dim_as_value(ctx, *, dim):
    # A symbolic size used as a number (e.g. the count in a mean under polymorphic shapes).
    return tf.cast(ctx.dim(dim), ctx.out_dtype)


# ---------------------------------------------------------------- joining and splitting


CONCATENATE_CASES = [
    case("axis0", lambda x, y: jnp.concatenate([x, y]), f32(2, 3), f32(4, 3)),
    case("axis1_i32", lambda x, y: jnp.concatenate([x, y], axis=1), i32(2, 3), i32(2, 1)),
    case("bool", lambda x, y: jnp.concatenate([x, y]), boolean(2), boolean(3)),
    case("f16", lambda x, y: jnp.concatenate([x, y]), f16(2), f16(3)),
    case("with_empty", lambda x, y, z: jnp.concatenate([x, emptied(y), z]), f32(2, 2), f32(3, 2), f32(1, 2)),
    case("symbolic", lambda x, y: jnp.concatenate([x, y, x]), f32(3, 4), f32(2, 4),
         polymorphic_shapes=("(b, 4)", None)),
    *rope.HALVES_CASES,
]


@lowering(lax.concatenate_p, cases=CONCATENATE_CASES)
@carried("float16", "int16", "uint16")  # TFLite's SLICE/CONCATENATION lack 16-bit ints
def lower_concatenate(ctx, *xs, dimension):
    rotated = rope.halves_rotation(ctx)
    return tf.concat(list(xs), axis=dimension) if rotated is None else rotated


def _rope(x):
    """Rotary embedding as Llama code writes it: pairs rotated, then interleaved with jnp.stack."""
    half = x.shape[-1] // 2
    angle = jnp.arange(x.shape[0], dtype=jnp.float32)[:, None] / 10000.0 ** (jnp.arange(half) / half)
    even, odd = x[..., ::2], x[..., 1::2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    return jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(x.shape)


STACK_CASES = [
    case("axis1", lambda x, y: jnp.stack([x, y], axis=1), f32(2, 3), f32(2, 3)),
    case("last_i32", lambda x, y, z: jnp.stack([x, y, z], axis=-1), i32(4), i32(4), i32(4)),
    case("axis0", lambda x, y: jnp.stack([x, y]), f32(3, 4), f32(3, 4)),
    case("rope", _rope, f32(6, 8)),
    case("single", lambda x: jnp.stack([x]), f32(4)),
    case("scalars", lambda x: jnp.stack([x[0], x[2], x[1]]), f32(3)),
    case("bool", lambda x, y: jnp.stack([x, y], axis=1), boolean(4), boolean(4)),
    case("f16", lambda x, y: jnp.stack([x, y]), f16(2, 3), f16(2, 3)),
    case("polymorphic_batch", lambda x: jnp.stack([x, 2 * x], axis=1), f32(3, 4),
         polymorphic_shapes=("(b, 4)",)),
]


@lowering(lax.stack_p, cases=STACK_CASES)
@carried("float16", "uint16")
def lower_stack(ctx, *xs, axis):
    return tf.stack(list(xs), axis=axis)


UNSTACK_CASES = [
    case("axis0", lambda x: jnp.unstack(x), f32(3, 4)),
    case("axis1_i32", lambda x: jnp.unstack(x, axis=1), i32(2, 3, 2)),
    case("last_axis_bool", lambda x: jnp.unstack(x, axis=-1), boolean(4, 2)),
    case("f16", lambda x: jnp.unstack(x, axis=1), f16(2, 3)),
    case("polymorphic_batch", lambda x: jnp.unstack(x, axis=1), f32(3, 2), polymorphic_shapes=("(b, 2)",)),
    # PRNG keys move whole (key_types.KEY_MOVERS): unpacking split keys, as JAX 0.12.1's randint does.
    case("keys", lambda s: [jax.random.uniform(k, (4,)) for k in jnp.unstack(jax.random.split(jax.random.key(s), 3))],
         np.array(9_876_543, np.int32)),
    case("key_data_axis1", lambda k: [jax.random.key_data(k) for k in jnp.unstack(
        jax.random.split(jax.random.wrap_key_data(k), (2, 3)), axis=1)], np.array([0x12345678, 0x9ABCDEF0], np.uint32)),
]


@lowering(lax.unstack_p, cases=UNSTACK_CASES, dtypes=dtypes(gaps=[
    gap((Target.TFLITE,), {"int64"}, "TFLite's UNPACK has no int64 kernel")]))
@carried("float16", "uint16", "uint32")
def lower_unstack(ctx, x, *, axis):
    return tf.unstack(x, num=ctx.avals_in[0].shape[axis], axis=axis)


SPLIT_CASES = [
    case("sections", lambda x: jnp.split(x, [1, 3], axis=1), f32(3, 4)),
    case("halves_i32", lambda x: jnp.split(x, 2), i32(4, 3)),
    case("bool", lambda x: jnp.split(x, 3), boolean(3)),
    case("u32", lambda x: jnp.split(x, 2), np.array([0, 2 ** 32 - 1, 2 ** 31, 7], np.uint32)),
    case("empty_piece", lambda x: [beside(empty, rest) for empty, _, rest in [jnp.split(x, [0, 2])]],
         f32(5, 2)),
    case("symbolic", lambda x: jnp.split(x, [1]), f32(4, 3), polymorphic_shapes=("(b, 3)",)),
    case("halves_symbolic", lambda x: jnp.split(x, 2), f32(4, 3), polymorphic_shapes=("(2*b, 3)",)),
]


@lowering(lax.split_p, cases=SPLIT_CASES)
@carried("float16", "bool", "uint32", "uint16")
def lower_split(ctx, x, *, sizes, axis):
    return tf.split(x, size_vector([ctx.dim(s) for s in sizes]), axis=axis, num=len(sizes))
