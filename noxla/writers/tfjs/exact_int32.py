"""int32 arithmetic that TF.js computes exactly: JAX's products and negations wrap modulo 2^32.

TF.js's cpu backend computes Mul in float64 and stores the result in an Int32Array (ToInt32 wraps
it), exact while ``|x * y| < 2^53``; it computes Square into a Float32Array, exact only below 2^24
(``46341 ** 2`` came back as -2147479040 for JAX's -2147479015; the fuzzer's
``shift_right_logical -> square``). Its wasm backend multiplies int32 natively. So on TF.js:

- an int32 Square is a Mul (the rule's ``tf.square`` for integers, the graph's Mul(x, x));
- an int32 Mul whose product may reach ``2^53`` (as far as ``int32_ranges`` bounds its operands:
  constants, remainders, bools, sums and products of those, through ops that only move values) is
  split: with ``x = hi * 2^16 + lo`` and ``lo`` in [0, 2^16), ``x * y = lo * y + (hi * y) * 2^16``
  modulo 2^32, where every product and the sum stay below 2^48 in magnitude: exact in float64, and
  each wrap to int32 is the exact residue. 7 ops for 1; a product by a constant below 2^22 (index
  arithmetic, strides) or of a bit by a power of two stays one Mul;
- an int32 Abs is ``Maximum(x, 0 - x)``: TF.js's cpu Abs computes into a Float32Array and its wasm
  Abs rounds through float32 too (|123456789| came back as 123456792); Sub and Maximum keep int32.
  abs(INT_MIN) stays INT_MIN, as in JAX;
- an int32 FloorDiv whose float32 quotient may be off is computed from the exact remainder:
  TF.js's wasm FloorDiv is ``floor(float(x) / float(y))`` (``(2^31 - 1) // 3`` came back as
  715827904 for 715827882), its FloorMod integer. A dividend the ranges keep below 2^24, or a
  multiple of 2^k divided by 2^k (the limb arithmetic's halves), stays one FloorDiv; a division by
  a literal 2^k (an arithmetic right shift) is 3 ops from 2^7 on, 6 below; any other 16.

- an int32 Prod whose running product may pass 2^53 is a tree of pairwise products (the Mul rule
  above then keeps each exact): TF.js's cpu Prod multiplies in float64. A product of sizes stays.

WebGL keeps int32 in float32 textures, exact within +-2^24 (lowering_rules/values/limb_values.py's
WEBGL_WORDS); this form changes nothing there.
"""
from __future__ import annotations

import numpy as np

from noxla.graph import ops
from noxla.graph.core import Graph, Node, Tensor
from noxla.writers.tfjs.arithmetic import constant_before, recorded_before
from noxla.writers.tfjs.int32_ranges import Range, int32_ranges, power_of_two

_INT32 = {"type": "DT_INT32"}
_FLOAT = {"type": "DT_FLOAT"}
_LIMB = 1 << 16
_EXACT = 1 << 53  # float64's integers
_FLOAT32_EXACT = 1 << 24  # float32's


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


def _float32_quotient_is_exact(x: Range, y: Range) -> bool:
    """Whether ``floor(float32(x) / float32(y))`` is x // y: for a dividend below 2^24 the float32
    quotient is within half an ulp, less than its distance to the next integer (1/|y|); a dividend
    float32 holds exactly (a multiple of 2^k below 2^(24+k)) divided by a power of two is exact."""
    return x.magnitude < _FLOAT32_EXACT or (power_of_two(y) is not None and x.magnitude < _FLOAT32_EXACT << x.zeros)


