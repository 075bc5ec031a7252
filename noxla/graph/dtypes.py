"""TF's dtypes without TensorFlow: what the rules read of a ``tf.DType`` (name, numpy type, kind,
limits) and the enum GraphDef and model.json name it by.

The enum values are TF's ``types.proto`` DataType numbers; model.json spells them ``DT_FLOAT``.
bfloat16's numpy type is ml_dtypes' (JAX's and TF's own); a fold reads its values widened to float32
(``noxla.graph.ops.emit``), since NumPy's float checks (``dtype.kind == "f"``) do not see it.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from noxla.errors import NoxlaError

# name: (DataType enum, model.json name, numpy dtype or None)
_TABLE = {
    "float32": (1, "DT_FLOAT", np.float32), "float64": (2, "DT_DOUBLE", np.float64),
    "int32": (3, "DT_INT32", np.int32), "uint8": (4, "DT_UINT8", np.uint8), "int16": (5, "DT_INT16", np.int16),
    "int8": (6, "DT_INT8", np.int8), "string": (7, "DT_STRING", object), "complex64": (8, "DT_COMPLEX64", np.complex64),
    "int64": (9, "DT_INT64", np.int64), "bool": (10, "DT_BOOL", np.bool_),
    "bfloat16": (14, "DT_BFLOAT16", ml_dtypes.bfloat16), "uint16": (17, "DT_UINT16", np.uint16),
    "complex128": (18, "DT_COMPLEX128", np.complex128),
    "float16": (19, "DT_HALF", np.float16), "resource": (20, "DT_RESOURCE", None), "variant": (21, "DT_VARIANT", None),
    "uint32": (22, "DT_UINT32", np.uint32), "uint64": (23, "DT_UINT64", np.uint64),
}


class Uncovered(NoxlaError):
    """A use of ``tf`` the graph does not record (yet): the export takes the TensorFlow path. A
    NoxlaError so that the interpreter passes it on as it is (it wraps other errors as bugs)."""


class DType:
    """One TF dtype, compared by name (``tf.float32 == recorder.float32`` never meets: one
    lowering uses one of them)."""
    __slots__ = ("name", "as_datatype_enum", "json_name", "_numpy")

    def __init__(self, name: str):
        self.name = name
        self.as_datatype_enum, self.json_name, self._numpy = _TABLE[name]

    @property
    def as_numpy_dtype(self):
        if self._numpy is None:
            raise Uncovered(f"dtype {self.name} has no numpy type in the graph")
        return self._numpy

    @property
    def base_dtype(self) -> "DType":
        return self

    @property
    def is_floating(self) -> bool:
        return self.name in ("float16", "bfloat16", "float32", "float64")

    @property
    def is_integer(self) -> bool:
        return self.name.startswith(("int", "uint"))

    @property
    def is_unsigned(self) -> bool:
        return self.name.startswith("uint") or self.name == "bool"

    @property
    def is_complex(self) -> bool:
        return self.name.startswith("complex")

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"

    @property
    def is_numeric(self) -> bool:
        return self.is_floating or self.is_integer or self.is_complex

    @property
    def size(self) -> int:
        return np.dtype(self.as_numpy_dtype).itemsize

    @property
    def min(self):   # ml_dtypes.finfo: NumPy's does not know bfloat16
        return ml_dtypes.finfo(self.as_numpy_dtype).min if self.is_floating else np.iinfo(self.as_numpy_dtype).min

    @property
    def max(self):
        return ml_dtypes.finfo(self.as_numpy_dtype).max if self.is_floating else np.iinfo(self.as_numpy_dtype).max

    def __eq__(self, other) -> bool:
        if isinstance(other, DType):
            return other.name == self.name
        if isinstance(other, str):
            return other == self.name
        try:
            return self._numpy is not None and np.dtype(other) == np.dtype(self._numpy)
        except TypeError:
            return False

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"graph.{self.name}"


DTYPES = {name: DType(name) for name in _TABLE}
BY_JSON = {d.json_name: d for d in DTYPES.values()}


def as_dtype(value) -> DType:
    """``tf.as_dtype``: a DType from a DType, a name, a numpy dtype or type."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    if getattr(value, "name", None) in DTYPES and not isinstance(value, (type, np.dtype)):
        return DTYPES[value.name]  # a tf.DType
    try:
        name = np.dtype(value).name
    except TypeError:
        raise Uncovered(f"as_dtype({value!r})") from None
    if name == "object":
        return DTYPES["string"]
    if name not in DTYPES:
        raise Uncovered(f"dtype {name}")
    return DTYPES[name]
