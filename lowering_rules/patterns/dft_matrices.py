"""The constant matrices of discrete Fourier transforms, as real float arrays, and the product
by one on the last axis (fft.py's lowering and the power-spectrum pattern in power_spectrum.py)."""
from __future__ import annotations

import numpy as np

from lowering_rules.core.helpers import size_vector
from lowering_rules.core.lazy_tensorflow import tf


def on_last_axis(x, dims, matrix):
    """x (..., k) @ matrix (k, l) (a constant array or tensor), through one rank-2 product whose
    reshapes the converters fold into FULLY_CONNECTED; ``dims`` are x's sizes."""
    flat = tf.reshape(x, [-1, matrix.shape[0]])
    product = tf.linalg.matmul(flat, matrix)
    return tf.reshape(product, size_vector([*dims[:-1], matrix.shape[1]]))


def _angles(rows: int, cols: int, n: int, sign: float) -> np.ndarray:
    """sign * 2 pi (j k mod n) / n for j < rows, k < cols; the index product is reduced exactly."""
    product = np.outer(np.arange(rows, dtype=np.int64), np.arange(cols, dtype=np.int64)) % n
    return sign * 2.0 * np.pi * product / n


def complex_matrix(n: int, inverse: bool, dtype) -> np.ndarray:
    """[[C, S], [-S, C]] for W = C + iS, W[j, k] = exp(-+ 2 pi i j k / n) (1/n for the inverse)."""
    angle = _angles(n, n, n, 1.0 if inverse else -1.0)
    scale = 1.0 / n if inverse else 1.0
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    return np.block([[c, s], [-s, c]]).astype(dtype)


def real_input_matrix(n: int, dtype) -> np.ndarray:
    """[C | S] for the n // 2 + 1 non-negative frequencies of a real signal."""
    angle = _angles(n, n // 2 + 1, n, -1.0)
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=1).astype(dtype)


def real_output_matrix(n: int, dtype) -> np.ndarray:
    """[[A], [B]] with x[t] = sum_k re[k] A[k, t] + im[k] B[k, t]: the inverse of a Hermitian
    spectrum, each frequency but 0 and n/2 counted twice (for its conjugate mirror)."""
    m = n // 2 + 1
    angle = _angles(m, n, n, 1.0)
    weight = np.full((m, 1), 2.0)
    weight[0] = 1.0
    if n % 2 == 0:
        weight[-1] = 1.0
    weight = weight / n
    return np.concatenate([weight * np.cos(angle), weight * -np.sin(angle)], axis=0).astype(dtype)
