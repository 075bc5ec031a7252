"""Complex values inside a lowering: a (real, imaginary) pair of float tensors.

TFLite builtins have no complex ADD and no op that builds a complex tensor, and TF.js's wasm
backend has no complex kernel at all (no Complex, Real, Imag or FFT). So between rules a complex
value is a ``ComplexPair`` of real tensors, and every complex operation lowers to real ops that
all targets run. Complex tensors exist only at the program's boundary (a complex input is split
with Real/Imag, a complex output joined with Complex), which the up-front check declares.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from lowering_rules.core.lazy_tensorflow import tf


@dataclasses.dataclass(frozen=True)
class ComplexPair:
    re: tf.Tensor
    im: tf.Tensor

    @property
    def dtype(self) -> tf.DType:
        return tf.complex64 if self.re.dtype == tf.float32 else tf.complex128


def is_complex_dtype(dtype) -> bool:
    try:
        return np.issubdtype(np.dtype(dtype), np.complexfloating)
    except TypeError:  # extended dtypes (PRNG keys)
        return False


def is_complex(aval) -> bool:
    return hasattr(aval, "dtype") and is_complex_dtype(aval.dtype)


def part_dtype(dtype) -> np.dtype:
    """float32 for complex64, float64 for complex128."""
    return np.finfo(np.dtype(dtype)).dtype


def real_aval(aval):
    """The aval of one part of a complex value (a real aval is returned as it is)."""
    return aval.update(dtype=part_dtype(aval.dtype)) if is_complex(aval) else aval


def split(x) -> ComplexPair:
    """A complex TF tensor (a program input) as a pair."""
    return x if isinstance(x, ComplexPair) else ComplexPair(tf.math.real(x), tf.math.imag(x))


def join(x):
    """A pair as one complex TF tensor (a program output); anything else unchanged."""
    return tf.complex(x.re, x.im) if isinstance(x, ComplexPair) else x


def constant(value) -> ComplexPair:
    array = np.asarray(value)
    dtype = part_dtype(array.dtype)
    return ComplexPair(tf.constant(array.real.astype(dtype)), tf.constant(array.imag.astype(dtype)))
