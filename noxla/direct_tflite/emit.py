"""JAX primitives as TFLite operators, one emitter per primitive, without TensorFlow.

The walk inlines calls (``jit``, ``custom_jvp_call``, ...), folds every equation whose operands are
all constants (JAX evaluates it, so a folded value is JAX's own), and keeps ``broadcast_in_dim``
lazy: its result is the operand reshaped to the output's rank, and elementwise operators broadcast
it as TFLite's do, so that a bias or a batch-norm scale is never materialized at the activation's
size. An equation no emitter covers raises ``Uncovered``: the caller then takes the TF path."""
from __future__ import annotations

import functools
import inspect
import math
from typing import Callable

import jax
import numpy as np

from lowering_rules.jax_compat import core
from lowering_rules.vocabulary import is_key_dtype, rule_params
from noxla.graph.tflite.model import Graph, Tensor, Uncovered, splat_as_scalar

EMITTERS: dict[str, Callable] = {}


def emitter(*names: str):
    def register(fn):
        for name in names:
            EMITTERS[name] = fn
        return fn
    return register


@functools.cache   # once per emitter, not once per equation
def _understood(fn) -> set | None:
    """The parameters an emitter names (None: it takes any, as the table-made ones do)."""
    kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return None
    return {n for n, p in inspect.signature(fn).parameters.items() if p.kind == inspect.Parameter.KEYWORD_ONLY}


# Calls whose body is inlined (the parameter holding it).
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
          "remat": "jaxpr", "checkpoint": "jaxpr"}
_IDENTITY = {"stop_gradient", "optimization_barrier", "copy", "copy_p"}
# Elementwise primitives: folded on operands broadcast to their common (small) shape only.
_ELEMENTWISE = {"add", "sub", "mul", "div", "max", "min", "neg", "exp", "log", "tanh", "logistic", "sqrt",
                "rsqrt", "abs", "sin", "cos", "pow", "integer_pow", "square", "convert_element_type",
                "erf", "sign", "floor", "ceil", "round", "log1p", "expm1", "eq", "ne", "lt", "le", "gt", "ge",
                "select_n", "and", "or", "not", "rem", "atan2", "exp2", "is_finite", "nextafter", "clamp"}


def lower_program(closed_jaxpr, in_names, out_names) -> Graph:
    if not all(isinstance(d, int) for v in closed_jaxpr.jaxpr.invars for d in v.aval.shape):
        raise Uncovered("symbolic input dimensions")
    if any(is_key_dtype(v.aval.dtype) for v in (*closed_jaxpr.jaxpr.invars, *closed_jaxpr.jaxpr.outvars)):
        raise Uncovered("PRNG keys")
    if any(v.aval.dtype == np.bool_ for v in (*closed_jaxpr.jaxpr.invars, *closed_jaxpr.jaxpr.outvars)):
        # run-time booleans only between the writer's comparisons and selects: the TF path's rules
        # carry other booleans as int32 (TF.js's wasm mixes them up)
        raise Uncovered("bool inputs or outputs")
    graph = Graph()
    inputs = []
    for var, name in zip(closed_jaxpr.jaxpr.invars, in_names):
        t = Tensor(tuple(var.aval.shape), np.dtype(var.aval.dtype), name=name)
        graph.inputs.append(t)
        inputs.append(t)
    consts = [graph.constant(np.asarray(c)) for c in closed_jaxpr.consts]
    outs = _walk(graph, closed_jaxpr.jaxpr, consts, inputs)
    # An output that is a constant, an input or another output is declined once fused (``fuse``).
    graph.outputs = [full(graph, t, var.aval.shape) for t, var in zip(outs, closed_jaxpr.jaxpr.outvars)]
    # In key order, as the TF path's converter writes a function's outputs.
    order = sorted(range(len(out_names)), key=lambda i: out_names[i])
    graph.outputs = [graph.outputs[i] for i in order]
    graph.in_names, graph.out_names = list(in_names), [out_names[i] for i in order]
    return graph


