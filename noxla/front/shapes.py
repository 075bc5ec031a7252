"""Dimension sizes at lowering time: Python ints where static, TF scalars where symbolic.

Rules never read ``tensor.shape`` to compute sizes; they ask the context, which
asks ``Dims``. With static shapes every answer is a Python int; with
polymorphic shapes the dimension variables are solved from ``tf.shape`` of the
inputs once, and expressions (``2*b``, ``b + 1``) are evaluated on them.
"""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from jax.core import ShapedArray

from lowering_rules.core.jax_compat import evaluate_dim, is_constant_dim, solve_dim_vars
from lowering_rules.core.lazy_tensorflow import tf  # TensorFlow only where a size is symbolic
from noxla.errors import ShapeMismatchError

DimSize = "int | tf.Tensor"


def is_static(shape: Sequence) -> bool:
    return all(is_constant_dim(d) for d in shape)


def dim_vars(avals: Sequence) -> set[str]:
    return {v for a in avals for d in getattr(a, "shape", ()) if not is_constant_dim(d)
            for v in d._get_vars()}


class Dims:
    """Evaluates dimension sizes (possibly symbolic) as Python ints or int32 TF scalars."""

    def __init__(self, env: dict[str, tf.Tensor] | None = None):
        self.env = env or {}

    @classmethod
    def solve(cls, in_avals: Sequence, tf_args: Sequence[tf.Tensor]) -> "Dims":
        """Solve the dimension variables from the inputs' run-time shapes."""
        if not dim_vars(in_avals):
            return cls()
        avals = tuple(ShapedArray(a.shape, a.dtype) for a in in_avals)
        tree = jax.tree_util.tree_structure((tuple(range(len(avals))), {}))
        solution, _, synthetic = solve_dim_vars(avals, tree)
        sizes = {name: _Size(tf.shape(tf_args[arg], out_type=tf.int32)[axis]) for name, arg, axis in synthetic}
        return cls({var: _Size(_as_int32(_evaluate(expr, sizes))) for var, expr in solution.items()})

    def check_inputs(self, in_avals, tf_args, in_names) -> list:
        """Verify every input against its specification (dimensions declared equal really are):
        eagerly by raising, in a graph by returning Assert ops to depend on. TFLite and TF.js
        exports skip this: neither runtime has an Assert op."""
        asserts = []
        for var, size in sorted(self.env.items()):  # jax.export's assumption: every variable is >= 1
            size = _as_int32(size)
            message = f"dimension variable {var} must be >= 1 (as polymorphic shapes assume), but it is {{}}"
            if isinstance(size, int):
                continue
            if tf.executing_eagerly():
                if int(size) < 1:
                    raise ShapeMismatchError(message.format(int(size)))
            else:
                asserts.append(tf.debugging.assert_greater_equal(size, 1, message=message.format("smaller")))
        for aval, arg, name in zip(in_avals, tf_args, in_names):
            actual = tf.shape(arg, out_type=tf.int32)
            for axis, d in enumerate(aval.shape):
                if is_constant_dim(d):
                    continue
                expected = self.dim(d)
                message = (f"input {name} has size {{}} in dimension {axis}, but its polymorphic shape "
                           f"says {d} = {{}} (solved from the other inputs' sizes)")
                if tf.executing_eagerly():
                    if int(actual[axis]) != int(expected):
                        raise ShapeMismatchError(message.format(int(actual[axis]), int(expected)))
                else:
                    asserts.append(tf.debugging.assert_equal(actual[axis], expected,
                                                             message=message.format("(see below)", "(see below)")))
        return asserts

    def dim(self, d) -> DimSize:
        if is_constant_dim(d):
            return int(d)
        return _as_int32(_evaluate(d, self.env))

    def shape(self, shape: Sequence) -> "list[int] | tf.Tensor":
        """A shape for ``tf.reshape``/``tf.zeros``/...: a list when static, else an int32 vector."""
        dims = [self.dim(d) for d in shape]
        if all(isinstance(d, int) for d in dims):
            return dims
        return tf.stack([tf.constant(d, tf.int32) if isinstance(d, int) else d for d in dims])


class _Size:
    """An int32 TF scalar with the integer arithmetic JAX's dimension expressions evaluate with
    (tf.Tensor has no ``divmod``)."""

    def __init__(self, value):
        self.value = value.value if isinstance(value, _Size) else value

    def _op(fn):
        return lambda self, other: _Size(fn(self.value, _Size(other).value))

    __add__ = _op(lambda a, b: a + b)
    __radd__ = _op(lambda a, b: b + a)
    __sub__ = _op(lambda a, b: a - b)
    __rsub__ = _op(lambda a, b: b - a)
    __mul__ = _op(lambda a, b: a * b)
    __rmul__ = _op(lambda a, b: b * a)
    __floordiv__ = _op(lambda a, b: a // b)
    __rfloordiv__ = _op(lambda a, b: b // a)
    __mod__ = _op(lambda a, b: a % b)
    __rmod__ = _op(lambda a, b: b % a)
    del _op

    def __divmod__(self, other):
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __neg__(self):
        return _Size(-self.value)


def _evaluate(expr, env: dict) -> _Size:
    return _Size(evaluate_dim(expr, env, lambda a, b: tf.maximum(_Size(a).value, _Size(b).value),
                              lambda a, b: tf.minimum(_Size(a).value, _Size(b).value)))


def _as_int32(value) -> DimSize:
    if isinstance(value, _Size):
        value = value.value
    if isinstance(value, (int, np.integer)):
        return int(value)
    return tf.cast(value, tf.int32)
