"""noxla's graph of TF ops: what the rules emit, recorded without TensorFlow.

A ``Node`` is one raw TF op (``Conv2D``, ``SelectV2``, ``GatherV2``: the op TF itself emits for the
``tf`` function a rule called), its attributes in the form GraphDef and model.json give them (the
proto3 JSON form of AttrValue: ``{"type": "DT_FLOAT"}``, ``{"i": "1"}``), its inputs (``Tensor``s,
an output of another node) and the dtype and static shape of each output, inferred when recorded.
A ``Const`` holds its value as a NumPy array; an op whose inputs are all constants is folded into
one when it is recorded (``noxla.graph.ops``), as grappler folds it on TF's path. Writers read
the nodes in order (each node's inputs come before it): ``noxla.writers.tfjs.from_graph`` (model.json, no
TensorFlow), ``noxla.writers.tf.replay`` (real TF ops: the oracle of the recording).
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
from typing import Sequence

import numpy as np

from noxla.graph.dtypes import DType, Uncovered


class UncoveredAttribute(Uncovered, AttributeError):
    """A tf.Tensor attribute the graph's tensors lack."""


class TensorShape:
    """A static shape as the rules read ``tensor.shape``: ``rank``, ``as_list()``, indexing."""
    __slots__ = ("dims",)

    def __init__(self, dims):
        self.dims = None if dims is None else tuple(None if d is None else int(d) for d in dims)

    @property
    def rank(self):
        return None if self.dims is None else len(self.dims)

    def as_list(self) -> list:
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self.dims)

    def is_fully_defined(self) -> bool:
        return self.dims is not None and None not in self.dims

    def num_elements(self):
        return int(np.prod(self.dims, dtype=np.int64)) if self.is_fully_defined() else None

    def __len__(self) -> int:
        return len(self.dims)

    def __iter__(self):
        return iter(self.dims)

    def __getitem__(self, i):
        return TensorShape(self.dims[i]) if isinstance(i, slice) else self.dims[i]

    def __eq__(self, other) -> bool:
        other = other.dims if isinstance(other, TensorShape) else (None if other is None else tuple(other))
        return self.dims == other

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.dims)

    def __repr__(self) -> str:
        return f"TensorShape({list(self.dims) if self.dims is not None else None})"


class Node:
    __slots__ = ("name", "op", "inputs", "attrs", "outputs", "value", "functions", "partial")

    def __init__(self, name: str, op: str, inputs: Sequence["Tensor"], attrs: dict,
                 outputs: Sequence[tuple[DType, tuple]], value: np.ndarray | None = None):
        self.name, self.op, self.inputs, self.attrs = name, op, list(inputs), dict(attrs)
        self.outputs = [(dtype, tuple(shape)) for dtype, shape in outputs]
        self.value = value  # a Const's value
        self.functions: dict[str, "Function"] = {}  # a While/If's bodies, by attribute
        # Output 0's value where partly known (an int scalar or vector computed from shapes: ``Shape``,
        # a slice of it, a ``Pack`` of sizes): ints, None where known only at run time. TF's shape
        # inference reads the same (ShapeRefiner::ConstantPartialShape) to shape a Reshape or Fill.
        self.partial = None

    @property
    def type(self) -> str:  # tf.Operation's name for the op type, which rules read (``t.op.type``)
        return self.op

    def output(self, index: int = 0) -> "Tensor":
        return Tensor(self, index)

    def __repr__(self) -> str:
        return f"Node({self.name}: {self.op})"


class Tensor:
    """Output ``index`` of ``node``: the value a rule holds. Operators and methods are TF's
    (``x + y`` is AddV2, ``x[1:]`` StridedSlice), recorded by ``noxla.graph.api``."""
    __slots__ = ("node", "index", "__weakref__")

    def __init__(self, node: Node, index: int = 0):
        self.node, self.index = node, index

    @property
    def dtype(self) -> DType:
        return self.node.outputs[self.index][0]

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self.node.outputs[self.index][1])

    @property
    def op(self) -> Node:  # as tf.Tensor.op: ``.type``, ``.inputs``, ``.name``
        return self.node

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def ndim(self) -> int:
        return len(self.node.outputs[self.index][1])

    @property
    def name(self) -> str:
        return f"{self.node.name}:{self.index}"

    @property
    def ref(self) -> str:
        """The tensor as a node input names it: ``node`` for output 0, else ``node:i``."""
        return self.node.name if self.index == 0 else f"{self.node.name}:{self.index}"

    @property
    def constant(self) -> np.ndarray | None:
        return self.node.value if self.node.op == "Const" else None

    def __hash__(self) -> int:  # TF 2's tensors refuse hashing (``==`` is elementwise): use ids
        raise TypeError("a graph tensor is unhashable, as a tf.Tensor; key by id()")

    def __eq__(self, other):
        return OPERATORS["eq"](self, other)

    def __ne__(self, other):
        return OPERATORS["ne"](self, other)

    def __bool__(self):
        raise Uncovered("a graph tensor used as a Python bool")

    def __len__(self) -> int:
        dims = self.node.outputs[self.index][1]
        if not dims or dims[0] is None:
            raise TypeError("len of a scalar or unknown-size tensor")
        return dims[0]

    def __iter__(self):
        raise Uncovered("iterating over a graph tensor")

    def __array__(self, dtype=None, copy=None):
        raise Uncovered("a graph tensor converted to a NumPy array")

    def __getattr__(self, name):
        method = TENSOR_METHODS.get(name)
        if method is None:  # also an AttributeError: ``getattr(t, "re", t)`` probes as it does on a tf.Tensor
            raise UncoveredAttribute(f"tf.Tensor.{name}")
        return lambda *args, **kwargs: method(self, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<graph tensor {self.name} {self.dtype.name} {list(self.node.outputs[self.index][1])}>"


# Filled by noxla.graph.api (which records the ops): operator name -> function, method name -> function.
OPERATORS: dict = {}
TENSOR_METHODS: dict = {}


def _operator(name: str, reflected: bool = False):
    def method(self, other=None):
        fn = OPERATORS[name]
        if other is None and name in ("neg", "invert", "abs"):
            return fn(self)
        return fn(other, self) if reflected else fn(self, other)
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
              "lt", "le", "gt", "ge", "matmul", "getitem"):
    setattr(Tensor, f"__{_name}__", _operator(_name))
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "matmul"):
    setattr(Tensor, f"__r{_name}__", _operator(_name, reflected=True))
