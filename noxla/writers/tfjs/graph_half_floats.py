"""Half floats inside a TF.js model written from noxla's graph: carried in float32, each computed
result rounded back, as TF's path does to its frozen GraphDef (``noxla.writers.half_float_carry`` with
``noxla.writers.tfjs.half_floats``' rounding, which both paths share).

TF.js has float32 tensors only: it reads a DT_HALF node as float32 and computes in float32 without
a word, so ``(a * b) * c`` on float16 would keep float32's extra bits where JAX rounds each product.
After the TF.js rewrites (``tfjs_passes``, whose arithmetic rewrites would not keep a rounding's
float arithmetic as written: TF's path carries after grappler too), every half-float dtype becomes
float32 (attributes, outputs, constants' values, exact), and each node that computes a new half-float
value (not one of ``half_float_carry.EXACT``'s, which move, pick or compare values) is followed by
``rounded_in_float32``'s nodes, which its readers then read. Loop and conditional bodies are carried
the same way, each a graph of its own; a body's results are its rounded values.

The pass takes the roundings per dtype (``TFJS_ROUNDINGS`` by default): the graph's TFLite writer
carries bfloat16 alone (float16 stays LiteRT's), rounded on the float's bits (``noxla.writers.tflite.bfloat16``).
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from noxla.graph.core import Graph, Node, Tensor
from noxla.graph.dtypes import DTYPES, Uncovered
from noxla.writers.half_float_carry import EXACT
from noxla.writers.tfjs.half_floats import HALF_FLOATS, rounded_in_float32

_FLOAT32 = DTYPES["float32"]
_BY_ENUM = {d.as_datatype_enum: d for d in DTYPES.values()}
_COMPARISONS = ("Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual")

# (the builder, the float32 tensor to round, a scope for its nodes' names) -> the rounded tensor
Rounding = Callable[["_Builder", Tensor, str], Tensor]
TFJS_ROUNDINGS: dict[str, Rounding] = {
    name: (lambda builder, x, scope, p=params: rounded_in_float32(builder, x, scope, *p))
    for name, params in HALF_FLOATS.items()}


def holds_half_floats(graph: Graph, roundings: Mapping[str, Rounding] = TFJS_ROUNDINGS) -> bool:
    return any(dtype.name in roundings for n in graph.nodes for dtype, _ in n.outputs)


def carried_in_float32(graph: Graph, results: Sequence[Tensor],
                       roundings: Mapping[str, Rounding] = TFJS_ROUNDINGS) -> list[Tensor]:
    """``graph`` with the half floats ``roundings`` names carried in float32, in place; ``results``
    (a body's, or the program's outputs) as its readers now read them: a rounded half-float result
    is its rounding's."""
    if not holds_half_floats(graph, roundings):
        return list(results)
    builder = _Builder(graph)
    rounded: dict[tuple[int, int], Tensor] = {}
    order: list[Node] = []
    for node in graph.nodes:
        if node.op == "Placeholder" and node.outputs[0][0].name in roundings:
            raise Uncovered("a half-float program input (noxla's check refuses it)")
        rounds = {} if node.op in EXACT or node.op == "_Arg" else {
            i: dtype.name for i, (dtype, _) in enumerate(node.outputs) if dtype.name in roundings}
        _to_float32(node, roundings)
        order.append(node)
        for index, name in rounds.items():
            builder.added = []
            rounded[(id(node), index)] = roundings[name](builder, node.output(index), f"{node.name}/half_round_{index}")
            order += builder.added
    own = {id(n) for n in builder.made}
    for node in order:
        if id(node) not in own:  # the rounding's own nodes read the raw value
            node.inputs = [rounded.get((id(t.node), t.index), t) for t in node.inputs]
    graph.nodes = builder.constants_made + order
    return [rounded.get((id(t.node), t.index), t) for t in results]


class _Builder:
    """A rounding's node maker on noxla's graph (``half_float_carry.Rewrite``'s ``add`` and
    ``constant``): nodes shaped as the rounded value, of the type their ``T`` (a Bitcast's ``type``)
    names, comparisons bool; its scalar constants (int32 for a Python int, else float32) made once."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.added: list[Node] = []   # the current rounding's nodes, in reading order
        self.made: list[Node] = []    # every rounding's
        self.constants_made: list[Node] = []
        self._constants: dict[tuple, Tensor] = {}

    def add(self, name: str, op: str, inputs: Sequence[Tensor], out_arg: str, **attrs) -> Tensor:
        del out_arg  # a GraphDef body's output argument name; noxla's graph reads outputs by index
        shape = max((t.node.outputs[t.index][1] for t in inputs), key=len)
        dtype = DTYPES["bool"] if op in _COMPARISONS else _BY_ENUM[attrs["type" if op == "Bitcast" else "T"]]
        json_attrs = {key: {"b": value} if isinstance(value, bool) else {"type": _BY_ENUM[value].json_name}
                      for key, value in attrs.items()}
        node = Node(self.graph.unique_name(name), op, inputs, json_attrs, [(dtype, shape)])
        self.added.append(node)
        self.made.append(node)
        return node.output(0)

    def constant(self, value) -> Tensor:
        value = np.int32(value) if isinstance(value, int) else np.float32(value)
        dtype = DTYPES[value.dtype.name]
        key = (dtype.name, float(value))
        if key not in self._constants:
            node = Node(self.graph.unique_name("half_round_constants/c"), "Const", [],
                        {"dtype": {"type": dtype.json_name}}, [(dtype, ())], np.asarray(value))
            self.constants_made.append(node)
            self._constants[key] = node.output(0)
        return self._constants[key]


def _to_float32(node: Node, halves: Mapping[str, Rounding]) -> None:
    """``node`` with its ``halves`` dtypes float32 (new attribute dicts: recorded nodes may share
    them) and such a constant's value converted, exactly."""
    json_names = {DTYPES[name].json_name for name in halves}
    for key, value in node.attrs.items():
        if value.get("type") in json_names:
            node.attrs[key] = {"type": _FLOAT32.json_name}
        elif any(t in json_names for t in value.get("list", {}).get("type", [])):
            types = [_FLOAT32.json_name if t in json_names else t for t in value["list"]["type"]]
            node.attrs[key] = {"list": {**value["list"], "type": types}}
    if any(dtype.name in halves for dtype, _ in node.outputs):
        node.outputs = [(_FLOAT32 if dtype.name in halves else dtype, shape) for dtype, shape in node.outputs]
        if node.op == "Const":
            node.value = np.asarray(node.value).astype(np.float32)
