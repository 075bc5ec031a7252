"""TF gradients of a converted function, computed as JAX computes them.

As jax2tf did (``with_gradient=True``): the converted function carries a ``tf.custom_gradient``
whose gradient is JAX's VJP of the same function (``jax.vjp``), itself converted by noxla with
gradient, so custom_vjp/custom_jvp rules, ``stop_gradient`` and gradients of gradients are JAX's,
not those of the lowered TF ops (whose own gradients differ: ``stop_gradient`` lowers to an identity).
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np
import tensorflow as tf

from noxla.shapes import is_static

NO_GRADIENT_MESSAGE = ("The noxla-converted function does not support gradients (it was converted with "
                       "with_gradient=False). Use the with_gradient parameter to enable gradients.")


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
            # Arguments are values read before the call, so no variable is used inside it.
            cts = [out_cts[i] if out_cts[i] is not None else tf.zeros_like(outs[i]) for i in float_outs]
            in_cts = converted_vjp(*args, *cts) if wrt else []
            grads = [None] * len(args)
            for i, ct in zip(wrt, in_cts):
                grads[i] = ct
            return grads
        return outs, grad

    if not flat_args:  # nothing to differentiate with respect to
        return list(forward(flat_args))
    return list(call(*flat_args))


def without_gradient(outs: Sequence[tf.Tensor]) -> list:
    """jax2tf's ``with_gradient=False``: a gradient through these outputs is an error (PreventGradient
    is kept in SavedModels)."""
    return [tf.raw_ops.PreventGradient(input=o, message=NO_GRADIENT_MESSAGE) for o in outs]
