"""TF gradients of a converted function, computed as JAX computes them.

As jax2tf did (``with_gradient=True``): the converted function carries a ``tf.custom_gradient``
whose gradient is JAX's VJP of the same function (``jax.vjp``), itself converted by noxla with
gradient, so custom_vjp/custom_jvp rules, ``stop_gradient`` and gradients of gradients are JAX's,
not those of the lowered TF ops (whose own gradients differ: ``stop_gradient`` lowers to an identity).
"""
from __future__ import annotations

import inspect
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from jax.extend.core import jaxpr_as_fun

from limitations.engine import check_jaxpr
from lowering_rules.core.vocabulary import Target
from noxla.errors import NoxlaError, UnsupportedError
from noxla.front.lowering import input_signature, program_inputs
from noxla.front.shapes import is_static
from noxla.front.tracing import trace
from noxla.writers.tf.forward import Forward
from noxla.writers.tf.replay import CapturedWeights

NO_GRADIENT_MESSAGE = ("The noxla-converted function does not support gradients (it was converted with "
                       "with_gradient=False). Use the with_gradient parameter to enable gradients.")


def tf_callable(fun: Callable, polymorphic_shapes, polymorphic_constraints: tuple, with_gradient: bool,
                strict: bool, weights: CapturedWeights | None = None) -> Callable:
    """The TF callable ``noxla.convert`` returns (see there): traces ``fun`` once per input
    signature, and computes it as ``Forward`` (noxla's graph replayed); with ``with_gradient`` its TF
    gradient is JAX's VJP, converted in turn on first use. Every signature's program captures the
    weights of one table (``weights``), each held once; the VJP those of them it uses
    (``CapturedWeights.existing``)."""
    programs: dict = {}
    weights = CapturedWeights() if weights is None else weights

    def converted(*args, **kwargs):
        positional, shapes, target = positional_call(fun, args, kwargs, polymorphic_shapes)
        flat, tree = jax.tree_util.tree_flatten(positional)
        flat = [as_tensor(x) for x in flat]
        key = (tree, tuple((tuple(x.shape.as_list()), x.dtype) for x in flat))
        entry = programs.get(key)
        if entry is None:
            program = trace(target, jax.tree_util.tree_unflatten(tree, flat), shapes, polymorphic_constraints)
            report = check_jaxpr(program.closed_jaxpr, Target.TF)
            if not report.ok:
                raise UnsupportedError(report)
            entry = programs[key] = [program, None, Forward(program, strict, weights)]
        program, forward = entry[0], entry[2]
        flat = program_inputs(program, flat)
        if not with_gradient:
            outs = without_gradient(forward(flat))
        else:
            def converted_vjp(*primals_and_cts):
                if entry[1] is None:  # most calls never ask for a gradient
                    vjp = vjp_function(flat_function(target, program.in_tree), program.in_avals, program.out_avals)
                    entry[1] = tf_callable(vjp, vjp_polymorphic_shapes(program.in_avals, program.out_avals),
                                           polymorphic_constraints, with_gradient, strict, weights.existing())
                return entry[1](*primals_and_cts)
            outs = with_custom_gradient(forward, flat, program.in_avals, program.out_avals, converted_vjp)
        return jax.tree_util.tree_unflatten(program.out_tree, outs)

    converted.__name__ = f"noxla_{getattr(fun, '__name__', 'fun')}"
    converted.__doc__ = getattr(fun, "__doc__", None)
    # Under tf.function's default autograph=True, AutoGraph would rewrite JAX's and noxla's Python
    # (tracing, lowering) on every trace: tens of seconds, and warnings, for nothing to convert.
    return tf.autograph.experimental.do_not_convert(converted)


def as_tensor(x):
    """A call argument as a TF value; a Python scalar typed as JAX types it (float64 under x64)."""
    if isinstance(x, (tf.Tensor, tf.Variable)):
        return x
    if isinstance(x, (bool, int, float, complex)):
        return tf.convert_to_tensor(x, dtype=jnp.result_type(x))
    return tf.convert_to_tensor(x)