def _exact_shift(graph: Graph, node: Node, k: int) -> None:
    """``node`` (an int32 FloorDiv by 2^k, an arithmetic right shift) on exact float32 values: from
    2^7 on, ``(x - x mod 2^k) / 2^k`` (a multiple of 2^k below 2^31 has at most 24 significant bits);
    below, ``hi * 2^(16-k) + lo // 2^k`` with ``x = hi * 2^16 + lo`` (both halves exact)."""
    x = node.inputs[0]
    dtype, shape = node.outputs[0]

    def op(name: str, kind: str, inputs) -> Tensor:
        return _before(graph, node, Node(graph.unique_name(f"{node.name}/{name}"), kind, inputs, {"T": _INT32},
                                         [(dtype, shape)]))

    def constant(name: str, value: int) -> Tensor:
        return constant_before(graph, node, f"{node.name}/{name}", np.array(value, np.int32))
    if k >= 7:
        divisor = node.inputs[1]
        node.inputs = [op("multiple", "Sub", [x, op("remainder", "FloorMod", [x, divisor])]), divisor]
        return
    limb = constant("limb", _LIMB)
    low = op("low", "FloorMod", [x, limb])
    high = op("high", "FloorDiv", [op("high_part", "Sub", [x, low]), limb])
    node.op, node.attrs = "AddV2", {"T": _INT32}
    node.inputs = [op("high_shifted", "Mul", [high, constant("high_scale", _LIMB >> k)]),
                   op("low_shifted", "FloorDiv", [low, constant("divisor", 1 << k)])]


def _existing_remainder(graph: Graph, quotient: Node) -> Tensor | None:
    """The graph's FloorMod of the FloorDiv ``quotient``'s operands (the rules compute both), moved
    before it if it came after (it reads only those operands)."""
    x, y = quotient.inputs
    for node in graph.nodes:
        if (node.op == "FloorMod" and node.inputs[0].node is x.node and node.inputs[0].index == x.index
                and node.inputs[1].node is y.node and node.inputs[1].index == y.index):
            if graph.nodes.index(node) > graph.nodes.index(quotient):
                graph.nodes.remove(node)
                graph.nodes.insert(graph.nodes.index(quotient), node)
            return node.output(0)
    return None


def _exact_quotient(graph: Graph, node: Node) -> None:
    """``node`` (an int32 FloorDiv) from integer remainders: ``r = x mod y`` (TF.js's FloorMod is
    integer on cpu and wasm), the multiple ``m = x - r`` estimated in float32 (``float(x) -
    float(r)``: no int32 wrap) and divided, rounded: ``q0``; then ``d = m - q0 * y`` is exactly
    ``(q - q0) * y`` (below 2^31: the estimate is off by at most |m| 2^-22 / |y| + 1/2), and
    ``k = round(d / y)`` is exact (a small integer), so ``q = q0 + k``. 16 ops for one, only where
    the ranges cannot show the float32 quotient exact."""
    x, y = node.inputs
    int32, float32 = node.outputs[0][0], ops.as_dtype(np.float32)
    shape = node.outputs[0][1]

    def op(name: str, kind: str, inputs, attrs, dtype=int32) -> Tensor:
        return _before(graph, node, Node(graph.unique_name(f"{node.name}/{name}"), kind, inputs, attrs,
                                         [(dtype, shape)]))

    def cast(name: str, t: Tensor, to_float: bool = True) -> Tensor:
        source, target = (_INT32, _FLOAT) if to_float else (_FLOAT, _INT32)
        return op(name, "Cast", [t], {"SrcT": source, "DstT": target, "Truncate": {"b": False}},
                  float32 if to_float else int32)

    def rounded_quotient(name: str, dividend: Tensor, divisor: Tensor) -> Tensor:
        quotient = op(f"{name}_ratio", "RealDiv", [dividend, divisor], {"T": _FLOAT}, float32)
        return cast(name, op(f"{name}_rounded", "Round", [quotient], {"T": _FLOAT}, float32), to_float=False)
    remainder = _existing_remainder(graph, node)
    if remainder is None:
        remainder = op("remainder", "FloorMod", [x, y], {"T": _INT32})
    y_float = cast("divisor", y)
    multiple_float = op("multiple_estimate", "Sub", [cast("dividend", x), cast("remainder_float", remainder)],
                        {"T": _FLOAT}, float32)
    estimate = rounded_quotient("estimate", multiple_float, y_float)
    multiple = op("multiple", "Sub", [x, remainder], {"T": _INT32})
    error = op("error", "Sub", [multiple, op("estimate_multiple", "Mul", [estimate, y], {"T": _INT32})],
               {"T": _INT32})
    correction = rounded_quotient("correction", cast("error_float", error), y_float)
    node.op, node.inputs, node.attrs = "AddV2", [estimate, correction], {"T": _INT32}


