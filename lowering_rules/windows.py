"""Windowed reductions and max-pooling gradients, for any rank, padding, stride and dilation.

A window reduction with a monoid (sum, max, min, product) is separable: reducing axis by axis
over a box window gives the same result as reducing the whole window. Each axis is reduced by
combining strided slices of the padded input (one per window position for small windows; for
large ones, power-of-two blocks built by doubling, so the work is O(n log w), not O(n w)).
Sums are added exactly, never recovered from an average. A whole-axis window with padding
(n - 1, 0) is a cumulative sum and becomes Cumsum. MaxPool is not used: it returns the lowest
finite float, not -inf, for a window of -inf (e.g. one lying wholly in padding).

The max-pooling gradients compare each window position with the window's max and keep the
first position that reaches it (the select_prim order XLA uses), then gather tangents from it
(select_and_gather_add) or place the cotangent back at it (select_and_scatter_add).
"""
from __future__ import annotations

import itertools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, flax_linen, i32
from lowering_rules.core.dtype_support import dtypes, gap
from lowering_rules.core.helpers import (
    axis_slice,
    convertible_constant,
    dilated_size,
    identity_element,
    interior_pad,
    kernel_dtype,
    pad_or_crop,
    size_vector,
    symbolic_padding,
)
from lowering_rules.core.jax_compat import closed_jaxpr, windowed_reductions
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Limitation, Target, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS, tfjs_webgpu_fails, webgpu_computes_wrong
from lowering_rules.patterns import fusion

# ----------------------------------------------------------------------------------------------
# Monoids

_DIRECT_WINDOW_LIMIT = 4  # wider windows are reduced by doubling


def _monoid(name: str, dtype) -> tuple[Callable, object]:
    """(combine, identity) of a reduction on ``dtype``; bool max/min are or/and."""
    dtype = np.dtype(dtype)
    boolean_dtype = dtype == np.bool_
    if name == "add":
        return tf.math.add, 0
    if name == "mul":
        return (tf.math.logical_and if boolean_dtype else tf.math.multiply), 1
    if name == "max":
        return (tf.math.logical_or if boolean_dtype else tf.math.maximum), identity_element(name, dtype)
    if name == "min":
        return (tf.math.logical_and if boolean_dtype else tf.math.minimum), identity_element(name, dtype)
    raise ValueError(name)


# ----------------------------------------------------------------------------------------------
# Reducing one axis


def _pad_axis(x, dims, axis, pad, fill):
    """Pads one axis with ``fill`` (a scalar tensor, see ``convertible_constant``) by concatenating
    filled blocks (a negative amount crops): TFLite's
    PADV2 turns an infinite pad value into the largest finite float, and TF.js wasm's rounds int32
    extremes through float32."""
    lo, hi = pad
    crop = [(0, 0)] * len(dims)
    crop[axis] = (min(lo, 0), min(hi, 0))
    x = pad_or_crop(x, crop)
    parts = []
    for amount in (lo, hi):
        block = None
        if amount > 0:
            block = tf.fill(size_vector([amount if a == axis else d for a, d in enumerate(dims)]),
                            fill)
        parts.append(block)
    parts.insert(1, x)
    parts = [p for p in parts if p is not None]
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis)


def _has_zero(dims) -> bool:
    return any(isinstance(d, int) and d == 0 for d in dims)


def _window_taps(x, rank, axis, taps, dilation, stride, out_size):
    """For each window position t, the strided slice of x that position sees in every window."""
    return [axis_slice(x, rank, axis, t * dilation, t * dilation + (out_size - 1) * stride + 1, stride)
            for t in taps]


def _doubled_blocks(x, rank, axis, width, dilation, combine):
    """blocks[L][i] = combine of L consecutive (dilated) elements from i, for L = 1, 2, 4, ... <= width."""
    blocks = {1: x}
    length = 1
    while 2 * length <= width:
        shift = length * dilation
        x = combine(axis_slice(x, rank, axis, 0, -shift), axis_slice(x, rank, axis, shift))
        length *= 2
        blocks[length] = x
    return blocks


