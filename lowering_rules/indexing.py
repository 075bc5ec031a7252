"""Gather and scatter, every dimension-number form and mode, through GatherNd and ScatterNd.

Both families first compute, with plain arithmetic on iotas, the operand coordinate every
gathered or scattered element refers to; JAX's out-of-bounds modes then become a clamp of
the window starts (CLIP, and gather's PROMISE_IN_BOUNDS, which XLA clamps) or a per-window
validity mask (FILL_OR_DROP, and scatter's PROMISE_IN_BOUNDS, which XLA drops).

Scatter sends every update to a flat operand position, and dropped updates to one extra
"trash" slot past the end, so ScatterNd (which sums duplicates) never sees an invalid index.
Combiners other than addition resolve duplicate positions exactly, without UnsortedSegment*
(refused by TF.js) or TensorScatter* (not TFLite builtins):
  * set: the last update of each position wins, as on XLA:CPU; the last writer is found with
    log2(#updates) rounds of GatherNd/ScatterNd (a bitwise search for the largest ordinal).
  * mul/min/max: an (#updates x #updates) equality matrix combines the updates sharing a
    position, so memory and time grow with the square of the number of updated elements
    (unless ``unique_indices`` promises there are no duplicates).
  * apply (``x.at[i].apply(f)``): f is applied as many times as the position is hit.
"""
from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, i8, i32, u8, u32
from lowering_rules.core.helpers import (
    compute_dtype,
    convertible_constant,
    identity_element,
    is_empty,
    is_nan,
    kernel_dtype,
    size_vector,
    where_nan_either,
)
from lowering_rules.core.jax_compat import closed_jaxpr, core
from lowering_rules.core.lazy_tensorflow import op, tf
from lowering_rules.core.registry import Limitation, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS, tfjs_webgpu_fails, webgpu_computes_wrong

Mode = lax.GatherScatterMode


# ---------------------------------------------------------------- shared helpers


def _iota(size, axis: int, rank: int) -> tf.Tensor:
    """0..size-1 laid along ``axis`` of a rank-``rank`` tensor, size 1 elsewhere."""
    values = tf.range(size, dtype=tf.int32)
    for _ in range(axis):
        values = tf.expand_dims(values, 0)
    for _ in range(rank - axis - 1):
        values = tf.expand_dims(values, -1)
    return values


def _trailing_ones(t: tf.Tensor, count: int) -> tf.Tensor:
    for _ in range(count):
        t = tf.expand_dims(t, -1)
    return t


def _start_columns(ctx, indices):
    """The index vectors' components as int32 tensors of the batch shape (index_vector_dim is last)."""
    indices = tf.cast(indices, tf.int32)
    count = ctx.avals_in[1].shape[-1]
    if count == 1:  # a reshape, which the converters merge with the one that made the vectors
        # Not tf.squeeze: TF 2.21's TFLite converter folded a Squeeze after a Transpose (indices
        # vmapped on another axis) into a TRANSPOSE of the wrong rank and failed.
        return [tf.reshape(indices, ctx.shape(ctx.avals_in[1].shape[:-1]))]
    return [indices[..., k] for k in range(count)]


def _in_window_range(start, dim_size, window_size):
    """Whether a window of ``window_size`` starting at ``start`` lies inside the dimension."""
    return tf.logical_and(start >= 0, start <= dim_size - window_size)


def _clamp_start(start, dim_size, window_size):
    return tf.minimum(tf.maximum(start, 0), dim_size - window_size)


def _all(masks):
    result = None
    for m in masks:
        result = m if result is None else tf.logical_and(result, m)
    return result


# ---------------------------------------------------------------- gather

