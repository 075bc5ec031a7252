"""``convert`` and ``check``: the in-process entry points."""
from __future__ import annotations

from typing import Callable

import jax
import tensorflow as tf

import lowering_rules  # noqa: F401  (registers every rule)
from limitations.engine import Report
from lowering_rules.vocabulary import Target
from noxla.export import full_check, require_supported
from noxla.lowering import lower_program
from noxla.tracing import check_callable, trace


def check(fun: Callable, *example_args, target: Target | str = Target.TFLITE,
          polymorphic_shapes=None) -> Report:
    """Every use in ``fun`` that ``target`` cannot run, found before any TF op is built."""
    program = trace(fun, example_args, polymorphic_shapes)
    return full_check(program.closed_jaxpr, target)


def convert(fun: Callable, *, polymorphic_shapes=None, strict: bool = False) -> Callable:
    """A TF callable computing ``fun``: a drop-in for ``jax2tf.convert(fun, enable_xla=False)``.

    It takes tf.Tensors, numpy arrays and pytrees of them, runs eagerly or inside
    ``tf.function``, and traces ``fun`` once per distinct input signature.

    By default patterns become fused ops (MaxPool, Softmax, Relu, ...) that compute what JAX
    computes for finite inputs but may treat NaN/inf differently (``noxla limitations`` lists
    where, per rule). ``strict=True`` keeps JAX's NaN/inf semantics exactly, with more ops.
    """
    check_callable(fun)
    programs: dict = {}

    def converted(*args):
        flat, tree = jax.tree_util.tree_flatten(args)
        flat = [x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x) for x in flat]
        key = (tree, tuple((tuple(x.shape.as_list()), x.dtype) for x in flat))
        program = programs.get(key)
        if program is None:
            program = trace(fun, jax.tree_util.tree_unflatten(tree, flat), polymorphic_shapes)
            require_supported(program, Target.TF)
            programs[key] = program
        outs = lower_program(program, flat, check_shapes=True, strict=strict)
        return jax.tree_util.tree_unflatten(program.out_tree, outs)

    converted.__name__ = f"noxla_{getattr(fun, '__name__', 'fun')}"
    converted.__doc__ = getattr(fun, "__doc__", None)
    return converted
