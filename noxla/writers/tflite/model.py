"""A graph of TFLite operators over tensors, before serialization: what the TFLite writer of noxla's
graph legalizes it into (``noxla.writers.tflite.legalize``).

A tensor is a run-time value (``data is None``) or a constant; an operator names its TFLite builtin
and keeps its options as a dict of the schema's option fields. Passes (``fuse``) rewrite the graph
in place; ``serialize`` turns it into the flatbuffer LiteRT reads, with the ``serving_default``
signature the TF path writes (inputs by name in order, outputs by name in key order).

A size known only at run time (a polymorphic program's symbolic size: the recorder's None) is a
``RunTimeSize``; it is written as the converter writes a tf.function's None size: 1 in the
tensor's ``shape``, -1 in its ``shapeSignature``."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from noxla.graph.dtypes import Uncovered

_TYPES = {np.dtype(np.float32): "FLOAT32", np.dtype(np.int32): "INT32", np.dtype(np.bool_): "BOOL",
          np.dtype(np.int64): "INT64", np.dtype(np.float16): "FLOAT16", np.dtype(np.int8): "INT8",
          np.dtype(np.uint8): "UINT8", np.dtype(np.int16): "INT16",
          np.dtype(np.uint32): "UINT32", np.dtype(np.uint16): "UINT16", np.dtype(np.complex64): "COMPLEX64"}
_ids = itertools.count()


SAME, VALID = 0, 1   # schema.Padding


class RunTimeSize:
    """A size known only at run time. Equal only to itself: ``DYNAMIC`` stands for every size the
    recorder left unknown, so shapes it inferred equal are equal at run time where the passes
    compare them (operands of one operator: JAX's elementwise operands have equal symbolic shapes,
    and a reshape keeps the element count, so one unknown size among known ones is determined). A
    reshape's output of several unknown sizes gets fresh ones, equal to no other size. Computing
    with one (arithmetic, ordering, ``int``) raises ``Uncovered``: a pass that needs the value
    cannot decide, and the program takes TF's path rather than crash or guess."""

    def _refuse(self, *args):
        raise Uncovered("a size known only at run time, where the TFLite writer needs its value")

    __int__ = __index__ = __float__ = __bool__ = __neg__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = __mod__ = __rmod__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = _refuse

    def __repr__(self) -> str:
        return "?"


DYNAMIC = RunTimeSize()


def dims(shape) -> tuple:
    """A recorded static shape (None where unknown) as the model's (``DYNAMIC`` there)."""
    return tuple(DYNAMIC if d is None else d if isinstance(d, RunTimeSize) else int(d) for d in shape)


def unknown(shape) -> int:
    """How many of ``shape``'s sizes are known only at run time."""
    return sum(isinstance(d, RunTimeSize) for d in shape)