def lower_gather(ctx, operand, indices, *, dimension_numbers, slice_sizes, unique_indices,
                 indices_are_sorted, mode, fill_value=None):
    # unique_indices and indices_are_sorted are performance hints; results do not depend on them.
    dn = dimension_numbers
    op_aval, idx_aval = ctx.avals_in
    if any(type(s) is int and s == 0 for s in slice_sizes):
        # An empty window gathers nothing: GatherNd (TF, TF.js) refuses slices of an empty operand.
        return tf.zeros(ctx.out_shape(), ctx.out_dtype)
    rank = len(op_aval.shape)
    op_dims = [ctx.dim(d) for d in op_aval.shape]
    sizes = [ctx.dim(s) for s in slice_sizes]
    batch = [ctx.dim(d) for d in idx_aval.shape[:-1]]
    nb = len(batch)
    indexed, batching = list(dn.start_index_map), list(dn.operand_batching_dims)
    coord_dims = indexed + batching
    free_dims = [d for d in range(rank) if d not in coord_dims]
    operand = tf.cast(operand, _moved_dtype(operand.dtype))
    starts = _start_columns(ctx, indices)
    # CLIP and PROMISE_IN_BOUNDS clamp (XLA's gather always does); FILL_OR_DROP clamps too, to
    # keep the gather in range, and masks the slice afterwards.
    clamped = [_clamp_start(starts[k], op_dims[d], sizes[d]) for k, d in enumerate(dn.start_index_map)]
    gathered = _take(ctx, operand, clamped, dn, slice_sizes)
    if gathered is not None:
        return _masked(ctx, gathered, starts, clamped, dn, mode, fill_value)

    # Dimensions the indices never touch are windows starting at 0: one static slice, and
    # GatherNd then takes them whole, as trailing dimensions of each gathered slice.
    if any(slice_sizes[d] != op_aval.shape[d] for d in free_dims):
        operand = tf.slice(operand, [0] * rank,
                           size_vector([sizes[d] if d in free_dims else -1 for d in range(rank)]))
    order = coord_dims + free_dims
    if order != list(range(rank)):
        operand = tf.transpose(operand, order)

    window = [sizes[d] for d in coord_dims]
    nc = len(coord_dims)
    if nc:
        coords = []
        for j, d in enumerate(coord_dims):
            if d in indexed:
                c = _trailing_ones(clamped[indexed.index(d)], nc) + _iota(window[j], nb + j, nb + nc)
            else:
                axis = dn.start_indices_batching_dims[batching.index(d)]
                c = _iota(batch[axis], axis, nb + nc)
            coords.append(tf.broadcast_to(c, size_vector(batch + window)))
        gathered = tf.gather_nd(operand, tf.stack(coords, axis=-1))
    else:
        gathered = operand
        for _ in range(nb):
            gathered = tf.expand_dims(gathered, 0)
        gathered = tf.broadcast_to(gathered, size_vector(batch + [sizes[d] for d in free_dims]))

    # Collapsed and batching dimensions are size-1 slice dimensions the output does not keep.
    dropped = [nb + p for p, d in enumerate(order) if d in dn.collapsed_slice_dims or d in batching]
    if dropped:
        gathered = tf.squeeze(gathered, dropped)
    kept = [d for d in order if d not in dn.collapsed_slice_dims and d not in batching]
    # Offset dimensions appear in the output in operand order, at the positions offset_dims names.
    out_rank = nb + len(kept)
    perm, next_batch = [], 0
    for o in range(out_rank):
        if o in dn.offset_dims:
            perm.append(nb + kept.index(sorted(kept)[list(dn.offset_dims).index(o)]))
        else:
            perm.append(next_batch)
            next_batch += 1
    if perm != list(range(out_rank)):
        gathered = tf.transpose(gathered, perm)

    return _masked(ctx, gathered, starts, clamped, dn, mode, fill_value)


def _moved_dtype(dtype: tf.DType) -> tf.DType:
    """The dtype gather moves values in: uint32 as the int32 with the same bits (TFLite has no
    uint32 Transpose or GatherNd; the casts wrap exactly), the rest as ``compute_dtype``."""
    return tf.int32 if dtype == tf.uint32 else compute_dtype(dtype, bools=True)


def _masked(ctx, gathered, starts, clamped, dn, mode, fill_value):
    """The gathered slices in the output's layout, FILL_OR_DROP's out-of-range ones filled.

    A window is in range where clamping left its start as it was: one Equal on the clamped start
    the gather needs anyway, instead of two comparisons and an And."""
    if mode == Mode.FILL_OR_DROP:
        valid = _all(tf.equal(c, s) for c, s in zip(clamped, starts))
        if valid is not None:
            for o in sorted(dn.offset_dims):
                valid = tf.expand_dims(valid, o)
            fill = tf.cast(tf.constant(_fill_constant(fill_value, ctx.aval_out.dtype)), gathered.dtype)
            gathered = tf.where(valid, gathered, fill)
    return tf.cast(gathered, ctx.out_dtype)