for _name in ("neg", "invert", "abs"):
    setattr(Tensor, f"__{_name}__", _operator(_name))


class Function:
    """A While/If body: its argument placeholders, nodes, and the tensors it returns."""

    def __init__(self, name: str, graph: "Graph", args: Sequence[Tensor], rets: Sequence[Tensor]):
        self.name, self.graph, self.args, self.rets = name, graph, list(args), list(rets)


class Graph:
    """Nodes in the order they were recorded (every input before its reader), names unique."""

    def __init__(self, outer: "Graph | None" = None):
        self.nodes: list[Node] = []
        self.outer = outer
        self._counts: collections.Counter = collections.Counter()
        self._taken: set[str] = set()
        self._scopes: list[str] = []
        self._collections: dict[str, list] = {}
        self._own: set[int] = set()  # a body's nodes (what it need not capture)
        self.captures: list[tuple[Tensor, Tensor]] = []  # a body's (outer tensor, its _Arg here)
        self._copies: dict[tuple[int, int], Tensor] = {}  # an outer tensor's Const copy or _Arg here

    def get_collection_ref(self, key: str) -> list:
        """TF's graph collections, which helpers.int32_constant keeps its cache in."""
        return self._collections.setdefault(key, [])

    def control_dependencies(self, inputs):
        if inputs is not None:
            raise Uncovered("control dependencies")
        return contextlib.nullcontext()

    def unique_name(self, base: str) -> str:
        prefix = "".join(self._scopes)
        name = prefix + base
        while name in self._taken:
            self._counts[prefix + base] += 1
            name = f"{prefix}{base}_{self._counts[prefix + base]}"
        self._taken.add(name)
        return name

    def add(self, op: str, inputs: Sequence[Tensor], attrs: dict, outputs: Sequence[tuple[DType, tuple]],
            value: np.ndarray | None = None, name: str | None = None) -> Node:
        if self.outer is not None:
            inputs = [self.captured(t) for t in inputs]
        node = Node(self.unique_name(name or op), op, inputs, attrs, outputs, value)
        self.nodes.append(node)
        self._own.add(id(node))
        return node

    def arg(self, dtype: DType, shape: tuple) -> Tensor:
        """A body's next argument (an ``_Arg`` node; TF's function bodies take their inputs so)."""
        index = sum(n.op == "_Arg" for n in self.nodes)
        return self.add("_Arg", [], {"T": {"type": dtype.json_name}, "index": {"i": str(index)}},
                        [(dtype, shape)], name="arg").output(0)

    def captured(self, t: Tensor) -> Tensor:
        """``t`` as this body reads it: itself when recorded here; an outer Const copied in; any other
        outer tensor an extra argument (TF's while_v2 and cond_v2 capture so), its outer graph
        capturing it first when that is a body too."""
        if id(t.node) in self._own:
            return t
        key = (id(t.node), t.index)
        if t.node.op == "Const":
            if key not in self._copies:
                self._copies[key] = self.add("Const", [], t.node.attrs, [t.node.outputs[0]], t.node.value,
                                             name="Const").output(0)
            return self._copies[key]
        if key not in self._copies:
            outer = t if self.outer.outer is None else self.outer.captured(t)
            self._copies[key] = self.arg(t.dtype, t.node.outputs[t.index][1])
            self.captures.append((outer, self._copies[key]))
        return self._copies[key]

    @contextlib.contextmanager
    def name_scope(self, name: str):
        """Names in the scope start ``name/`` (as TF's, so a rule's ops read where they come from)."""
        scope = name if name.endswith("/") else name + "/"
        self._scopes.append(scope)
        try:
            yield scope
        finally:
            self._scopes.pop()

    def as_default(self):
        return recording(self)


# The graph being recorded into: set for one lowering (``recording``), read by every recorded op.
_GRAPH: contextvars.ContextVar = contextvars.ContextVar("noxla_graph", default=None)


def current() -> Graph:
    graph = _GRAPH.get()
    if graph is None:
        raise Uncovered("a graph op recorded outside a graph lowering")
    return graph


@contextlib.contextmanager
def recording(graph: Graph):
    token = _GRAPH.set(graph)
    try:
        yield graph
    finally:
        _GRAPH.reset(token)