def positional_call(fun: Callable, args: tuple, kwargs: dict, polymorphic_shapes):
    """Keyword arguments bound to ``fun``'s parameters by its signature: the positional arguments,
    the ``polymorphic_shapes`` for them (keyword-only arguments are static, as in jax2tf) and a
    function of positional arguments only."""
    if not kwargs:
        return args, polymorphic_shapes, fun
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise TypeError(f"cannot bind the arguments of {getattr(fun, '__name__', fun)}: {e}") from None
    positional, named = tuple(bound.args), dict(bound.kwargs)
    if not named:
        return positional, polymorphic_shapes, fun
    names = tuple(named)
    shapes = polymorphic_shapes
    if isinstance(shapes, (list, tuple)):
        shapes = (*tuple(shapes)[:len(positional)], *[None] * (len(positional) - len(shapes)),
                  *[None] * len(names))

    def of_positional(*all_args):
        return fun(*all_args[:len(positional)], **dict(zip(names, all_args[len(positional):])))
    of_positional.__name__ = getattr(fun, "__name__", "fun")
    return (*positional, *named.values()), shapes, of_positional


def differentiable(aval) -> bool:
    """Whether JAX gives the value a tangent (float or complex); others' tangents are float0."""
    return jax.dtypes.issubdtype(aval.dtype, np.inexact)


def flat_function(fun: Callable, in_tree) -> Callable:
    """``fun`` on the flat leaves of its positional arguments, returning its flat outputs."""
    def flat(*leaves):
        return jax.tree_util.tree_leaves(fun(*jax.tree_util.tree_unflatten(in_tree, leaves)))
    return flat


def vjp_function(fun_flat: Callable, in_avals: Sequence, out_avals: Sequence) -> Callable:
    """JAX's VJP of ``fun_flat`` as a function of the primal inputs and the cotangents of its
    differentiable outputs, returning the cotangents of its differentiable inputs. Integer inputs
    and outputs have float0 tangents, which TF has no type for: they are left out on both sides."""
    wrt = [i for i, a in enumerate(in_avals) if differentiable(a)]
    float_outs = [i for i, a in enumerate(out_avals) if differentiable(a)]

    def vjp(*primals_and_cts):
        primals, cts = primals_and_cts[:len(in_avals)], primals_and_cts[len(in_avals):]

        def of_wrt(*xs):
            full = list(primals)
            for i, x in zip(wrt, xs):
                full[i] = x
            outs = fun_flat(*full)
            return [outs[i] for i in float_outs]
        _, pullback = jax.vjp(of_wrt, *[primals[i] for i in wrt])
        return list(pullback(list(cts)))
    vjp.__name__ = f"vjp_{getattr(fun_flat, '__name__', 'fun')}"
    return vjp


def vjp_polymorphic_shapes(in_avals: Sequence, out_avals: Sequence):
    """The VJP's ``polymorphic_shapes``: its inputs' shapes in the primal's dimension variables
    (expressions such as ``2*b`` included), or None when every shape is static."""
    avals = [*in_avals, *(a for a in out_avals if differentiable(a))]
    if all(is_static(a.shape) for a in avals):
        return None
    return tuple(str(tuple(a.shape)) for a in avals)


def with_custom_gradient(forward: Callable[[Sequence[tf.Tensor]], list], flat_args: Sequence[tf.Tensor],
                         in_avals: Sequence, out_avals: Sequence, converted_vjp: Callable) -> list:
    """``forward(flat_args)`` whose TF gradient is ``converted_vjp(*primals, *cotangents)``
    (the VJP of ``vjp_function``, converted): cotangents of non-differentiable inputs are None."""
    float_outs = [i for i, a in enumerate(out_avals) if differentiable(a)]
    wrt = [i for i, a in enumerate(in_avals) if differentiable(a)]

    @tf.custom_gradient
    def call(*args):
        outs = [tf.identity(o) for o in forward(args)]

        def grad(*out_cts, variables=None):
            # Arguments are values read before the call; the variables read inside it are the
            # weights of a SavedModel noxla writes (``CapturedWeights(variables=True)``): constants
            # to JAX, so they get no gradient.
            cts = [out_cts[i] if out_cts[i] is not None else tf.zeros_like(outs[i]) for i in float_outs]
            try:
                in_cts = converted_vjp(*args, *cts) if wrt else []
            except NoxlaError as e:
                if tf.executing_eagerly():
                    raise
                # In a graph, e.g. while tf.saved_model.save traces every gradient: a program JAX
                # cannot differentiate (a while_loop) still saves, and asking for its gradient fails.
                failed = tf.debugging.Assert(False, [f"noxla: no JAX gradient for this function: {e}"[:2000]])
                with tf.control_dependencies([failed]):
                    in_cts = [tf.zeros_like(args[i]) for i in wrt]
            grads = [None] * len(args)
            for i, ct in zip(wrt, in_cts):
                grads[i] = ct
            return (grads, [None] * len(variables)) if variables else grads
        return outs, grad

    if not flat_args:  # nothing to differentiate with respect to
        return list(forward(flat_args))
    return list(call(*flat_args))


