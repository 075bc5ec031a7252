"""Complex numbers as (real, imaginary) pairs of float tensors (see complex_values for why).

- complex, real, imag and conj build and take apart pairs;
- arithmetic (mul, div, integer_pow, dot_general), exp, log and abs spell out complex math on the
  parts with real ops every target has;
- structural and linear rules (reshape, slice, add, reduce_sum, ...) are COMPONENTWISE: the real
  rule applied to each part is the complex result;
- calls (jit, custom_jvp_call, ...) pass pairs to their bodies untouched.
A rule not declared here rejects complex operands up front.

Cases take real inputs and return real and imaginary parts, so they run in every target: TFLite
builtins cannot return complex values and TF.js's wasm backend has no complex tensors.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import c64, case, f32, i8, i32
from lowering_rules.core.helpers import is_inf
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import (
    COMPONENTWISE,
    PASS_THROUGH,
    add_complex,
    lowering,
    rule_for,
)
from lowering_rules.values.complex_values import ComplexPair, part_dtype


def _parts(z):
    """A complex value's parts as (real, imaginary) tensors."""
    return z.re, z.im


def _complex_rule(primitive, cases):
    """A primitive that exists only for complex values: its rule takes and returns pairs."""
    def decorate(lower):
        lowering(primitive, cases=cases)(lower)
        add_complex(primitive, lower)
        return lower
    return decorate


def _parts_of(fn):
    """A case function returning the real and imaginary parts of ``fn``'s complex result."""
    def both(*args):
        z = fn(*args)
        return jnp.real(z), jnp.imag(z)
    return both


def _z(a, b):
    return lax.complex(a, b)


# ----------------------------------------------------------------------------- building blocks

def multiply(x: ComplexPair, y: ComplexPair) -> ComplexPair:
    a, b = _parts(x)
    c, d = _parts(y)
    return ComplexPair(a * c - b * d, a * d + b * c)


@functools.cache
def _infinite_part_wins() -> bool:
    """Whether this JAX's |inf + NaN i| is inf (C99's hypot: JAX 0.12) or NaN (JAX 0.10)."""
    return bool(np.isinf(jnp.abs(lax.complex(np.float32(np.inf), np.float32(np.nan)))))


def hypot(a, b):
    """|a + bi| without overflow or underflow in the squares (as XLA computes complex abs)."""
    abs_a, abs_b = tf.abs(a), tf.abs(b)
    big, small = tf.maximum(abs_a, abs_b), tf.minimum(abs_a, abs_b)
    safe = tf.where(big > 0, big, tf.ones_like(big))
    ratio = small / safe
    result = big * tf.sqrt(1.0 + ratio * ratio)
    # A part not finite: NaN where either is NaN, else inf, as the parts' sum is. Not left to the
    # MAXIMUM/MINIMUM above: LiteRT's drop a NaN operand (|NaN + 1i| was sqrt(2) on LiteRT).
    result = tf.where(tf.logical_and(tf.math.is_finite(a), tf.math.is_finite(b)), result, abs_a + abs_b)
    if _infinite_part_wins():   # then an infinite part makes |z| inf even where the other is NaN
        result = tf.where(is_inf(a), abs_a, tf.where(is_inf(b), abs_b, result))
    return result


def divide(x: ComplexPair, y: ComplexPair) -> ComplexPair:
    """Smith's algorithm: scale by the larger part of the divisor so nothing overflows early."""
    a, b = _parts(x)
    c, d = _parts(y)
    c_larger = tf.abs(c) >= tf.abs(d)
    ratio = tf.where(c_larger, d / c, c / d)
    denominator = tf.where(c_larger, c + d * ratio, c * ratio + d)
    re = tf.where(c_larger, a + b * ratio, a * ratio + b) / denominator
    im = tf.where(c_larger, b - a * ratio, b * ratio - a) / denominator
    return ComplexPair(re, im)


# ----------------------------------------------------------------------------- complex-only primitives

@_complex_rule(lax.complex_p, cases=[
    case("parts", _parts_of(_z), f32(3, 4), f32(3, 4)),
    case("broadcast_scalar", _parts_of(lambda a: _z(a, 2.0)), f32(5)),
])
def lower_complex(ctx, re, im):
    if ctx.avals_in[0].shape != ctx.avals_in[1].shape:  # a scalar part beside an array
        shape = ctx.out_shape()
        re, im = tf.broadcast_to(re, shape), tf.broadcast_to(im, shape)
    return ComplexPair(re, im)