def _walk(graph: Graph, jaxpr, consts, args) -> list:
    values: dict = {}

    def read(atom):
        if isinstance(atom, core.Literal):
            return graph.constant(np.asarray(atom.val, dtype=atom.aval.dtype))
        return values[atom]

    for var, value in zip(jaxpr.constvars, consts):
        values[var] = value
    for var, value in zip(jaxpr.invars, args):
        values[var] = value
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if any(is_key_dtype(v.aval.dtype) for v in eqn.outvars):   # carried as words by the TF path's rules
            raise Uncovered(f"{name} of PRNG keys")
        operands = [read(a) for a in eqn.invars]
        if name in _CALLS:
            body = eqn.params[_CALLS[name]]
            inner, inner_consts = (body.jaxpr, [graph.constant(np.asarray(c)) for c in body.consts]) \
                if hasattr(body, "consts") else (body, [])
            outs = _walk(graph, inner, inner_consts, operands)
        elif name in _IDENTITY:
            outs = operands
        elif all(t.is_constant for t in operands):
            outs = _fold(graph, eqn, operands)
        elif name in EMITTERS:
            params = rule_params(eqn.params)
            understood = _understood(EMITTERS[name])
            if understood is not None and not set(params) <= understood:
                raise Uncovered(f"{name} with parameters {sorted(set(params) - understood)}")
            out = EMITTERS[name](graph, eqn, *operands, **params)
            outs = out if isinstance(out, list) else [out]
        else:
            raise Uncovered(f"no direct emitter for {name}")
        for var, value in zip(eqn.outvars, outs):
            values[var] = value
    return [read(a) for a in jaxpr.outvars]


def _in_float64(fn):
    def fold(x, *, accuracy=None):
        if accuracy is not None or x.dtype.kind != "f":
            return None
        with np.errstate(all="ignore"):   # overflow to inf, log(0): the IEEE results JAX gives too
            return fn(x.astype(np.float64))
    return fold


# Folds NumPy computes as JAX does (IEEE-rounded arithmetic and moves of data): JAX would compile each
# distinct one (ResNet-50's batch norms: 32 compilations, 1 s). The rest go to JAX.
_NUMPY_FOLDS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
    "min": np.minimum, "neg": np.negative, "sqrt": np.sqrt, "abs": np.abs,
    # Transcendentals in float64, rounded once: XLA's float32 ones round differently on CPUs without
    # FMA (AVX and older), so folding them there would make the file depend on the exporting CPU. The
    # result may differ from JAX's own by an ulp.
    "rsqrt": _in_float64(lambda x: 1 / np.sqrt(x)), "exp": _in_float64(np.exp), "log": _in_float64(np.log),
    "tanh": _in_float64(np.tanh), "logistic": _in_float64(lambda x: 1 / (1 + np.exp(-x))),
    "sin": _in_float64(np.sin), "cos": _in_float64(np.cos), "log1p": _in_float64(np.log1p),
    "expm1": _in_float64(np.expm1), "erf": _in_float64(np.vectorize(math.erf, otypes=[np.float64])),
    "reshape": lambda x, *, new_sizes, dimensions, **_: x.reshape(new_sizes) if dimensions is None else None,
    "squeeze": lambda x, *, dimensions: np.squeeze(x, tuple(dimensions)),
    "transpose": lambda x, *, permutation: np.transpose(x, permutation),
    "convert_element_type": lambda x, *, new_dtype, **_: x if np.dtype(new_dtype) == x.dtype else None,
    "broadcast_in_dim": lambda x, *, shape, broadcast_dimensions, **_: np.broadcast_to(
        np.expand_dims(x, tuple(d for d in range(len(shape)) if d not in broadcast_dimensions)), shape),
}


