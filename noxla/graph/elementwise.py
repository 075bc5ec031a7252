"""Elementwise TF functions on the graph: the raw op each emits, its NumPy fold, and TF's
conversion of the operands (the second operand, and a Python first one, take the dtype of the
first tensor, as TF's op wrappers convert them)."""
from __future__ import annotations

import numpy as np

from noxla.graph import ops
from noxla.graph.convert import convert_to_tensor
from noxla.graph.core import Tensor
from noxla.graph.dtypes import DTYPES, Uncovered


def _no_nan(*values) -> bool:
    return not any(v.dtype.kind in "fc" and np.isnan(v).any() for v in values)


def _floor_mod(x, y):
    if x.dtype.kind in "iu":
        return None if (y == 0).any() else np.mod(x, y)
    trunc = np.fmod(x, y)  # TF's FloorMod for floats: fmod, moved by y where the signs differ
    return np.where((trunc != 0) & ((x < 0) != (y < 0)), trunc + y, trunc)


def _floor_div(x, y):
    if x.dtype.kind in "iu":
        return None if (y == 0).any() else np.floor_divide(x, y)
    return np.floor(x / y)  # TF's float FloorDiv is floor(x / y), not NumPy's fmod-based one


def _portable(fn):
    """``fn`` folded in long double and rounded back. NumPy picks its float16/32/64 loops for exp,
    log, tanh, sin, cos ... by the CPU's instruction set (AVX2, AVX-512 and the baseline give
    different last bits: measured in float32), and a folded value is written into the file; long
    double's loops are scalar C library code with no such dispatch, so the file is the same on
    every x86 CPU (``tests/test_cpu_independence.py``), and its values nearly always correctly rounded."""
    def fold(*xs):
        return fn(*(x.astype(np.longdouble) for x in xs)).astype(xs[0].dtype)
    return fold


def _int_pow(x, y):
    if x.dtype.kind in "iu":
        return None if (y < 0).any() else np.power(x, y)
    return _portable(np.power)(x, y)


# op: (NumPy fold or None, dtypes the op is recorded for: "f" floats, "i" ints, "b" bool)
BINARY = {
    "AddV2": (np.add, "fi"), "Sub": (np.subtract, "fi"), "Mul": (np.multiply, "fi"),
    "RealDiv": (np.divide, "f"), "FloorDiv": (_floor_div, "fi"), "FloorMod": (_floor_mod, "fi"),
    "Maximum": (lambda x, y: np.maximum(x, y) if _no_nan(x, y) else None, "fi"),
    "Minimum": (lambda x, y: np.minimum(x, y) if _no_nan(x, y) else None, "fi"),
    "Pow": (_int_pow, "fi"), "SquaredDifference": (lambda x, y: np.square(x - y), "fi"),
    "Atan2": (np.arctan2, "f"),
    "LogicalAnd": (np.logical_and, "b"), "LogicalOr": (np.logical_or, "b"),
    "BitwiseAnd": (np.bitwise_and, "i"), "BitwiseOr": (np.bitwise_or, "i"), "BitwiseXor": (np.bitwise_xor, "i"),
}
COMPARE = {"Equal": np.equal, "NotEqual": np.not_equal, "Less": np.less, "LessEqual": np.less_equal,
           "Greater": np.greater, "GreaterEqual": np.greater_equal}
UNARY = {
    "Neg": (np.negative, "fi"), "Abs": (np.abs, "fi"), "Sign": (np.sign, "fi"), "Square": (np.square, "fi"),
    "Sqrt": (np.sqrt, "f"), "Rsqrt": (lambda x: 1 / np.sqrt(x), "f"), "Exp": (np.exp, "f"), "Log": (np.log, "f"),
    "Log1p": (np.log1p, "f"), "Expm1": (np.expm1, "f"), "Sin": (np.sin, "f"), "Cos": (np.cos, "f"),
    "Tan": (np.tan, "f"), "Atan": (np.arctan, "f"), "Asin": (np.arcsin, "f"), "Acos": (np.arccos, "f"),
    "Tanh": (np.tanh, "f"), "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), "f"), "Floor": (np.floor, "f"),
    "Ceil": (np.ceil, "f"), "Round": (np.round, "f"), "Reciprocal": (lambda x: 1 / x, "f"),
    "Erf": (None, "f"), "Erfc": (None, "f"), "Sinh": (np.sinh, "f"), "Cosh": (np.cosh, "f"),
    "Asinh": (np.arcsinh, "f"), "Acosh": (np.arccosh, "f"), "Atanh": (np.arctanh, "f"),
    "Relu": (lambda x: np.maximum(x, 0) if _no_nan(x) else None, "fi"),
    "Relu6": (lambda x: np.minimum(np.maximum(x, 0), 6) if _no_nan(x) else None, "fi"),
    "Elu": (None, "f"), "Selu": (None, "f"), "Softplus": (None, "f"),
    "LogicalNot": (np.logical_not, "b"), "Invert": (np.invert, "i"),
}
# Folded in long double (``_portable``): the functions NumPy computes with CPU-picked loops.
_TRANSCENDENTAL = {"Exp", "Log", "Log1p", "Expm1", "Sin", "Cos", "Tan", "Atan", "Asin", "Acos", "Tanh", "Sigmoid",
                   "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Atan2"}