@_complex_rule(lax.real_p, cases=[
    case("of_product", lambda a, b: jnp.real(_z(a, b) * _z(b, a)), f32(3, 4), f32(3, 4)),
    case("complex_input", jnp.real, c64(2, 3)),
])
def lower_real(ctx, z):
    return z.re


@_complex_rule(lax.imag_p, cases=[
    case("of_product", lambda a, b: jnp.imag(_z(a, b) * _z(b, a)), f32(3, 4), f32(3, 4)),
    case("complex_input", jnp.imag, c64(2, 3)),
])
def lower_imag(ctx, z):
    return z.im


@_complex_rule(lax.conj_p, cases=[
    case("complex", _parts_of(lambda a, b: jnp.conj(_z(a, b))), f32(3, 4), f32(3, 4)),
    case("of_real", _parts_of(lambda a: lax.conj(a)), f32(4)),
    # A complex result cannot leave a TFLite or TF.js program: rejected there, up front.
    case("complex_output", jnp.conj, c64(2, 3)),
])
def lower_conj(ctx, z, *, input_dtype=None):  # JAX's lowering reads the operand
    if not isinstance(z, ComplexPair):  # lax.conj of a real array is complex
        return ComplexPair(z, tf.zeros_like(z))
    return ComplexPair(z.re, -z.im)


# ----------------------------------------------------------------------------- arithmetic on pairs

def lower_mul(ctx, x, y, *, out_dtype=None):
    return multiply(x, y)


def lower_div(ctx, x, y):
    return divide(x, y)


def lower_integer_pow(ctx, x, *, y):
    # Square-and-multiply, as for real bases, then one complex reciprocal for negative exponents.
    result, base, n = None, x, abs(y)
    while n:
        if n & 1:
            result = base if result is None else multiply(result, base)
        n >>= 1
        if n:
            base = multiply(base, base)
    if result is None:
        result = ComplexPair(tf.ones_like(x.re), tf.zeros_like(x.im))
    if y < 0:
        result = divide(ComplexPair(tf.ones_like(x.re), tf.zeros_like(x.im)), result)
    return result


def lower_exp(ctx, z, *, accuracy=None):
    # e^(a + bi) = e^a (cos b + i sin b)
    magnitude = tf.exp(z.re)
    return ComplexPair(magnitude * tf.cos(z.im), magnitude * tf.sin(z.im))


def lower_log(ctx, z, *, accuracy=None):
    # log(a + bi) = log|z| + i atan2(b, a)
    return ComplexPair(tf.math.log(hypot(z.re, z.im)), tf.math.atan2(z.im, z.re))


def lower_abs(ctx, z):
    return hypot(z.re, z.im)


def lower_sign(ctx, z):
    # z / |z|, and 0 at 0
    magnitude = hypot(z.re, z.im)
    safe = tf.where(magnitude > 0, magnitude, tf.ones_like(magnitude))
    return ComplexPair(z.re / safe, z.im / safe)


def _equal_parts(ctx, x, y):
    return tf.logical_and(tf.equal(x.re, y.re), tf.equal(x.im, y.im))


def lower_eq(ctx, x, y):
    return _equal_parts(ctx, x, y)


def lower_ne(ctx, x, y):
    return tf.logical_not(_equal_parts(ctx, x, y))


def lower_convert_element_type(ctx, x, *, new_dtype, weak_type):
    dtype = tf.as_dtype(part_dtype(new_dtype)) if ctx.out_dtype.is_complex else ctx.out_dtype
    if not isinstance(x, ComplexPair):  # real -> complex: a zero imaginary part
        re = tf.cast(x, dtype)
        return ComplexPair(re, tf.zeros_like(re))
    if ctx.out_dtype.is_complex:         # complex64 <-> complex128
        return ComplexPair(tf.cast(x.re, dtype), tf.cast(x.im, dtype))
    return tf.cast(x.re, dtype)         # complex -> real keeps the real part, as in JAX


def lower_dot_general(ctx, lhs, rhs, **params):
    # (A + Bi)(C + Di) = (AC - BD) + (AD + BC)i: four real products through the real rule.
    real_dot, parts = rule_for("dot_general").lower, ctx.for_parts()
    # A real operand (an integer or float times a complex one: JAX converts it to the complex
    # output type, a zero imaginary part) multiplies each part of the other; the real rule
    # converts it as XLA would.
    if not isinstance(lhs, ComplexPair):
        return ComplexPair(*(real_dot(parts, lhs, y, **params) for y in _parts(rhs)))
    if not isinstance(rhs, ComplexPair):
        return ComplexPair(*(real_dot(parts, x, rhs, **params) for x in _parts(lhs)))
    product = [[real_dot(parts, x, y, **params) for y in _parts(rhs)] for x in _parts(lhs)]
    return ComplexPair(product[0][0] - product[1][1], product[0][1] + product[1][0])


