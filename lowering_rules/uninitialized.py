"""Uninitialized arrays: ``empty`` (``lax.empty``) and ``empty2`` (the residuals JAX's autodiff
keeps for the branch of a ``cond`` not taken). JAX's CPU backend fills them with zeros: so do
the rules.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from lowering_rules.core.cases import case, f32, i32
from lowering_rules.core.jax_compat import lax_internal  # empty_p and empty2_p are not exported
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering


@lowering(lax_internal.empty_p, cases=[
    case("f32", lambda x: (lax.empty((2, 3), jnp.float32), x + 1), f32(2)),
    case("i32_added", lambda x: lax.empty(x.shape, jnp.int32) + x, i32(3, 2)),
])
def lower_empty(ctx, *, shape, dtype):
    return tf.zeros(ctx.out_shape(), ctx.out_dtype)


def _grad_through_cond(x):
    """The linearized cond keeps residuals for both branches; the branch not taken fills its own
    with empty2."""
    def f(x):
        return lax.cond(x.sum() > 0, lambda y: jnp.sin(y) * y, lambda y: jnp.cos(y), x)
    return jax.grad(lambda x: f(x).sum())(x)


@lowering(lax_internal.empty2_p, cases=[
    case("grad_of_cond", _grad_through_cond, f32(3)),
    case("grad_of_cond_other_branch", lambda x: _grad_through_cond(-jnp.abs(x)), f32(3)),
])
def lower_empty2(ctx, *, dtype, memory_space):
    return tf.zeros([], ctx.out_dtype)
