"""The ``tf`` the rules see while a program is recorded into a graph (``recorder()``): each
``tf.<name>`` they call maps to the raw op TF emits for it, with TF's semantics for the uses the
rules make. A name not listed here raises ``Uncovered`` naming it, and the export takes the
TensorFlow path instead."""
from __future__ import annotations

import functools

import numpy as np

from noxla.graph import control_flow, converter_ops, core, nn, ops
from noxla.graph import elementwise as ew
from noxla.graph import structural as st
from noxla.graph.convert import convert_to_tensor
from noxla.graph.core import Tensor, TensorShape
from noxla.graph.dtypes import DTYPES, DType, Uncovered, as_dtype


class Namespace:
    """A ``tf`` module: listed names, ``Uncovered`` for the rest."""

    def __init__(self, path: str, names: dict):
        self._path, self._names = path, names

    def __getattr__(self, name: str):
        try:
            return self._names[name]
        except KeyError:
            raise Uncovered(f"{self._path}.{name}") from None

    def __repr__(self) -> str:
        return f"<noxla graph recorder {self._path}>"


def _binary(op):
    return lambda x, y, name=None: ew.binary(op, x, y, name)


def _compare(op):
    return lambda x, y, name=None: ew.compare(op, x, y, name)


def _unary(op):
    return lambda x, name=None: ew.unary(op, x, name)


def _reduce(op):
    def reduce(input_tensor, axis=None, keepdims=False, name=None):
        return st.reduce(op, input_tensor, axis, keepdims, name)
    return reduce


def _round(x, name=None):
    x = convert_to_tensor(x)
    return x if x.dtype.is_integer else ew.unary("Round", x, name)


def _abs(x, name=None):
    x = convert_to_tensor(x)
    if x.dtype.is_complex:
        raise Uncovered("tf.abs of complex values (ComplexAbs)")
    return ew.unary("Abs", x, name)


def _clip_by_value(t, clip_value_min, clip_value_max, name=None):
    t = convert_to_tensor(t)
    return ew.binary("Maximum", ew.binary("Minimum", t, clip_value_max), clip_value_min)


def _logical_and(x, y, name=None):
    return ew.binary("LogicalAnd", x, y, name)


def _and(x, y):
    x, y = ew.operands(x, y)
    return ew.binary("LogicalAnd" if x.dtype.is_bool else "BitwiseAnd", x, y)


def _or(x, y):
    x, y = ew.operands(x, y)
    return ew.binary("LogicalOr" if x.dtype.is_bool else "BitwiseOr", x, y)


def _xor(x, y):
    x, y = ew.operands(x, y)
    if x.dtype.is_bool:  # TF's logical_xor: (x | y) & ~(x & y)
        return ew.binary("LogicalAnd", ew.binary("LogicalOr", x, y), ew.unary("LogicalNot", ew.binary(
            "LogicalAnd", x, y)))
    return ew.binary("BitwiseXor", x, y)


def _invert(x):
    x = convert_to_tensor(x)
    return ew.unary("LogicalNot" if x.dtype.is_bool else "Invert", x)


def _get_static_value(tensor, partial=False):
    if isinstance(tensor, Tensor):
        return tensor.constant
    return tensor


def _executing_eagerly() -> bool:
    return False


def _name_scope(name, *args, **kwargs):
    return ops.current().name_scope(name)


def _zeros_like(input, dtype=None, name=None):
    return st.filled_like(input, 0, dtype)


def _ones_like(input, dtype=None, name=None):
    return st.filled_like(input, 1, dtype)


def _zeros(shape, dtype=DTYPES["float32"], name=None):
    return st.filled_shape(shape, 0, dtype)


def _ones(shape, dtype=DTYPES["float32"], name=None):
    return st.filled_shape(shape, 1, dtype)


def _constant(value, dtype=None, shape=None, name="Const"):
    if shape is not None:
        raise Uncovered("tf.constant with shape=")
    if isinstance(value, Tensor):
        raise Uncovered("tf.constant of a graph tensor")
    return convert_to_tensor(value, dtype)


def _uncovered(name):
    def fail(*args, **kwargs):
        raise Uncovered(name)
    return fail