def _fill_constant(fill_value, dtype) -> np.ndarray:
    """The fill value in the output's dtype as JAX makes it (lax.full_like, through NumPy): a
    float or out-of-range fill wraps into an integer dtype (-2.0 is 254 in uint8) instead of failing."""
    if fill_value is None:
        return np.asarray(fill_value, dtype=dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(fill_value).astype(dtype)


def _take(ctx, operand, clamped, dn, slice_sizes):
    """Whole slices at single indices along one axis (x[i], jnp.take, an embedding lookup) as one
    GatherV2 (TFLite GATHER) on the ``clamped`` indices, in the output's layout; else None.
    GatherNd would need the coordinates built, and reshapes around it. Not for half floats,
    uint16 or uint32: the TFLite converter moves their cast behind GATHER, which has no float16,
    uint16 or uint32 kernel."""
    op_shape = ctx.avals_in[0].shape
    if np.dtype(ctx.avals_in[0].dtype) in (np.float16, jnp.bfloat16, np.uint16, np.uint32):
        return None
    if len(dn.start_index_map) != 1 or dn.operand_batching_dims or tuple(dn.collapsed_slice_dims) != tuple(
            dn.start_index_map):
        return None
    axis = dn.start_index_map[0]
    if slice_sizes[axis] != 1 or any(slice_sizes[d] != op_shape[d] for d in range(len(op_shape)) if d != axis):
        return None
    gathered = _gather_flat_indices(ctx, operand, clamped[0], axis)
    nb = len(ctx.avals_in[1].shape) - 1
    # tf.gather puts the index dims at ``axis``; JAX puts the kept operand dims at offset_dims.
    perm, next_batch = [], 0
    for o in range(nb + len(op_shape) - 1):
        if o in dn.offset_dims:
            kept = list(dn.offset_dims).index(o)
            perm.append(kept if kept < axis else kept + nb)
        else:
            perm.append(axis + next_batch)
            next_batch += 1
    return gathered if perm == sorted(perm) else tf.transpose(gathered, perm)


def _gather_flat_indices(ctx, operand, indices, axis: int):
    """tf.gather; lowered for LiteRT.js's WebGPU delegate (``ctx.lowering_for.webgpu``), which takes
    only 1-D indices, a gather with static multi-dimensional indices is a GATHER of their flattened
    vector between RESHAPEs (the same values; an embedding lookup of [batch, tokens] otherwise
    leaves the GPU). The default .tflite keeps the one GATHER: two ops fewer on LiteRT's CPU. Rows
    of a table only (axis 0 of a matrix or more): the flattened gather of 7,680 samples from a wave
    failed to compile on WebGPU (log_mel_audio_classifier), from its [1, n] and from an [n, 1] table
    ("Unable to parse bc coord for BATCH axis"), where the 2-D one falls back to wasm."""
    shape = indices.shape
    if (not ctx.lowering_for.webgpu or shape.rank is None or shape.rank < 2 or not shape.is_fully_defined()
            or not operand.shape.is_fully_defined()):
        return tf.gather(operand, indices, axis=axis)
    op_shape = operand.shape.as_list()
    out_shape = op_shape[:axis] + shape.as_list() + op_shape[axis + 1:]
    if axis != 0 or len(op_shape) < 2:
        return tf.gather(operand, indices, axis=axis)
    return tf.reshape(tf.gather(operand, tf.reshape(indices, [-1])), out_shape)


_ONE_HOT_MODE = Limitation(
    ALL_TARGETS, "mode is ONE_HOT", param="mode",
    reason="GatherScatterMode.ONE_HOT has no lowering in JAX 0.10.2 itself (XLA refuses it)",
    workaround="use mode='clip' or mode='fill'",
    when=lambda eqn: eqn.params.get("mode") == Mode.ONE_HOT)


# ---------------------------------------------------------------- scatter

def _scatter_positions(ctx, indices, updates, dn, mode):
    """Each update element's flat (row-major) operand position, and the updates, both flat.

    Updates whose window is out of bounds (modes other than CLIP) go to position ``size``,
    one past the operand: the trash slot, sliced off after ScatterNd.
    """
    op_aval, idx_aval, upd_aval = ctx.avals_in
    rank = len(op_aval.shape)
    op_dims = [ctx.dim(d) for d in op_aval.shape]
    batch = [ctx.dim(d) for d in idx_aval.shape[:-1]]
    nb = len(batch)
    indexed, batching = list(dn.scatter_dims_to_operand_dims), list(dn.operand_batching_dims)
    window_dims = [d for d in range(rank) if d not in dn.inserted_window_dims and d not in batching]
    window = {d: ctx.dim(upd_aval.shape[u]) for d, u in zip(window_dims, dn.update_window_dims)}
    nw = len(window_dims)

    scatter_axes = [a for a in range(len(upd_aval.shape)) if a not in dn.update_window_dims]
    order = scatter_axes + list(dn.update_window_dims)
    if order != list(range(len(order))):
        updates = tf.transpose(updates, order)   # now batch + window, windows in operand order

    starts = _start_columns(ctx, indices)
    position, stride, valid = tf.zeros([], tf.int32), 1, []
    for d in reversed(range(rank)):
        if d in indexed:
            start, size = starts[indexed.index(d)], window.get(d, 1)
            if mode == Mode.CLIP:
                start = _clamp_start(start, op_dims[d], size)
            else:   # FILL_OR_DROP, PROMISE_IN_BOUNDS (and ONE_HOT): XLA drops the whole window
                valid.append(_in_window_range(start, op_dims[d], size))
            coord = _trailing_ones(start, nw)
            if d in window:
                coord = coord + _iota(window[d], nb + window_dims.index(d), nb + nw)
        elif d in batching:
            axis = dn.scatter_indices_batching_dims[batching.index(d)]
            coord = _iota(batch[axis], axis, nb + nw)
        else:
            coord = _iota(window[d], nb + window_dims.index(d), nb + nw)
        position = position + coord * stride
        stride = stride * op_dims[d]
    size = stride
    position = tf.broadcast_to(position, size_vector(batch + [window[d] for d in window_dims]))
    valid = _all(valid)
    if valid is not None:
        position = tf.where(_trailing_ones(valid, nw), position, size)
    return tf.reshape(position, [-1]), tf.reshape(updates, [-1]), size


def _scatter_sum(values, positions, size):
    """Sum of the values sent to each of ``size`` positions (the trash slot is dropped)."""
    total = tf.scatter_nd(tf.expand_dims(positions, -1), values, size_vector([size + 1]))
    return total[:size]


def _last_writers(positions, size, count):
    """True for the update each position keeps under "last one wins".

    The largest ordinal per position is found bit by bit: a bit is set when some update at that
    position reaches the prefix found so far plus that bit. Exact, O((updates + size) * log2).
    """
    ordinal = tf.range(tf.size(positions), dtype=tf.int32)
    bits = max(1, (count - 1).bit_length()) if isinstance(count, int) else 31
    best = tf.zeros(size_vector([size + 1]), tf.int32)
    for bit in reversed(range(bits)):
        trial = best + (1 << bit)
        reaches = tf.cast(ordinal >= tf.gather(trial, positions), tf.int32)
        found = _scatter_sum(reaches, positions, size + 1) > 0
        best = tf.where(found, trial, best)
    return tf.equal(ordinal, tf.gather(best, positions))


def _hits(positions, size):
    return _scatter_sum(tf.ones_like(positions), positions, size)


def _element_count(aval):
    count = 1
    for d in aval.shape:
        if not isinstance(d, int):
            return None
        count *= d
    return count


_REDUCE = {"mul": op("reduce_prod"), "min": op("reduce_min"), "max": op("reduce_max")}
_COMBINE = {"add": op("add"), "sub": op("subtract"), "mul": op("multiply"),
            "min": op("minimum"), "max": op("maximum")}


def _propagates_nan(kind, dtype) -> bool:
    # XLA's min and max propagate NaN; not every target's Minimum/Maximum/Min/Max kernel does.
    return kind in ("min", "max") and dtype.is_floating


def _combine(kind, a, b):
    result = _COMBINE[kind](a, b)
    if _propagates_nan(kind, a.dtype):
        result = where_nan_either(a, b, result)
    return result


def _combine_duplicates(ctx, kind, values, positions):
    """Per update: the combination of every update sharing its position; and whether it is the
    first of them (the one that carries the result). O(#updates^2)."""
    same = tf.equal(tf.expand_dims(positions, 1), tf.expand_dims(positions, 0))
    identity = convertible_constant(ctx, identity_element(kind, values.dtype), values.dtype)
    combined = _REDUCE[kind](tf.where(same, tf.expand_dims(values, 0), identity), axis=1)
    if _propagates_nan(kind, values.dtype):
        nan_among = tf.reduce_any(tf.logical_and(same, tf.expand_dims(is_nan(values), 0)), axis=1)
        combined = tf.where(nan_among, tf.constant(np.nan, values.dtype), combined)
    ordinal = tf.range(tf.size(positions), dtype=tf.int32)
    earlier = tf.expand_dims(ordinal, 0) < tf.expand_dims(ordinal, 1)
    first = tf.logical_not(tf.reduce_any(tf.logical_and(same, earlier), axis=1))
    return combined, first


def _scatter(kind, ctx, operand, indices, updates, dn, mode, unique_indices, apply=None):
    if is_empty(ctx.avals_in[0]) or is_empty(ctx.avals_in[2]):
        return operand
    dtype = operand.dtype
    # The dtype values move and combine in. Booleans become 0/1: min is "and", max "or", as JAX
    # defines them (JAX refuses add/mul on booleans). uint32 sums and products as int32 bits, max
    # and min in int64: TFLite's SCATTER_ND, SUM, PROD, MAX and MIN have no uint32 kernel.
    if kind in ("add", "sub", "mul", "max", "min"):
        compute = kernel_dtype(dtype, ordered=kind in ("max", "min"), bools=True)
    elif kind == "set":  # moved only: a uint32 as the int32 with the same bits (no uint32 SELECT_V2)
        compute = _moved_dtype(dtype)
    else:
        compute = compute_dtype(dtype, bools=True)
    positions, values, size = _scatter_positions(ctx, indices, tf.cast(updates, compute), dn, mode)
    flat = tf.reshape(tf.cast(operand, compute), [-1])

    if kind in ("add", "sub"):
        result = _combine(kind, flat, _scatter_sum(values, positions, size))
    elif kind == "apply":
        result = _apply_repeatedly(apply, flat, _hits(positions, size))
    else:
        if unique_indices:   # the caller promises no position is written twice
            carrier = None
        elif kind == "set":
            carrier = _last_writers(positions, size, _element_count(ctx.avals_in[2]))
        else:
            values, carrier = _combine_duplicates(ctx, kind, values, positions)
        if carrier is not None:   # one update per position carries the result to ScatterNd
            positions = tf.where(carrier, positions, size)
        written = _scatter_sum(values, positions, size)
        if kind != "set":
            written = _combine(kind, flat, written)
        result = tf.where(_hits(positions, size) > 0, written, flat)
    return tf.cast(tf.reshape(result, ctx.out_shape()), dtype)


def _apply_repeatedly(update, flat, hits):
    """``x.at[i].apply(f)``: f applied once per hit, as XLA applies it once per update."""
    unused_update = tf.zeros_like(flat)

    def body(step, x):
        return step + 1, tf.where(hits > step, update(x, unused_update)[0], x)

    _, result = tf.while_loop(lambda step, _: step < tf.reduce_max(hits), body,
                              [tf.constant(0, tf.int32), flat])
    return result


def _scatter_rule(kind):
    def lower(ctx, operand, indices, updates, *, dimension_numbers, indices_are_sorted,
              unique_indices, mode, update_jaxpr, update_consts):
        # update_jaxpr is the primitive's own combiner for these primitives; kind says which.
        return _scatter(kind, ctx, operand, indices, updates, dimension_numbers, mode,
                        unique_indices)
    lower.__name__ = f"lower_scatter_{kind}"
    return lower


def lower_scatter(ctx, operand, indices, updates, *, dimension_numbers, indices_are_sorted,
                  unique_indices, mode, update_jaxpr, update_consts):
    if update_jaxpr is None:   # lax.scatter / x.at[i].set
        return _scatter("set", ctx, operand, indices, updates, dimension_numbers, mode,
                        unique_indices)
    # lax.scatter_apply / x.at[i].apply(f): update_jaxpr is f(x, unused).
    apply = ctx.sub_program(closed_jaxpr(update_jaxpr, update_consts))
    return _scatter("apply", ctx, operand, indices, updates, dimension_numbers, mode,
                    unique_indices, apply=apply)


def _reads_update(eqn) -> bool:
    jaxpr = eqn.params.get("update_jaxpr")
    if jaxpr is None:
        return False
    update_var = jaxpr.invars[1]
    used = {v for e in jaxpr.eqns for v in e.invars if not isinstance(v, core.Literal)}
    used |= {v for v in jaxpr.outvars if not isinstance(v, core.Literal)}
    return update_var in used


_CUSTOM_COMBINER = Limitation(
    ALL_TARGETS, "update_jaxpr reads the update value", param="update_jaxpr",
    reason="only lax.scatter_apply's combiner (which ignores the update) is lowered; a general "
           "combiner can only be reached through scatter_p.bind",
    workaround="use x.at[i].set/add/mul/min/max or x.at[i].apply(f)",
    when=_reads_update)


# ---------------------------------------------------------------- cases

def _idx(*values):
    return np.array(values, np.int32)


def _vmap_dynamic_slice(x, i):
    return jax.vmap(lambda row, k: lax.dynamic_slice(row, (k, 0), (2, 3)))(x, i)


def _vmap_vmap_dynamic_slice(x, i):
    return jax.vmap(jax.vmap(lambda row, k: lax.dynamic_slice(row, (k,), (2,))))(x, i)


def _window_gather(x, i, j):
    # x[i:i+2, j:j+3] for a batch of (i, j) pairs: windows in two dimensions at once.
    return jax.vmap(lambda a, b: lax.dynamic_slice(x, (a, b), (2, 3)))(i, j)


_ROWS_GATHER = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
_ROWS_SCATTER = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                            scatter_dims_to_operand_dims=(0,))


