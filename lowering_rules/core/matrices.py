"""Slicing and constant helpers for the rules on (batches of) small matrices: the last two axes are
the matrix, any axes before them are batch dimensions (decompositions, linalg_factor)."""
from __future__ import annotations

import numpy as np

from lowering_rules.core.helpers import axis_slice
from lowering_rules.core.lazy_tensorflow import tf


def rows(x, start, stop=None):
    rank = len(x.shape)
    return axis_slice(x, rank, rank - 2, start, stop)


def cols(x, start, stop=None):
    rank = len(x.shape)
    return axis_slice(x, rank, rank - 1, start, stop)


def swap_last(x):
    """Swap the last two axes."""
    rank = len(x.shape)
    return tf.transpose(x, [*range(rank - 2), rank - 1, rank - 2])


def index(n: int, axis: int) -> np.ndarray:
    """0..n-1 along ``axis`` of a rank-2 shape ((n, 1) for rows, (1, n) for columns)."""
    return np.arange(n, dtype=np.int32).reshape((n, 1) if axis == 0 else (1, n))


def eye_like(x, n: int):
    """The identity, broadcast to x's batch dimensions."""
    eye = tf.constant(np.eye(n, dtype=x.dtype.as_numpy_dtype))
    batch = tf.shape(x)[:-2]
    return tf.broadcast_to(eye, tf.concat([batch, [n, n]], 0))