def _fold(graph: Graph, eqn, operands) -> list:
    """JAX's own result for an equation of constants (an elementwise one at its operands' common shape)."""
    name = eqn.primitive.name
    if name in _ELEMENTWISE:
        shape = np.broadcast_shapes(*(t.shape for t in operands))
        arrays = [np.broadcast_to(t.data, shape) for t in operands]
    else:
        arrays = [full_array(t, v.aval.shape) for t, v in zip(operands, eqn.invars)]
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    if name in _NUMPY_FOLDS and all(a.dtype == dtype for a in arrays):
        params = rule_params(eqn.params)
        if isinstance(_NUMPY_FOLDS[name], np.ufunc):   # its parameters (mul's out_dtype) unset
            out = _NUMPY_FOLDS[name](*arrays) if not any(v is not None for v in params.values()) else None
        else:
            out = _NUMPY_FOLDS[name](*arrays, **params)
        if out is not None:
            return [graph.constant(np.asarray(out, dtype))]
    with jax.default_device(jax.devices("cpu")[0]):
        outs = eqn.primitive.bind(*arrays, **eqn.params)
    outs = outs if eqn.primitive.multiple_results else [outs]
    return [graph.constant(np.asarray(o)) for o in outs]


def full_array(t: Tensor, shape) -> np.ndarray:
    shape = tuple(shape)
    return t.data if t.data.shape == shape else np.broadcast_to(t.data, shape).copy()


def full(graph: Graph, t: Tensor, shape) -> Tensor:
    """``t`` at ``shape`` (a lazily broadcast value made whole)."""
    shape = tuple(int(d) for d in shape)
    if t.shape == shape:
        return t
    if t.is_constant:
        return graph.constant(full_array(t, shape))
    return graph.add("BROADCAST_TO", [t, graph.constant(np.asarray(shape, np.int32))], shape, t.dtype)


def reshape(graph: Graph, t: Tensor, shape) -> Tensor:
    shape = tuple(int(d) for d in shape)
    if t.shape == shape:
        return t
    if t.is_constant:
        return graph.constant(t.data.reshape(shape))
    return graph.add("RESHAPE", [t, graph.constant(np.asarray(shape, np.int32))], shape, t.dtype)


def out_type(eqn) -> tuple:
    """The first output's shape and NumPy dtype."""
    aval = eqn.outvars[0].aval
    return tuple(aval.shape), np.dtype(aval.dtype)


def _float_or(eqn, int32: bool = False):
    """The output dtype: float32, or int32 where the builtin computes JAX's wrapping int32 result."""
    dtypes = {np.dtype(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars)}
    if dtypes != {np.dtype(np.float32)} and not (int32 and dtypes == {np.dtype(np.int32)}):
        raise Uncovered(f"{eqn.primitive.name} on {' and '.join(sorted(map(str, dtypes)))}")
    return dtypes.pop()


# ----------------------------------------------------------------------------- elementwise

BINARY = {"add": ("ADD", True), "sub": ("SUB", True), "mul": ("MUL", True), "div": ("DIV", False),
          "max": ("MAXIMUM", True), "min": ("MINIMUM", True)}
UNARY = {"neg": "NEG", "abs": "ABS", "tanh": "TANH", "logistic": "LOGISTIC", "sin": "SIN", "cos": "COS",
         "sqrt": "SQRT", "floor": "FLOOR", "ceil": "CEIL",
         # TFLite's kernels differ from JAX on finite inputs here (EXP overflows from 88.4, LOG from
         # 1e38, RSQRT(0) is NaN): emitted only to be fused (softmax's exp), else ``Uncovered`` (fuse).
         "exp": "EXP", "log": "LOG", "rsqrt": "RSQRT"}
# SUM_POOL_2D, a window sum, is no builtin: only its average is (``emit_nn``).
ONLY_FUSED = {"EXP", "LOG", "RSQRT", "SUM_POOL_2D"}
_FUSED = {"ADD", "SUB", "MUL", "DIV"}   # the binary builtins with a fused activation field


def binary(graph: Graph, kind: str, a: Tensor, b: Tensor, dtype) -> Tensor:
    shape = np.broadcast_shapes(a.shape, b.shape)
    options = {"fusedActivationFunction": 0} if kind in _FUSED else {}
    return graph.add(kind, [a, b], shape, dtype, **options)


