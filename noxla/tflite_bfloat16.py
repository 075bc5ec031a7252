"""bfloat16 inside a .tflite: carried in float32, each computed value rounded to bfloat16.

TFLite has no bfloat16 kernels (nor tensors its converter takes), but a bfloat16 value is a float32
with its low 16 bits zero. This pass rewrites a frozen GraphDef (and the function bodies of its
loops and conditionals) before the TFLite converter sees it:

- every bfloat16 dtype attribute becomes float32, every bfloat16 constant its exact float32 value;
- every op that computes a new bfloat16 value (a Cast to bfloat16, an AddV2 on bfloat16, ...) is
  followed by a round to nearest even at bfloat16's precision, made of builtins on the float's
  bits (``_ROUNDING``); ops that only move or pick values (``_EXACT``) need none.

Rounding a float32 result is bfloat16 arithmetic exactly for +, -, *, / and sqrt (the double
rounding is innocuous: 24 >= 2 * 8 + 2 bits), which is what the rules compute bfloat16 in (they
widen half floats to float32 and cast back, ``lowering_rules.helpers.wide``). The rounding keeps
NaN (the input NaN itself), rounds past the largest bfloat16 to infinity as bfloat16 does, and
rounds float32 subnormals on their bits as well (integer ops: LiteRT does not flush them).
Program inputs and outputs stay float32 only: a bfloat16 one is refused up front
(``lowering_rules.dtype_support``), as TFLite takes no bfloat16 tensor.
"""
from __future__ import annotations

import numpy as np

from noxla.errors import ExportError

_BF16, _F32, _I32, _BOOL = 14, 1, 3, 10  # tensorflow DataType enum values

# Ops whose bfloat16 results are some of their bfloat16 inputs' values (moved, picked, compared
# or negated), or integers: exact in float32 without rounding. Control flow is rounded inside.
_EXACT = frozenset({
    "Identity", "IdentityN", "Snapshot", "StopGradient", "Placeholder", "Const",
    "Reshape", "Squeeze", "ExpandDims", "Transpose", "ConcatV2", "Pack", "Unpack", "Split", "SplitV",
    "Slice", "StridedSlice", "GatherV2", "GatherNd", "TensorScatterUpdate", "Tile", "BroadcastTo",
    "Fill", "Pad", "PadV2", "MirrorPad", "Reverse", "ReverseV2", "Select", "SelectV2", "Maximum",
    "Minimum", "Max", "Min", "Neg", "Abs", "Sign", "Floor", "Ceil", "Round", "Rint", "Relu",
    "ZerosLike", "OnesLike", "TopKV2", "While", "StatelessWhile", "If", "StatelessIf",
    "PartitionedCall", "StatefulPartitionedCall", "Where",
})


def carry_bfloat16_in_float32(graph_def) -> bool:
    """``graph_def`` with bfloat16 carried in float32 (see the module's doc), in place: whether it
    held any."""
    if not _holds_bfloat16(graph_def):
        return False
    _Rewrite(graph_def.node, function=None).run()
    for function in graph_def.library.function:
        for arg in (*function.signature.input_arg, *function.signature.output_arg):
            if arg.type == _BF16:
                arg.type = _F32
        _Rewrite(function.node_def, function=function).run()
    return True


def _holds_bfloat16(graph_def) -> bool:
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return any(_BF16 in _types(value) for node in nodes for value in node.attr.values())


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


