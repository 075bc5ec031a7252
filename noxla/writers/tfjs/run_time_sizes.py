"""Run-time sizes in the ops TF.js's WebGPU backend computes where their operands are.

A size known only at run time (``Shape``, a slice of it, integer arithmetic with constants) is read
by its op (a Pad's paddings, a Reshape's shape, a Fill's dims) through a synchronous ``dataSync``.
WebGPU runs an int32 op on the CPU, where a ``Shape``'s values are, only where its kernel has a CPU
implementation for small tensors (``WEBGPU_CPU_FORWARD``); its ``Mod`` kernel (TF's FloorMod) has
none, so it runs on the GPU, and the synchronous readback (through canvases) gave 0 in headless
Chromium: ``jnp.pad`` to a multiple of 8 at a polymorphic size padded nothing
(``pad:symbolic_amounts``, ``conv_general_dilated:symbolic_zero_pad``). Such a FloorMod by a
nonzero constant is written ``a - FloorDiv(a, c) * c`` (exact for integers, and FloorDiv, Mul, Sub
have CPU implementations there); an AddN of sizes (TF's add trees as one op: the arithmetic
optimizer's, ``noxla.writers.tfjs.arithmetic``), read 0 back the same way, is a chain of AddV2s
(``pad:symbolic_amounts``). Only for run-time sizes: TF.js's wasm divides int32 through
float32, exact for sizes (below 2**24) but not for every int32 a program's data holds.

The same holds for run-time starts (``lax.dynamic_slice``, ``dynamic_update_slice``): JAX wraps a
negative start with a select, and WebGPU's Select has no CPU implementation, so the Slice's begin
or the Pad's paddings were read back from the GPU (a lost device, or wrong values: every
dynamic_slice and dynamic_update_slice case in headless Chromium). An int32 SelectV2 that an op
reads this way (``_READ_BY_THE_EXECUTOR``, through integer ops) is ``b + Cast(c) * (a - b)``: exact
modulo 2^32, as int32 arithmetic wraps, with Cast, Mul, Sub and AddV2 on the CPU there.
"""
from __future__ import annotations

import numpy as np

from noxla.graph import ops
from noxla.graph.core import Graph, Node

# The integer ops the rules compute run-time sizes with (noxla.front.shapes, the rules' shape code).
_SIZE_OPS = ("StridedSlice", "Slice", "Pack", "ConcatV2", "Reshape", "Squeeze", "ExpandDims", "Cast", "Neg",
             "AddV2", "Add", "AddN", "Sub", "Mul", "FloorDiv", "FloorMod", "Maximum", "Minimum", "GatherV2")
_INTEGERS = ("DT_INT32", "DT_INT64")


def run_time_sizes(graph: Graph) -> set[int]:
    """The ids of the integer nodes computed from ``Shape``s and constants alone."""
    sizes: set[int] = set()
    for node in graph.nodes:
        if not node.outputs or node.outputs[0][0].json_name not in _INTEGERS:
            continue
        from_sizes = [id(t.node) in sizes for t in node.inputs]
        if node.op == "Shape" or (node.op in _SIZE_OPS and any(from_sizes) and all(
                known or t.constant is not None for known, t in zip(from_sizes, node.inputs))):
            sizes.add(id(node))
    return sizes