def _binary_emitter(kind: str, int32: bool):
    def emit(graph, eqn, a, b, *, out_dtype=None):   # out_dtype (mul's wider product): not taken
        if out_dtype is not None:
            raise Uncovered(f"{eqn.primitive.name} into a wider type")
        return binary(graph, kind, a, b, _float_or(eqn, int32))
    return emit


def _unary_emitter(kind: str):
    def emit(graph, eqn, x, *, accuracy=None):
        return graph.add(kind, [x], x.shape, _float_or(eqn))
    return emit


for _name, (_kind, _int32) in BINARY.items():
    EMITTERS[_name] = _binary_emitter(_kind, _int32)
for _name, _kind in UNARY.items():
    EMITTERS[_name] = _unary_emitter(_kind)


# Comparisons of float32 or int32 (NaN compares as IEEE says, in both): booleans, read by selects.
COMPARISONS = {"lt": "LESS", "le": "LESS_EQUAL", "gt": "GREATER", "ge": "GREATER_EQUAL", "eq": "EQUAL",
               "ne": "NOT_EQUAL"}


def _comparison_emitter(kind: str):
    def emit(graph, eqn, a, b):
        if {a.dtype, b.dtype} - {np.dtype(np.float32), np.dtype(np.int32)}:
            raise Uncovered(f"{eqn.primitive.name} on {a.dtype}")   # the TF path widens narrow ones
        return graph.add(kind, [a, b], np.broadcast_shapes(a.shape, b.shape), np.bool_)
    return emit


for _name, _kind in COMPARISONS.items():
    EMITTERS[_name] = _comparison_emitter(_kind)


def select(graph: Graph, which: Tensor, if_true: Tensor, if_false: Tensor, dtype) -> Tensor:
    """``SELECT`` where the three shapes agree, else the broadcasting ``SELECT_V2``, as the
    converter writes TF's ``SelectV2``; a float constant of one value is read as a scalar, as it
    writes one (``jnp.where(x > 0, x, 0.0)``; an int32 one it keeps whole)."""
    if_true, if_false = splat_as_scalar(graph, if_true), splat_as_scalar(graph, if_false)
    shapes = {which.shape, if_true.shape, if_false.shape}
    shape = np.broadcast_shapes(*shapes)
    return graph.add("SELECT" if len(shapes) == 1 else "SELECT_V2", [which, if_true, if_false], shape, dtype)


@emitter("select_n")
def _select_n(graph, eqn, which, *cases):
    if which.dtype != np.bool_ or len(cases) != 2:   # an int32 index: the TF path chains EQUALs
        raise Uncovered("select_n on an index")
    dtype = out_type(eqn)[1]
    if dtype not in (np.float32, np.int32):   # booleans: the TF path selects them as int32
        raise Uncovered(f"select_n of {dtype}")
    return select(graph, which, cases[1], cases[0], dtype)


@emitter("integer_pow")
def _integer_pow(graph, eqn, x, *, y):
    if y not in (2, 3):
        raise Uncovered(f"integer_pow with exponent {y}")
    dtype = _float_or(eqn)
    square = graph.add("MUL", [x, x], x.shape, dtype, fusedActivationFunction=0)
    return square if y == 2 else graph.add("MUL", [square, x], x.shape, dtype, fusedActivationFunction=0)


@emitter("square")
def _square(graph, eqn, x):
    return graph.add("MUL", [x, x], x.shape, _float_or(eqn), fusedActivationFunction=0)


@emitter("convert_element_type")
def _convert(graph, eqn, x, *, new_dtype, weak_type):
    if np.dtype(new_dtype) != x.dtype:
        raise Uncovered(f"convert_element_type from {x.dtype} to {np.dtype(new_dtype)}")
    return x


# ----------------------------------------------------------------------------- structure

@emitter("reshape")
def _reshape(graph, eqn, x, *, new_sizes, dimensions):
    if dimensions is not None:
        raise Uncovered("reshape with dimensions")
    return reshape(graph, full(graph, x, eqn.invars[0].aval.shape), new_sizes)


