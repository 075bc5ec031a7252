"""Generic ``select_and_scatter``: XLA's SelectAndScatter with any ``select`` and ``scatter`` body.

JAX builds it in ``jax._src.lax.windowed_reductions._select_and_scatter`` (max-pooling's gradient
uses the specialised ``select_and_scatter_add``). XLA's semantics, which JAX's CPU results follow
(checked against a direct Python transcription, with ties and order-dependent scatters):

- per window of the padded operand, the selected element starts as the window's first element
  that is not padding and is replaced by each later one ``e`` for which
  ``select(selected, e)`` is false; a window of padding only selects nothing;
- the output starts as ``init_value`` everywhere, and each window's source value is combined into
  the output at its selected element, ``out = scatter(out, source)``, windows in row-major order.

The order of window positions matters only among tied elements. Without padding XLA's CPU
backend takes them row-major (measured on 120 random windows of rank 2 to 4); with padding it
does not use one order (row-major for some window shapes and strides, column-major for others,
permuted ones at rank 3 and 4). So a padded operand with more than one window dimension wider
than 1 is rejected up front.

Here the selection runs over the window positions (taps) in order, elementwise over all windows
at once, and records the chosen tap. The scatter then goes over the taps in *reverse* row-major
order: two windows i < j (row-major) reaching the same element do so through taps t_i > t_j, so
that order combines each element's contributions in XLA's order, exactly, even for a
non-commutative or rounding ``scatter``.
"""
from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f32, i32
from lowering_rules.core.dtype_support import NUMERIC, dtypes, gap
from lowering_rules.core.helpers import pad_or_crop, size_vector
from lowering_rules.core.jax_compat import closed_jaxpr, windowed_reductions
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Limitation, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS, Target, webgpu_computes_wrong
from lowering_rules.windows import _window_taps, place_at_tap


def _select_and_scatter(select, scatter, init, window, strides, padding):
    def fun(operand, source):
        return windowed_reductions._select_and_scatter(
            operand, select, window, strides, padding, source, jnp.asarray(init, operand.dtype), scatter)
    return fun


def _largest_magnitude(a, b):
    return jnp.abs(a) >= jnp.abs(b)


def _tap_slice(t, tap, strides, grid):
    for axis, (offset, stride, size) in enumerate(zip(tap, strides, grid)):
        t = _window_taps(t, len(tap), axis, [offset], 1, stride, size)[0]
    return t


# Ties that XLA's CPU backend resolves column-major under this 3x2 window, strides and padding.
_TIES = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0],
                  [1, 1, 0, 1, 1]], np.int32)


def _double_minus(out, source):  # a scatter whose result depends on the order of its updates
    return out * 2 - source


def _wide_dims(eqn) -> int:
    return sum(w > 1 for w in eqn.params["window_dimensions"])


def _ambiguous_order(eqn) -> bool:
    params = eqn.params
    padded = any(p != (0, 0) for p in params["padding"])
    return padded and sum(w > 1 for w in params["window_dimensions"]) > 1


_WINDOW_ORDER = Limitation(
    ALL_TARGETS, "more than one window dimension is wider than 1, with padding",
    "among tied elements of a padded operand, XLA's CPU backend (which JAX's results follow) selects in "
    "a window order that depends on the window's shape, strides and padding (measured: row-major for a "
    "padded 2x3 window, column-major for a padded 3x2 window with strides (2, 1)), which noxla does not "
    "reproduce; without padding the order is row-major (measured on 120 random windows of rank 2 to 4)",
    param="padding", when=_ambiguous_order,
    workaround="pad the operand with lax.pad (a value select never prefers, e.g. -inf for a max) and "
               "pass zero padding, as JAX does for select_and_scatter_add")


# Measured (select_and_scatter:window_3d_gt, le_min_max_scatter_1d): values scattered to the wrong
# places on LiteRT.js WebGPU, silently (one window shape failed to compile); wasm is right.
_WEBGPU_SCATTER = webgpu_computes_wrong("any select_and_scatter", "values placed in the wrong windows",
                                        "window_dimensions")