def _reduce_axis(x, dims, axis, window, stride, pad, dilation, out_size, combine, fill,
                 cumulative, may_double):
    """Reduces the windows of one axis; ``dims`` are x's current sizes."""
    rank, size = len(dims), dims[axis]
    lo, hi = pad
    if window == stride == 1 and lo == hi == 0:
        return x
    if (cumulative is not None and stride == dilation == 1 and isinstance(size, int) and window == size
            and pad in ((size - 1, 0), (0, size - 1))):
        return cumulative(x, axis=axis, reverse=lo == 0)
    x = _pad_axis(x, dims, axis, pad, fill)
    if window <= _DIRECT_WINDOW_LIMIT or not may_double:
        parts = _window_taps(x, rank, axis, range(window), dilation, stride, out_size)
    else:
        blocks = _doubled_blocks(x, rank, axis, window, dilation, combine)
        parts, offset = [], 0
        for length in sorted(blocks, reverse=True):
            if window - offset >= length:
                parts += _window_taps(blocks[length], rank, axis, [offset], dilation, stride, out_size)
                offset += length
    result = parts[0]
    for part in parts[1:]:
        result = combine(result, part)
    return result


def reduce_window(ctx, x, name, window_dimensions, window_strides, padding, base_dilation,
                  window_dilation, fill=None, combine=None):
    """The windowed reduction of x by the monoid ``name``, or by ``combine`` (whose ``fill`` is its
    identity; None: there is none, so no padding or dilation holes may arise)."""
    aval = ctx.avals_in[0]
    rank = len(aval.shape)
    dtype = np.dtype(aval.dtype)
    if combine is None:
        combine, fill = _monoid(name, dtype)
    if fill is not None:  # infinities as run-time values (TFLite's converter would store FLT_MAX)
        fill = convertible_constant(ctx, fill, x.dtype)
    dims = [ctx.dim(d) for d in aval.shape]
    out_dims = [ctx.dim(d) for d in ctx.aval_out.shape]
    if _has_zero(out_dims):
        return tf.zeros(size_vector(out_dims), ctx.out_dtype)
    for a, factor in enumerate(base_dilation):
        x = interior_pad(x, dims, a, factor, fill)
        dims[a] = dilated_size(dims[a], factor)

    cumulative = tf.math.cumsum if name == "add" else None
    for a in range(rank):
        x = _reduce_axis(x, [*out_dims[:a], *dims[a:]], a, window_dimensions[a], window_strides[a],
                         padding[a], window_dilation[a], out_dims[a], combine, fill, cumulative,
                         may_double=name is not None)
    return x


