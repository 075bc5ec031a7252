"""TF building blocks shared by several rules."""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np
import tensorflow as tf

# TF.js has no uint32 tensors. Lowering for it, a uint32 value is carried as the int32 with the
# same bits: set by the TF.js export, read through tf_dtype/constant by everything that makes a
# tensor. The check admits uint32 on TF.js only where the rule computes on bit patterns alone
# (limitations/dtypes.py), so no rule meets a carried value whose sign it would misread.
_UINT32_AS_INT32 = contextvars.ContextVar("noxla_uint32_as_int32", default=False)


@contextlib.contextmanager
def uint32_as_int32(enabled: bool = True):
    token = _UINT32_AS_INT32.set(enabled)
    try:
        yield
    finally:
        _UINT32_AS_INT32.reset(token)


def tf_dtype(dtype) -> tf.DType:
    dtype = np.dtype(dtype)
    if dtype == np.uint32 and _UINT32_AS_INT32.get():
        return tf.int32
    return tf.as_dtype(dtype)


def constant(array) -> tf.Tensor:
    """A constant of the array's dtype, or of its carrier (uint32 as int32 bits, see above)."""
    array = np.asarray(array)
    if array.dtype == np.uint32 and _UINT32_AS_INT32.get():
        array = array.view(np.int32)
    return tf.constant(array, dtype=tf_dtype(array.dtype))


# --- Sizes, slices and padding that work with static and symbolic dimensions -----------------

def size_vector(dims):
    """A shape/begin/end argument for TF ops: a list when all entries are static, else an int32 vector."""
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return [int(d) for d in dims]
    return tf.stack([tf.constant(int(d), tf.int32) if isinstance(d, (int, np.integer)) else d
                     for d in dims])


def axis_slice(x, rank: int, axis: int, start, stop=None, stride: int = 1):
    """``x[..., start:stop:stride, ...]`` on one axis (``stop=None``: to the end; negative: from the end)."""
    if stride > 1 and x.dtype.is_integer and stop is not None and not _negative(stop):
        # TF.js's wasm StridedSlice returns integer data retyped as float32 when a stride is > 1.
        return tf.gather(x, tf.range(start, stop, stride), axis=axis)
    begin, end, strides = [0] * rank, [0] * rank, [1] * rank
    begin[axis], strides[axis] = start, stride
    others = ((1 << rank) - 1) & ~(1 << axis)
    end_mask = others
    if stop is None:
        end_mask |= 1 << axis
    else:
        end[axis] = stop
    return tf.strided_slice(x, size_vector(begin), size_vector(end), strides,
                            begin_mask=others, end_mask=end_mask)


def _negative(n) -> bool:
    return isinstance(n, (int, np.integer)) and n < 0


def pad_or_crop(x, pads, value=0):
    """Pads each axis by ``(low, high)``; a negative amount removes elements from that side instead."""
    rank = len(pads)
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        begin = [max(-lo, 0) for lo, _ in pads]
        end = [min(hi, 0) for _, hi in pads]
        end_mask = sum(1 << a for a, (_, hi) in enumerate(pads) if hi >= 0)
        x = tf.strided_slice(x, begin, end, [1] * rank, end_mask=end_mask)
    if any(lo > 0 or hi > 0 for lo, hi in pads):
        x = tf.pad(x, [[max(lo, 0), max(hi, 0)] for lo, hi in pads], constant_values=value)
    return x


def interior_pad(x, dims, axis: int, factor: int, value=0):
    """Puts ``factor - 1`` copies of ``value`` between neighbours along ``axis`` (lax.pad's interior
    padding, a convolution's lhs dilation): view x as [before, n, 1, after], pad the unit axis, merge
    it, drop the trailing fill. ``dims`` are x's sizes (ints or int32 scalars); the new size is
    ``(n - 1) * factor + 1``. The padded view has rank 4 whatever x's rank: TF.js's WebGL Pad
    kernel makes a fragment shader that does not compile at rank 5 and above."""
    if factor == 1 or (isinstance(dims[axis], (int, np.integer)) and dims[axis] == 0):
        return x
    before, after = _product(dims[:axis]), _product(dims[axis + 1:])
    widened = tf.reshape(x, size_vector([before, dims[axis], 1, after]))
    widened = tf.pad(widened, [[0, 0], [0, 0], [0, factor - 1], [0, 0]], constant_values=value)
    merged = tf.reshape(widened, size_vector([before, dims[axis] * factor, after]))
    trimmed = axis_slice(merged, 3, 1, 0, -(factor - 1))
    new_dims = list(dims)
    new_dims[axis] = (dims[axis] - 1) * factor + 1
    return tf.reshape(trimmed, size_vector(new_dims))


def _product(dims):
    """The product of sizes that are ints or int32 scalars (an int when all are static)."""
    total = 1
    for d in dims:
        total = total * d
    return total


def runtime_infinity(x) -> tf.Tensor:
    """+inf as a scalar of x's (floating) dtype, computed from x at run time.

    The TFLite converter stores an infinite constant as the largest finite float, so an infinity
    that must survive conversion is made as 1 / (a zero the converter cannot fold)."""
    finite = tf.where(tf.math.is_finite(x), x, tf.zeros_like(x))
    return 1.0 / tf.reduce_sum(tf.abs(finite) * 0.0)
