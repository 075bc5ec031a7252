"""int32 arithmetic that TF.js computes exactly: JAX's products and negations wrap modulo 2^32.

TF.js's cpu backend computes Mul in float64 and stores the result in an Int32Array (ToInt32 wraps
it), exact while ``|x * y| < 2^53``; it computes Square into a Float32Array, exact only below 2^24
(``46341 ** 2`` came back as -2147479040 for JAX's -2147479015; the fuzzer's
``shift_right_logical -> square``). Its wasm backend multiplies int32 natively. So on TF.js:

- an int32 Square is a Mul (the rule's ``tf.square`` for integers, the graph's Mul(x, x));
- an int32 Mul whose product may reach ``2^53`` (as far as the graph bounds its operands: constants,
  remainders by a constant, bools, through ops that only move values) is split: with
  ``x = hi * 2^16 + lo`` and ``lo`` in [0, 2^16), ``x * y = lo * y + (hi * y) * 2^16`` modulo 2^32,
  where every product and the sum stay below 2^48 in magnitude: exact in float64, and each wrap to
  int32 is the exact residue. 7 ops for 1; a product by a constant below 2^22 (index arithmetic,
  strides) or of a bit by a power of two stays one Mul;
- an int32 Abs is ``Maximum(x, 0 - x)``: TF.js's cpu Abs computes into a Float32Array and its wasm
  Abs rounds through float32 too (|123456789| came back as 123456792); Sub and Maximum keep int32.
  abs(INT_MIN) stays INT_MIN, as in JAX.

Not yet exact: TF.js's wasm backend divides int32 in float32 (FloorDiv, FloorMod): a quotient or
remainder of operands beyond 2^24 in magnitude may be off.

WebGL keeps int32 in float32 textures, exact within +-2^24 (lowering_rules/values/limb_values.py's
WEBGL_WORDS); this form changes nothing there.
"""
from __future__ import annotations

import numpy as np

from noxla.graph.core import Graph, Node, Tensor
from noxla.writers.tfjs.arithmetic import constant_before

_INT32 = {"type": "DT_INT32"}
_LIMB = 1 << 16
_SHAPE_ONLY = ("Reshape", "ExpandDims", "Squeeze", "Transpose", "BroadcastTo", "Tile", "Identity", "GatherV2",
               "StridedSlice", "Slice", "ConcatV2", "Pack")
_EXACT = 1 << 53


def _bound(t: Tensor, depth: int = 0) -> int:
    """A bound on |t|'s values that the graph shows: a constant's largest magnitude, a FloorMod by a
    constant's divisor, a bool's 1, through ops that only move values; else 2^31."""
    c = t.constant
    if c is not None and c.dtype != object and c.size > 0:
        return int(np.abs(c.astype(np.int64)).max())
    node = t.node
    if depth >= 8:
        return 1 << 31
    if node.op == "FloorMod" and node.inputs[1].constant is not None:
        return _bound(node.inputs[1], depth + 1)
    if node.op == "Cast" and node.attrs.get("SrcT") == {"type": "DT_BOOL"}:
        return 1
    if node.op in _SHAPE_ONLY:
        values = node.inputs[:-1] if node.op == "ConcatV2" else node.inputs if node.op == "Pack" else node.inputs[:1]
        return max(_bound(v, depth + 1) for v in values)
    return 1 << 31


def _before(graph: Graph, node: Node, new: Node) -> Tensor:
    graph.nodes.insert(graph.nodes.index(node), new)
    return new.output(0)


def _split_product(graph: Graph, node: Node, x: Tensor, y: Tensor) -> None:
    """``node`` (an int32 Mul) as ``lo * y + (hi * y) * 2^16`` for ``x = hi * 2^16 + lo``."""
    dtype, shape = node.outputs[0]

    def op(name: str, kind: str, inputs, out_shape=shape) -> Tensor:
        return _before(graph, node, Node(graph.unique_name(f"{node.name}/{name}"), kind, inputs, {"T": _INT32},
                                         [(dtype, out_shape)]))
    limb = constant_before(graph, node, f"{node.name}/limb", np.array(_LIMB, np.int32))
    lo = op("lo", "FloorMod", [x, limb], x.shape.dims)
    hi = op("hi", "FloorDiv", [op("high_part", "Sub", [x, lo], x.shape.dims), limb], x.shape.dims)
    high_product = op("high_product", "Mul", [op("high_times", "Mul", [hi, y]), limb])
    node.op, node.inputs, node.attrs = "AddV2", [op("low_product", "Mul", [lo, y]), high_product], {"T": _INT32}


def _exact_abs(graph: Graph, node: Node) -> None:
    x = node.inputs[0]
    dtype, shape = node.outputs[0]
    zero = constant_before(graph, node, f"{node.name}/zero", np.array(0, np.int32))
    negated = _before(graph, node, Node(graph.unique_name(f"{node.name}/negated"), "Sub", [zero, x], {"T": _INT32},
                                        [(dtype, shape)]))
    node.op, node.inputs, node.attrs = "Maximum", [x, negated], {"T": _INT32}


def exact_int32_arithmetic(graph: Graph, kept) -> None:
    """The rewrites above, in place (``kept``, the outputs, keep their nodes: each is rewritten in place)."""
    for node in list(graph.nodes):
        if node.attrs.get("T") == _INT32 and node.op == "Abs":
            _exact_abs(graph, node)
        if node.attrs.get("T") != _INT32 or node.op not in ("Mul", "Square"):
            continue
        if node.op == "Square":
            node.op, node.inputs = "Mul", [node.inputs[0], node.inputs[0]]
        x, y = node.inputs
        if _bound(x) * _bound(y) < _EXACT:
            continue
        if y.constant is None and x.constant is not None:
            x, y = y, x  # split the run-time operand
        _split_product(graph, node, x, y)