def sizes_on_the_cpu(graph: Graph) -> None:
    """The run-time sizes (``run_time_sizes``, found once) rewritten in place, each node keeping its
    name and output: a FloorMod by a nonzero constant as ``a - FloorDiv(a, c) * c`` (the node becomes
    the Sub), an AddN (grappler's AddOpsRewrite of an add tree) as a chain of AddV2s (exact: integer
    sums wrap in any order)."""
    sizes = run_time_sizes(graph)
    for node in list(graph.nodes):
        if id(node) not in sizes:
            continue
        dtype, shape = node.outputs[0]
        attrs = {"T": ops.type_attr(dtype)}
        if node.op == "FloorMod":
            a, c = node.inputs
            if c.constant is None or not np.all(c.constant != 0):
                continue
            quotient = _before(graph, node, Node(graph.unique_name(node.name + "/quotient"), "FloorDiv", [a, c],
                                                 attrs, [(dtype, shape)]))
            product = _before(graph, node, Node(graph.unique_name(node.name + "/multiple"), "Mul",
                                                [quotient.output(0), c], attrs, [(dtype, shape)]))
            node.op, node.inputs, node.attrs = "Sub", [a, product.output(0)], attrs
        elif node.op == "AddN" and len(node.inputs) >= 2:
            total = node.inputs[0]
            for i, addend in enumerate(node.inputs[1:-1]):
                total = _before(graph, node, Node(graph.unique_name(f"{node.name}/sum_{i}"), "AddV2",
                                                  [total, addend], attrs, [(dtype, shape)])).output(0)
            node.op, node.inputs, node.attrs = "AddV2", [total, node.inputs[-1]], attrs


# The inputs TF.js's executor reads into numbers before the op runs (tfjs-converter's op mappers:
# ``getParamValue`` of a ``number`` or ``number[]`` parameter, a ``dataSync``).
_READ_BY_THE_EXECUTOR = {"Slice": (1, 2), "StridedSlice": (1, 2, 3), "Pad": (1,), "PadV2": (1,), "MirrorPad": (1,),
                         "Reshape": (1,), "Fill": (0,), "Tile": (1,), "BroadcastTo": (1,), "ScatterNd": (2,),
                         "SplitV": (1,), "Conv2DBackpropInput": (0,), "Range": (0, 1, 2), "OneHot": (1,)}
_WALKED = _SIZE_OPS + ("SelectV2", "Select", "Identity", "Less", "LessEqual", "Greater", "GreaterEqual", "Equal",
                       "NotEqual")


def _read_by_the_executor(graph: Graph) -> list[Node]:
    """The integer and bool nodes whose values an op above reads on the CPU, through ``_WALKED`` ops."""
    found, seen = [], set()
    stack = [node.inputs[i] for node in graph.nodes for i in _READ_BY_THE_EXECUTOR.get(node.op, ())
             if i < len(node.inputs)]
    while stack:
        node = stack.pop().node
        if id(node) in seen or node.op not in _WALKED or node.outputs[0][0].json_name not in (*_INTEGERS, "DT_BOOL"):
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(node.inputs)
    return found


def selects_on_the_cpu(graph: Graph) -> None:
    """Each int32 SelectV2 an op reads on the CPU (``_read_by_the_executor``) as ``b + Cast(c) * (a - b)``,
    in place (the node becomes the AddV2)."""
    for node in _read_by_the_executor(graph):
        if node.op not in ("SelectV2", "Select") or node.outputs[0][0].json_name != "DT_INT32":
            continue
        c, a, b = node.inputs
        dtype, shape = node.outputs[0]
        attrs = {"T": ops.type_attr(dtype)}
        cast = {"SrcT": ops.type_attr(c.dtype), "DstT": attrs["T"], "Truncate": ops.bool_attr(False)}
        chosen = _before(graph, node, Node(graph.unique_name(node.name + "/chosen"), "Cast", [c], cast,
                                           [(dtype, c.shape.dims)]))
        step = _before(graph, node, Node(graph.unique_name(node.name + "/step"), "Sub", [a, b], attrs,
                                         [(dtype, shape)]))
        moved = _before(graph, node, Node(graph.unique_name(node.name + "/moved"), "Mul",
                                          [chosen.output(0), step.output(0)], attrs, [(dtype, shape)]))
        node.op, node.inputs, node.attrs = "AddV2", [b, moved.output(0)], attrs


def _before(graph: Graph, node: Node, new: Node) -> Node:
    graph.nodes.insert(graph.nodes.index(node), new)
    return new