_NO_ROWS = np.zeros((0, 1), np.int32)


def _rows_gather(x, i):
    return lax.gather(x, i, _ROWS_GATHER, (1, x.shape[1]), mode="fill")


def _promise_gather(x, i):
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,))
    return lax.gather(x, i, dn, (3,), mode="promise_in_bounds")


GATHER_CASES = [
    case("take_axis0_default_fill", lambda x, i: jnp.take(x, i, axis=0), f32(5, 3), _idx(0, 4, -1, 7, -6, 2)),
    case("take_axis1_clip", lambda x, i: jnp.take(x, i, axis=1, mode="clip"), f32(3, 5), _idx(0, 9, -3, 4)),
    case("take_wrap", lambda x, i: jnp.take(x, i, mode="wrap"), i32(2, 3), _idx(-1, 7, 12)),
    case("take_along_axis1", lambda x, i: jnp.take_along_axis(x, i, axis=1), f32(4, 5), i32(4, 3, low=0, high=4)),
    case("take_along_axis0_i32", lambda x, i: jnp.take_along_axis(x, i, axis=0), i32(4, 5), i32(2, 5, low=-4, high=3)),
    case("fancy_rows", lambda x, i: x[i], i32(6, 2), _idx(5, 0, 0, -2)),
    case("fancy_2d_index", lambda x, i: x[i], f32(6, 4), i32(2, 3, low=-6, high=5)),
    case("fancy_pair", lambda x, i, j: x[i, j], f32(4, 5), _idx(0, 3, -1), _idx(4, 0, 2)),
    case("fancy_columns_bool", lambda x, i: x[:, i], boolean(3, 5), _idx(4, 0, 4, 1)),
    case("fancy_last_axis", lambda x, i: x[..., i], f32(2, 3, 4), _idx(3, 1)),
    case("fancy_split_advanced", lambda x, i, j: x[i, :, j], f32(4, 3, 5), _idx(0, 3), _idx(1, 4)),
    case("scalar_and_fancy", lambda x, i: x[1, i], f32(3, 4), _idx(2, 2, 0)),
    case("vmap_dynamic_slice_window", _vmap_dynamic_slice, f32(4, 6, 5), _idx(0, 4, -1, 9)),
    case("vmap_vmap_dynamic_slice", _vmap_vmap_dynamic_slice, f32(2, 3, 5), i32(2, 3, low=-2, high=6)),
    case("vmap_fancy_batching_dims", jax.vmap(lambda x, i: x[i]), f32(3, 5), i32(3, 4, low=-5, high=4)),
    case("window_2d_clipped", _window_gather, f32(5, 6), _idx(0, 4, 2), _idx(5, 0, 1)),
    case("get_fill_value", lambda x, i: x.at[i].get(mode="fill", fill_value=-1.0), f32(5, 2), _idx(1, 5, -7, 4)),
    # Found by tests/fuzz.py: a float fill value below 0 for uint8 wraps, as JAX converts it.
    case("get_fill_negative_float_u8", lambda x, i: lax.gather(
        x, i, lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,)),
        (1,), mode=lax.GatherScatterMode.FILL_OR_DROP, fill_value=-2.0), u8(5), _idx(1, 5, -7, 4)[:, None]),
    case("get_fill_default_i32", lambda x, i: x.at[i].get(mode="fill"), i32(5), _idx(1, 5, -9, 4)),
    case("get_fill_default_bool", lambda x, i: x.at[i].get(mode="fill"), boolean(5), _idx(1, 5, 0, 9)),
    case("get_clip", lambda x, i: x.at[i].get(mode="clip"), f32(5, 2), _idx(-8, 5, 2)),
    case("get_promise_in_bounds_oob", lambda x, i: x.at[i].get(mode="promise_in_bounds"), f32(5), _idx(1, 5, -9, 4)),
    case("gather_promise_window_oob", _promise_gather, f32(10), np.array([[8], [-3], [12], [2]], np.int32)),
    # jnp short-circuits empty index arrays before gather; lax.gather itself does not. The empty
    # result feeds a concatenation: TFLite and TF.js runners cannot pass zero-size tensors.
    case("empty_indices", lambda x: jnp.concatenate([_rows_gather(x, _NO_ROWS), x]), f32(4, 3)),
    # Found by tests/fuzz.py: a window of size 0 (an empty result, here beside a whole operand).
    case("zero_size_window", lambda x, i: jnp.concatenate([lax.gather(
        x, i, lax.GatherDimensionNumbers(offset_dims=(0, 1), collapsed_slice_dims=(), start_index_map=(0,)),
        (1, 0), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS).reshape(-1), x[0]]), i32(5, 2), np.array([1], np.int32)),
    case("rows_of_size_one_operand", _rows_gather, f32(1, 3), np.array([[0], [2], [-1]], np.int32)),
    case("size_one_dims", lambda x, i: x[i, 0], f32(1, 1), _idx(0, 0, -1)),
    case("f16", lambda x, i: jnp.take(x, i, axis=1), f16(3, 4), _idx(3, 0)),
    # JAX's gather_dtypes harness: GATHER has no uint16 kernel (words above 2^15 come back as is).
    case("u16_scalar_take", lambda x, i: jnp.take(x, i, axis=0),
         np.array([3, 40000, 65535, 0, 32768, 9], np.uint16), np.int32(2)),
    case("u8_fill_default", lambda x, i: x.at[i].get(mode="fill"), u8(4), _idx(3, 4, 0)),
    # uint32 moves as int32 bits (no uint32 Transpose/GatherNd in TFLite): words above 2^31 and
    # the fill value 2^32 - 1 must come back unchanged.
    case("u32_take_along_axis1", lambda x, i: jnp.take_along_axis(x, i, axis=1),
         u32(4, 5, low=0, high=2 ** 32 - 1), i32(4, 3, low=0, high=4)),
    case("u32_fill_default_columns", lambda x, i: x.at[:, i].get(mode="fill"),
         u32(3, 5, low=0, high=2 ** 32 - 1), _idx(4, 0, 7, 1)),
    case("polymorphic_rows", lambda x, i: jnp.take(x, i, axis=0), f32(5, 3), _idx(4, 0, 2),
         polymorphic_shapes=["(b, 3)", None]),
    # JAX traces ONE_HOT but cannot run it: every target must reject it up front.
    case("one_hot_mode_rejected", lambda x, i: lax.gather(
        x, i, lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,)),
        (1,), mode=lax.GatherScatterMode.ONE_HOT), f32(4), np.array([[1], [3]], np.int32)),
]