def _dot_general_signature(ctx, lhs, rhs, *, dimension_numbers, precision=None,
                           preferred_element_type=None):
    return lower_dot_general(ctx, lhs, rhs, dimension_numbers=dimension_numbers, precision=precision,
                             preferred_element_type=None if preferred_element_type is None else
                             part_dtype(preferred_element_type))


_C = (f32(3, 4), f32(3, 4), f32(3, 4), f32(3, 4))  # two complex operands as four real arrays


def _binary_parts(fn):
    return _parts_of(lambda a, b, c, d: fn(_z(a, b), _z(c, d)))


add_complex(lax.mul_p, lower_mul,
            case("complex", _binary_parts(lax.mul), *_C),
            case("by_imaginary_literal", _parts_of(lambda a, b: _z(a, b) * 2j), f32(5), f32(5)))
add_complex(lax.div_p, lower_div,
            case("complex", _binary_parts(lax.div), *_C),
            case("large_divisor", _binary_parts(lax.div), f32(4), f32(4),
                 np.array([1e30, -3e29, 2.0, 1e-30], np.float32), np.array([2e30, 1e30, 1e-30, 5.0], np.float32)))
add_complex(lax.integer_pow_p, lower_integer_pow,
            case("complex_square", _parts_of(lambda a, b: _z(a, b) ** 2), f32(3, 4), f32(3, 4)),
            case("complex_minus_three", _parts_of(lambda a, b: lax.integer_pow(_z(a, b), -3)),
                 f32(6, low=0.5, high=2), f32(6, low=0.5, high=2)))
add_complex(lax.exp_p, lower_exp,
            case("complex", _parts_of(lambda a, b: jnp.exp(_z(a, b))), f32(3, 4), f32(3, 4, low=-6, high=6)))
add_complex(lax.log_p, lower_log,
            case("complex", _parts_of(lambda a, b: jnp.log(_z(a, b))), f32(3, 4), f32(3, 4)),
            case("complex_negative_real_axis", _parts_of(lambda a: jnp.log(_z(a, 0.0))),
                 np.array([-2.0, -0.5, 3.0], np.float32)))
add_complex(lax.abs_p, lower_abs,
            case("complex", lambda a, b: jnp.abs(_z(a, b)), f32(3, 4), f32(3, 4)),
            case("complex_huge", lambda a, b: jnp.abs(_z(a, b)),
                 np.array([3e30, 0.0, -1e-30, 4e-30, 0.0], np.float32),
                 np.array([4e30, 0.0, 1e-30, -3e-30, -2.0], np.float32)),
            # Every pairing of NaN, inf, -inf and a finite part: JAX 0.10 and 0.12 differ on |inf + NaN i|.
            case("complex_nonfinite", lambda a, b: jnp.abs(_z(a, b)),
                 np.array([np.nan, 1.0, np.inf, np.nan, -np.inf, np.nan, np.inf, -np.inf, 3e38], np.float32),
                 np.array([1.0, np.nan, np.nan, -np.inf, 2.0, np.nan, np.inf, 0.0, 1e38], np.float32)))
add_complex(lax.sign_p, lower_sign,
            case("complex", _parts_of(lambda a, b: jnp.sign(_z(a, b))),
                 np.array([3.0, 0.0, -1.0, 0.0], np.float32), np.array([4.0, 0.0, 1.0, -2.0], np.float32)))
add_complex(lax.eq_p, lower_eq,
            case("complex", lambda a, b, c: _z(a, b) == _z(a, c), f32(6), f32(6),
                 np.array([0, 1, 2, 3, 4, 5], np.float32)))
add_complex(lax.ne_p, lower_ne,
            case("complex", lambda a, b, c: _z(a, b) != _z(c, b), f32(6), f32(6),
                 np.array([0, 1, 2, 3, 4, 5], np.float32)))
add_complex(lax.convert_element_type_p, lower_convert_element_type,
            case("to_complex", _parts_of(lambda a: a.astype(jnp.complex64) * (1 + 2j)), f32(3, 4)),
            case("int_to_complex", _parts_of(lambda a: a.astype(jnp.complex64) * (1 + 2j)), i32(5)),
            case("complex_to_real", lambda a, b: lax.convert_element_type(_z(a, b), jnp.float32), f32(4), f32(4)))