def same_pads(size: int, window: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """The padding TFLite's SAME applies on one spatial axis (the smaller half first)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (window - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


# The run-time tensors' types: the emitters' operators are held to JAX on these only.
RUNTIME_DTYPES = {np.dtype(np.float32), np.dtype(np.int32)}
# Booleans only where an emitter makes or reads them (comparisons, selects, a gather's in-bounds
# mask): LiteRT's other kernels (PAD, the arithmetic) have no bool version, or one not tested here.
BOOL_KINDS = {"LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "SELECT", "SELECT_V2",
              "RESHAPE", "LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT", "REDUCE_ANY", "CAST", "REDUCE_ALL",
              "TRANSPOSE", "SLICE", "BROADCAST_TO",   # the last three: keras-hub's attention masks
              "CONCATENATION", "TILE", "DYNAMIC_UPDATE_SLICE"}   # a bool PACK is a CONCATENATION (``legalize_more``)
# Types only the graph writer carries, each with the builtins that may read or make it (LiteRT's
# kernels for these copy or convert them, as on TF's path): uint32, where the rules move a PRNG
# key's words (threefry computes in int32 limbs); float16 and the narrow integers, which the rules
# convert to float32 or int32 to compute and back (``lowering_rules.core.helpers.wide``); int64, in which
# the rules compare and divide uint32 values and take their max and min (every uint32 and their
# differences fit exactly).
_MOVES = {"CAST", "RESHAPE", "SLICE", "BITCAST", "DYNAMIC_UPDATE_SLICE"}   # BITCAST: a float16's bits
GRAPH_WRITER_KINDS = {np.dtype(np.uint32): {"RESHAPE", "SLICE", "CONCATENATION", "CAST",
                                             "SELECT", "SELECT_V2",   # a key carried through a vmapped loop
                                             "STRIDED_SLICE", "PACK", "MUL"},   # MUL: LiteRT's wraps (uint32_t)
                      np.dtype(np.bool_): {"UNPACK"},   # LiteRT's PACK has no bool kernel
                      np.dtype(np.float16): _MOVES | {"PAD"},
                      np.dtype(np.uint16): _MOVES,   # LiteRT's PAD: no uint16
                      # Those the rules move as they are, as TF's converter writes them: LiteRT's
                      # TRANSPOSE, CONCATENATION and REVERSE_V2 copy an unquantized integer by its
                      # size, its PADV2 fills one with the value, and its unquantized int16 ABS wraps
                      # |-32768| to -32768 as JAX does (tests/test_graph_tflite_dtypes.py).
                      np.dtype(np.int8): _MOVES | {"PAD", "TRANSPOSE", "CONCATENATION"},
                      np.dtype(np.uint8): _MOVES | {"PAD", "PADV2", "TRANSPOSE", "CONCATENATION", "REVERSE_V2"},
                      np.dtype(np.int16): _MOVES | {"PAD", "REVERSE_V2", "ABS"},
                      np.dtype(np.complex64): {"REAL", "IMAG"},   # a program input split (graph.lower)
                      np.dtype(np.int64): {"CAST", "RESHAPE", "SLICE", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL",
                                           "EQUAL", "NOT_EQUAL", "FLOOR_MOD", "FLOOR_DIV", "SELECT", "SELECT_V2",
                                           "MAXIMUM", "MINIMUM", "ADD", "SUB", "MUL",
                                           # a uint32 scatter's, reduction's or scan's max and min
                                           "SCATTER_ND", "REDUCE_MAX", "REDUCE_MIN", "TRANSPOSE", "CONCATENATION",
                                           "PACK"}}
MAX_RANK = 6
# Builtins that make an empty tensor of a size known only at run time, as TF's path writes one.
EMPTY_AT_RUN_TIME = {"FILL", "CAST"}
# LiteRT's RESHAPE copies a buffer of any rank (its kernel checks element counts only); TF's
# converter writes a rank-7 one where the rules merge a seventh axis away (a vmapped transpose).
_ANY_RANK = {"RESHAPE"}


def _allowed(kind: str, uint32_moves: bool) -> set:
    return RUNTIME_DTYPES | ({np.dtype(np.bool_)} if kind in BOOL_KINDS else set()) \
        | ({t for t, kinds in GRAPH_WRITER_KINDS.items() if kind in kinds} if uint32_moves else set())


@dataclasses.dataclass(eq=False)
class Tensor:
    shape: tuple
    dtype: np.dtype
    data: np.ndarray | None = None
    name: str = ""
    id: int = dataclasses.field(default_factory=lambda: next(_ids))

    @property
    def is_constant(self) -> bool:
        return self.data is not None


@dataclasses.dataclass(eq=False)
class Op:
    kind: str                      # the BuiltinOperator's name, e.g. "CONV_2D"
    inputs: list                   # Tensors (None: an optional input left out)
    outputs: list
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def out(self) -> Tensor:
        return self.outputs[0]


class Graph:
    def __init__(self, uint32_moves: bool = False):
        self.uint32_moves = uint32_moves   # the graph writer's types (GRAPH_WRITER_KINDS)
        self.name = "main"   # a While/If body's: its function's
        self.ops: list[Op] = []
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.in_names: list[str] = []
        self.out_names: list[str] = []
        self._view: View | None = None
        self._int32: dict = {}

    def constant(self, array) -> Tensor:
        array = np.asarray(array)
        return Tensor(tuple(array.shape), array.dtype, array)

    def int32(self, values) -> Tensor:
        """An int32 constant (a shape, axes, a permutation), one tensor per value, so that operators
        reading equal ones are recognized as the same (``fuse.common_operators``)."""
        array = np.asarray(values, np.int32)
        key = (array.shape, array.tobytes())
        if key not in self._int32:
            self._int32[key] = self.constant(array)
        return self._int32[key]

    def add(self, kind: str, inputs: list, shape, dtype, **options) -> Tensor:
        shape = dims(shape)
        allowed = _allowed(kind, self.uint32_moves)
        reads = inputs if kind != "SHAPE" else []   # SHAPE reads its input's sizes only, of any type
        if any(t is not None and not t.is_constant and t.dtype not in allowed for t in reads):
            raise Uncovered(f"{kind} on {sorted({str(t.dtype) for t in inputs if t is not None})}")
        self.check(kind, shape, dtype)
        out = Tensor(shape, np.dtype(dtype))
        self.ops.append(Op(kind, list(inputs), [out], options))
        return out

    def check(self, kind: str, shape: tuple, dtype) -> None:
        """``Uncovered`` for an output LiteRT's kernels are not held to JAX on here."""
        allowed = _allowed(kind, self.uint32_moves)
        if np.dtype(dtype) not in allowed:
            raise Uncovered(f"{kind} on {np.dtype(dtype)}")
        if 0 in shape and not (unknown(shape) and kind in EMPTY_AT_RUN_TIME) \
                or len(shape) > MAX_RANK and kind not in _ANY_RANK:   # LiteRT copies no empty tensors
            raise Uncovered(f"{kind} of shape {shape}")

    def producers(self) -> dict:
        return {t.id: op for op in self.ops for t in op.outputs}

    def users(self) -> dict:
        """Tensor id -> the operators reading it (a graph output counts as a reader: None)."""
        found: dict = {}
        for op in self.ops:
            for t in op.inputs:
                if t is not None:
                    found.setdefault(t.id, []).append(op)
        for t in self.outputs:
            found.setdefault(t.id, []).append(None)
        return found

    def replace_uses(self, old: Tensor, new: Tensor) -> None:
        for op in self.ops:
            op.inputs = [new if t is old else t for t in op.inputs]
        self.outputs = [new if t is old else t for t in self.outputs]

    def view(self) -> View:
        """Each tensor's producer and readers, kept until the graph changes: a pass that finds
        nothing to rewrite leaves it for the next (``fuse`` prunes after every rewrite)."""
        if self._view is None:
            self._view = View.of(self)
        return self._view

    def prune(self) -> None:
        """Drop operators whose outputs nothing reads (rewrites leave them behind): one sweep from
        the outputs back, as an operator comes after everything it reads."""
        needed, kept = {t.id for t in self.outputs}, []
        for op in reversed(self.ops):   # loops, not generators: the fusions prune after every rewrite
            for t in op.outputs:
                if t.id in needed:
                    kept.append(op)
                    for i in op.inputs:
                        if i is not None:
                            needed.add(i.id)
                    break
        self.ops = kept[::-1]
        self._view = None


def broadcast_shape(*shapes) -> tuple | None:
    """``np.broadcast_shapes`` of shapes that may hold unknown sizes: an unknown size broadcasts
    against 1 or itself (a JAX program's operands broadcast no other way); None where that does
    not decide it (an unknown size against another, or against a known one)."""
    rank = max(len(s) for s in shapes)
    out = []
    for sizes in zip(*((1,) * (rank - len(s)) + tuple(s) for s in shapes)):
        kept = {d for d in sizes if isinstance(d, RunTimeSize) or d != 1}
        if len(kept) > 1:
            if unknown(kept):
                return None
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(next(iter(kept), 1))
    return tuple(out)


def shape_constant(graph: Graph, shape) -> Tensor:
    """A RESHAPE's shape operand for ``shape``: -1 where its one unknown size is (the element count
    determines it at run time); ``Uncovered`` for several unknown sizes, which only a shape computed
    at run time gives."""
    if unknown(shape) > 1:
        raise Uncovered("a reshape to several sizes known only at run time in the TFLite writer")
    return graph.int32([-1 if isinstance(d, RunTimeSize) else d for d in shape])


def shape_of(graph: Graph, t: Tensor) -> Tensor:
    """``t``'s shape as an int32 vector: a constant, or a SHAPE of ``t`` where a size is known only
    at run time (as the converter reads a tf.shape of a None size)."""
    if not unknown(t.shape):
        return graph.int32(t.shape)
    return graph.add("SHAPE", [t], (len(t.shape),), np.int32, outType=2)   # schema.TensorType.INT32


def splat_as_scalar(graph: Graph, t: Tensor) -> Tensor:
    """A float constant of one value as a scalar, as the converter writes one in a select
    (an int32 one it keeps whole)."""
    if not t.is_constant or t.data.size < 2 or t.dtype != np.float32:
        return t
    bits = np.ascontiguousarray(t.data).reshape(-1).view(f"u{t.data.itemsize}")   # NaN and -0.0 as stored
    return graph.constant(t.data.reshape(-1)[:1].reshape(())) if np.all(bits == bits[0]) else t


class View:
    """The producer and readers of each tensor, at the time it was made."""

    def __init__(self, made_by: dict, read_by: dict):
        self.made_by, self.read_by = made_by, read_by

    @classmethod
    def of(cls, graph: Graph) -> View:
        return cls(graph.producers(), graph.users())

    def only_reader(self, t: Tensor) -> bool:
        return len(self.read_by.get(t.id, [])) == 1

    def producer(self, t: Tensor, kind: str | set) -> Op | None:
        op = self.made_by.get(t.id)
        kinds = {kind} if isinstance(kind, str) else kind
        return op if op is not None and op.kind in kinds else None


def subgraphs(graph: Graph) -> list[Graph]:
    """The While and If bodies ``graph`` names (an operator's options holding a ``Graph``), and
    theirs, depth first: the order they are written in after the main subgraph."""
    found = []
    for op in graph.ops:
        for value in op.options.values():
            if isinstance(value, Graph):
                found += [value, *subgraphs(value)]
    return found


def serialize(graph: Graph) -> list:
    """The .tflite as chunks for ``noxla.writers.tflite.flatbuffer.large``'s writer (large constants are not copied;
    past 2 GB the buffers follow the flatbuffer at offsets, as LiteRT reads a large model)."""
    from noxla.writers.tflite.flatbuffer.large import serialized
    return serialized(model_of(graph))


def model_of(graph: Graph, stubs=None):
    """The unpacked .tflite (``ModelT``): ``graph`` as the main subgraph, then the bodies it names,
    each a subgraph of its own. ``stubs`` (a ``noxla.writers.tf.weight_stubs.WeightStubs``): each large float32
    constant's buffer holds its placeholder, its bytes made when written (a transposed weight, held
    as a view of the caller's, is copied one weight at a time), and one array read by several
    signatures is one placeholder (``WeightStubs.hold``). Tensor names are bytes, as a read file's."""
    from ai_edge_litert import schema_py_generated as schema

    from noxla.writers.tflite.flatbuffer.large import serving_signature
    graphs = [graph, *subgraphs(graph)]
    builtins = vars(schema.BuiltinOperator)
    model = schema.ModelT()
    model.version, model.description = 3, "noxla direct"
    model.buffers = [schema.BufferT()]   # buffer 0: the empty buffer every run-time tensor points at
    codes: dict = {}
    buffers: dict = {}   # small constants' bytes: one buffer each, whatever their type, in every subgraph
    indices = {id(g): i for i, g in enumerate(graphs)}

    def buffer_index(data: np.ndarray) -> int:
        if stubs is not None and stubs.takes(data):
            data = stubs.hold(data)
            key = ("held", id(data))
        else:
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            key = data.tobytes() if data.nbytes <= _SHARED_BYTES else None
        if key is not None and key in buffers:
            return buffers[key]
        buffer = schema.BufferT()
        buffer.data = data
        model.buffers.append(buffer)
        if key is not None:
            buffers[key] = len(model.buffers) - 1
        return len(model.buffers) - 1

    model.subgraphs = [_subgraph(schema, g, codes, buffer_index, indices) for g in graphs]
    model.operatorCodes = [None] * len(codes)
    for kind, i in codes.items():
        code = schema.OperatorCodeT()
        code.builtinCode = builtins[kind]
        code.deprecatedBuiltinCode = min(code.builtinCode, 127)  # the old field is an int8
        code.version = _VERSIONS.get(kind, 1)
        model.operatorCodes[i] = code
    main = model.subgraphs[0]
    model.signatureDefs = [serving_signature(schema, graph.in_names, main.inputs, graph.out_names, main.outputs)]
    return model


def _subgraph(schema, graph: Graph, codes: dict, buffer_index, indices: dict):
    """One subgraph's tables: its tensors (small constants by value, one tensor each), operators
    (a body named in an operator's options by its subgraph's index), inputs and outputs."""
    tensors: dict = {}
    shared: dict = {}
    sub = schema.SubGraphT()
    sub.tensors, sub.operators, sub.name = [], [], graph.name

    def index(t: Tensor) -> int:
        if t.dtype not in _TYPES:
            raise Uncovered(f"a constant of {t.dtype}")
        if t.is_constant and t.data.nbytes <= _SHARED_BYTES:
            t = shared.setdefault((t.dtype.str, t.shape, t.data.tobytes()), t)
        if t.id not in tensors:
            entry = schema.TensorT()
            entry.shape = np.asarray([1 if isinstance(d, RunTimeSize) else d for d in t.shape], np.int32)
            if unknown(t.shape):
                entry.shapeSignature = np.asarray([-1 if isinstance(d, RunTimeSize) else d for d in t.shape], np.int32)
            entry.hasRank = True   # as the converter writes them (a scalar too)
            entry.type = getattr(schema.TensorType, _TYPES[t.dtype])
            entry.name = (t.name or f"t{len(tensors)}").encode()
            entry.buffer = buffer_index(t.data) if t.is_constant else 0
            tensors[t.id] = len(sub.tensors)
            sub.tensors.append(entry)
        return tensors[t.id]

    for t, name in zip(graph.inputs, graph.in_names):
        t.name = name
    for t, name in zip(graph.outputs, graph.out_names):
        # An output named as an input (an LLM's kv_cache_k_0, in and out) gets a name of its own:
        # LiteRT's quantizer keys tensors by name (the signature maps keep both names).
        t.name = t.name or (f"{name}:out" if name in graph.in_names else name)
    sub.inputs = np.asarray([index(t) for t in graph.inputs], np.int32)
    for op in graph.ops:
        entry = schema.OperatorT()
        entry.opcodeIndex = codes.setdefault(op.kind, len(codes))
        inputs = [op.inputs[i] for i in _ORDER[op.kind]] if op.kind in _ORDER else op.inputs
        entry.inputs = np.asarray([-1 if t is None else index(t) for t in inputs], np.int32)
        entry.outputs = np.asarray([index(t) for t in op.outputs], np.int32)
        options_name = _OPTIONS.get(op.kind) or (_OPTIONS_WHERE_SET.get(op.kind) if op.options else None)
        if options_name is not None:
            options = getattr(schema, options_name + "T")()
            for key, value in op.options.items():
                setattr(options, key, indices[id(value)] if isinstance(value, Graph) else value)
            entry.builtinOptionsType = getattr(schema.BuiltinOptions, options_name)
            entry.builtinOptions = options
        sub.operators.append(entry)
    sub.outputs = np.asarray([index(t) for t in graph.outputs], np.int32)
    return sub


# Constants up to this size are compared by value and stored once (zero biases, axes, shapes);
# larger ones (weights) are rarely equal, and comparing them would read every byte.
_SHARED_BYTES = 1 << 16
# Builtins whose options table is written only where the op sets one: a RESHAPE copying an output that
# is an input has its newShape, as TF's path writes it
# (``noxla.writers.tflite.flatbuffer.webgpu.copy_passthrough_outputs``).
_OPTIONS_WHERE_SET = {"RESHAPE": "ReshapeOptions"}
# Builtins whose kernels LiteRT registers from a version above 1 (its register.cc).
_VERSIONS = {"BROADCAST_TO": 2, "TRANSPOSE_CONV": 4}   # TRANSPOSE_CONV's 4: with a fused activation
# Builtins whose inputs the graph keeps in another order (input, weights, bias first, as for the
# other linear operators): where each of TFLite's inputs is in the graph's.
_ORDER = {"TRANSPOSE_CONV": (3, 1, 0, 2)}
# The options table of each builtin the writer emits that has one (schema.BuiltinOptions' names).
_OPTIONS = {
    "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions",
    "CONV_2D": "Conv2DOptions", "TRANSPOSE_CONV": "TransposeConvOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions", "MAX_POOL_2D": "Pool2DOptions", "AVERAGE_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions", "REDUCE_MIN": "ReducerOptions",
    "SOFTMAX": "SoftmaxOptions", "LOG_SOFTMAX": "LogSoftmaxOptions", "TRANSPOSE": "TransposeOptions",
    "PAD": "PadOptions", "PADV2": "PadV2Options", "BATCH_MATMUL": "BatchMatMulOptions",
    "CONCATENATION": "ConcatenationOptions", "GELU": "GeluOptions", "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions", "SQUARED_DIFFERENCE": "SquaredDifferenceOptions",
    "POW": "PowOptions", "SELECT": "SelectOptions", "SELECT_V2": "SelectV2Options", "GATHER": "GatherOptions",
    # Those only the graph writer emits (the ones with fields to write).
    "STRIDED_SLICE": "StridedSliceOptions", "PACK": "PackOptions", "UNPACK": "UnpackOptions",
    "SPLIT": "SplitOptions", "SPLIT_V": "SplitVOptions", "LEAKY_RELU": "LeakyReluOptions",
    "MIRROR_PAD": "MirrorPadOptions", "REDUCE_PROD": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "CUMSUM": "CumsumOptions", "TOPK_V2": "TopKV2Options", "SCATTER_ND": "ScatterNdOptions",
    "REDUCE_ALL": "ReducerOptions", "ARG_MAX": "ArgMaxOptions", "ARG_MIN": "ArgMinOptions",
    "CONV_3D": "Conv3DOptions",
    "SHAPE": "ShapeOptions", "SQUEEZE": "SqueezeOptions",
    "WHILE": "WhileOptions", "IF": "IfOptions",   # their subgraph indices: the bodies' (``subgraphs``)
}
