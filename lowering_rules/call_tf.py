"""``call_tf`` (``jax2tf.call_tf(tf_fn)``): a TF function called from a JAX program.

noxla's output is TF, so the function runs in place: the rule calls it on the TF tensors inside
the graph being built, and its ops become the program's own (TFLite's and TF.js's checks see them
like any rule's). JAX differentiates ``call_tf`` through TF (its custom_vjp calls
``tf.GradientTape`` in another ``call_tf``), so gradients through it are TF's here too.
"""
from __future__ import annotations

import contextlib
import functools
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from lowering_rules.core.cases import case, f32, i32
from lowering_rules.core.jax_compat import CALL_TF
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering

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


@functools.cache
def _restored_module():
    """A SavedModel's restored module: its functions are ConcreteFunctions holding variables, and
    its call of another ``tf.function`` is a StatefulPartitionedCall in their library."""
    class Dense(tf.Module):
        def __init__(self):
            self.w = tf.Variable(WEIGHT)
            self.b = tf.Variable(np.array([0.5, -0.25, 0.0], np.float32))

        @tf.function(autograph=False)
        def activation(self, y):
            return tf.nn.relu(y) * 2.0

        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32)], autograph=False)
        def __call__(self, x):
            return self.activation(tf.matmul(x, self.w) + self.b)

    with tempfile.TemporaryDirectory(prefix="noxla_call_tf_") as path:
        tf.saved_model.save(Dense(), path)
        return tf.saved_model.load(path)  # the variables' values are read into memory here


def _saved_model_function(x):
    concrete = _restored_module().__call__.get_concrete_function(tf.TensorSpec([2, 4], tf.float32))
    return jnp.sin(_call_tf(concrete)(x))


@functools.cache
def _scale_by_variable():
    """A ``tf.function`` reading a ``tf.Variable`` it closes over (a resource, as a Keras layer's)."""
    scale = tf.Variable(np.array([2.0, -1.0, 0.5], np.float32))
    return tf.function(lambda y: y * scale, autograph=False)


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


_CALLS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


def _call_in_graph(call, args):
    """``call(*args)`` with its ops in the graph being built. A ``tf.function`` it calls is traced
    inline (``_inlined_tf_functions``), but a ConcreteFunction (one restored from a SavedModel)
    is always called through a StatefulPartitionedCall, and its variables are resources, neither of
    which TF.js or TFLite builtins run: such a function is frozen (variables as constants, its
    calls inlined by Grappler, as TF's converters do) and its graph imported here."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    with _inlined_tf_functions():
        concrete = tf.function(call, autograph=False).get_concrete_function(
            *[tf.TensorSpec(a.shape, a.dtype) for a in args])
    graph_def = concrete.graph.as_graph_def()
    if not any(n.op in _CALLS for n in graph_def.node) and not any(
            t.dtype == tf.resource for t in concrete.captured_inputs):
        with _inlined_tf_functions():
            return call(*args)
    with tf.init_scope():  # the variables' values are read eagerly
        frozen = convert_variables_to_constants_v2(concrete, aggressive_inlining=True)
    graph_def = frozen.graph.as_graph_def()
    inputs = [t.name for t in frozen.inputs]
    return tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(inputs, args)),
                                          return_elements=[t.name for t in frozen.outputs], name="inlined")


@lowering(CALL_TF, cases=[
    case("cos_then_sin", _cos_then_sin, f32(3, 4)),
    case("pytree_int_and_matmul", _pytree, f32(2, 4), i32(5)),
    case("tf_function", lambda x: _call_tf(tf.function(lambda y: tf.nn.relu(y) * 3.0, autograph=False))(x) - x,
         f32(6)),
    case("saved_model_concrete_function", _saved_model_function, f32(2, 4)),
    case("closes_over_a_variable", lambda x: _call_tf(_scale_by_variable())(x) + 1.0, f32(4, 3)),
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
    if tf.executing_eagerly():
        outs = call(*args)
    else:
        outs = _call_in_graph(call, args)
    return [tf.convert_to_tensor(o) if tf.as_dtype(o.dtype) == ctx.tf_dtype(aval.dtype)
            else tf.cast(o, ctx.tf_dtype(aval.dtype)) for o, aval in zip(outs, ctx.avals_out)]