BINARY, UNARY = ({op: (_portable(fold) if op in _TRANSCENDENTAL else fold, kinds)
                  for op, (fold, kinds) in table.items()} for table in (BINARY, UNARY))
PREDICATES = {"IsFinite": np.isfinite, "IsInf": np.isinf, "IsNan": np.isnan}


def _kind(dtype) -> str:
    return "b" if dtype.is_bool else "f" if dtype.is_floating else "i" if dtype.is_integer else "c"


def _check(op: str, dtype, kinds: str) -> None:
    # TF's bfloat16 SquaredDifference rounds the difference, then its square: not the fold's one rounding.
    if (dtype.name == "bfloat16" and op == "SquaredDifference") or _kind(dtype) not in kinds:
        raise Uncovered(f"{op} on {dtype.name}")


def operands(x, y):
    """Both as tensors of one dtype, converted as TF's binary op wrappers convert them."""
    if isinstance(x, Tensor):
        return x, convert_to_tensor(y, dtype=x.dtype)
    if isinstance(y, Tensor):
        return convert_to_tensor(x, dtype=y.dtype), y
    x = convert_to_tensor(x)
    return x, convert_to_tensor(y, dtype=x.dtype)


def _broadcast(op, x: Tensor, y: Tensor) -> tuple:
    try:
        return ops.broadcast_shapes(x.shape.dims, y.shape.dims)
    except ValueError:
        raise ValueError(f"{op}: incompatible shapes {x.shape} and {y.shape}") from None


def binary(op: str, x, y, name=None) -> Tensor:
    x, y = operands(x, y)
    fold, kinds = BINARY[op]
    _check(op, x.dtype, kinds)
    attrs = {} if op.startswith("Logical") else {"T": ops.type_attr(x.dtype)}
    return ops.emit1(op, [x, y], attrs, x.dtype, _broadcast(op, x, y), fold, name)


def compare(op: str, x, y, name=None, incompatible_shape_error: bool = True) -> Tensor:
    x, y = operands(x, y)
    _check(op, x.dtype, "fib" if op in ("Equal", "NotEqual") else "fi")
    attrs = {"T": ops.type_attr(x.dtype)}
    if op in ("Equal", "NotEqual"):
        attrs["incompatible_shape_error"] = ops.bool_attr(incompatible_shape_error)
    return ops.emit1(op, [x, y], attrs, DTYPES["bool"], _broadcast(op, x, y), COMPARE[op], name)


def unary(op: str, x, name=None) -> Tensor:
    x = convert_to_tensor(x)
    fold, kinds = UNARY[op]
    _check(op, x.dtype, kinds)
    attrs = {} if op == "LogicalNot" else {"T": ops.type_attr(x.dtype)}
    return ops.emit1(op, [x], attrs, x.dtype, x.shape.dims, fold, name)


def predicate(op: str, x, name=None) -> Tensor:
    x = convert_to_tensor(x)
    _check(op, x.dtype, "f")
    return ops.emit1(op, [x], {"T": ops.type_attr(x.dtype)}, DTYPES["bool"], x.shape.dims, PREDICATES[op], name)


def truediv(x, y, name=None) -> Tensor:
    x, y = operands(x, y)
    if not x.dtype.is_floating:  # TF casts integers to float64 (int32) or float32 (int8/16) first
        raise Uncovered(f"tf.math.truediv on {x.dtype.name}")
    return binary("RealDiv", x, y, name)


