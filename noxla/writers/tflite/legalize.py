"""noxla's graph of TF ops legalized into LiteRT builtins, as TF's converter legalizes a frozen
GraphDef: one node at a time into the builtin (or builtins) that compute what the TF op computes,
in the forms ``fuse`` reads (a convolution or product with a zero bias that a following bias add
or batch-norm scale folds into, binary operators with their fused-activation field).

The rules chose the ops, so the builtins compute what TF's path's converter writes for them: EXP,
LOG and RSQRT appear only where a rule emitted them, having made their operand safe (the direct
writer, which lowers JAX's primitives itself, had to fuse them instead). An op or a form not
listed here (or in ``legalize_nn``: convolutions, pools, products) raises ``Uncovered``: the export
takes another path."""
from __future__ import annotations

import base64
from typing import Callable

import numpy as np

from noxla.graph.core import Node
from noxla.graph.dtypes import Uncovered
from noxla.graph.lower import Recorded
from noxla.writers.tflite.model import SAME, VALID, Graph, Tensor, broadcast_shape, dims, splat_as_scalar

LEGALIZERS: dict[str, Callable] = {}
# Folds tried before a node's legalizer, registered by their modules (``empty``: grappler's folds of
# empty tensors): (graph, node, its inputs, the ids of tensors folds made) -> its outputs, or None.
FOLDS: list[Callable] = []


def legalizer(*ops: str):
    def register(fn):
        for op in ops:
            LEGALIZERS[op] = fn
        return fn
    return register


def legalize(recorded: Recorded) -> Graph:
    """The recorded program as TFLite operators: inputs by name in order, outputs in key order (as
    TF's path's converter writes a function's outputs)."""
    graph = Graph(uint32_moves=True)
    values: dict = {}
    legalize_nodes(graph, recorded.graph.nodes, values, live(recorded.outputs, recorded.inputs, recorded.graph.nodes))
    outputs = [values[(id(t.node), t.index)] for t in recorded.outputs]
    order = sorted(range(len(outputs)), key=lambda i: recorded.out_names[i])
    graph.outputs = [outputs[i] for i in order]
    graph.in_names, graph.out_names = list(recorded.in_names), [recorded.out_names[i] for i in order]
    return graph


def legalize_nodes(graph: Graph, nodes, values: dict, live_ids: set) -> None:
    """Each of ``nodes`` in ``live_ids`` into ``graph``; ``values``: (node id, output) -> Tensor, the
    tensors made so far (a body's arguments, ``control_flow``)."""
    folded: set = set()   # the tensors FOLDS made
    for node in nodes:
        if id(node) not in live_ids or (id(node), 0) in values:
            continue
        if node.op == "Placeholder":
            dtype, shape = node.outputs[0]
            t = Tensor(dims(shape), np.dtype(dtype.as_numpy_dtype), name=node.name)
            graph.inputs.append(t)
            values[(id(node), 0)] = t
            continue
        if node.op == "Const":
            values[(id(node), 0)] = graph.constant(node.value)
            continue
        fn = LEGALIZERS.get(node.op)
        inputs = [values[(id(t.node), t.index)] for t in node.inputs]
        outs = next((o for o in (fold(graph, node, inputs, folded) for fold in FOLDS) if o is not None), None)
        if outs is None and fn is None:
            raise Uncovered(f"TF op {node.op} in the TFLite writer")
        if outs is None:
            outs = fn(graph, node, *inputs)
        for i, out in enumerate(outs if isinstance(outs, list) else [outs]):
            values[(id(node), i)] = out


def live(outputs, inputs, nodes) -> set:
    """The ids of the nodes ``outputs`` and ``inputs`` are made from."""
    found = {id(t.node) for t in (*outputs, *inputs)}
    for node in reversed(nodes):
        if id(node) in found:
            found.update(id(t.node) for t in node.inputs)
    return found


# ----------------------------------------------------------------------------- attributes and helpers