class _Rewrite:
    """The pass on one graph: the GraphDef's nodes, or a FunctionDef's body (``function``), whose
    tensor references name the output arg (``node:arg:index``) instead of the output's index."""

    def __init__(self, nodes, function):
        self.nodes, self.function = nodes, function
        self.constants: dict[int, str] = {}

    def ref(self, name: str, arg: str, index: int, flat: int) -> str:
        if self.function is not None:
            return f"{name}:{arg}:{index}"
        return name if flat == 0 else f"{name}:{flat}"

    def run(self) -> None:
        moved: dict[str, str] = {}  # a bfloat16 result's reference -> its rounded value's
        for node in list(self.nodes):
            outputs = _outputs(node)
            rounds = node.op == "Cast" and node.attr["DstT"].type == _BF16 or (
                node.op not in _EXACT and any(t == _BF16 for _, _, t in outputs))
            if node.op == "Placeholder" and node.attr["dtype"].type == _BF16:
                raise ExportError(f"{node.name}: a bfloat16 input reached the TFLite converter; TFLite "
                                  "takes no bfloat16 tensor (noxla's check refuses such programs)")
            _to_float32(node)
            if not rounds:
                continue
            for flat, (arg, index, dtype) in enumerate(outputs):
                if dtype == _BF16:
                    value = self.ref(node.name, arg, index, flat)
                    rounded = self.rounding(value, f"{node.name}/bf16_round_{flat}")
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

    # --- nodes

    def add(self, name: str, op: str, inputs, out_arg: str, **attrs) -> str:
        node = self.nodes.add(name=name, op=op)
        node.input.extend(inputs)
        for key, value in attrs.items():
            if isinstance(value, bool):
                node.attr[key].b = value
            else:
                node.attr[key].type = value
        return self.ref(name, out_arg, 0, 0)

    def constant(self, value: int) -> str:
        if value not in self.constants:
            from tensorflow.python.framework import tensor_util
            node = self.nodes.add(name=f"bf16_round_constants/c{value}", op="Const")
            node.attr["dtype"].type = _I32
            node.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(np.int32(value)))
            self.constants[value] = self.ref(node.name, "output", 0, 0)
        return self.constants[value]

    def rounding(self, x: str, scope: str) -> str:
        """``x`` (float32) rounded to nearest even at bfloat16's precision: on its bits b (an int32),
        b + 0x7FFF + (bit 16 of b), with the low 16 bits cleared. A negative float's int32 is its
        magnitude's bits less 2^31, so the same integer steps round its magnitude; clearing the low
        bits is floor division (the sign bit stays). A NaN's bits would carry into the exponent or
        overflow the int32: NaNs are set aside before the add (as 0) and returned as they came."""
        def op(name, kind, inputs, out_arg="z", **attrs):
            return self.add(f"{scope}/{name}", kind, inputs, out_arg, **attrs)
        bits = op("bits", "Bitcast", [x], "output", T=_F32, type=_I32)
        nan = op("is_nan", "NotEqual", [x, x], T=_F32, incompatible_shape_error=True)
        safe = op("not_nan", "SelectV2", [nan, self.constant(0), bits], "output", T=_I32)
        unit = self.constant(1 << 16)
        odd = op("odd", "FloorMod", [op("high", "FloorDiv", [safe, unit], T=_I32), self.constant(2)], T=_I32)
        up = op("up", "AddV2", [op("half", "AddV2", [safe, self.constant(0x7FFF)], T=_I32), odd], T=_I32)
        kept = op("cleared", "Mul", [op("kept", "FloorDiv", [up, unit], T=_I32), unit], T=_I32)
        rounded = op("float", "Bitcast", [kept], "output", T=_I32, type=_F32)
        return op("value", "SelectV2", [nan, x, rounded], "output", T=_F32)


def _to_float32(node) -> None:
    """``node`` with its bfloat16 dtypes float32 and a bfloat16 constant's value converted exactly."""
    for value in node.attr.values():
        which = value.WhichOneof("value")
        if which == "type" and value.type == _BF16:
            value.type = _F32
        elif which == "list" and _BF16 in value.list.type:
            value.list.type[:] = [_F32 if t == _BF16 else t for t in value.list.type]
        elif which == "tensor" and value.tensor.dtype == _BF16:
            from tensorflow.python.framework import tensor_util
            array = tensor_util.MakeNdarray(value.tensor).astype(np.float32)
            value.tensor.CopyFrom(tensor_util.make_tensor_proto(array))
