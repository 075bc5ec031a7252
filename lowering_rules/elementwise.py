"""Elementwise primitives: tables where TF has the op, functions where semantics differ."""
from __future__ import annotations

import tensorflow as tf
from jax import lax

from lowering_rules.cases import case, f32, i32
from lowering_rules.registry import register


def unary(tf_fn):
    def lower(ctx, x, *, accuracy=None):
        return tf_fn(x)
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


def binary(tf_fn):
    def lower(ctx, x, y):
        return tf_fn(x, y)
    lower.__name__ = f"lower_{tf_fn.__name__}"
    return lower


UNARY = {
    lax.sin_p: (tf.math.sin, lax.sin),
    lax.tanh_p: (tf.math.tanh, lax.tanh),
    lax.exp_p: (tf.math.exp, lax.exp),
}

BINARY = {
    lax.add_p: tf.math.add,
    lax.sub_p: tf.math.subtract,
}


def lower_mul(ctx, x, y, *, out_dtype=None):
    # out_dtype asks for the product in a wider type (e.g. int8 x int8 -> int32): widen first.
    if out_dtype is not None:
        x, y = tf.cast(x, ctx.out_dtype), tf.cast(y, ctx.out_dtype)
    return tf.math.multiply(x, y)

for _prim, (_fn, _jax_fn) in UNARY.items():
    register(_prim, unary(_fn), cases=[case("f32", _jax_fn, f32(3, 4))])
for _prim, _fn in BINARY.items():
    register(_prim, binary(_fn), cases=[case("f32", lambda x, y, p=_prim: p.bind(x, y), f32(3, 4), f32(3, 4)),
                                        case("i32", lambda x, y, p=_prim: p.bind(x, y), i32(5), i32(5))])
register(lax.mul_p, lower_mul, cases=[case("f32", lambda x, y: x * y, f32(3, 4), f32(3, 4))])