def _attr(node: Node, key: str, default=None):
    value = node.attrs.get(key)
    if value is None:
        return default
    if "b" in value:
        return bool(value["b"])
    if "i" in value:
        return int(value["i"])
    if "f" in value:
        return float(value["f"])
    if "s" in value:
        return base64.b64decode(value["s"]).decode()
    if "list" in value:
        return [int(i) for i in value["list"].get("i", [])]
    return value


def _shape(node: Node, index: int = 0) -> tuple:
    """The output's shape, ``DYNAMIC`` where the recorder left a size unknown: a legalizer that
    computes with such a size raises ``Uncovered`` (``model.RunTimeSize``); ``legalize_shapes``
    writes the ops that read sizes at run time."""
    return dims(node.outputs[index][1])


def _dtype(node: Node, index: int = 0) -> np.dtype:
    return np.dtype(node.outputs[index][0].as_numpy_dtype)


def _static(t: Tensor, what: str) -> np.ndarray:
    if not t.is_constant:
        raise Uncovered(f"{what} at run time in the TFLite writer")
    return t.data


def _int32(graph: Graph, values) -> Tensor:
    return graph.int32(values)


def _out(graph: Graph, kind: str, node: Node, inputs: list, **options) -> Tensor:
    return graph.add(kind, inputs, _shape(node), _dtype(node), **options)


def reshape(graph: Graph, t: Tensor, shape) -> Tensor:
    shape = tuple(int(d) for d in shape)
    if t.shape == shape:
        return t
    if t.is_constant:
        return graph.constant(t.data.reshape(shape))
    return graph.add("RESHAPE", [t, _int32(graph, shape)], shape, t.dtype)


def _nhwc(node: Node) -> None:
    if _attr(node, "data_format", "NHWC") != "NHWC":
        raise Uncovered(f"{node.op} in {_attr(node, 'data_format')}")


def _padding(node: Node) -> int:
    padding = _attr(node, "padding")
    if padding not in ("SAME", "VALID"):
        raise Uncovered(f"{node.op} with {padding} padding")
    return SAME if padding == "SAME" else VALID


# ----------------------------------------------------------------------------- elementwise

_FUSED = {"ADD", "SUB", "MUL", "DIV"}   # the binary builtins with a fused activation field
_BINARY = {"AddV2": "ADD", "Add": "ADD", "Sub": "SUB", "Mul": "MUL", "RealDiv": "DIV", "Maximum": "MAXIMUM",
           "Minimum": "MINIMUM", "FloorDiv": "FLOOR_DIV", "FloorMod": "FLOOR_MOD",
           "SquaredDifference": "SQUARED_DIFFERENCE", "Less": "LESS", "LessEqual": "LESS_EQUAL",
           "Greater": "GREATER", "GreaterEqual": "GREATER_EQUAL", "Equal": "EQUAL", "NotEqual": "NOT_EQUAL",
           "LogicalAnd": "LOGICAL_AND", "LogicalOr": "LOGICAL_OR"}
_UNARY = {"Abs": "ABS", "Tanh": "TANH", "Sigmoid": "LOGISTIC", "Sin": "SIN", "Cos": "COS",
          "Sqrt": "SQRT", "Rsqrt": "RSQRT", "Exp": "EXP", "Log": "LOG", "Floor": "FLOOR", "Ceil": "CEIL",
          "Relu": "RELU", "Relu6": "RELU6", "Elu": "ELU", "LogicalNot": "LOGICAL_NOT",
          "Softmax": "SOFTMAX", "LogSoftmax": "LOG_SOFTMAX"}
_OPTIONS = {"SOFTMAX": {"beta": 1.0}}


def _binary(kind: str):
    def legalize(graph, node, a, b):
        options = {"fusedActivationFunction": 0} if kind in _FUSED else {}
        return _out(graph, kind, node, [a, b], **options)
    return legalize


def _unary(kind: str):
    def legalize(graph, node, x):
        return _out(graph, kind, node, [x], **_OPTIONS.get(kind, {}))
    return legalize


for _op, _kind in _BINARY.items():
    LEGALIZERS[_op] = _binary(_kind)
for _op, _kind in _UNARY.items():
    LEGALIZERS[_op] = _unary(_kind)