_SIZE_MOVES = ("StridedSlice", "Slice", "GatherV2", "ConcatV2", "Pack", "Reshape", "Cast", "Identity")


def _sizes(t: Tensor, depth: int = 0) -> bool:
    """Whether ``t`` holds only tensor sizes (a Shape, sliced or packed, or constants): their
    product is an element count, far below 2^53."""
    node = t.node
    if node.op in ("Shape", "Size", "Const"):
        return True
    inputs = node.inputs[:-1] if node.op == "ConcatV2" else node.inputs
    return depth < 8 and node.op in _SIZE_MOVES and all(_sizes(i, depth + 1) for i in inputs)


def _product_tree(graph: Graph, node: Node) -> None:
    """``node`` (an int32 Prod over constant axes of a static shape) as a tree of pairwise products,
    which the Mul rewrite above then keeps exact: TF.js's cpu Prod multiplies its terms in float64,
    wrong once the running product passes 2^53 (three wide words)."""
    x, axes = node.inputs
    dims, rank = x.shape.dims, x.shape.rank
    axes = sorted({int(a) % rank for a in np.asarray(axes.constant).ravel()})
    kept = [a for a in range(rank) if a not in axes]
    n, k = int(np.prod([dims[a] for a in axes])), int(np.prod([dims[a] for a in kept]))

    def tree(tf, n=n):
        terms = tf.reshape(tf.transpose(x, kept + axes), [k, n])
        if n == 0:
            terms = tf.ones([k, 1], tf.int32)
        while n > 1:
            if n % 2:
                terms, n = tf.concat([terms, tf.ones([k, 1], tf.int32)], 1), n + 1
            pairs, n = tf.reshape(terms, [k, n // 2, 2]), n // 2  # Slices: wasm's strided int32 slice is wrong
            terms = tf.reshape(tf.slice(pairs, [0, 0, 0], [k, n, 1]), [k, n]) * tf.reshape(
                tf.slice(pairs, [0, 0, 1], [k, n, 1]), [k, n])
        return tf.reshape(terms, list(node.outputs[0][1]))
    product = recorded_before(graph, node, tree)
    node.op, node.inputs, node.attrs = "Identity", [product], {"T": _INT32}


def _needs_product_tree(node: Node, of) -> bool:
    x, axes = node.inputs
    if x.shape.dims is None or None in x.shape.dims or axes.constant is None or _sizes(x):
        return False
    n = int(np.prod([x.shape.dims[int(a) % x.shape.rank] for a in np.asarray(axes.constant).ravel()]))
    return of(x).magnitude ** n >= _EXACT


def exact_int32_arithmetic(graph: Graph, kept) -> None:
    """The rewrites above, in place (``kept``, the outputs, keep their nodes: each is rewritten in place)."""
    of = int32_ranges(graph)
    products = [n for n in graph.nodes if n.op == "Prod" and n.attrs.get("T") == _INT32 and _needs_product_tree(n, of)]
    for node in products:
        _product_tree(graph, node)
    if products:
        of = int32_ranges(graph)
    for node in list(graph.nodes):
        if node.attrs.get("T") != _INT32:
            continue
        if node.op == "Abs":
            _exact_abs(graph, node)
        elif node.op == "FloorDiv" and not _float32_quotient_is_exact(*map(of, node.inputs)):
            k = power_of_two(of(node.inputs[1]))
            if k is None:
                _exact_quotient(graph, node)
            else:
                _exact_shift(graph, node, k)
        elif node.op in ("Mul", "Square"):
            if node.op == "Square":
                node.op, node.inputs = "Mul", [node.inputs[0], node.inputs[0]]
            x, y = node.inputs
            if of(x).magnitude * of(y).magnitude < _EXACT:
                continue
            if y.constant is None and x.constant is not None:
                x, y = y, x  # split the run-time operand
            _split_product(graph, node, x, y)
