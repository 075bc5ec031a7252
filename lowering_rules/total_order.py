"""``eq_to``, ``le_to`` and ``lt_to``: comparisons in the total order of XLA's TOTALORDER compare.

JAX emits them in its sort-based helpers that reach a jaxpr, e.g. ``jnp.searchsorted`` (``le_to``
in the default scan, ``lt_to``/``le_to``/``eq_to`` with ``method="compare_all"``, ``eq_to`` for
complex keys). For integers and bools they are the usual comparisons. For floats the order is
-NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN, and a NaN equals a NaN.

TF.js has no Bitcast, so the sign of a NaN cannot be read: every NaN is ordered as +NaN, above
inf. JAX canonicalizes NaNs to +NaN (and -0.0 to 0.0) before each of these comparisons it emits,
so no program JAX traces from its public API shows the difference. -0.0 is told from 0.0 by the
sign of 1 / x.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, i32
from lowering_rules.core.dtype_support import BOOL, FLOATS, INTEGERS, dtypes
from lowering_rules.core.jax_compat import SEARCHSORTED_IS_HIJAX, lax_internal
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering

_SORTED = np.array([-np.inf, -2.5, -1.0, 0.0, 0.0, 0.5, 3.0, 3.0, np.inf, np.nan], np.float32)
_QUERIES = np.array([-np.inf, -3.0, -1.0, -0.0, 0.0, 0.25, 3.0, 7.0, np.inf, np.nan, -np.nan, 0.5],
                    np.float32)


def _floats(x, y):
    """(x, y, x is NaN, y is NaN, x is -0.0, y is -0.0)."""
    nan_x, nan_y = tf.math.not_equal(x, x), tf.math.not_equal(y, y)
    zero = tf.zeros_like(x)
    neg_zero_x = tf.logical_and(tf.equal(x, zero), tf.less(1.0 / x, zero))
    neg_zero_y = tf.logical_and(tf.equal(y, zero), tf.less(1.0 / y, zero))
    return x, y, nan_x, nan_y, neg_zero_x, neg_zero_y


def _less(x, y):
    x, y, nan_x, nan_y, neg_zero_x, neg_zero_y = _floats(x, y)
    below = tf.logical_or(tf.less(x, y), tf.logical_and(tf.equal(x, y),
                                                        tf.logical_and(neg_zero_x, tf.logical_not(neg_zero_y))))
    numbers = tf.logical_not(tf.logical_or(nan_x, nan_y))
    return tf.logical_or(tf.logical_and(numbers, below), tf.logical_and(tf.logical_not(nan_x), nan_y))


def _equal(x, y):
    x, y, nan_x, nan_y, neg_zero_x, neg_zero_y = _floats(x, y)
    same = tf.logical_and(tf.equal(x, y), tf.equal(neg_zero_x, neg_zero_y))
    return tf.logical_or(same, tf.logical_and(nan_x, nan_y))


def _is_float(ctx) -> bool:
    return bool(jnp.issubdtype(ctx.avals_in[0].dtype, jnp.floating))


def _comparable(dtype) -> tf.DType:
    """A dtype holding every value of ``dtype`` exactly, that TFLite's comparisons and broadcasts
    take: TF orders no bools, and TFLite has no Less or BroadcastTo on 8/16-bit integers, uint32
    or float16."""
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return tf.float64 if dtype == np.float64 else tf.float32
    if dtype == np.uint32:
        return tf.int64
    return tf.int64 if dtype.itemsize == 8 else tf.int32


def _operands(ctx, x, y):
    carrier = _comparable(ctx.avals_in[0].dtype)
    shape = ctx.out_shape()
    return tuple(tf.broadcast_to(tf.cast(v, carrier), shape) for v in (x, y))


_ORDERED = dtypes(BOOL, INTEGERS, FLOATS)


def _through_searchsorted(*cases):
    """The cases, all jnp.searchsorted: from JAX 0.11 it binds a hijax primitive that is expanded
    only when lowered, so its jaxpr holds no comparison; call_hi_primitive's searchsorted cases
    (one per method, side and dtype) run these rules there."""
    skip = ("JAX 0.11's searchsorted is a hijax primitive expanded when lowered: call_hi_primitive's "
            "searchsorted cases run this rule") if SEARCHSORTED_IS_HIJAX else ""
    return [dataclasses.replace(c, skip=skip) for c in cases]


@lowering(lax_internal.lt_to_p, dtypes=_ORDERED, cases=_through_searchsorted(
    case("searchsorted_compare_all", lambda a, v: jnp.searchsorted(a, v, method="compare_all"), _SORTED, _QUERIES),
    case("i32", lambda a, v: jnp.searchsorted(a, v, method="compare_all"),
         np.array([-5, -5, 0, 2, 2, 9], np.int32), i32(7)),
    case("complex_keys", lambda re, im, v: jnp.searchsorted(lax.complex(re, im), lax.complex(v, v),
                                                               method="compare_all"),
         np.array([-1, 0, 0, 2], np.float32), np.array([0, -1, 1, 0], np.float32), f32(5)),
))
def lower_lt_to(ctx, x, y):
    x, y = _operands(ctx, x, y)
    return _less(x, y) if _is_float(ctx) else tf.less(x, y)


@lowering(lax_internal.le_to_p, dtypes=_ORDERED, cases=_through_searchsorted(
    case("searchsorted_scan", jnp.searchsorted, _SORTED, _QUERIES),
    case("searchsorted_right", lambda a, v: jnp.searchsorted(a, v, side="right", method="compare_all"),
         _SORTED, _QUERIES),
    case("f16", jnp.searchsorted, np.array([-1.5, 0, 0, 2, 2, 8], np.float16), f16(6)),
    case("bool", jnp.searchsorted, np.array([False, False, True]), boolean(4)),
))
def lower_le_to(ctx, x, y):
    x, y = _operands(ctx, x, y)
    if not _is_float(ctx):
        return tf.less_equal(x, y)
    return tf.logical_or(_less(x, y), _equal(x, y))


@lowering(lax_internal.eq_to_p, dtypes=_ORDERED, cases=_through_searchsorted(
    case("complex_keys_right", lambda re, im, v: jnp.searchsorted(lax.complex(re, im), lax.complex(v, -v),
                                                                     side="right", method="compare_all"),
         np.array([-1, 0, 0, 0, 2], np.float32), np.array([0, -1, 0, 1, 0], np.float32),
         np.array([0.0, -0.0, 2.0, np.nan, -1.0], np.float32)),
))
def lower_eq_to(ctx, x, y):
    x, y = _operands(ctx, x, y)
    return _equal(x, y) if _is_float(ctx) else tf.equal(x, y)