@emitter("squeeze")
def _squeeze(graph, eqn, x, *, dimensions):
    return reshape(graph, full(graph, x, eqn.invars[0].aval.shape), eqn.outvars[0].aval.shape)


@emitter("broadcast_in_dim")
def _broadcast_in_dim(graph, eqn, x, *, shape, broadcast_dimensions):
    aligned = [1] * len(shape)
    for d, size in zip(broadcast_dimensions, x.shape):
        aligned[d] = size
    return reshape(graph, x, aligned)   # broadcast lazily, by the operators that read it


def permuted(graph: Graph, t: Tensor, permutation) -> Tensor:
    """``t`` with its axes in the order ``permutation`` names (``fuse`` joins transposes of transposes)."""
    permutation = tuple(int(a) for a in permutation)
    if permutation == tuple(range(len(t.shape))):
        return t
    if t.is_constant:
        return graph.constant(np.ascontiguousarray(np.transpose(t.data, permutation)))
    shape = tuple(t.shape[a] for a in permutation)
    return graph.add("TRANSPOSE", [t, graph.constant(np.asarray(permutation, np.int32))], shape, t.dtype)


@emitter("transpose")
def _transpose(graph, eqn, x, *, permutation):
    return permuted(graph, full(graph, x, eqn.invars[0].aval.shape), permutation)


@emitter("pad")
def _pad(graph, eqn, x, value, *, padding_config):
    if any(lo < 0 or hi < 0 or interior for lo, hi, interior in padding_config):
        raise Uncovered("pad with negative or interior padding")
    x = full(graph, x, eqn.invars[0].aval.shape)
    shape, dtype = out_type(eqn)
    pads = graph.constant(np.asarray([(lo, hi) for lo, hi, _ in padding_config], np.int32))
    if not value.is_constant:
        raise Uncovered("pad with a run-time padding value")
    if float(value.data) == 0 and not np.signbit(value.data):   # PAD fills with +0.0
        return graph.add("PAD", [x, pads], shape, dtype)
    return graph.add("PADV2", [x, pads, graph.constant(np.asarray(value.data, dtype).reshape(()))], shape, dtype)


_REDUCERS = {"reduce_sum": "SUM", "reduce_max": "REDUCE_MAX", "reduce_min": "REDUCE_MIN"}


@emitter(*_REDUCERS)
def _reduce(graph, eqn, x, *, axes):
    x = full(graph, x, eqn.invars[0].aval.shape)
    shape, dtype = out_type(eqn)
    _float_or(eqn, int32=True)
    axes_t = graph.constant(np.asarray(axes, np.int32))
    return graph.add(_REDUCERS[eqn.primitive.name], [x, axes_t], shape, dtype, keepDims=False)


@emitter("concatenate")
def _concatenate(graph, eqn, *xs, dimension):
    shape, dtype = out_type(eqn)
    _float_or(eqn, int32=True)
    xs = [full(graph, x, v.aval.shape) for x, v in zip(xs, eqn.invars)]
    return graph.add("CONCATENATION", xs, shape, dtype, axis=dimension, fusedActivationFunction=0)


@emitter("slice")
def _slice(graph, eqn, x, *, start_indices, limit_indices, strides):
    x = full(graph, x, eqn.invars[0].aval.shape)
    shape, dtype = out_type(eqn)
    begin = graph.constant(np.asarray(start_indices, np.int32))
    if strides is None or all(s == 1 for s in strides):
        return graph.add("SLICE", [x, begin, graph.constant(np.asarray(shape, np.int32))], shape, dtype)
    return graph.add("STRIDED_SLICE", [x, begin, graph.constant(np.asarray(limit_indices, np.int32)),
                                       graph.constant(np.asarray(strides, np.int32))], shape, dtype,
                     beginMask=0, endMask=0, ellipsisMask=0, newAxisMask=0, shrinkAxisMask=0, offset=False)