def without_gradient(outs: Sequence[tf.Tensor]) -> list:
    """jax2tf's ``with_gradient=False``: a gradient through these outputs is an error (PreventGradient
    is kept in SavedModels)."""
    return [tf.raw_ops.PreventGradient(input=o, message=NO_GRADIENT_MESSAGE) for o in outs]


def variable_arguments(fun: Callable, variables, num_args: int) -> set[int]:
    """The positional indices ``variables`` names: an index, a parameter name, or a sequence of them."""
    if variables is None:
        return set()
    names = variables if isinstance(variables, (list, tuple, set)) else [variables]
    try:
        params = [p.name for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    indices = set()
    for name in names:
        index = params.index(name) if isinstance(name, str) and name in params else name
        if not isinstance(index, int) or not 0 <= index < num_args:
            raise TypeError(f"variables={variables!r}: {name!r} names no positional argument of "
                            f"{getattr(fun, '__name__', fun)} (parameters {params}, {num_args} given)")
        indices.add(index)
    return indices


def saved_model_module(fun: Callable, program, example_args: Sequence, polymorphic_shapes,
                       polymorphic_constraints: tuple = (), strict: bool = False, variables=None,
                       with_gradient: bool = True):
    """A ``tf.Module`` whose ``serve`` computes ``fun`` with JAX's gradients (save it with
    ``experimental_custom_gradients``), and its ``serving_default`` concrete function.

    The positional arguments ``variables`` names (``variable_arguments``) become ``tf.Variable``s
    holding their example values, one per leaf: the signature takes only the other inputs, and a
    gradient w.r.t. them (``module.parameters``) fine-tunes them. ``with_gradient=False``: no
    gradient (PreventGradient), and no VJP traced when the model is saved."""
    weights = CapturedWeights(variables=True)  # saved as variables: see there
    converted = tf_callable(fun, polymorphic_shapes, polymorphic_constraints, with_gradient, strict, weights)
    held = variable_arguments(fun, variables, len(example_args))
    per_arg = [t.num_leaves for t in program.in_tree.children()]
    is_variable = [i in held for i, n in enumerate(per_arg) for _ in range(n)]
    leaves = jax.tree_util.tree_leaves(tuple(example_args))
    module = tf.Module()
    module.parameters = [tf.Variable(np.asarray(leaf), name=name)
                         for leaf, name, v in zip(leaves, program.in_names, is_variable) if v]
    signature = [s for s, v in zip(input_signature(program), is_variable) if not v]

    def serve(*inputs):
        given, params = iter(inputs), iter(module.parameters)
        flat = [next(params) if v else next(given) for v in is_variable]
        outs = jax.tree_util.tree_leaves(converted(*jax.tree_util.tree_unflatten(program.in_tree, flat)))
        return {name: tf.identity(out, name=name) for name, out in zip(program.out_names, outs)}
    module.serve = tf.function(serve, input_signature=signature, autograph=False)
    concrete = module.serve.get_concrete_function()
    module.weights = weights.variables()  # tracked, so saved
    return module, concrete


def signature_function(program, strict: bool, weights: CapturedWeights, with_gradient: bool = True):
    """``program`` (one signature of several) as a concrete function of its named flat inputs
    returning a dict of its named outputs, computed by ``Forward`` (its weights from ``weights``,
    shared with the other signatures), its TF gradient JAX's VJP of the program's jaxpr, as
    ``tf_callable`` gives a single function (``with_gradient=False``: PreventGradient). Without
    it, TF would differentiate the replayed ops: custom_vjp rules and ``stop_gradient`` lost."""
    forward = Forward(program, strict, weights)
    converted = []

    def converted_vjp(*primals_and_cts):
        if not converted:  # traced once, when tf.saved_model.save (or a tape) first asks
            vjp = vjp_function(jaxpr_as_fun(program.closed_jaxpr), program.in_avals, program.out_avals)
            converted.append(tf_callable(vjp, None, (), True, strict, weights.existing()))
        return converted[0](*primals_and_cts)

    def serve(*flat):
        flat = program_inputs(program, flat)
        outs = (with_custom_gradient(forward, flat, program.in_avals, program.out_avals, converted_vjp)
                if with_gradient else without_gradient(forward(flat)))
        return {name: tf.identity(out, name=name) for name, out in zip(program.out_names, outs)}
    return tf.function(serve, input_signature=input_signature(program), autograph=False).get_concrete_function()


SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=True)
