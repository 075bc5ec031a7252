"""Elementwise primitives JAX 0.11 added: log2, one_minus_square and polynomial.

Before 0.11, ``jnp.log2`` traced to log(x) / log(2), the gradient of tanh to 1 - t * t, and
``jnp.sinc``'s series to a chain of multiplies and adds, all of which other rules lower. The rules
are registered by name under every JAX; their cases run only where the primitive exists (JAX 0.10
reports them skipped, with the reason).

- ``log2``: JAX multiplies log(x) by 1/ln 2 in x's dtype; so does this rule (in float32 for halves).
- ``one_minus_square``: (1 + x)(1 - x), JAX's own expansion (no cancellation near |x| = 1).
- ``polynomial``: Horner's rule over the coefficients (lowest degree first), as JAX evaluates it:
  from the highest coefficient while there are at most ``unroll`` (default 8) of them, else from a
  zero start (JAX's scan), whose first step gives 0 * x: NaN where x is infinite, which the
  rule keeps.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32, i32, newer_primitive
from lowering_rules.core.float_math import log
from lowering_rules.core.helpers import as_out, compute_dtype, is_inf, is_nan
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering

NAN, INF = float("nan"), float("inf")


def _cases(name, *cases_):
    return newer_primitive(name, "0.11", *cases_)


def _wide(x):
    """Half floats in float32, narrow integers in int32 (TFLite has no arithmetic for either)."""
    dtype = compute_dtype(x.dtype)
    return x if x.dtype == dtype else tf.cast(x, dtype)


# ----------------------------------------------------------------------------- log2

INV_LN2 = 1.4426950408889634


@lowering("log2", cases=_cases(
    "log2",
    case("f32", jnp.log2, f32(3, 4, low=0.01, high=100)),
    case("edges", jnp.log2, np.array([1.0, 2.0, 8.0, 0.5, 0.0, -1.0, INF, NAN, 1e-30, 3e38, -INF], np.float32)),
    case("f16", jnp.log2, f16(2, 3, low=0.1, high=10)),
    case("poly", jnp.log2, f32(3, 4, low=0.1, high=5), polymorphic_shapes=("(b, ...)",)),
))
def lower_log2(ctx, x, *, accuracy=None):
    # accuracy asks for a tolerance; TF has one log (see elementwise.unary).
    return as_out(ctx, log(_wide(x)) * INV_LN2)


# ----------------------------------------------------------------------------- one_minus_square

_tanh_grad = jax.vmap(jax.grad(jnp.tanh))


@lowering("one_minus_square", cases=_cases(
    "one_minus_square",
    case("grad_of_tanh", _tanh_grad, f32(12, low=-4, high=4)),
    case("grad_of_tanh_edges", _tanh_grad, np.array([0.0, -0.0, 1e-30, 0.5, 20.0, -20.0, INF, -INF, NAN], np.float32)),
    case("grad_of_tanh_f16", _tanh_grad, f16(6, low=-3, high=3)),
    case("i32", lambda x: lax.one_minus_square(x), i32(3, 4)),
))
def lower_one_minus_square(ctx, x):
    w = _wide(x)
    one = tf.ones_like(w)
    return as_out(ctx, (one + w) * (one - w))


# ----------------------------------------------------------------------------- polynomial

def _zero_or_nan(x):
    """0 * x without a multiply: 0 where x is finite, NaN where it is inf or NaN (integers: 0)."""
    zeros = tf.zeros_like(x)
    if not x.dtype.is_floating:
        return zeros
    return tf.where(tf.logical_or(is_nan(x), is_inf(x)), tf.fill(tf.shape(x), tf.constant(NAN, x.dtype)), zeros)


def _sinc_series(x):
    return lax.polynomial(x, [np.float32(1.0), np.float32(-0.5), np.float32(0.25), np.float32(-0.125)])


@lowering("polynomial", cases=_cases(
    "polynomial",
    case("sinc", jnp.sinc, f32(4, 5, low=-3, high=3)),
    # JAX 0.12's sinc compares |x| with an inf literal, which TFLite's converter read as FLT_MAX (NaN at
    # +-inf, JAX 0: noxla.writers.tflite.converter.infinities); polynomial's own inf and NaN are
    # past_unroll_from_zero's.
    case("sinc_edges", jnp.sinc, np.array([0.0, -0.0, 0.5, 1.0, -2.0, 1e-20, 3e38, NAN, INF, -INF], np.float32)),
    case("scalar_coefficients", _sinc_series, f32(3, 4)),
    case("array_coefficients", lambda x, a, b: lax.polynomial(x, [a, b, a]), f32(3, 4), f32(3, 4), f32(1, 4)),
    case("coefficients_wider_than_x", lambda x, a: lax.polynomial(x, [a, a]), f32(1, 4), f32(3, 4)),
    case("past_unroll_from_zero", lambda x: lax.polynomial(x, [np.float32(k) for k in range(1, 11)]),
         np.array([0.5, -1.0, 0.0, INF, NAN], np.float32)),
    case("unroll_2", lambda x: lax.polynomial(x, [np.float32(k) for k in (1, -2, 3, -4)], unroll=2), f32(5)),
    case("i32", lambda x: lax.polynomial(x, [np.int32(3), np.int32(-2), np.int32(1)]), i32(6)),
    case("f16", lambda x: lax.polynomial(x, [np.float16(1), np.float16(0.5), np.float16(-0.25)]), f16(2, 3)),
))
def lower_polynomial(ctx, x, *coefficients, unroll=None):
    x = _wide(x)
    coefficients = [_wide(c) for c in coefficients]
    if len(coefficients) <= (8 if unroll is None else unroll):
        acc, rest = coefficients[-1], coefficients[-2::-1]
    else:
        # JAX's first step from zero, 0 * x + c_N: NaN where x is inf or NaN. Written with a NaN
        # constant, as the TFLite converter folds a product with zeros to zeros (inf came out).
        acc, rest = coefficients[-1] + _zero_or_nan(x), coefficients[-2::-1]
    for c in rest:
        acc = acc * x + c
    if not rest and tuple(ctx.avals_in[-1].shape) != tuple(ctx.avals_out[0].shape):
        # One coefficient (bound directly: lax.polynomial returns it without binding): x never
        # entered the sum, whose shape is x's and the coefficient's broadcast.
        acc = tf.broadcast_to(acc, ctx.out_shape())
    return as_out(ctx, acc)
