"""``tf.convert_to_tensor`` on the graph: Python and NumPy values become Consts typed as TF types
them (Python ints int32, floats float32; NumPy arrays keep their dtype), and a value TF would
refuse or convert in a way not checked here is Uncovered rather than guessed."""
from __future__ import annotations

import numbers

import numpy as np

from noxla.graph import ops
from noxla.graph.core import Tensor
from noxla.graph.dtypes import DTYPES, DType, Uncovered, as_dtype


def _default_dtype(value) -> DType:
    """TF's dtype for a Python value (nested lists of scalars): bool, int32 (int64 when it does
    not fit), float32, complex128 is left Uncovered."""
    flat = np.asarray(value, dtype=object).reshape(-1) if isinstance(value, (list, tuple)) else [value]
    kinds = {type(v) for v in flat}
    if kinds <= {bool, np.bool_}:
        return DTYPES["bool"]
    if all(isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) for v in flat):
        values = [int(v) for v in flat]
        fits = all(-2 ** 31 <= v < 2 ** 31 for v in values)
        return DTYPES["int32" if fits else "int64"]
    if all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in flat):
        return DTYPES["float32"]
    raise Uncovered(f"converting {type(value).__name__} to a tensor")


def _compatible(array: np.ndarray, dtype: DType) -> np.ndarray:
    """``array`` as ``dtype``, when TF converts it the same way (exact values only)."""
    target = np.dtype(dtype.as_numpy_dtype)
    if array.dtype == target:
        return array
    if array.dtype == object:
        items = array.reshape(-1).tolist()
        if dtype.is_integer and not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
            raise TypeError(f"Expected {dtype.name}, got a non-integer value")  # as TF refuses it
        if dtype.is_bool and not all(isinstance(v, (bool, np.bool_)) for v in items):
            raise TypeError(f"Expected bool, got {items[:3]}")
        if dtype.is_floating and not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in items):
            raise TypeError(f"Expected {dtype.name}, got {items[:3]}")
        array = np.array(items, dtype=np.float64 if dtype.is_floating else None).reshape(array.shape)
        return array.astype(target) if array.size == 0 else _compatible(array, dtype)
    if array.dtype.kind in "iub" and dtype.is_integer:
        if array.dtype.kind == "b":
            raise Uncovered("a bool array converted to an integer tensor")
        info = np.iinfo(target)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise TypeError(f"a value out of {dtype.name}'s range")
        return array.astype(target)
    if (array.dtype.kind in "iuf" or array.dtype == np.dtype(DTYPES["bfloat16"].as_numpy_dtype)) and dtype.is_floating:
        return array.astype(target)
    raise Uncovered(f"converting a {array.dtype} array to {dtype.name}")


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None, preferred_dtype=None) -> Tensor:
    dtype = None if dtype is None else as_dtype(dtype)
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype != dtype:
            raise ValueError(f"Tensor conversion requested dtype {dtype.name} for Tensor with dtype {value.dtype.name}")
        return value
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in flat(value)):
        raise Uncovered("a list holding tensors converted to one tensor (sizes: noxla.graph.structural.packed)")
    if isinstance(value, DType) or callable(value):
        raise Uncovered(f"converting {value!r} to a tensor")
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.kind in "SUO":
            raise Uncovered("string tensors")
        if dtype is None:
            hint = dtype_hint or preferred_dtype
            dtype = as_dtype(array.dtype)
            if hint is not None and as_dtype(hint) != dtype:
                try:
                    dtype, array = as_dtype(hint), _compatible(array, as_dtype(hint))
                except (TypeError, Uncovered):
                    pass
        return ops.constant(_compatible(array, dtype), dtype)
    if dtype is None:
        hint = dtype_hint or preferred_dtype
        dtype = _default_dtype(value)
        if hint is not None and as_dtype(hint) != dtype:
            try:
                array = _compatible(np.asarray(value, dtype=object), as_dtype(hint))
                return ops.constant(array, as_dtype(hint))
            except (TypeError, Uncovered):
                pass
    if dtype.is_complex:
        raise Uncovered("complex constants")
    if isinstance(value, (list, tuple)) and not value:
        return ops.constant(np.zeros((0,), dtype.as_numpy_dtype), dtype)
    return ops.constant(_compatible(np.asarray(value, dtype=object), dtype), dtype)


def flat(value):
    for v in value:
        if isinstance(v, (list, tuple)):
            yield from flat(v)
        else:
            yield v