@legalizer("Neg")
def _neg(graph, node, x):
    """A float negation as x * -1: LiteRT's NEG (XNNPACK's) gives +0.0 for +0.0, where JAX gives -0.0."""
    if np.issubdtype(x.dtype, np.floating):
        return _out(graph, "MUL", node, [x, graph.constant(np.array(-1, x.dtype))], fusedActivationFunction=0)
    return _out(graph, "NEG", node, [x])


@legalizer("Identity", "Snapshot", "StopGradient")
def _identity(graph, node, x):
    return x


@legalizer("BiasAdd")
def _bias_add(graph, node, x, bias):
    _nhwc(node)
    return _out(graph, "ADD", node, [x, bias], fusedActivationFunction=0)


@legalizer("Square")
def _square(graph, node, x):
    """SQUARE for floats (LiteRT's has no integer kernel), else x * x (JAX's wrapping product)."""
    if x.dtype == np.float32:
        return _out(graph, "SQUARE", node, [x])
    return _out(graph, "MUL", node, [x, x], fusedActivationFunction=0)


@legalizer("Pow")
def _pow(graph, node, x, y):
    """x ** 2 as x * x: LiteRT's POW gives the largest float where the square overflows (the rule
    case pow:int_literal_square), x * x gives JAX's inf."""
    if y.is_constant and y.data.size == 1 and float(y.data.reshape(-1)[0]) == 2 and x.shape == _shape(node):
        return _out(graph, "MUL", node, [x, x], fusedActivationFunction=0)
    return _out(graph, "POW", node, [x, y])


@legalizer("IsFinite")
def _is_finite(graph, node, x):
    """x - x == 0, as the converter writes it: x - x is NaN exactly where x is infinite or NaN."""
    difference = graph.add("SUB", [x, x], x.shape, x.dtype, fusedActivationFunction=0)
    return _out(graph, "EQUAL", node, [difference, graph.constant(np.zeros((), x.dtype))])


@legalizer("LeakyRelu")
def _leaky_relu(graph, node, x):
    return _out(graph, "LEAKY_RELU", node, [x], alpha=_attr(node, "alpha", 0.2))


@legalizer("AddN")
def _add_n(graph, node, *xs):
    return _out(graph, "ADD_N", node, list(xs))


@legalizer("Cast")
def _cast(graph, node, x):
    if _attr(node, "Truncate", False):
        raise Uncovered("a truncating Cast")
    return x if x.dtype == _dtype(node) else _out(graph, "CAST", node, [x])


@legalizer("SelectV2", "Select")
def _select(graph, node, which, if_true, if_false):
    """``SELECT`` where the three shapes agree, else the broadcasting ``SELECT_V2``, as the converter
    writes TF's ``SelectV2``; a float constant of one value read as a scalar, as it writes one, where
    the other operands still broadcast to the result's shape (a condition of shape (1, 4) choosing
    between two splats of shape (3, 4) keeps one of them whole: else the result came out (1, 4))."""
    full = broadcast_shape(which.shape, if_true.shape, if_false.shape)
    scalar = splat_as_scalar(graph, if_true)
    if broadcast_shape(which.shape, scalar.shape, if_false.shape) == full:
        if_true = scalar
    scalar = splat_as_scalar(graph, if_false)
    if broadcast_shape(which.shape, if_true.shape, scalar.shape) == full:
        if_false = scalar
    shapes = {which.shape, if_true.shape, if_false.shape}
    return _out(graph, "SELECT" if len(shapes) == 1 else "SELECT_V2", node, [which, if_true, if_false])


# ----------------------------------------------------------------------------- structure

@legalizer("Reshape", "Squeeze", "ExpandDims")
def _reshape(graph, node, x, *shape):
    return reshape(graph, x, _shape(node))


@legalizer("Transpose")
def _transpose(graph, node, x, perm):
    perm = [int(a) for a in _static(perm, "a permutation")]
    if perm == list(range(len(perm))):
        return x
    return _out(graph, "TRANSPOSE", node, [x, _int32(graph, perm)])


@legalizer("BroadcastTo")
def _broadcast_to(graph, node, x, shape):
    if x.shape == _shape(node):
        return x
    return _out(graph, "BROADCAST_TO", node, [x, _int32(graph, _shape(node))])