lowering(lax.gather_p, limitations=[_ONE_HOT_MODE], cases=GATHER_CASES)(lower_gather)


def _vmap_update_slice(x, u, i):
    return jax.vmap(lambda row, new, k: lax.dynamic_update_slice(row, new, (k, 0)))(x, u, i)


def _vmap_vmap_set(x, i, v):
    return jax.vmap(jax.vmap(lambda row, k, val: row.at[k].set(val)))(x, i, v)


def _segment_sum(x, ids):
    return jax.ops.segment_sum(x, ids, num_segments=4)


SET_CASES = [
    case("unique", lambda x, i, v: x.at[i].set(v), f32(6), _idx(4, 0, 2), f32(3)),
    case("u32_words", lambda x, i, v: x.at[i].set(v), np.array([0, 1, 2 ** 32 - 1, 2 ** 31, 5], np.uint32),
         _idx(0, 2, 7), np.array([2 ** 32 - 2, 2 ** 31 + 3, 9], np.uint32)),
    case("duplicates_last_wins", lambda x, i, v: x.at[i].set(v), f32(6), _idx(1, 3, 1, 1, 3, 5), f32(6)),
    case("many_duplicates", lambda x, i, v: x.at[i].set(v), i32(3), np.arange(300, dtype=np.int32) % 3,
         i32(300)),
    case("oob_dropped_negative_wrapped", lambda x, i, v: x.at[i].set(v), f32(5), _idx(-1, 5, -6, 2, 9), f32(5)),
    case("clip", lambda x, i, v: x.at[i].set(v, mode="clip"), f32(5), _idx(-4, 7, 2), f32(3)),
    case("promise_in_bounds_oob", lambda x, i, v: x.at[i].set(v, mode="promise_in_bounds"), f32(5),
         _idx(1, 7, 3), f32(3)),
    case("rows", lambda x, i, v: x.at[i].set(v), f32(4, 3), _idx(3, 0, 3), f32(3, 3)),
    case("columns_i32", lambda x, i, v: x.at[:, i].set(v), i32(3, 5), _idx(4, 1), i32(3, 2)),
    case("pairs_scalar_bool", lambda x, i, j: x.at[i, j].set(True), boolean(3, 4), _idx(0, 2, 2), _idx(3, 1, 1)),
    case("unique_indices_hint", lambda x, i, v: x.at[i].set(v, unique_indices=True), f32(6), _idx(5, 1, 2), f32(3)),
    case("f16_duplicates", lambda x, i, v: x.at[i].set(v), f16(4), _idx(2, 2, 0), f16(3)),
    case("empty_indices", lambda x: lax.scatter(x, _NO_ROWS, jnp.zeros((0, 3), x.dtype), _ROWS_SCATTER), f32(4, 3)),
    case("vmap_dynamic_update_slice", _vmap_update_slice, f32(3, 5, 4), f32(3, 2, 4), _idx(0, 4, -2)),
    case("vmap_vmap_batching_dims", _vmap_vmap_set, f32(2, 3, 4), i32(2, 3, low=-5, high=4), f32(2, 3)),
    # Found by the batched fuzz family: indices vmapped on their middle axis (a Transpose, then the
    # index column's removal) crashed TFLite's converter.
    case("vmap_indices_middle_axis", jax.vmap(lambda x, i, u: lax.scatter(
        x, i, u, lax.ScatterDimensionNumbers(update_window_dims=(0, 2, 3), inserted_window_dims=(),
                                             scatter_dims_to_operand_dims=(0,)),
        mode=lax.GatherScatterMode.FILL_OR_DROP), in_axes=(1, 1, None)),
         i32(5, 2, 2, 3), np.array([[[2], [0]], [[0], [4]]], np.int32), i32(1, 2, 2, 3)),
    case("polymorphic", lambda x, i, v: x.at[i].set(v), f32(6), _idx(1, 1, 4), f32(3),
         polymorphic_shapes=["(b,)", None, None]),
]

