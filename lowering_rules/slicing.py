"""Slicing and padding: slice, dynamic_slice, dynamic_update_slice and pad.

Sizes may be symbolic (polymorphic shapes): every size comes from the avals through
``ctx.dim``/``ctx.shape``. Out-of-range dynamic starts are clamped as XLA clamps them, with TF ops
only (no XLA slices).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, i8, i32, u8
from lowering_rules.core.helpers import (
    DtypeNames,
    pad_exactly,
    size_vector,
    symbolic_padding,
)
from lowering_rules.core.lazy_tensorflow import tf, xla_ops
from lowering_rules.core.registry import lowering
from lowering_rules.core.vocabulary import webgpu_computes_wrong
from lowering_rules.patterns import joins
from lowering_rules.structural import beside, carried, emptied, reshape_to

# TFLite's data-movement kernels lack some 8/16-bit integer and uint32 dtypes (the converter refuses
# them, measured by `python3 -m tests.dtype_sweep tflite`); int32 holds every value (uint32 as bits).
_NARROW = ("int8", "uint8", "int16", "uint16", "uint32")


def _clamped_starts(ctx, starts, operand_shape, window_shape):
    """XLA moves a dynamic window back inside the operand: start = clip(start, 0, dim - window)."""
    clamped = []
    for start, dim, window in zip(starts, operand_shape, window_shape):
        # Clamp in a type that holds every start (uint32 does not fit int32), then narrow.
        wide = tf.int64 if start.dtype in (tf.uint32, tf.int64, tf.uint64) else tf.int32
        limit = tf.cast(ctx.dim(dim) - ctx.dim(window), wide)
        start = tf.clip_by_value(tf.cast(start, wide), tf.constant(0, wide), limit)
        clamped.append(tf.cast(start, tf.int32))
    return clamped


SLICE_CASES = [
    case("rows", lambda x: x[1:3], f32(5, 4)),
    case("strided_i32", lambda x: x[::2, 1::2], i32(5, 4)),
    case("strided_bool", lambda x: lax.slice(x, (0, 1), (3, 7), (2, 3)), boolean(3, 8)),
    # Found by tests/fuzz.py: TFLite has no int8/uint8 PAD, which a strided slice may use.
    case("strided_i8", lambda x: lax.slice(x, (4, 1), (5, 2), (2, 1)), np.arange(-7, 8, dtype=np.int8).reshape(5, 3)),
    case("strided_u8", lambda x: lax.slice(x, (4,), (5,), (3,)), np.array([1, 2, 200, 4, 255], np.uint8)),
    # TFLite has no uint32 PAD either: words above 2^31 must come back unchanged.
    case("strided_u32", lambda x: x[1:6:3], np.array([1, 2 ** 32 - 1, 7, 2 ** 31, 5, 9, 3], np.uint32)),
    # Unit strides take uint32 and int8 as they are (no PAD): the same words must come back.
    case("u32", lambda x: x[1:6], np.array([1, 2 ** 32 - 1, 7, 2 ** 31, 5, 9, 3], np.uint32)),
    case("i8", lambda x: x[1:, :2], np.arange(-7, 8, dtype=np.int8).reshape(5, 3)),
    case("stride_past_end_i32", lambda x: lax.slice(x, (1,), (7,), (4,)), i32(9)),
    case("strides", lambda x: lax.slice(x, (1, 0), (5, 4), (3, 2)), f32(5, 4)),
    case("bool", lambda x: x[1:], boolean(4)),
    case("f16", lambda x: x[:, 1:2], f16(3, 3)),
    case("empty_result", lambda x: beside(lax.slice(x, (2, 0), (2, 4)), x), f32(5, 4)),
    case("symbolic_limit", lambda x: lax.slice(x, (1, 0), (x.shape[0] - 1, 4)), f32(5, 4),
         polymorphic_shapes=("(b + 2, 4)",)),
    case("symbolic_stride", lambda x: lax.slice(x, (0, 1), (x.shape[0], 4), (2, 2)), f32(5, 4),
         polymorphic_shapes=("(b, 4)",)),
    case("symbolic_stride_i32", lambda x: lax.slice(x, (1, 0), (x.shape[0], 2), (3, 1)), i32(7, 2),
         polymorphic_shapes=("(b, 2)",)),
    # Found by tests/fuzz_poly.py: LiteRT's XNNPACK delegate reads a STRIDED_SLICE's end 0 as the
    # axis's end (noxla.writers.tflite.legalize_shapes): the .tflite returned x[0:0] of a symbolic size whole.
    case("symbolic_empty", lambda x: lax.slice(x, (0,), (0,)), f32(3), polymorphic_shapes=("(b,)",)),
    # Found by tests/fuzz_poly.py: the recorder's shape of a slice of two symbolic sizes overflowed
    # NumPy's iterator ("iterator is too large": noxla.graph.structural._sliced_shape).
    case("symbolic_empty_of_two_sizes", lambda x: lax.slice(x, (1, 1, 3), (1, 1, 3)), i32(1, 1, 4),
         polymorphic_shapes=("(b, b, 4)",)),
    # A part of a join read as itself (joins): keras-hub's caches, stacked and sliced apart.
    case("part_of_stack", lambda a, b: jnp.stack([a, b], 1)[:, 1], f32(2, 3), f32(2, 3)),
    case("part_of_concatenate", lambda a, b: jnp.concatenate([a, b])[3:5, 1:], f32(2, 4), f32(4, 4)),
    case("across_parts", lambda a, b: jnp.concatenate([a, b])[1:4], f32(2, 4), f32(4, 4)),
    case("part_of_stacked_stacks", lambda k, v: jnp.reshape(
        jnp.stack([jnp.stack([k, v], 1), jnp.stack([v, k], 1)], 1), (2, 2, 3, 4))[1:2, 0:1],
         f32(1, 3, 4), f32(1, 3, 4)),
    case("part_of_stack_bool", lambda a, b: jnp.stack([a, b])[1], boolean(3), boolean(3)),
    case("part_of_stack_i32", lambda a, b: jnp.stack([a, b])[0, 1:], i32(3), i32(3)),
]


def _every_nth(ctx, x, sizes, axis, stride, kept):
    """``x[..., ::stride, ...]`` on one axis of sizes ``sizes`` without a strided StridedSlice:
    pad the axis to ``kept * stride``, fold it into ``(kept, stride)`` and keep the first column."""
    paddings = [[0, 0]] * len(sizes)
    paddings[axis] = [0, kept * stride - sizes[axis]]
    folded = reshape_to(ctx, tf.pad(x, paddings), sizes[:axis] + [kept, stride] + sizes[axis + 1:])
    first = [-1] * (axis + 1) + [1] + [-1] * (len(sizes) - axis - 1)
    return reshape_to(ctx, tf.slice(folded, [0] * (len(sizes) + 1), first),
                    sizes[:axis] + [kept] + sizes[axis + 1:])


@lowering(lax.slice_p, cases=SLICE_CASES)
@carried("float16", "bool", "int16", "uint16")  # bool: PAD in _every_nth
def lower_slice(ctx, x, *, start_indices, limit_indices, strides):
    # Nothing to read from a run-time size (a static one folds): LiteRT's XNNPACK reads a
    # STRIDED_SLICE's end of 0 as the axis's end.
    if 0 in ctx.aval_out.shape and not all(isinstance(d, int) for d in ctx.avals_in[0].shape):
        return tf.zeros(ctx.out_shape(), ctx.out_dtype)
    found = joins.sliced_part(ctx, start_indices, limit_indices, strides)
    value = None if found is None else ctx.value(found[0])
    # Not for a carried dtype, nor for a part held as 16-bit limbs (Limbs, no dtype) while this
    # slice runs per limb: threefry's hash of an odd count, then its padding cut off.
    if value is not None and getattr(value, "dtype", None) == x.dtype:
        piece, starts, sizes = found
        if starts != [0] * len(starts) or sizes != list(piece.aval.shape):
            value = tf.slice(value, starts, sizes)
        return tf.reshape(value, ctx.out_shape())
    starts = [ctx.dim(s) for s in start_indices]
    limits = [ctx.dim(s) for s in limit_indices]
    strides = [1] * len(starts) if strides is None else [int(s) for s in strides]
    if x.dtype == tf.float32 or all(s == 1 for s in strides):
        return tf.strided_slice(x, size_vector(starts), size_vector(limits), strides)
    return _strided_slice(ctx, x, starts=starts, limits=limits, strides=strides)


# Carried here, not for every slice: TFLite's STRIDED_SLICE takes these dtypes, its PAD does not,
# and a carried unit-stride slice leaves its CASTs in the model (a sampling model's uint32 key
# words: three more operators).
@carried("int8", "uint8", "uint32")
def _strided_slice(ctx, x, *, starts, limits, strides):
    """TF.js wasm's StridedSlice reads non-float32 data as float32 bits when a stride is not 1:
    take the unit-stride window, then every n-th element with reshapes (``_every_nth``)."""
    sizes = [limit - start for start, limit in zip(starts, limits)]
    x = tf.slice(x, size_vector(starts), size_vector(sizes))
    for axis, stride in enumerate(strides):
        if stride != 1:
            kept = ctx.dim(ctx.aval_out.shape[axis])
            x = _every_nth(ctx, x, sizes, axis, stride, kept)
            sizes[axis] = kept
    return x


def _window(x, starts, sizes, allow_negative=False):
    """A dynamic slice at starts read from an int array, the way a traced index arrives."""
    return lax.dynamic_slice(x, tuple(starts[i] for i in range(len(sizes))), sizes,
                             allow_negative_indices=allow_negative)


DYNAMIC_SLICE_CASES = [
    case("in_range", lambda x, s: _window(x, s, (2, 2)), f32(5, 4), np.array([1, 2], np.int32)),
    case("past_end_clamps", lambda x, s: _window(x, s, (2, 3)), f32(5, 4), np.array([7, 9], np.int32)),
    case("negative_clamps", lambda x, s: _window(x, s, (2, 2)), f32(5, 4), np.array([-3, -1], np.int32)),
    case("negative_from_end", lambda x, s: _window(x, s, (2, 2), allow_negative=True), f32(5, 4),
         np.array([-2, -3], np.int32)),
    case("uint8_starts", lambda x, s: _window(x, s, (2, 2)), f32(5, 4), np.array([200, 1], np.uint8)),
    case("int16_starts", lambda x, s: _window(x, s, (3,)), i32(6), np.array([-4], np.int16)),
    case("uint32_starts", lambda x, s: _window(x, s, (2,)), f32(6), np.array([4_000_000_000], np.uint32)),
    case("bool_whole", lambda x, s: _window(x, s, (3, 2)), boolean(3, 2), np.array([2, 1], np.int32)),
    case("f16", lambda x, s: _window(x, s, (1, 2)), f16(3, 4), np.array([1, 5], np.int32)),
    case("empty_window", lambda x, s, y: beside(_window(x, s, (0, 2)), y), f32(3, 4),
         np.array([4, 1], np.int32), f32(1, 2)),
    case("in_dim", lambda x, s: lax.dynamic_slice_in_dim(x, s[0], 2, axis=1), i32(3, 4),
         np.array([3], np.int32)),
    case("symbolic_operand", lambda x, s: _window(x, s, (2, 4)), f32(5, 4), np.array([9, 0], np.int32),
         polymorphic_shapes=("(b + 2, 4)", None)),
]


@lowering(lax.dynamic_slice_p, cases=DYNAMIC_SLICE_CASES)
@carried("float16", "int16", "uint16")
def lower_dynamic_slice(ctx, x, *starts, slice_sizes):
    starts = _clamped_starts(ctx, starts, ctx.avals_in[0].shape, slice_sizes)
    if not starts:
        return x
    return tf.slice(x, tf.stack(starts), size_vector([ctx.dim(s) for s in slice_sizes]))


def _update(x, update, starts, allow_negative=False):
    return lax.dynamic_update_slice(x, update, tuple(starts[i] for i in range(x.ndim)),
                                    allow_negative_indices=allow_negative)


DYNAMIC_UPDATE_SLICE_CASES = [
    case("in_range", _update, f32(5, 4), f32(2, 2), np.array([1, 2], np.int32)),
    case("past_end_clamps", _update, f32(5, 4), f32(2, 3), np.array([7, 9], np.int32)),
    case("negative_clamps", _update, f32(5, 4), f32(2, 2), np.array([-3, -1], np.int32)),
    case("negative_from_end", lambda x, u, s: _update(x, u, s, allow_negative=True), f32(5, 4), f32(2, 2),
         np.array([-2, -3], np.int32)),
    case("i32", _update, i32(6), i32(3), np.array([2], np.int32)),
    case("bool", _update, boolean(3, 4), boolean(1, 4), np.array([1, 0], np.int32)),
    case("f16", _update, f16(3, 3), f16(2, 2), np.array([2, 0], np.int32)),
    case("uint8_starts", _update, f32(4), f32(2), np.array([250], np.uint8)),
    case("whole", _update, f32(2, 3), f32(2, 3), np.array([1, 1], np.int32)),
    case("empty_update", lambda x, u, s: _update(x, emptied(u), s), f32(3, 2), f32(1, 2),
         np.array([1, 0], np.int32)),
    case("in_dim", lambda x, u, s: lax.dynamic_update_slice_in_dim(x, u, s[0], axis=0), f32(4, 2), f32(1, 2),
         np.array([-1], np.int32)),
    case("symbolic_operand", _update, f32(5, 4), f32(2, 4), np.array([4, 0], np.int32),
         polymorphic_shapes=("(b + 2, 4)", None, None)),
    # The .tflite's DYNAMIC_UPDATE_SLICE clamps the starts itself: an LLM's cache write (one slot
    # per token) past either end, an int8 operand, and starts of the kinds the rule hands it
    # (int16 cast as is; uint32 clamped first, as its int32 cast would wrap negative).
    case("cache_write_past_end", lambda c, u, p: lax.dynamic_update_slice(c, u, (0, 0, p[0], 0)),
         f32(1, 2, 6, 3), f32(1, 2, 2, 3), np.array([5], np.int32)),
    case("cache_write_negative", lambda c, u, p: _update(c, u, (0, 0, p[0], 0)),
         f32(1, 2, 6, 3), f32(1, 2, 1, 3), np.array([-2], np.int32)),
    case("i8", _update, i8(3, 4), i8(2, 1), np.array([2, -5], np.int32)),
    case("int16_starts", _update, i32(5, 3), i32(2, 2), np.array([-7, 30000], np.int16)),
    case("uint32_starts", _update, f32(6), f32(2), np.array([4_000_000_000], np.uint32)),
    case("u8", _update, u8(4, 3), u8(1, 3), np.array([9, 0], np.int32)),  # PAD + SELECT in TFLite too
    # A transposed cache updated (in the source's layout for the .tflite), alone and as noxla.llm.keras
    # hands keras-hub its caches: stacked, read back, updated and transposed back.
    case("transposed_operand", lambda c, u, p: lax.dynamic_update_slice(
        jnp.transpose(c, (0, 2, 1, 3)), u, (0, p[0], 0, 0)), f32(1, 2, 6, 3), f32(1, 1, 2, 3), np.array([4], np.int32)),
    case("transposed_stacked_operand", lambda k, v, u, p: jnp.transpose(lax.dynamic_update_slice(
        jnp.stack([jnp.transpose(k, (0, 2, 1, 3)), jnp.transpose(v, (0, 3, 1, 2))], 1)[:, 1], u, (0, p[0], 0, 0)),
        (0, 2, 3, 1)), f32(1, 2, 6, 3), f32(1, 2, 3, 6), f32(1, 1, 2, 3), np.array([7], np.int32)),
]


# The dtypes TFLite's DYNAMIC_UPDATE_SLICE kernel takes (TF 2.19's converter refuses uint8, int16,
# uint16 and uint32 for it; measured; every case above runs in LiteRT): the others keep the
# PAD + SELECT lowering, in their carriers.
_TFLITE_UPDATE_SLICE_DTYPES = DtypeNames({"float32", "float16", "int32", "int64", "bool", "int8"})
_INT32_SIZED = DtypeNames({"int8", "uint8", "int16", "uint16", "int32"})  # starts the builtin takes as they are


@lowering(lax.dynamic_update_slice_p, cases=DYNAMIC_UPDATE_SLICE_CASES)
def lower_dynamic_update_slice(ctx, x, update, *starts):
    # For the .tflite: one builtin DYNAMIC_UPDATE_SLICE instead of two PADs and a SELECT over the
    # whole operand (in an LLM's decode step: every layer's K and V cache, per token). The TFLite
    # converter makes that builtin only from TF's XlaDynamicUpdateSlice, so the op is emitted in
    # the lowering only the converter sees (``ctx.lowering_for.tflite_converter``), which turns it into the builtin
    # or fails the export: no XLA op reaches the SavedModel, TF.js or ``noxla.convert``'s function.
    # Chosen over rewriting the converted flatbuffer's PAD/PAD/SELECT: that pattern is whatever the
    # converter's folding left of it, while this op has one documented legalization. The kernel
    # clamps the starts into the operand as XLA (and so JAX's primitive) does. LiteRT.js's WebGPU
    # delegate keeps the PAD + SELECT form it is known to run.
    if (starts and ctx.lowering_for.tflite_converter and not ctx.lowering_for.webgpu and isinstance(x, tf.Tensor)
            and x.dtype in _TFLITE_UPDATE_SLICE_DTYPES):
        moved = _update_before_transpose(ctx, x, update, starts)
        return _tflite_update_slice(ctx, x, update, starts) if moved is None else moved
    if not starts:  # a scalar: the update replaces it
        return update
    # Clamped (to int32) before the operands go to their carriers, which would wrap a uint32 start
    # past 2^31 to a negative one (tests/test_rules.py's uint32_starts case found it).
    clamped = _clamped_starts(ctx, starts, ctx.avals_in[0].shape, ctx.avals_in[1].shape)
    if ctx.lowering_for.webgpu:
        return _gathered_update(ctx, x, update, *clamped)
    return _selected_update(ctx, x, update, *clamped)


def _update_before_transpose(ctx, x, update, starts):
    """An update of ``transpose(source, p)`` as ``transpose(update of source, p)``: the update moved
    to the source's layout, the whole operand not. noxla.llm.keras hands keras-hub the contract's
    caches transposed to its layout, and transposes the updated caches back: with the update
    first, the two transposes meet and the converter drops both (four cache copies per layer and
    token). The same elements land in the same places. Only for int32-sized starts (the builtin
    clamps them itself); None where it does not apply."""
    found = joins.transposed(ctx, ctx.eqn.invars[0])
    if found is None or not all(s.dtype in _INT32_SIZED for s in starts):
        return None
    source, permutation = found
    value = ctx.value(source)
    if value.dtype != x.dtype:
        return None
    inverse = [permutation.index(d) for d in range(len(permutation))]
    placed = [starts[inverse[d]] for d in range(len(permutation))]
    return tf.transpose(_tflite_update_slice(ctx, value, tf.transpose(update, inverse), placed), permutation)


def _tflite_update_slice(ctx, x, update, starts):
    narrow = all(s.dtype in _INT32_SIZED for s in starts)
    # Starts that int32 holds go as they are (the kernel clamps); wider ones are clamped first, since
    # casting them to int32 could wrap a huge start to a negative one.
    starts = ([tf.cast(s, tf.int32) for s in starts] if narrow
              else _clamped_starts(ctx, starts, ctx.avals_in[0].shape, ctx.avals_in[1].shape))
    # The converter's input form of the builtin (or the graph's recording of it, for its writer).
    return xla_ops().xla_dynamic_update_slice(x, update, tf.stack(starts))


@carried("float16", "bool", *_NARROW)
def _selected_update(ctx, x, update, *starts):
    """The update at ``starts`` (already clamped, int32) as PAD + SELECT over the whole operand."""
    operand_shape, update_shape = ctx.avals_in[0].shape, ctx.avals_in[1].shape
    # Pad the update (and a mask of where it lands) out to the operand's shape, then select.
    paddings = tf.stack([tf.stack([start, ctx.dim(dim) - start - ctx.dim(size)])
                         for start, dim, size in zip(starts, operand_shape, update_shape)])
    placed = tf.pad(update, paddings)
    inside = tf.pad(tf.ones(ctx.shape(update_shape), tf.int32), paddings) > 0
    return tf.where(inside, placed, x)


def _gathered_update(ctx, x, update, *starts):
    """The update at ``starts`` (clamped, int32) with static shapes only, for LiteRT.js's WebGPU
    delegate: it runs DYNAMIC_UPDATE_SLICE with its starts ignored (the update landed at 0), and a
    PAD by amounts known at run time makes tensors of dynamic size, which it refuses, failing the
    model. So per axis the update's rows are gathered to the operand's positions (clipped), and a
    mask of the positions it covers selects them (LiteRT.js has static shapes only)."""
    operand_shape, update_shape = ctx.avals_in[0].shape, ctx.avals_in[1].shape
    if 0 in update_shape:
        return x
    placed, inside = update, None
    for axis, (start, dim, size) in enumerate(zip(starts, operand_shape, update_shape)):
        if dim == size:  # the start is clamped to 0
            continue
        offsets = tf.constant(np.arange(dim, dtype=np.int32)) - start
        known = tf.get_static_value(start)
        if known is not None:  # a PAD by known amounts: the delegate's GATHER of constant indices along
            known = int(known)  # a leading axis does not compile ("Unable to parse bc coord for BATCH axis")
            placed = tf.pad(placed, [(known, dim - size - known) if d == axis else (0, 0)
                                     for d in range(len(operand_shape))])
        else:
            placed = tf.gather(placed, tf.clip_by_value(offsets, 0, size - 1), axis=axis)
        hit = tf.reshape(tf.logical_and(offsets >= 0, offsets < size),
                         [dim if d == axis else 1 for d in range(len(operand_shape))])
        inside = hit if inside is None else tf.logical_and(inside, hit)
    if inside is None:
        return placed
    if x.dtype in (tf.uint8, tf.int8, tf.int16, tf.uint16):  # TFLite's SELECT_V2 has no kernel for them
        return tf.cast(tf.where(inside, tf.cast(placed, tf.int32), tf.cast(x, tf.int32)), x.dtype)
    return tf.where(inside, placed, x)


PAD_CASES = [
    case("edges", lambda x: lax.pad(x, 0.0, [(1, 2, 0), (0, 1, 0)]), f32(3, 4)),
    case("negative_crops", lambda x: lax.pad(x, 0.0, [(-1, 0, 0), (1, -2, 0)]), f32(3, 4)),
    case("interior", lambda x: lax.pad(x, -1.0, [(0, 0, 1), (2, 1, 2)]), f32(3, 4)),
    case("negative_and_interior", lambda x: lax.pad(x, 5.0, [(-1, -2, 2), (1, -1, 1)]), f32(3, 4)),
    case("crop_into_interior", lambda x: lax.pad(x, 9.0, [(-2, -3, 3)]), f32(4)),
    case("traced_value", lambda x, v: lax.pad(x, v[0], [(1, 1, 1), (0, 2, 0)]), f32(2, 3), f32(1)),
    case("i32", lambda x: lax.pad(x, 7, [(2, -1, 1)]), i32(4)),
    # TF.js's wasm PadV2 takes its fill as a float32: found by tests/fuzz.py, INT32_MAX came out INT32_MIN.
    case("i32_fill_float32_cannot_hold", lambda x: lax.pad(x, np.int32(2**31 - 1), [(1, 2, 1)]), i32(4)),
    case("i32_traced_fill", lambda x, v: lax.pad(x, v[0], [(2, 1, 1)]), i32(3), i32(1, low=2**24, high=2**31 - 1)),
    case("bool", lambda x: lax.pad(x, True, [(1, 0, 1), (0, 1, 0)]), boolean(2, 2)),
    # Found by tests/fuzz.py: a zero fill of inner axes only (here the interior padding's unit axis)
    # was a Pad, which TF's TFLite converter refuses for uint8 (it needed Flex).
    case("u8_zero_fill_interior", lambda x: lax.pad(x, np.uint8(0), [(0, 0, 1), (1, 1, 0)]),
         np.array([[1, 200, 3], [255, 0, 7]], np.uint8)),
    case("f16", lambda x: lax.pad(x, jnp.float16(2), [(1, 1, 1)]), f16(3)),
    case("empty_operand", lambda x: lax.pad(emptied(x), 1.0, [(1, 1, 2), (0, 0, 0)]), f32(2, 3)),
    case("size1_interior", lambda x: lax.pad(x, 1.0, [(0, 0, 3), (1, 0, 2)]), f32(1, 2)),
    case("jnp_pad", lambda x: jnp.pad(x, ((1, 2), (0, 0)), constant_values=3.0), f32(2, 3)),
    # Found by tests/fuzz.py: a negative pad that eats into the other side's positive one leaves
    # padding values only (the crop kept -1 elements: all of them).
    case("crop_into_other_side", lambda x, v: lax.pad(x, v[0], [(3, -2, 2), (-3, 4, 0)]), f32(1, 2), f32(1)),
    case("crop_into_other_side_of_empty", lambda x: lax.pad(emptied(x, 1), 4.0, [(1, 0, 1), (3, -1, 0)]),
         f32(2, 3)),
    case("symbolic", lambda x: lax.pad(x, 0.0, [(1, 2, 1), (0, -1, 0)]), f32(3, 4),
         polymorphic_shapes=("(b, 4)",)),
    # Found by tests/fuzz_poly.py: with a symbolic size, whether a crop eats into the other side's
    # padding is known at run time only (b = 1 here: it does; a wrong size, or a failed slice).
    case("symbolic_crop_into_other_side", lambda x: lax.pad(x, 2.0, [(2, -2, 0), (-2, 3, 0), (3, -3, 2)]),
         f32(1, 1, 1), polymorphic_shapes=("(b, b, b)",)),
    # jnp.pad to a multiple of 4 (its amount symbolic), beside a crop of the padded axis.
    case("symbolic_amounts", lambda x: lax.pad(x, 1.0, [(x.shape[1] % 3, 1, 0), (-1, (-x.shape[1]) % 4, 0)]),
         f32(2, 5), polymorphic_shapes=("(2, b)",)),
    case("symbolic_interior", lambda x: lax.pad(x, 0.0, [(0, 0, x.shape[0] // 2)]), f32(5),
         polymorphic_shapes=("(b,)",)),
    # Found by tests/fuzz_poly.py: the recorder took the unknown size of an empty tensor's reshape
    # for 0 ((b, 0) viewed as (b, 1, 0) by the interior padding), so the final slice read past the end.
    case("symbolic_beside_empty", lambda x, v: lax.pad(x, v[0], [(3, 3, 1), (3, 3, 2)]), i32(3, 0), i32(1),
         polymorphic_shapes=("(b, 0)", None)),
    case("symbolic_between_empty", lambda x: lax.pad(x, 2.0, [(0, 2, 2), (3, -2, 0), (3, 3, 0)]), f32(0, 5, 0),
         polymorphic_shapes=("(0, b, 0)",)),
]


# Measured (pad:u8_zero_fill_interior): values in the wrong places on LiteRT.js's WebGPU.
_WEBGPU_U8_INTERIOR = webgpu_computes_wrong(
    "a uint8 pad with interior padding", "values in the wrong places", "padding_config",
    when=lambda eqn: eqn.dtype_in == np.uint8 and any(entry[2] for entry in eqn.params["padding_config"]))


@lowering(lax.pad_p, cases=PAD_CASES, limitations=[_WEBGPU_U8_INTERIOR, symbolic_padding(
    "padding_config", "give that axis a static size (noxla export's --shape-buckets writes one signature per "
    "size), or an integer interior padding", amounts=lambda entry: entry[2:])])
@carried("float16", "bool", "int8", "int16", "uint16", "uint32")
def lower_pad(ctx, x, padding_value, *, padding_config):
    # Edge amounts may be symbolic (jnp.pad to a multiple of a block: (-b) % 8), interior ones not.
    config = [(ctx.dim(lo), ctx.dim(hi), int(interior)) for lo, hi, interior in padding_config]
    sizes = [ctx.dim(d) for d in ctx.avals_in[0].shape]
    given = list(sizes)
    # 1. Interior padding: give every element `interior` trailing pad values along the axis.
    #    The last element's trailing values are dropped by the crop below.
    for axis, (_, _, interior) in enumerate(config):
        if interior == 0:
            continue
        spread = sizes[:axis + 1] + [1] + sizes[axis + 1:]
        gaps = [[0, 0]] * len(spread)
        gaps[axis + 1] = [0, interior]
        x = _pad_with(reshape_to(ctx, x, spread), gaps, padding_value)
        sizes[axis] = sizes[axis] * (1 + interior)
        x = reshape_to(ctx, x, sizes)
    out = [ctx.dim(d) for d in ctx.aval_out.shape]
    if not all(type(o) is int for o in out):
        # A symbolic size: whether a crop eats into the other side's padding is known only at run
        # time, so pad first (XLA's order) and slice. The last element's interior tail is cut as
        # part of the high side; symbolic sizes are >= 1, so every such axis has a last element.
        tails = [interior if type(n) is not int or n > 0 else 0 for n, (_, _, interior) in zip(given, config)]
        x = _pad_with(x, [[_at_least_0(lo), _at_least_0(hi - t)] for (lo, hi, _), t in zip(config, tails)],
                      padding_value)
        return tf.slice(x, size_vector([_at_least_0(-lo) for lo, _, _ in config]), size_vector(out))
    # 2. Negative edge padding crops (and interior padding's extra tail goes) with one slice.
    if any(lo < 0 or hi < 0 or interior > 0 for lo, hi, interior in config):
        kept = [o - max(lo, 0) - max(hi, 0) for o, (lo, hi, _) in zip(out, config)]
        # A crop that eats into the other side's padding (x = [a], lo = 1, hi = -2) keeps no
        # element: the axis is then padding values only.
        gone = [type(k) is int and k < 0 for k in kept]
        config = [(o, 0, c[2]) if g else c for o, g, c in zip(out, gone, config)]
        x = tf.slice(x, [0 if g else max(-lo, 0) for g, (lo, _, _) in zip(gone, config)],
                     size_vector([0 if g else k for g, k in zip(gone, kept)]))
    # 3. Positive edge padding.
    if any(lo > 0 or hi > 0 for lo, hi, _ in config):
        x = _pad_with(x, [[max(lo, 0), max(hi, 0)] for lo, hi, _ in config], padding_value)
    return x


def _at_least_0(amount):
    return max(amount, 0) if type(amount) is int else tf.maximum(amount, 0)


def _pad_with(x, paddings, value):
    """tf.pad with fill ``value``. A constant +0 fill (every bit zero, so also 0) of inner axes only
    becomes a Pad (TFLite PAD), anything else a PadV2 (PADV2). XNNPACK delegates PAD but not PADV2: a
    PADV2 runs in TFLite's own kernel and cuts the graph into two XNNPACK partitions around it
    (ResNet50's zero pad before its max pool: 2 partitions where litert-converter has 1). A -0.0 fill
    stays PADV2, since PAD fills with +0.0; so does a pad of the first or last axis, since TF's CPU
    graph optimizer fuses a Pad into the Conv2D it feeds as spatial padding only (a feature-axis pad
    then reaches the Conv2D unpadded: "input depth must be evenly divisible by filter depth").
    A uint8 pad stays PADV2 too: TF's TFLite converter legalizes a uint8 Pad to no builtin (PAD takes
    quantized uint8 only) and refuses the model, where PADV2 takes plain uint8."""
    static = tf.get_static_value(value)
    inner = all(isinstance(v, (int, np.integer)) and v == 0 for v in (*paddings[0], *paddings[-1]))
    zero = static is not None and np.ndim(static) == 0 and not np.asarray(static).tobytes().strip(b"\0")
    if inner and zero and x.dtype != tf.uint8:
        return tf.pad(x, paddings)
    return pad_exactly(x, paddings, value)