add_complex(lax.dot_general_p, _dot_general_signature,
            case("complex_matmul", _parts_of(lambda a, b, c, d: _z(a, b) @ _z(c, d)),
                 f32(3, 4), f32(3, 4), f32(4, 2), f32(4, 2)),
            case("complex_batched", _parts_of(lambda a, b, c, d: jnp.einsum("bij,bjk->bik", _z(a, b), _z(c, d))),
                 f32(2, 3, 4), f32(2, 3, 4), f32(2, 4, 2), f32(2, 4, 2)),
            case("int8_times_complex", _parts_of(lambda a, c, d: lax.dot(a, _z(c, d))),
                 i8(3, 4), f32(4, 2), f32(4, 2)),
            case("complex_times_float", _parts_of(lambda a, b, c: lax.dot_general(_z(a, b), c, (((0,), (1,)), ((),
                                                                                                              ())))),
                 f32(4, 3), f32(4, 3), f32(2, 4)),
            # Two contracting pairs, listed out of the operands' order (found by JAX's harnesses:
            # the real rule asked whether an operand is a constant, here an equation's part).
            case("complex_two_contracting_dims", _parts_of(lambda a, b, c, d: lax.dot_general(
                _z(a, b), _z(c, d), (((2, 1), (1, 2)), ((0,), (0,))))),
                 f32(1, 3, 4), f32(1, 3, 4), f32(1, 4, 3), f32(1, 4, 3)))


# ----------------------------------------------------------------------------- componentwise and calls

def _unary_case(name, fn):
    return case(name, _parts_of(lambda a, b: fn(_z(a, b))), f32(3, 4), f32(3, 4))


COMPONENTWISE_CASES = {
    "neg": [_unary_case("complex", lambda z: -z)],
    "add": [case("complex", _binary_parts(lax.add), *_C)],
    "sub": [case("complex", _binary_parts(lax.sub), *_C)],
    "add_any": [case("complex_grad_sum", lambda a, b: jax_grad_sum(a, b), f32(4), f32(4))],
    "reduce_sum": [_unary_case("complex", lambda z: jnp.sum(z, axis=1))],
    "cumsum": [_unary_case("complex", lambda z: jnp.cumsum(z, axis=0))],
    "select_n": [case("complex", _parts_of(lambda p, a, b: jnp.where(p > 0, _z(a, b), _z(b, a))),
                      f32(3, 4), f32(3, 4), f32(3, 4))],
    "broadcast_in_dim": [_unary_case("complex", lambda z: jnp.broadcast_to(z[:, None, :], (3, 2, 4)))],
    "reshape": [_unary_case("complex", lambda z: z.reshape(4, 3))],
    "squeeze": [_unary_case("complex", lambda z: z[:1].squeeze(0))],
    "transpose": [_unary_case("complex", lambda z: z.T)],
    "rev": [_unary_case("complex", lambda z: z[::-1])],
    "concatenate": [_unary_case("complex", lambda z: jnp.concatenate([z, z * 2j], axis=1))],
    "split": [_unary_case("complex", lambda z: jnp.split(z, 2, axis=1)[1])],
    "slice": [_unary_case("complex", lambda z: z[1:, ::2])],
    "pad": [_unary_case("complex", lambda z: jnp.pad(z, ((1, 0), (0, 2)), constant_values=1 - 1j))],
    "gather": [_unary_case("complex", lambda z: z[jnp.array([2, 0, 2])])],
    "dynamic_slice": [case("complex", _parts_of(lambda a, b, i: lax.dynamic_slice(_z(a, b), (i, 1), (2, 2))),
                           f32(3, 4), f32(3, 4), np.int32(1))],
    "dynamic_update_slice": [case("complex", _parts_of(
        lambda a, b, i: lax.dynamic_update_slice(_z(a, b), _z(b, a)[:1, :2], (i, 1))),
        f32(3, 4), f32(3, 4), np.int32(2))],
    "copy": [_unary_case("complex", jnp.copy)],
}


def jax_grad_sum(a, b):
    # add_any appears where a value is used twice under differentiation.
    return jax.grad(lambda x: jnp.real(jnp.sum(_z(x, b) * _z(x, b) * 1j)))(a)


for _name, _cases in COMPONENTWISE_CASES.items():
    add_complex(_name, COMPONENTWISE, *_cases)

add_complex("jit", PASS_THROUGH,
            case("complex", _parts_of(lambda a, b: jnp_jit_square(_z(a, b))), f32(3), f32(3)))
for _name in ("closed_call", "custom_jvp_call", "custom_vjp_call", "remat2"):
    add_complex(_name, PASS_THROUGH)


def jnp_jit_square(z):
    return jax.jit(lambda w: w * w + 1j)(z)