ADD_CASES = [
    case("duplicates", lambda x, i, v: x.at[i].add(v), f32(5), _idx(1, 3, 1, 1, 4), f32(5)),
    case("segment_sum", _segment_sum, f32(8, 2), _idx(0, 3, 3, 1, 0, 5, -1, 3)),
    case("oob_dropped_i32", lambda x, i, v: x.at[i].add(v), i32(4, 2), _idx(0, 4, -5, 0), i32(4, 2)),
    case("clip", lambda x, i, v: x.at[i].add(v, mode="clip"), f32(4), _idx(-3, 9, 1), f32(3)),
    case("one_hot_mode_drops", lambda x, i: x.at[i].add(10.0, mode="one_hot"), f32(5), _idx(1, 7, 1)),
    case("empty_indices", lambda x: lax.scatter_add(x, _NO_ROWS, jnp.ones((0, 3), x.dtype), _ROWS_SCATTER),
         i32(4, 3)),
    case("window_rows_vmap_vmap", jax.vmap(jax.vmap(lambda row, k, v: row.at[k].add(v))),
         f32(2, 3, 4), i32(2, 3, low=0, high=3), f32(2, 3)),
    case("size_one", lambda x, i, v: x.at[i].add(v), f32(1, 1), _idx(0, 0), f32(2, 1)),
    case("f16", lambda x, i, v: x.at[i].add(v), f16(4, 2), _idx(3, 3, 0), f16(3, 2)),
    case("i8_wraps", lambda x, i, v: x.at[i].add(v), i8(3, low=100, high=120), _idx(1, 1, 2), i8(3, low=20, high=27)),
]