def _monoid_rule(name):
    def lower(ctx, x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
        # Half floats are reduced in float32 (exact for max/min; TFLite has no float16 PAD or ADD).
        if name == "max" and not ctx.strict:
            plan = fusion.pool_plan(ctx.eqn.params, ctx.avals_in[0].shape, ctx.avals_in[0].dtype, "max")
            if plan is not None:
                return fusion.pool(x, plan, "max")
        # 8/16-bit integers in int32, uint32 as int32 bits (sums) or int64 (max/min): TFLite's
        # ADD/MAXIMUM/PAD/GATHER lack them; the final cast wraps a sum as JAX's narrow sums wrap.
        # Bools as 0/1 in int32 too: TF.js wasm's LogicalOr refuses the converted bool windows.
        half = ctx.out_dtype in (tf.float16, tf.bfloat16)
        params = (window_dimensions, window_strides, padding, base_dilation, window_dilation)
        if x.dtype == tf.bool and name in ("max", "min"):
            combine = tf.maximum if name == "max" else tf.minimum
            y = reduce_window(ctx, tf.cast(x, tf.int32), name, *params, fill=int(name == "min"), combine=combine)
        else:
            work = tf.float32 if half else kernel_dtype(x.dtype, ordered=name != "add")
            y = reduce_window(ctx, tf.cast(x, work), name, *params)
        return tf.cast(y, ctx.out_dtype)
    lower.__name__ = f"lower_reduce_window_{name}"
    return lower


# ----------------------------------------------------------------------------------------------
# Generic reduce_window: a monoid recognised from its body, else the body applied elementwise

_BODY_MONOIDS = {lax.add_p: "add", lax.mul_p: "mul", lax.max_p: "max", lax.min_p: "min"}


def _body_monoid(jaxpr) -> str | None:
    if len(jaxpr.eqns) != 1 or len(jaxpr.invars) != 2:
        return None
    eqn = jaxpr.eqns[0]
    if set(eqn.invars) != set(jaxpr.invars) or list(eqn.outvars) != list(jaxpr.outvars):
        return None
    return _BODY_MONOIDS.get(eqn.primitive)


def lower_reduce_window(ctx, x, init, *, jaxpr, consts, window_dimensions, window_strides, padding,
                        base_dilation, window_dilation):
    # XLA starts each window from the initial value and skips padding and dilation holes; with a
    # monoid, filling those with its identity is the same. Other bodies are combined elementwise.
    name = _body_monoid(jaxpr)
    if name is not None:
        combine, fill = _monoid(name, ctx.avals_in[0].dtype)
        # In the kernel dtype, as the monoid rules do: TFLite's PAD, ADD, MUL, MAXIMUM lack float16,
        # 8/16-bit integers and uint32; max/min are exact there, narrow sums wrap on the final cast.
        work = kernel_dtype(x.dtype, ordered=name in ("max", "min"))
        x, init = tf.cast(x, work), tf.cast(init, work)
    else:
        body = ctx.sub_program(closed_jaxpr(jaxpr, consts))
        combine, fill = (lambda a, b: body(a, b)[0]), None
    result = reduce_window(ctx, x, name, window_dimensions, window_strides, padding, base_dilation,
                           window_dilation, fill=fill, combine=combine)
    return [tf.cast(combine(init, tf.cast(result, x.dtype)), ctx.out_dtype)]


# ----------------------------------------------------------------------------------------------
# Max-pooling derivatives


def _selection(x, rank, valid, window, strides, dilation, out_dims, select_prim):
    """For each window position (row-major), where that position is the window's first max (or
    min): the element XLA's select_prim picks."""
    taps = list(itertools.product(*(range(w) for w in window)))

    def tap_slice(t, tap):
        for a in range(rank):
            t = _window_taps(t, rank, a, [tap[a]], dilation[a], strides[a], out_dims[a])[0]
        return t

    values = [tap_slice(x, tap) for tap in taps]
    best_of = tf.math.maximum if select_prim is lax.ge_p else tf.math.minimum
    best = values[0]
    for v in values[1:]:
        best = best_of(best, v)
    chosen, taken = [], None
    for tap, v in zip(taps, values):
        hit = tf.equal(v, best)
        if valid is not None:
            hit = tf.logical_and(hit, tap_slice(valid, tap))
        if taken is not None:
            hit = tf.logical_and(hit, tf.logical_not(taken))
        taken = hit if taken is None else tf.logical_or(taken, hit)
        chosen.append(hit)
    return taps, chosen, tap_slice


def _prepare_operand(ctx, x, dims, select_prim, padding, base_dilation):
    """Operand with base dilation and padding, and where that left real elements (None: all)."""
    fill = convertible_constant(ctx, identity_element("max" if select_prim is lax.ge_p else "min", x.dtype),
                                x.dtype)
    trivial = all(f == 1 for f in base_dilation) and all(p == (0, 0) for p in padding)
    valid = None if trivial else tf.ones_like(x, tf.bool)
    for a, factor in enumerate(base_dilation):
        x = interior_pad(x, dims, a, factor, fill)
        if valid is not None:
            valid = interior_pad(valid, dims, a, factor, False)
        dims[a] = dilated_size(dims[a], factor)
    x = pad_or_crop(x, padding, fill)
    if valid is not None:
        valid = pad_or_crop(valid, padding, False)
    return x, valid, [n + lo + hi for n, (lo, hi) in zip(dims, padding)]


def lower_select_and_gather_add(ctx, tangents, operand, *, select_prim, window_dimensions,
                                window_strides, padding, base_dilation, window_dilation):
    rank = len(window_dimensions)
    dims = [ctx.dim(d) for d in ctx.avals_in[1].shape]
    out_dims = [ctx.dim(d) for d in ctx.aval_out.shape]
    if _has_zero(out_dims):
        return tf.zeros(size_vector(out_dims), ctx.out_dtype)
    tangent_dims = list(dims)
    x, valid, _ = _prepare_operand(ctx, operand, dims, select_prim, padding, base_dilation)
    for a, factor in enumerate(base_dilation):
        tangents = interior_pad(tangents, tangent_dims, a, factor)
        tangent_dims[a] = dilated_size(tangent_dims[a], factor)  # the next axis reshapes these sizes
    tangents = pad_or_crop(tangents, padding)
    taps, chosen, tap_slice = _selection(x, rank, valid, window_dimensions, window_strides,
                                         window_dilation, out_dims, select_prim)
    zeros = tf.zeros(size_vector(out_dims), ctx.out_dtype)
    result = zeros
    for tap, hit in zip(taps, chosen):
        result = result + tf.where(hit, tap_slice(tangents, tap), zeros)
    return result


def lower_select_and_scatter_add(ctx, source, operand, *, select_prim, window_dimensions,
                                 window_strides, padding):
    rank = len(window_dimensions)
    dims = [ctx.dim(d) for d in ctx.avals_in[1].shape]
    out_dims = [ctx.dim(d) for d in ctx.avals_in[0].shape]  # the windows' grid
    if _has_zero(out_dims) or _has_zero(dims):
        return tf.zeros(ctx.out_shape(), ctx.out_dtype)
    if operand.dtype == tf.bool:  # ordered as 0 < 1: TF has no bool Maximum
        operand = tf.cast(operand, tf.int32)
    x, valid, padded_dims = _prepare_operand(ctx, operand, dims, select_prim, padding, (1,) * rank)
    taps, chosen, _ = _selection(x, rank, valid, window_dimensions, window_strides, (1,) * rank,
                                 out_dims, select_prim)
    # XLA adds booleans by OR (TF has no bool AddV2): count the selected true sources, then test.
    counted = tf.cast(source, tf.int32) if ctx.out_dtype == tf.bool else source
    zeros = tf.zeros_like(counted)
    total = None
    for tap, hit in zip(taps, chosen):
        placed = place_at_tap(tf.where(hit, counted, zeros), tap, window_strides, out_dims, padded_dims)
        total = placed if total is None else total + placed
    total = pad_or_crop(total, [(-lo, -hi) for lo, hi in padding])
    return total > 0 if ctx.out_dtype == tf.bool else total


def place_at_tap(t, tap, strides, grid, padded_dims):
    """A tensor over the windows' grid spread over the padded operand: window i's value lands at
    ``i * stride + tap`` (spread with zeros, then shifted), zeros elsewhere."""
    rank = len(tap)
    placed_dims = list(grid)
    for axis, stride in enumerate(strides):
        t = interior_pad(t, placed_dims, axis, stride)
        placed_dims[axis] = (placed_dims[axis] - 1) * stride + 1
    after = [p - o - n for o, p, n in zip(tap, padded_dims, placed_dims)]
    paddings = tf.reshape(size_vector([v for pair in zip(tap, after) for v in pair]), [rank, 2])
    return tf.pad(t, paddings)


# ----------------------------------------------------------------------------------------------
# Cases

def window(op, init, dims, strides=None, padding="VALID", base_dilation=None, window_dilation=None):
    def fun(x):
        return lax.reduce_window(x, init, op, dims, strides or (1,) * len(dims), padding,
                                 base_dilation, window_dilation)
    return fun


def cumulative(op, init, axis_size, reverse=False):
    pad = (0, axis_size - 1) if reverse else (axis_size - 1, 0)
    return window(op, init, (1, axis_size), (1, 1), ((0, 0), pad))


def vjp_of(forward):
    return lambda x, ct: jax.vjp(forward, x)[1](ct)[0]


def jvp_of(forward):
    return lambda x, t: jax.jvp(forward, (x,), (t,))[1]


def strided_same(op, init):
    """A window 3 wide at stride 2, SAME: its padding depends on the length (symbolic in the cases)."""
    return window(op, init, (3,), (2,), "SAME")


def max_pool_2x2(x):
    return flax_linen().max_pool(x, (2, 2), strides=(2, 2), padding="VALID")


def max_pool_3x3_same(x):
    return flax_linen().max_pool(x, (3, 3), strides=(1, 1), padding="SAME")



INF = np.inf

SUM_CASES = [
    case("symbolic_same_padding", strided_same(lax.add, 0.), f32(7), polymorphic_shapes=("(t,)",)),
    case("flax_avg_pool_same", lambda x: flax_linen().avg_pool(x, (3, 3), strides=(2, 2), padding="SAME"),
         f32(2, 7, 6, 3)),
    case("flax_avg_pool_valid_1d", lambda x: flax_linen().avg_pool(x, (3,), strides=(2,)), f32(2, 9, 3)),
    case("explicit_asymmetric_padding_int32", window(lax.add, 0, (2, 3), (1, 2), ((1, 0), (2, 3))),
         i32(5, 6)),
    case("base_and_window_dilation", window(lax.add, 0., (1, 2, 2), (1, 1, 2), ((0, 0), (1, 1), (0, 2)),
                                            base_dilation=(1, 2, 3), window_dilation=(1, 2, 1)),
         f32(2, 4, 5)),
    case("3d_window", window(lax.add, 0., (1, 2, 2, 2, 1), (1, 2, 1, 2, 1)), f32(1, 4, 5, 6, 2)),
    case("wide_window_doubling", window(lax.add, 0., (2, 11), (1, 3), ((0, 1), (4, 2)),
                                        window_dilation=(1, 2)), f32(3, 25)),
    case("cumsum_pattern", cumulative(lax.add, 0., 50), f32(3, 50)),
    case("reverse_cumsum_pattern_int32", cumulative(lax.add, 0, 9, reverse=True), i32(2, 9)),
    case("f16", window(lax.add, np.float16(0), (2, 2), (1, 1), "SAME"), f16(4, 5)),
    case("size_one_dims", window(lax.add, 0., (1, 1, 1)), f32(1, 1, 1)),
    case("polymorphic_batch", lambda x: flax_linen().avg_pool(x, (2, 2), strides=(2, 2)), f32(3, 6, 4, 2),
         polymorphic_shapes=("(b, ...)",)),
    # Found by tests/fuzz_poly.py: an output size max(0, ...) of a symbolic length (see noxla.front.shapes).
    case("symbolic_length_base_dilation", window(lax.add, 0., (1, 3), (1, 2), base_dilation=(1, 2)),
         f32(2, 7), polymorphic_shapes=("(2, t)",)),
    # Found by tests/fuzz_poly.py: the recorder's shape of a window's strided slice of two symbolic
    # sizes overflowed NumPy's iterator ("iterator is too large": noxla.graph.structural._sliced_shape).
    case("two_symbolic_sizes", window(lax.add, 0., (2, 2, 2), (1, 1, 2), ((1, 2), (2, 0), (2, 0)),
                                      window_dilation=(1, 1, 2)), f32(3, 6, 1), polymorphic_shapes=("(3, b, c)",)),
]

MAX_CASES = [
    case("symbolic_same_padding", strided_same(lax.max, -INF), f32(7), polymorphic_shapes=("(t,)",)),
    case("flax_max_pool_nhwc", max_pool_2x2, f32(2, 6, 7, 3)),
    case("flax_max_pool_same_strided", lambda x: flax_linen().max_pool(x, (3, 3), strides=(2, 2), padding="SAME"),
         f32(1, 7, 8, 2)),
    case("nhwc_explicit_asymmetric_padding", window(lax.max, -INF, (1, 3, 2, 1), (1, 2, 1, 1),
                                                    ((0, 0), (2, 0), (0, 3), (0, 0))), f32(2, 5, 4, 3)),
    case("nchw_layout", window(lax.max, -INF, (1, 1, 2, 2), (1, 1, 2, 2)), f32(2, 3, 6, 4)),
    case("int32", window(lax.max, np.iinfo(np.int32).min, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"),
         i32(2, 5, 5, 2)),
    case("bool", window(lax.max, False, (2, 2), (1, 1)), boolean(4, 5)),
    case("1d", lambda x: flax_linen().max_pool(x, (3,), strides=(2,), padding="SAME"), f32(2, 10, 3)),
    case("3d", lambda x: flax_linen().max_pool(x, (2, 2, 2), strides=(2, 1, 2)), f32(1, 4, 5, 6, 2)),
    case("base_and_window_dilation", window(lax.max, -INF, (2, 3), (2, 1), ((1, 0), (0, 1)),
                                            base_dilation=(2, 1), window_dilation=(1, 2)), f32(5, 8)),
    case("cummax_pattern", cumulative(lax.max, -INF, 40), f32(2, 40)),
    case("f16", window(lax.max, -jnp.inf, (2, 3), (1, 2), "SAME"), f16(4, 7)),
    case("polymorphic_batch", max_pool_3x3_same, f32(3, 5, 4, 2), polymorphic_shapes=("(b, ...)",)),
]

MIN_CASES = [
    case("symbolic_same_padding", strided_same(lax.min, INF), f32(7), polymorphic_shapes=("(t,)",)),
    # The first windows lie wholly in padding: +inf must survive the TFLite converter.
    case("window_wholly_in_padding", window(lax.min, INF, (2,), (1,), ((3, 0),)), f32(5)),
    case("base_dilation_holes_only", window(lax.min, INF, (1,), (1,), ((0, 0),), base_dilation=(2,)), f32(4)),
    case("nhwc_pool", window(lax.min, INF, (1, 2, 2, 1), (1, 2, 2, 1), "SAME"), f32(2, 5, 5, 3)),
    case("3d", window(lax.min, INF, (1, 2, 2, 2, 1), (1, 2, 1, 2, 1)), f32(1, 4, 5, 6, 2)),
    case("int32_dilated", window(lax.min, np.iinfo(np.int32).max, (3, 2), (1, 2), ((1, 1), (0, 1)),
                                 window_dilation=(2, 1)), i32(7, 6)),
    # Found by tests/fuzz.py: the holes' INT32_MAX came out INT32_MIN on TF.js's wasm (its PadV2).
    case("int32_base_dilated", window(lax.min, np.iinfo(np.int32).max, (3,), (1,), ((1, 2),), base_dilation=(2,)),
         i32(5)),
    case("cummin_reverse_pattern", cumulative(lax.min, INF, 13, reverse=True), f32(2, 13)),
]

GENERIC_CASES = [
    case("symbolic_same_padding", strided_same(lambda a, b: a + b, 0.), f32(7), polymorphic_shapes=("(t,)",)),
    case("product", window(lax.mul, 1., (1, 2, 2, 1), (1, 1, 1, 1), "SAME"), f32(2, 4, 5, 2, low=0.5, high=1.5)),
    case("product_int32_wide", window(lax.mul, 1, (6,), (2,), ((2, 1),)), i32(12, low=-2, high=2)),
    case("add_with_non_identity_init", window(lax.add, 2., (2,), (1,), ((1, 0),)), f32(6)),
    case("unrecognised_body", window(lambda a, b: a + b + a * b, 0., (2, 3), (1, 2), "VALID",
                                     window_dilation=(1, 2)), f32(4, 7, low=-0.5, high=0.5)),
    case("unrecognised_body_padded", window(lambda a, b: a + b + a * b, 0., (2, 3), (1, 2), "SAME"),
         f32(4, 7, low=-0.5, high=0.5)),
    # Dtypes TFLite's kernels lack, with an initial value that is no identity (JAX's harnesses).
    case("max_u8_init", window(lax.max, np.uint8(1), (2, 2), (1, 1)), np.arange(24, dtype=np.uint8).reshape(4, 6) % 7),
    case("add_i8_wraps", window(lax.add, np.int8(100), (2,), (1,), ((1, 0),)),
         np.array([100, 27, -128, -1, 5], np.int8)),
    case("mul_f16_init", window(lax.mul, np.float16(2), (2, 2), (1, 1)), f16(4, 6, low=0.5, high=1.5)),
    case("max_u32_init", window(lax.max, np.uint32(1), (3,), (1,)),
         np.array([0, 2 ** 32 - 1, 7, 2 ** 31, 3], np.uint32)),
    case("variadic", lambda x, y: lax.reduce_window((x, y), (0., -jnp.inf),
                                                    lambda a, b: (a[0] + b[0], lax.max(a[1], b[1])),
                                                    (2,), (1,), "VALID"), f32(5), f32(5)),
]

SCATTER_CASES = [
    case("grad_symbolic_same_padding", lambda x: jax.grad(lambda x: strided_same(lax.max, -INF)(x).sum())(x),
         f32(7), polymorphic_shapes=("(t,)",)),
    case("grad_flax_max_pool", vjp_of(max_pool_2x2), f32(2, 6, 7, 3), f32(2, 3, 3, 3)),
    case("grad_overlapping_same", vjp_of(max_pool_3x3_same), f32(1, 5, 6, 2), f32(1, 5, 6, 2)),
    case("grad_strided_padded_1d", vjp_of(lambda x: flax_linen().max_pool(x, (3,), strides=(2,), padding="SAME")),
         f32(2, 9, 2), f32(2, 5, 2)),
    case("grad_min_pool", vjp_of(window(lax.min, INF, (2, 3), (2, 1), ((0, 1), (1, 1)))), f32(5, 6),
         f32(3, 6)),
    case("grad_ties_go_to_first_max",
         lambda x, ct: jax.vjp(max_pool_3x3_same, jnp.round(x))[1](ct)[0], f32(1, 4, 5, 1, low=0, high=2),
         f32(1, 4, 5, 1)),
    # Booleans (XLA's add of booleans is OR), as JAX's harnesses bind it: no user API makes it.
    case("bool", lambda s, x: windowed_reductions._select_and_scatter_add(
        s, x, lax.ge_p, (2, 2), (1, 2), ((0, 1), (1, 0))), boolean(4, 3), boolean(4, 6)),
]

GATHER_CASES = [
    case("jvp_symbolic_same_padding", lambda x: jax.jvp(strided_same(lax.max, -INF), (x,), (x,))[1], f32(7),
         polymorphic_shapes=("(t,)",)),
    case("jvp_flax_max_pool", jvp_of(max_pool_3x3_same), f32(2, 5, 6, 3), f32(2, 5, 6, 3)),
    case("jvp_dilated_min", jvp_of(window(lax.min, INF, (2, 2), (1, 2), ((1, 0), (0, 1)),
                                          base_dilation=(1, 2), window_dilation=(2, 1))),
         f32(5, 4), f32(5, 4)),
    # Base dilation on two axes: the tangents' sizes after the first one's (a Reshape error before).
    case("jvp_base_dilated_both_axes", jvp_of(window(lax.max, -INF, (2, 2), base_dilation=(2, 3),
                                                     window_dilation=(3, 2))), f32(4, 6), f32(4, 6)),
]

# Measured (reduce_window_max:3d, reduce_window_sum:3d_window): the rank-5 strided slices of a 3-D window
# reduction are shaders TF.js's WebGL does not compile ("'coords' : left of '[' is not of type array").
_WEBGL_RANK5_WINDOWS = Limitation(
    (Target.TFJS_WEBGL,), param="window_dimensions", condition="a window reduction of a rank-5 or rank-6 array",
    reason="TF.js's WebGL does not compile the rank-5 strided slices of its lowering (a loud failure)",
    workaround="run the model on TF.js's wasm or webgpu backend, or pool 3-D volumes as 2-D slices",
    when=lambda eqn: len(eqn.avals_in[0].shape) >= 5)
# Measured (reduce_window_min:int32_base_dilated wrong; the other int32 windows fail to compile, the
# delegate's int32 GATHER "Unable to parse bc coord for BATCH axis") on LiteRT.js's WebGPU.
_WEBGPU_INT_WINDOWS = webgpu_computes_wrong("an integer window reduction", "wrong, or a model WebGPU cannot compile",
                                            "dtype", when=lambda eqn: eqn.dtype_in.kind in "iu")
for _prim, _name, _cases in ((lax.reduce_window_sum_p, "add", SUM_CASES),
                             (lax.reduce_window_max_p, "max", MAX_CASES),
                             (lax.reduce_window_min_p, "min", MIN_CASES)):
    lowering(_prim, cases=_cases, limitations=[symbolic_padding(), _WEBGL_RANK5_WINDOWS, _WEBGPU_INT_WINDOWS],
             fast=fusion.MAX_POOL if _name == "max" else None)(_monoid_rule(_name))

lowering(lax.reduce_window_p, cases=GENERIC_CASES, limitations=[
    symbolic_padding(), _WEBGPU_INT_WINDOWS,
    Limitation(ALL_TARGETS, param="jaxpr", condition="more than one operand (variadic reduce_window)",
               reason="only single-operand window reductions are lowered",
               workaround="reduce each operand with its own lax.reduce_window",
               when=lambda eqn: len(eqn.avals_in) > 2),
    Limitation(ALL_TARGETS, param="padding",
               condition="a body other than add/mul/max/min with padding or base dilation",
               reason="XLA skips padding and dilation holes; without a known identity element there is "
                      "nothing to fill them with",
               workaround="write the body as lax.add/mul/max/min, or pad the operand with jnp.pad first",
               when=lambda eqn: _body_monoid(eqn.params["jaxpr"]) is None and (
                   any(p != (0, 0) for p in eqn.params["padding"])
                   or any(d != 1 for d in eqn.params["base_dilation"])))])(lower_reduce_window)
# The selection pads and slices the operand in its own dtype: TFLite's PAD and STRIDED_SLICE have no float16 kernel.
_NO_TFLITE_FLOAT16 = dtypes(gaps=[gap((Target.TFLITE,), {"float16"},
                                      "the window selection pads and slices float16 values (PAD, STRIDED_SLICE), "
                                      "which TFLite's builtins have no kernel for")])
# The scattered sums add 8/16-bit and uint32 values, which TFLite's ADD has no kernel for (the converter
# refuses them, found by JAX's own harnesses).
_NO_TFLITE_NARROW_SUMS = dtypes(gaps=[*_NO_TFLITE_FLOAT16.gaps, gap(
    (Target.TFLITE,), {"int8", "int16", "uint8", "uint16", "uint32"},
    "the scattered values are summed in their own dtype, and TFLite's ADD has no 8/16-bit or uint32 kernel")])
# Measured (select_and_scatter_add:grad_overlapping_same, grad_ties_go_to_first_max,
# select_and_gather_add:jvp_flax_max_pool): entries left 0 on TF.js's WebGPU, for a reason not found
# op by op (the chain of first-maximum masks); its cpu, wasm and WebGL match JAX.
_WEBGPU_POOL_DERIVATIVE = tfjs_webgpu_fails("any max/min pooling derivative (select_and_scatter_add, "
                                            "select_and_gather_add)", "entries left 0", "select_prim")
lowering(lax.select_and_scatter_add_p, cases=[
    *SCATTER_CASES,
    # Integer sums (JAX's harness binds it directly; no gradient has integers).
    case("i16", lambda ct, x: windowed_reductions._select_and_scatter_add(ct, x, lax.ge_p, (2, 2), (2, 2),
                                                                          ((0, 0), (0, 0))),
         np.arange(6, dtype=np.int16).reshape(2, 3), np.arange(24, dtype=np.int16).reshape(4, 6) % 5),
], dtypes=_NO_TFLITE_NARROW_SUMS, limitations=[symbolic_padding(), _WEBGPU_POOL_DERIVATIVE])(
    lower_select_and_scatter_add)
lowering(lax.select_and_gather_add_p, cases=GATHER_CASES, dtypes=_NO_TFLITE_FLOAT16,
         limitations=[symbolic_padding(), _WEBGPU_POOL_DERIVATIVE])(lower_select_and_gather_add)
