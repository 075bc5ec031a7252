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
import tensorflow as tf
from jax._src.core import is_constant_dim
from jax.core import ShapedArray
from jax._src.export import shape_poly

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
        if not dim_vars(in_avals):
            return cls()
        avals = tuple(ShapedArray(a.shape, a.dtype) for a in in_avals)
        tree = jax.tree_util.tree_structure((tuple(range(len(avals))), {}))
        solution, _, synthetic = shape_poly.solve_dim_vars(avals, tree)
        sizes = {name: tf.shape(tf_args[arg], out_type=tf.int32)[axis]
                 for name, arg, axis in synthetic}
        return cls({var: _as_int32(expr._evaluate(sizes)) for var, expr in solution.items()})

    def dim(self, d) -> DimSize:
        if is_constant_dim(d):
            return int(d)
        return _as_int32(d._evaluate(self.env))

    def shape(self, shape: Sequence) -> "list[int] | tf.Tensor":
        """A shape for ``tf.reshape``/``tf.zeros``/...: a list when static, else an int32 vector."""
        dims = [self.dim(d) for d in shape]
        if all(isinstance(d, int) for d in dims):
            return dims
        return tf.stack([tf.constant(d, tf.int32) if isinstance(d, int) else d for d in dims])


def _as_int32(value) -> DimSize:
    if isinstance(value, (int, np.integer)):
        return int(value)
    return tf.cast(value, tf.int32)