SUB_CASES = [
    case("duplicates", lambda x, i, v: x.at[i].subtract(v), f32(5), _idx(1, 3, 1, 9), f32(4)),
    case("i32_clip", lambda x, i, v: x.at[:, i].subtract(v, mode="clip"), i32(2, 4), _idx(3, 3, -9), i32(2, 3)),
]

MUL_CASES = [
    case("duplicates", lambda x, i, v: x.at[i].multiply(v), f32(5), _idx(1, 3, 1, 1, 9), f32(5)),
    case("i32_rows_exact", lambda x, i, v: x.at[i].multiply(v), i32(3, 2), _idx(2, 0, 2), i32(3, 2)),
    case("clip", lambda x, i, v: x.at[i].multiply(v, mode="clip"), f32(4), _idx(-2, 8, 3), f32(3)),
    case("unique_indices_hint", lambda x, i, v: x.at[i].multiply(v, unique_indices=True), f32(4), _idx(3, 0),
         f32(2)),
]

_NAN_OPERAND = np.array([np.nan, 1, 2, 3], np.float32)
_NAN_UPDATES = np.array([5, np.nan, 0, -1, 4], np.float32)
# Infinite updates at a repeated position: duplicates are combined against the monoid's identity,
# which must be a real infinity in TFLite too (its converter stores an infinite constant as FLT_MAX).
_INF = np.float32(np.inf)