@lowering(windowed_reductions.select_and_scatter_p, limitations=[_WINDOW_ORDER, _WEBGPU_SCATTER],
          dtypes=dtypes(NUMERIC, gaps=[
    gap((Target.TFJS,), {"bool"}, "TF.js wasm's Select garbles bool tensors, and the selection keeps the "
        "selected values with Select"),
    gap((Target.TFLITE,), {"bool", "int8", "int16", "uint8", "uint16", "uint32", "float16"},
        "TFLite's builtin PAD has no kernel for this dtype, and the source values are placed on the "
        "operand with PAD (measured with TF 2.19's converter)")]), cases=[
    case("ge_add_padded_strided", _select_and_scatter(lax.ge, lax.add, 0.0, (1, 3), (2, 1), ((1, 0), (1, 1))),
         f32(5, 6), f32(3, 6)),
    case("gt_last_max_ordered_scatter_ties", _select_and_scatter(lax.gt, _double_minus, 7, (2, 1), (1, 1),
                                                                 ((0, 1), (1, 0))),
         i32(4, 5, low=0, high=2), i32(4, 6)),
    case("le_min_max_scatter_1d", _select_and_scatter(lax.le, lax.max, -100.0, (3,), (2,), ((1, 1),)),
         f32(9), f32(5)),
    case("user_select_mul", _select_and_scatter(_largest_magnitude, lax.mul, 1.0, (1, 1, 2), (1, 1, 2),
                                                ((0, 0), (0, 0), (0, 0))),
         f32(2, 4, 6), f32(2, 4, 3)),
    case("window_2x3_ties_row_major", _select_and_scatter(lax.ge, _double_minus, 0, (2, 3), (1, 2),
                                                          ((0, 0), (0, 0))),
         i32(5, 7, low=0, high=1), i32(4, 3)),
    case("window_3d_gt", _select_and_scatter(lax.gt, lax.add, 0.0, (2, 2, 2), (1, 2, 1), ((0, 0),) * 3),
         np.round(np.linspace(-2, 2, 60, dtype=np.float32)).reshape(3, 5, 4)[:, ::-1], f32(2, 2, 3)),
    case("polymorphic_batch", _select_and_scatter(lax.ge, lax.add, 0.0, (1, 2), (1, 2), ((0, 0), (0, 0))),
         f32(3, 6), f32(3, 3), polymorphic_shapes=("(b, 6)", "(b, 3)")),
    case("padded_3x2_ties_rejected", _select_and_scatter(lax.ge, lax.add, 0, (3, 2), (2, 1), ((0, 2), (1, 0))),
         _TIES, np.arange(1, 16, dtype=np.int32).reshape(3, 5)),
])
def lower_select_and_scatter(ctx, operand, source, init_value, *, select_jaxpr, select_consts,
                             scatter_jaxpr, scatter_consts, window_dimensions, window_strides, padding):
    out_shape = ctx.out_shape()
    dims = [ctx.dim(d) for d in ctx.avals_in[0].shape]
    grid = [ctx.dim(d) for d in ctx.avals_in[1].shape]
    if any(isinstance(d, int) and d == 0 for d in (*dims, *grid)):
        return tf.broadcast_to(init_value, out_shape)
    select = ctx.sub_program(closed_jaxpr(select_jaxpr, select_consts))
    scatter = ctx.sub_program(closed_jaxpr(scatter_jaxpr, scatter_consts))
    padded = pad_or_crop(operand, padding)
    real = None  # where the padded operand holds operand elements (None: everywhere)
    if any(p != (0, 0) for p in padding):
        real = pad_or_crop(tf.ones(out_shape, tf.int32), padding)
    padded_dims = [n + lo + hi for n, (lo, hi) in zip(dims, padding)]
    taps = list(itertools.product(*(range(w) for w in window_dimensions)))

    selected, chosen, seen = None, tf.fill(size_vector(grid), -1), None
    for index, tap in enumerate(taps):
        candidate = _tap_slice(padded, tap, window_strides, grid)
        inside = None if real is None else tf.greater(_tap_slice(real, tap, window_strides, grid), 0)
        if selected is None:
            take = inside
        else:
            take = tf.logical_not(select(selected, candidate)[0])
            if seen is not None:
                take = tf.logical_or(take, tf.logical_not(seen))
            if inside is not None:
                take = tf.logical_and(take, inside)
        if take is None:  # the first tap of windows without padding
            selected, chosen = candidate, tf.zeros_like(chosen)
        else:
            selected = tf.where(take, candidate, selected) if selected is not None else candidate
            chosen = tf.where(take, tf.fill(size_vector(grid), index), chosen)
        if inside is not None:
            seen = inside if seen is None else tf.logical_or(seen, inside)

    out = tf.broadcast_to(init_value, size_vector(padded_dims))
    zeros = tf.zeros_like(source)
    for index in reversed(range(len(taps))):
        hit = tf.equal(chosen, index)
        placed = place_at_tap(tf.where(hit, source, zeros), taps[index], window_strides, grid, padded_dims)
        reached = tf.greater(place_at_tap(tf.cast(hit, tf.int32), taps[index], window_strides, grid, padded_dims), 0)
        out = tf.where(reached, scatter(out, placed)[0], out)
    return pad_or_crop(out, [(-lo, -hi) for lo, hi in padding])
