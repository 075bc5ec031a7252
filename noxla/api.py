"""``convert`` and ``check``: the in-process entry points."""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import tensorflow as tf

import lowering_rules  # noqa: F401  (registers every rule)
from limitations.engine import Report, check_jaxpr
from limitations.targets import Target
from lowering_rules import complex_values
from noxla.errors import UnsupportedError
from noxla.interpreter import Lowering, lower_jaxpr, tf_dtype
from noxla.shapes import Dims
from noxla.tracing import Program, check_callable, trace


def check(fun: Callable, *example_args, target: Target | str = Target.TFLITE,
          polymorphic_shapes=None) -> Report:
    """Every use in ``fun`` that ``target`` cannot run, found before any TF op is built."""
    program = trace(fun, example_args, polymorphic_shapes)
    return check_jaxpr(program.closed_jaxpr, target)


def require_supported(program: Program, target: Target | str) -> None:
    report = check_jaxpr(program.closed_jaxpr, target)
    if not report.ok:
        raise UnsupportedError(report)


def lower_program(program: Program, flat_args: Sequence, check_shapes: bool = False,
                  strict: bool = False) -> list[tf.Tensor]:
    """Emit the TF ops of a traced program on flat TF inputs (eagerly or into the current graph).

    ``check_shapes`` verifies inputs against their polymorphic shapes (TF only: Assert ops).
    ``strict`` keeps the IEEE-exact lowerings (see ``convert``).
    """
    flat_args = [tf.convert_to_tensor(a, dtype_hint=tf_dtype(aval.dtype)) for a, aval in
                 zip(flat_args, program.in_avals)]
    flat_args = [a if a.dtype == tf_dtype(aval.dtype) else tf.cast(a, tf_dtype(aval.dtype))
                 for a, aval in zip(flat_args, program.in_avals)]
    dims = Dims.solve(program.in_avals, flat_args)
    if check_shapes:
        checks = dims.check_inputs(program.in_avals, flat_args, program.in_names)
        if checks:
            with tf.control_dependencies(checks):
                flat_args = [tf.identity(a) for a in flat_args]
    # Complex values travel between rules as (real, imaginary) pairs; see complex_values.
    lowering = Lowering(dims, [a for a in flat_args if not a.dtype.is_complex], strict=strict)
    args = [complex_values.split(a) if a.dtype.is_complex else a for a in flat_args]
    outs = lower_jaxpr(lowering, program.closed_jaxpr.jaxpr, program.consts, args)
    return [complex_values.join(out) for out in outs]


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