@legalizer("Tile")
def _tile(graph, node, x, multiples):
    return _out(graph, "TILE", node, [x, _int32(graph, _static(multiples, "Tile's multiples"))])


@legalizer("ReverseV2")
def _reverse(graph, node, x, axis):
    axes = [int(a) % len(x.shape) for a in np.reshape(_static(axis, "ReverseV2's axis"), -1)]
    return _out(graph, "REVERSE_V2", node, [x, _int32(graph, axes)]) if axes else x


@legalizer("Pad", "PadV2", "MirrorPad")
def _pad(graph, node, x, paddings, *value):
    pads = _int32(graph, _static(paddings, "paddings"))
    if node.op == "MirrorPad":
        mode = {"REFLECT": 0, "SYMMETRIC": 1}[_attr(node, "mode")]
        return _out(graph, "MIRROR_PAD", node, [x, pads], mode=mode)
    if value:   # PAD fills with +0.0; PADV2 reads its value, also one computed at run time
        fill = value[0].data
        if fill is None or not (fill == 0 and not np.signbit(fill)):
            return _out(graph, "PADV2", node, [x, pads, value[0]])
    return _out(graph, "PAD", node, [x, pads])


@legalizer("XlaDynamicUpdateSlice")
def _dynamic_update_slice(graph, node, x, update, indices):
    """The rules' cache write (``noxla.graph.converter_ops``), as TF's converter legalizes it: the
    builtin clamps the starts into the operand as XLA does."""
    return _out(graph, "DYNAMIC_UPDATE_SLICE", node, [x, update, indices])


@legalizer("Slice")
def _slice(graph, node, x, begin, size):
    if not begin.is_constant:   # a dynamic_slice's start (a loop's x[i]), clamped by its rule
        return _out(graph, "SLICE", node, [x, begin, _int32(graph, _shape(node))])
    begin = [int(b) for b in _static(begin, "a slice's begin")]
    return _out(graph, "SLICE", node, [x, _int32(graph, begin), _int32(graph, _shape(node))])


@legalizer("StridedSlice")
def _strided_slice(graph, node, x, begin, end, strides):
    """One STRIDED_SLICE of x's own axes (an ellipsis expanded, new axes left to a RESHAPE after it,
    as the converter expands them), or a SLICE where every stride is 1 and no axis shrinks."""
    b, e, s, masks, new_axes = _per_axis(node, x, begin, end, strides)
    if not masks["shrink_axis"] and all(v == 1 for v in s):   # the converter's canonical form: a SLICE
        starts, sizes = [], []
        for i, n in enumerate(x.shape):
            lo = 0 if masks["begin"] >> i & 1 else b[i]
            hi = n if masks["end"] >> i & 1 else e[i]
            lo, hi = (min(max(v + n if v < 0 else v, 0), n) for v in (lo, hi))
            starts.append(lo)
            sizes.append(max(hi - lo, 0))
        if int(np.prod(sizes)) == int(np.prod(_shape(node))):
            y = x if sizes == list(x.shape) else graph.add("SLICE", [x, _int32(graph, starts), _int32(graph, sizes)],
                                                         sizes, x.dtype)
            return reshape(graph, y, _shape(node))
    kept = [n for i, n in enumerate(_shape(node)) if i not in new_axes]
    y = graph.add("STRIDED_SLICE", [x, *(_int32(graph, v) for v in (b, e, s))], kept, x.dtype,
                  beginMask=masks["begin"], endMask=masks["end"], ellipsisMask=0, newAxisMask=0,
                  shrinkAxisMask=masks["shrink_axis"], offset=False)
    return reshape(graph, y, _shape(node))


