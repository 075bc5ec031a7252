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


def _before(graph: Graph, node: Node, new: Node) -> Node:
    graph.nodes.insert(graph.nodes.index(node), new)
    return new