MIN_CASES = [
    case("nan_propagates", lambda x, i, v: x.at[i].min(v), _NAN_OPERAND, _idx(0, 1, 1, 2, 3), _NAN_UPDATES),
    case("duplicates", lambda x, i, v: x.at[i].min(v), f32(5), _idx(1, 3, 1, 1, 6), f32(5)),
    case("i32_extremes", lambda x, i, v: x.at[i].min(v), i32(3), _idx(0, 0, 2),
         np.array([2**31 - 1, 5, -2**31], np.int32)),
    case("columns_clip", lambda x, i, v: x.at[:, i].min(v, mode="clip"), f32(2, 4), _idx(3, 7, 0), f32(2, 3)),
    case("bool", lambda x, i, v: x.at[i].min(v), boolean(4), _idx(1, 1, 3), boolean(3)),
    case("u8", lambda x, i, v: x.at[i].min(v), u8(4), _idx(0, 3, 0), u8(3)),
    case("infinities", lambda x, i, v: x.at[i].min(v), np.array([_INF, _INF, 1, -_INF], np.float32),
         _idx(0, 0, 1, 3), np.array([_INF, _INF, _INF, 5], np.float32)),
]

MAX_CASES = [
    case("nan_propagates", lambda x, i, v: x.at[i].max(v), _NAN_OPERAND, _idx(0, 1, 1, 2, 3), _NAN_UPDATES),
    case("duplicates", lambda x, i, v: x.at[i].max(v), f32(5), _idx(1, 3, 1, 1, -9), f32(5)),
    case("i32_extremes", lambda x, i, v: x.at[i].max(v), np.array([-2**31, 3, 0], np.int32), _idx(0, 0, 2),
         np.array([-2**31, -2**31, -2**31], np.int32)),
    case("vmap_rows", jax.vmap(lambda x, i, v: x.at[i].max(v)), f32(2, 5), i32(2, 3, low=0, high=4), f32(2, 3)),
    case("infinities", lambda x, i, v: x.at[i].max(v), np.array([-_INF, -_INF, 1, _INF], np.float32),
         _idx(0, 0, 1, 3), np.array([-_INF, -_INF, -_INF, 5], np.float32)),
]

def _scatter_with_update_reading_combiner(x, indices, updates):
    """The only way to reach a combiner that reads the update is scatter_p.bind itself."""
    combiner = jax.make_jaxpr(lambda old, new: old * new)(np.float32(0), np.float32(0)).jaxpr
    numbers = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))
    # JAX 0.12.1's scatters take out_sharding (as lax.scatter's keyword says).
    placement = {"out_sharding": None} if "out_sharding" in inspect.signature(lax.scatter).parameters else {}
    return lax.scatter_p.bind(x, indices, updates, update_jaxpr=combiner, update_consts=(),
                              dimension_numbers=numbers, indices_are_sorted=False, unique_indices=False,
                              mode=lax.GatherScatterMode.FILL_OR_DROP, **placement)


APPLY_CASES = [
    case("combiner_reading_update_rejected", _scatter_with_update_reading_combiner, f32(4),
         np.array([[1], [3]], np.int32), f32(2)),
    case("apply_sin_duplicates", lambda x, i: x.at[i].apply(jnp.sin), f32(5), _idx(1, 3, 1, 1, 7)),
    case("apply_affine_i32_clip", lambda x, i: x.at[i].apply(lambda v: v * 2 + 1, mode="clip"), i32(4),
         _idx(0, 9, 3, 3)),
]

# Measured (scatter:rows, scatter:unique): rows left unwritten on LiteRT.js WebGPU; wasm is right.
_WEBGPU_SET = webgpu_computes_wrong("any x.at[i].set", "updates written to the wrong rows or none",
                                    "dimension_numbers")
lowering(lax.scatter_p, limitations=[_CUSTOM_COMBINER, _WEBGPU_SET], cases=SET_CASES + APPLY_CASES)(lower_scatter)
# Measured (scatter-mul:i32_rows_exact): products of the duplicate rows wrong on TF.js's WebGPU.
_WEBGPU_INT_PRODUCTS = tfjs_webgpu_fails("an integer x.at[i].multiply", "products of repeated rows wrong", "dtype",
                                         when=lambda eqn: eqn.dtype_in.kind in "iu")
for _prim, _kind, _cases in [(lax.scatter_add_p, "add", ADD_CASES), (lax.scatter_sub_p, "sub", SUB_CASES),
                             (lax.scatter_mul_p, "mul", MUL_CASES), (lax.scatter_min_p, "min", MIN_CASES),
                             (lax.scatter_max_p, "max", MAX_CASES)]:
    lowering(_prim, cases=_cases, limitations=[_WEBGPU_INT_PRODUCTS] if _kind == "mul" else [])(_scatter_rule(_kind))