def _per_axis(node: Node, x: Tensor, begin, end, strides):
    """The slice's begin, end, stride and masks for each axis of x, and which output axes are new."""
    masks = {k: _attr(node, f"{k}_mask", 0) for k in ("begin", "end", "ellipsis", "new_axis", "shrink_axis")}
    spec = [np.reshape(_static(t, "a strided slice's bounds"), -1).astype(np.int64).tolist()
            for t in (begin, end, strides)]
    rank, entries = len(x.shape), len(spec[0])
    real = sum(1 for i in range(entries) if not (masks["new_axis"] >> i & 1 or masks["ellipsis"] >> i & 1))
    b, e, s, out, new_axes = [], [], [], {"begin": 0, "end": 0, "shrink_axis": 0}, set()
    o = 0   # the output axis
    for i in range(entries):
        if masks["ellipsis"] >> i & 1:
            for _ in range(rank - real):
                axis = len(b)
                b.append(0), e.append(0), s.append(1)
                out["begin"] |= 1 << axis
                out["end"] |= 1 << axis
                o += 1
        elif masks["new_axis"] >> i & 1:
            new_axes.add(o)
            o += 1
        else:
            axis = len(b)
            b.append(spec[0][i]), e.append(spec[1][i]), s.append(spec[2][i])
            for k in out:
                out[k] |= (masks[k] >> i & 1) << axis
            o += 0 if masks["shrink_axis"] >> i & 1 else 1
    while len(b) < rank:   # axes after the spec: whole
        axis = len(b)
        b.append(0), e.append(0), s.append(1)
        out["begin"] |= 1 << axis
        out["end"] |= 1 << axis
    return b, e, s, out, new_axes


@legalizer("ConcatV2")
def _concat(graph, node, *xs):
    *xs, axis = xs
    rank = len(_shape(node))
    axis = int(_static(axis, "a concatenation's axis")) % rank
    return _out(graph, "CONCATENATION", node, list(xs), axis=axis, fusedActivationFunction=0)


@legalizer("Unpack")
def _unpack(graph, node, x):
    axis = _attr(node, "axis", 0) % len(x.shape)
    outs = [Tensor(_shape(node, i), _dtype(node, i)) for i in range(len(node.outputs))]
    return _many(graph, "UNPACK", [x], outs, num=len(outs), axis=axis)


@legalizer("SplitV")
def _split_v(graph, node, x, sizes, axis):
    axis = int(_static(axis, "a split's axis")) % len(x.shape)
    outs = [Tensor(_shape(node, i), _dtype(node, i)) for i in range(len(node.outputs))]
    sizes = [o.shape[axis] for o in outs]
    return _many(graph, "SPLIT_V", [x, _int32(graph, sizes), _int32(graph, axis)], outs, numSplits=len(outs))


@legalizer("Split")
def _split(graph, node, axis, x):
    axis = int(_static(axis, "a split's axis")) % len(x.shape)
    outs = [Tensor(_shape(node, i), _dtype(node, i)) for i in range(len(node.outputs))]
    return _many(graph, "SPLIT", [_int32(graph, axis), x], outs, numSplits=len(outs))


def _many(graph: Graph, kind: str, inputs: list, outs: list, **options) -> list:
    """A builtin of several outputs (``Graph.add`` makes one)."""
    first = graph.add(kind, inputs, outs[0].shape, outs[0].dtype, **options)
    for o in outs:
        graph.check(kind, o.shape, o.dtype)
    graph.ops[-1].outputs = [first, *outs[1:]]
    return [first, *outs[1:]]


@legalizer("GatherV2")
def _gather(graph, node, params, indices, axis):
    axis = int(_static(axis, "a gather's axis")) % len(params.shape)
    return _out(graph, "GATHER", node, [params, indices], axis=axis, batchDims=_attr(node, "batch_dims", 0))


_REDUCERS = {"Sum": "SUM", "Mean": "MEAN", "Max": "REDUCE_MAX", "Min": "REDUCE_MIN", "Prod": "REDUCE_PROD",
             "Any": "REDUCE_ANY", "All": "REDUCE_ALL"}


def _reducer(kind: str):
    def legalize(graph, node, x, axes):
        axes = sorted({int(a) % len(x.shape) for a in np.reshape(_static(axes, "reduction axes"), -1)})
        if not axes:
            return x
        return _out(graph, kind, node, [x, _int32(graph, axes)], keepDims=_attr(node, "keep_dims", False))
    return legalize


for _op, _kind in _REDUCERS.items():
    LEGALIZERS[_op] = _reducer(_kind)
