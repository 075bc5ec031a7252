"""``call_tf`` (``jax2tf.call_tf(tf_fn)``): a TF function called from a JAX program.

noxla's output is TF, so the function runs in place: the rule calls it on the TF tensors inside
the graph being built, and its ops become the program's own (TFLite's and TF.js's checks see them
like any rule's). JAX differentiates ``call_tf`` through TF (its custom_vjp calls
``tf.GradientTape`` in another ``call_tf``), so gradients through it are TF's here too.
"""
from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

from lowering_rules.cases import case, f32, i32
from lowering_rules.helpers import tf_dtype
from lowering_rules.jax_compat import call_tf_p
from lowering_rules.registry import lowering

WEIGHT = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)


def _call_tf(tf_fn, **kwargs):
    from jax.experimental import jax2tf
    return jax2tf.call_tf(tf_fn, **kwargs)


def _cos_then_sin(x):
    return jnp.sin(_call_tf(tf.math.cos)(x))


def _pytree(x, n):
    def tf_fn(pair):
        a, b = pair
        return {"scaled": tf.matmul(a, WEIGHT) * 2.0, "count": b + 1}
    out = _call_tf(tf_fn)((x, n))
    return out["scaled"] + 1.0, out["count"]


@contextlib.contextmanager
def _inlined_tf_functions():
    """``tf.function``s the TF function calls, traced as plain Python into the graph being built:
    TF would otherwise emit a PartitionedCall, which TF.js's converter cannot run. The setting is
    read when a ``tf.function`` is called, so the enclosing one, already tracing, is unaffected."""
    before = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(before)


@lowering(call_tf_p, cases=[
    case("cos_then_sin", _cos_then_sin, f32(3, 4)),
    case("pytree_int_and_matmul", _pytree, f32(2, 4), i32(5)),
    case("tf_function", lambda x: _call_tf(tf.function(lambda y: tf.nn.relu(y) * 3.0, autograph=False))(x) - x,
         f32(6)),
    case("grad_is_tf_gradient", jax.grad(lambda x: jnp.sum(_cos_then_sin(x) ** 2)), f32(5)),
])
def lower_call_tf(ctx, *args, function_flat_tf, callable_flat_tf=None, args_flat_sig_tf=None, output_avals=None,
                  has_side_effects=True, ordered=False, call_tf_graph=False):
    # callable_flat_tf is the user's function on flat arguments, returning flat results;
    # function_flat_tf is the same as a tf.function (compiled for XLA when JAX runs it), whose
    # Python function noxla calls when the equation omits the former.
    call = callable_flat_tf if callable_flat_tf is not None else function_flat_tf.python_function
    if args_flat_sig_tf is not None:
        args = [a if a.dtype == spec.dtype else tf.cast(a, spec.dtype) for a, spec in zip(args, args_flat_sig_tf)]
    with _inlined_tf_functions():
        outs = call(*args)
    return [tf.convert_to_tensor(o) if tf.as_dtype(o.dtype) == tf_dtype(aval.dtype)
            else tf.cast(o, tf_dtype(aval.dtype)) for o, aval in zip(outs, ctx.avals_out)]
