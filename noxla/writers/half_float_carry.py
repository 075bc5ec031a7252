"""Half floats inside a frozen GraphDef carried in float32, each computed value rounded back.

A target with no bfloat16 (TFLite's builtins) or no half floats at all (TF.js) can still compute
them exactly: a half float is a float32 whose low bits are zero. ``carry_in_float32`` rewrites a
frozen GraphDef (and the function bodies of its loops and conditionals) before a writer reads it:

- every half-float dtype attribute (those ``roundings`` names) becomes float32, every such
  constant its exact float32 value;
- every op that computes a new half-float value (a Cast to one, an AddV2 on one, ...) is
  followed by a round to nearest even at that dtype's precision, which the writer's ``roundings``
  build (``noxla.writers.tflite.converter.bfloat16``: on the float's bits; ``noxla.writers.tfjs.half_floats``: float
  arithmetic); ops that only move or pick values (``EXACT``) need none.

Rounding a float32 result is half-float arithmetic exactly for +, -, *, / and sqrt (the double
rounding is innocuous: 24 >= 2 * 11 + 2 bits), which is what the rules compute half floats in
(they widen them to float32 and cast back, ``lowering_rules.core.helpers.wide``). Program inputs and
outputs stay float32 only: a half-float one is refused up front (``lowering_rules.core.dtype_support``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from noxla.errors import ExportError

HALF, BF16, F32, I32 = 19, 14, 1, 3  # tensorflow DataType enum values

# Ops whose half-float results are some of their half-float inputs' values (moved, picked, compared
# or negated), or integers: exact in float32 without rounding. Control flow is rounded inside.
EXACT = frozenset({
    "Identity", "IdentityN", "Snapshot", "StopGradient", "Placeholder", "Const",
    "Reshape", "Squeeze", "ExpandDims", "Transpose", "ConcatV2", "Pack", "Unpack", "Split", "SplitV",
    "Slice", "StridedSlice", "GatherV2", "GatherNd", "TensorScatterUpdate", "Tile", "BroadcastTo",
    "Fill", "Pad", "PadV2", "MirrorPad", "Reverse", "ReverseV2", "Select", "SelectV2", "Maximum",
    "Minimum", "Max", "Min", "Neg", "Abs", "Sign", "Floor", "Ceil", "Round", "Rint", "Relu",
    "ZerosLike", "OnesLike", "TopKV2", "While", "StatelessWhile", "If", "StatelessIf",
    "PartitionedCall", "StatefulPartitionedCall", "Where",
})

# (the rewrite, the float32 tensor to round, a scope for its nodes' names) -> the rounded tensor
Rounding = Callable[["Rewrite", str, str], str]


def carry_in_float32(graph_def, roundings: Mapping[int, Rounding], target: str) -> bool:
    """``graph_def`` with the dtypes ``roundings`` names carried in float32 (see the module's doc),
    in place: whether it held any. ``target``: the writer's name, for the error on an input."""
    halves = frozenset(roundings)
    if not _holds(graph_def, halves):
        return False
    Rewrite(graph_def.node, None, roundings, target).run()
    for function in graph_def.library.function:
        for arg in (*function.signature.input_arg, *function.signature.output_arg):
            if arg.type in halves:
                arg.type = F32
        Rewrite(function.node_def, function, roundings, target).run()
    return True


def _holds(graph_def, halves: frozenset[int]) -> bool:
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return any(halves & set(_types(value)) for node in nodes for value in node.attr.values())


def _types(value) -> list[int]:
    which = value.WhichOneof("value")
    if which == "type":
        return [value.type]
    if which == "list":
        return list(value.list.type)
    if which == "tensor":
        return [value.tensor.dtype]
    return []


def _outputs(node) -> list[tuple[str, int, int]]:
    """(output arg name, index within it, dtype) for each output of ``node``, from its op's def."""
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(node.op)
    if op_def is None:  # a function called by name: its outputs are not rounded here
        return []
    found = []
    for arg in op_def.output_arg:
        if arg.type_list_attr:
            types = list(node.attr[arg.type_list_attr].list.type)
        else:
            dtype = arg.type or node.attr[arg.type_attr].type
            types = [dtype] * (node.attr[arg.number_attr].i if arg.number_attr else 1)
        found += [(arg.name, i, t) for i, t in enumerate(types)]
    return found


class Rewrite:
    """The pass on one graph: the GraphDef's nodes, or a FunctionDef's body (``function``), whose
    tensor references name the output arg (``node:arg:index``) instead of the output's index."""

    def __init__(self, nodes, function, roundings: Mapping[int, Rounding], target: str):
        self.nodes, self.function, self.roundings, self.target = nodes, function, roundings, target
        self.constants: dict[tuple, str] = {}

    def ref(self, name: str, arg: str, index: int, flat: int) -> str:
        if self.function is not None:
            return f"{name}:{arg}:{index}"
        return name if flat == 0 else f"{name}:{flat}"

    def run(self) -> None:
        moved: dict[str, str] = {}  # a half-float result's reference -> its rounded value's
        for node in list(self.nodes):
            outputs = _outputs(node)
            if node.op == "Cast":
                rounds = {0: node.attr["DstT"].type} if node.attr["DstT"].type in self.roundings else {}
            elif node.op in EXACT:
                rounds = {}
            else:
                rounds = {flat: t for flat, (_, _, t) in enumerate(outputs) if t in self.roundings}
            if node.op == "Placeholder" and node.attr["dtype"].type in self.roundings:
                raise ExportError(f"{node.name}: a half-float input reached the {self.target} writer, which "
                                  "takes none (noxla's check refuses such programs)")
            _to_float32(node, frozenset(self.roundings))
            for flat, dtype in rounds.items():
                arg, index, _ = outputs[flat]
                value = self.ref(node.name, arg, index, flat)
                rounded = self.roundings[dtype](self, value, f"{node.name}/half_round_{flat}")
                moved[value] = rounded
                if self.function is None and flat == 0:
                    moved[f"{node.name}:0"] = rounded
        rounding = {m.split(":")[0].rsplit("/", 1)[0] for m in moved.values()}
        for node in self.nodes:
            if node.name.rsplit("/", 1)[0] in rounding:  # the rounding's own nodes read the raw value
                continue
            for i, name in enumerate(node.input):
                if name in moved:
                    node.input[i] = moved[name]
        if self.function is not None:
            for key, name in self.function.ret.items():
                if name in moved:
                    self.function.ret[key] = moved[name]

    # --- nodes, for the roundings

    def add(self, name: str, op: str, inputs, out_arg: str, **attrs) -> str:
        node = self.nodes.add(name=name, op=op)
        node.input.extend(inputs)
        for key, value in attrs.items():
            if isinstance(value, bool):
                node.attr[key].b = value
            else:
                node.attr[key].type = value
        return self.ref(name, out_arg, 0, 0)

    def constant(self, value) -> str:
        """A scalar Const (an int32 for a Python int, a float32 for a numpy float32), made once."""
        key = (type(value).__name__, float(value))
        if key not in self.constants:
            from tensorflow.python.framework import tensor_util
            array = np.int32(value) if isinstance(value, int) else np.float32(value)
            node = self.nodes.add(name=f"half_round_constants/c{len(self.constants)}", op="Const")
            node.attr["dtype"].type = I32 if array.dtype == np.int32 else F32
            node.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(array))
            self.constants[key] = self.ref(node.name, "output", 0, 0)
        return self.constants[key]


def _to_float32(node, halves: frozenset[int]) -> None:
    """``node`` with its half-float dtypes float32 and a half-float constant's value converted exactly."""
    for value in node.attr.values():
        which = value.WhichOneof("value")
        if which == "type" and value.type in halves:
            value.type = F32
        elif which == "list" and halves & set(value.list.type):
            value.list.type[:] = [F32 if t in halves else t for t in value.list.type]
        elif which == "tensor" and value.tensor.dtype in halves:
            from tensorflow.python.framework import tensor_util
            array = tensor_util.MakeNdarray(value.tensor).astype(np.float32)
            value.tensor.CopyFrom(tensor_util.make_tensor_proto(array))