def _broadcast_dynamic_shape(shape_x, shape_y):
    """TF's BroadcastArgs of two shapes known when recorded: folded, as grappler folds it."""
    x, y = convert_to_tensor(shape_x), convert_to_tensor(shape_y)
    if x.constant is None or y.constant is None:
        raise Uncovered("tf.broadcast_dynamic_shape of sizes known only at run time")
    return ops.constant(np.array(np.broadcast_shapes(tuple(x.constant), tuple(y.constant)), x.constant.dtype))


class _NoVariable:
    """``tf.Variable`` for ``isinstance`` checks: a recorded graph holds none."""


_MATH = {
    "add": _binary("AddV2"), "subtract": _binary("Sub"), "multiply": _binary("Mul"), "divide": ew.truediv,
    "truediv": ew.truediv, "floordiv": _binary("FloorDiv"), "floormod": _binary("FloorMod"),
    "maximum": _binary("Maximum"), "minimum": _binary("Minimum"), "pow": _binary("Pow"),
    "squared_difference": _binary("SquaredDifference"), "atan2": _binary("Atan2"),
    "equal": _compare("Equal"), "not_equal": _compare("NotEqual"), "less": _compare("Less"),
    "less_equal": _compare("LessEqual"), "greater": _compare("Greater"), "greater_equal": _compare("GreaterEqual"),
    "logical_and": _logical_and, "logical_or": _binary("LogicalOr"), "logical_not": _unary("LogicalNot"),
    "negative": _unary("Neg"), "abs": _abs, "sign": _unary("Sign"), "square": _unary("Square"),
    "sqrt": _unary("Sqrt"), "rsqrt": _unary("Rsqrt"), "exp": _unary("Exp"), "log": _unary("Log"),
    "log1p": _unary("Log1p"), "expm1": _unary("Expm1"), "sin": _unary("Sin"), "cos": _unary("Cos"),
    "tan": _unary("Tan"), "atan": _unary("Atan"), "asin": _unary("Asin"), "acos": _unary("Acos"),
    "tanh": _unary("Tanh"), "sigmoid": _unary("Sigmoid"), "floor": _unary("Floor"), "ceil": _unary("Ceil"),
    "round": _round, "reciprocal": _unary("Reciprocal"), "erf": _unary("Erf"), "erfc": _unary("Erfc"),
    "sinh": _unary("Sinh"), "cosh": _unary("Cosh"), "asinh": _unary("Asinh"), "acosh": _unary("Acosh"),
    "atanh": _unary("Atanh"),
    "is_finite": lambda x, name=None: ew.predicate("IsFinite", x, name),
    "is_inf": lambda x, name=None: ew.predicate("IsInf", x, name),
    "is_nan": lambda x, name=None: ew.predicate("IsNan", x, name),
    "reduce_sum": _reduce("Sum"), "reduce_prod": _reduce("Prod"), "reduce_max": _reduce("Max"),
    "reduce_min": _reduce("Min"), "reduce_mean": _reduce("Mean"), "reduce_any": _reduce("Any"),
    "reduce_all": _reduce("All"), "cumsum": st.cumsum, "argmax": st.argmax, "top_k": st.top_k,
    "real": ew.complex_part("Real"), "imag": ew.complex_part("Imag"),
}
_TOP = {name: _MATH[name] for name in (
    "add", "subtract", "multiply", "divide", "truediv", "floordiv", "maximum", "minimum", "pow", "equal", "not_equal",
    "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "negative", "abs",
    "sign", "square", "sqrt", "exp", "sin", "cos", "tan", "atan", "tanh", "sigmoid", "floor", "round",
    "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_mean", "reduce_any", "reduce_all", "cumsum",
    "atan2", "argmax")}
_NN = {"relu": nn.relu, "relu6": nn.relu6, "elu": nn.elu, "leaky_relu": nn.leaky_relu, "gelu": nn.gelu,
       "sigmoid": _unary("Sigmoid"), "tanh": _unary("Tanh"), "softmax": nn.softmax, "log_softmax": nn.log_softmax,
       "bias_add": nn.bias_add, "conv2d": nn.conv2d, "depthwise_conv2d": nn.depthwise_conv2d,
       "conv2d_transpose": nn.conv2d_transpose, "max_pool2d": nn.max_pool2d, "avg_pool2d": nn.avg_pool2d,
       "conv3d": nn.conv3d}