def where(condition, x=None, y=None, name=None) -> Tensor:
    if x is None or y is None:
        raise Uncovered("tf.where with one argument (Where)")
    condition = convert_to_tensor(condition, dtype=DTYPES["bool"])
    x, y = operands(x, y)
    try:
        shape = ops.broadcast_shapes(condition.shape.dims, x.shape.dims, y.shape.dims)
    except ValueError:
        raise ValueError(f"SelectV2: incompatible shapes {condition.shape}, {x.shape}, {y.shape}") from None
    return ops.emit1("SelectV2", [condition, x, y], {"T": ops.type_attr(x.dtype)}, x.dtype, shape,
                     lambda c, a, b: np.where(c, a, b), name)


def cast(x, dtype, name=None) -> Tensor:
    from noxla.graph.dtypes import as_dtype
    dtype = as_dtype(dtype)
    x = convert_to_tensor(x)
    if x.dtype == dtype:
        return x
    if x.dtype.is_complex or dtype.is_complex:
        raise Uncovered(f"tf.cast from {x.dtype.name} to {dtype.name}")

    def fold(v):
        if v.dtype.kind == "f" and dtype.is_integer:
            info = np.iinfo(dtype.as_numpy_dtype)  # TF's out-of-range float-to-int casts are the CPU's
            if not np.isfinite(v).all() or (v.size and (v.min() <= info.min - 1 or v.max() >= info.max + 1)):
                return None
        if dtype.is_bool:
            return v != 0
        if v.dtype.kind in "iu" and dtype.is_integer:
            return v.astype(dtype.as_numpy_dtype)  # wraps, as TF's integer casts do
        return v.astype(dtype.as_numpy_dtype)
    attrs = {"SrcT": ops.type_attr(x.dtype), "DstT": ops.type_attr(dtype), "Truncate": ops.bool_attr(False)}
    known = ops.partial(x) if x.dtype.is_integer and dtype.is_integer else None  # TF's partial shapes see through
    return ops.emit1("Cast", [x], attrs, dtype, x.shape.dims, fold, name, partial=known)


def complex_part(op: str):
    """``tf.math.real`` / ``tf.math.imag`` (TF's Real/Imag): a complex program input split into the
    (real, imaginary) pair the rules compute with (``lowering_rules.values.complex_values``)."""
    def part(input, name=None) -> Tensor:
        x = convert_to_tensor(input)
        if not x.dtype.is_complex:
            raise Uncovered(f"tf.math.{op.lower()} of {x.dtype.name} values")
        dtype = DTYPES["float32" if x.dtype.name == "complex64" else "float64"]
        attrs = {"T": ops.type_attr(x.dtype), "Tout": ops.type_attr(dtype)}
        fold = np.real if op == "Real" else np.imag
        return ops.emit1(op, [x], attrs, dtype, x.shape.dims, lambda v: np.array(fold(v)), name)
    return part


def bitcast(input, type, name=None) -> Tensor:
    """``tf.bitcast`` between types of one size (the rules read a float32's or a float16's bits): the
    shape kept. Between sizes TF's Bitcast adds or drops a last axis: not recorded."""
    from noxla.graph.dtypes import as_dtype
    dtype, x = as_dtype(type), convert_to_tensor(input)
    # bfloat16: a fold reads it widened to float32 (``ops.emit``), not its bits.
    if x.dtype.size != dtype.size or "bfloat16" in (x.dtype.name, dtype.name) or x.dtype.is_complex \
            or dtype.is_complex or x.dtype.is_bool or dtype.is_bool:
        raise Uncovered(f"tf.bitcast from {x.dtype.name} to {dtype.name}")
    attrs = {"T": ops.type_attr(x.dtype), "type": ops.type_attr(dtype)}
    return ops.emit1("Bitcast", [x], attrs, dtype, x.shape.dims,
                     lambda v: np.array(v).view(dtype.as_numpy_dtype), name)   # np.array: a contiguous copy, 0-D kept


def tensor_equals(op: str, x: Tensor, y):
    """``x == y`` / ``x != y`` as TF 2's tensors compute them: elementwise (Equal/NotEqual without the
    shape error) when ``y`` converts to ``x``'s dtype and the shapes broadcast, else identity."""
    if y is None:
        return op == "NotEqual"
    try:
        x, y = operands(x, y)
        ops.broadcast_shapes(x.shape.dims, y.shape.dims)
    except (TypeError, ValueError):
        return (x is y) == (op == "Equal")
    return compare(op, x, y, incompatible_shape_error=False)