_LINALG = {"matmul": nn.matmul}
_ARRAY = {
    "where": ew.where, "cast": ew.cast, "constant": _constant, "convert_to_tensor": convert_to_tensor,
    "reshape": st.reshape, "transpose": st.transpose, "expand_dims": st.expand_dims, "squeeze": st.squeeze,
    "identity": st.identity, "concat": st.concat, "stack": st.stack, "unstack": st.unstack, "split": st.split,
    "gather": st.gather, "gather_nd": st.gather_nd, "scatter_nd": st.scatter_nd, "broadcast_to": st.broadcast_to,
    "fill": st.fill, "while_loop": control_flow.while_loop, "cond": control_flow.cond,
    "zeros_like": _zeros_like, "ones_like": _ones_like, "zeros": _zeros, "ones": _ones, "shape": st.shape,
    "size": st.size,
    "range": st.range_, "slice": st.slice_, "strided_slice": st.strided_slice, "pad": st.pad,
    "reverse": st.reverse, "tile": st.tile, "clip_by_value": _clip_by_value, "matmul": nn.matmul,
    "bitcast": ew.bitcast, "broadcast_dynamic_shape": _broadcast_dynamic_shape,
    "get_static_value": _get_static_value, "executing_eagerly": _executing_eagerly, "name_scope": _name_scope,
    "as_dtype": as_dtype, "DType": DType, "Tensor": Tensor, "Variable": _NoVariable, "TensorShape": TensorShape,
}

core.OPERATORS.update({
    "add": _binary("AddV2"), "sub": _binary("Sub"), "mul": _binary("Mul"), "truediv": ew.truediv,
    "floordiv": _binary("FloorDiv"), "mod": _binary("FloorMod"), "pow": _binary("Pow"),
    "and": _and, "or": _or, "xor": _xor, "lt": _compare("Less"), "le": _compare("LessEqual"),
    "gt": _compare("Greater"), "ge": _compare("GreaterEqual"), "matmul": nn.matmul, "getitem": st.getitem,
    "neg": _unary("Neg"), "invert": _invert, "abs": _abs,
    "eq": lambda x, y: ew.tensor_equals("Equal", x, y), "ne": lambda x, y: ew.tensor_equals("NotEqual", x, y),
})


def _set_shape(tensor: Tensor, shape) -> None:
    """tf.Tensor.set_shape: a check that ``shape`` fits the tensor's, and a size the recorder left
    unknown (None) refined to ``shape``'s, as TF's shape inference refines it (a loop's carry)."""
    dims = getattr(shape, "dims", shape)
    if dims is None:
        return
    dims = [getattr(d, "value", d) for d in dims]
    known = tensor.shape.dims
    if len(dims) != tensor.ndim or any(d is not None and e is not None and d != e for d, e in zip(dims, known)):
        raise ValueError(f"Tensor's shape {list(known)} is not compatible with {list(dims)}")
    refined = tuple(e if e is not None else d for d, e in zip(dims, known))
    if refined != tuple(known):
        dtype, _ = tensor.node.outputs[tensor.index]
        tensor.node.outputs[tensor.index] = (dtype, refined)


core.TENSOR_METHODS.setdefault("set_shape", _set_shape)


@functools.lru_cache(maxsize=None)
def recorder() -> Namespace:
    """The ``tf`` stand-in (one per process: it holds no state; the graph is the current one)."""
    graph_ns = Namespace("tf.compat.v1", {"get_default_graph": ops.current})
    return Namespace("tf", {
        **_ARRAY, **_TOP, **DTYPES,
        "math": Namespace("tf.math", _MATH), "nn": Namespace("tf.nn", _NN),
        "linalg": Namespace("tf.linalg", _LINALG),
        "dtypes": Namespace("tf.dtypes", {**DTYPES, "as_dtype": as_dtype, "DType": DType}),
        "compat": Namespace("tf.compat", {"v1": graph_ns}),
        "raw_ops": Namespace("tf.raw_ops", {"Snapshot": st.snapshot}),
        "xla_ops": Namespace("gen_xla_ops", converter_ops.NAMESPACE),   # lazy_tensorflow.xla_ops
    })
