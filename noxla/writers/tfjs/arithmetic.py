"""Grappler's arithmetic rewrites that TF's path gets before the TF.js converter writes a graph
(``noxla.writers.tfjs.optimize`` runs constant folding and the arithmetic optimizer), made on noxla's
graph under grappler's conditions, so the graph path's model.json has no more ops:

- constant folding's arithmetic with an identity operand (``SimplifyArithmeticOperations``):
  ``x * 1``, ``x / 1``, ``x + 0`` (BiasAdd too), ``x - 0``, ``1 * y``, ``0 + y`` are their other operand (a
  BroadcastTo of it where only the constant has the result's shape), a float ``0 - y`` is ``Neg(y)``, a float
  ``1 / y`` is ``Reciprocal(y)``. The same values but one: ``-0.0 + 0.0`` is ``+0.0``, and the
  rewrite gives ``-0.0`` (TF's path does the same);
- the arithmetic optimizer's ``RemoveNegation`` (an add of a Neg is a Sub, a Sub of a Neg an
  add: exact) and ``ReplaceMulWithBroadcastByTile``: a float32 ``Mul(x, ones)`` that
  only broadcasts ``x`` (same rank, larger result) is ``Tile(x, multiples)``: exact;
- constant folding's selects on a constant condition (the operand it picks) and logic with an
  identity operand (``x | False``, ``x & True``: ``x``), where the operand has the result's shape;
- its ``FuseSquaredDiff``: ``Square(x - y)`` whose difference nothing else reads is
  ``SquaredDifference(x, y)``, which every TF.js backend computes as ``(x - y) * (x - y)``: exact;
- its ``AddOpsRewrite``: a tree of Add/AddV2/AddN whose inner adds are read once (the root being
  no output) is one AddN of its leaves in depth-first order, or, when the leaves have several
  shapes, one AddN per shape (smallest first) added pairwise. For floats this reassociates the
  sum, as it does on TF's path (tests/test_graph.py checks the zoo against JAX in TF.js); an
  integer tree's constants are summed first (constant folding's push-down: exact for integers).
"""
from __future__ import annotations

import collections

import numpy as np

from noxla.graph import api, ops
from noxla.graph.core import Graph, Node, Tensor, recording

_ADDS = ("Add", "AddV2")
_FLOATS = ("DT_FLOAT", "DT_DOUBLE", "DT_HALF", "DT_BFLOAT16")


def _all(tensor: Tensor, value) -> bool:
    c = tensor.constant
    return c is not None and c.dtype != object and c.dtype.kind in "iufb" and c.size > 0 and bool(np.all(c == value))


def constant_before(graph: Graph, before: Node, name: str, value: np.ndarray) -> Tensor:
    """A Const of ``value`` placed just before ``before``."""
    dtype = ops.as_dtype(value.dtype)
    node = Node(graph.unique_name(name), "Const", [], {"dtype": ops.type_attr(dtype)}, [(dtype, value.shape)], value)
    graph.nodes.insert(graph.nodes.index(before), node)
    return node.output(0)


def recorded_before(graph: Graph, before: Node, build):
    """What ``build(tf)`` returns, the ops it records (with ``noxla.graph.api``'s ``tf``) placed just
    before ``before``: a rewrite written as the rules write ops."""
    tf, start = api.recorder(), len(graph.nodes)
    with recording(graph):
        result = build(tf)
    recorded = graph.nodes[start:]
    del graph.nodes[start:]
    at = graph.nodes.index(before)
    graph.nodes[at:at] = recorded
    return result


def _broadcast_to(graph: Graph, node: Node, x: Tensor) -> None:
    shape = np.asarray(node.outputs[0][1], dtype=np.int32)
    node.op, node.attrs = "BroadcastTo", {"T": node.attrs["T"], "Tidx": ops.type_attr(ops.as_dtype(np.int32))}
    node.inputs = [x, constant_before(graph, node, node.name + "/shape", shape)]


def identity_arithmetic(graph: Graph, kept) -> None:
    """Constant folding's identity-operand rewrites above, in place (bypassed nodes are left for pruning)."""
    moved: dict[tuple[int, int], Tensor] = {}
    for node in list(graph.nodes):
        node.inputs = [moved.get((id(t.node), t.index), t) for t in node.inputs]
        is_add, is_sub, is_mul = node.op in (*_ADDS, "BiasAdd"), node.op == "Sub", node.op == "Mul"
        is_div = node.op in ("RealDiv", "Div")
        if id(node) in kept or not (is_add or is_sub or is_mul or is_div) or "T" not in node.attrs:
            continue
        if node.attrs["T"]["type"] in ("DT_STRING", "DT_BOOL"):
            continue
        x, y = node.inputs
        out = node.outputs[0][1]
        x_fits, y_fits = x.shape.dims == out, y.shape.dims == out
        if (is_mul and _all(x, 1)) or (is_add and _all(x, 0)):
            if y_fits:
                moved[(id(node), 0)] = y
            elif x_fits:
                _broadcast_to(graph, node, y)
            continue
        # A float's only: TF.js's wasm Neg goes through float32 and rounds int32 values past 2^24, so
        # the rules write an integer negation as 0 - x (lowering_rules/elementwise.py), and TF's path
        # keeps that Sub (div:i32_truncates on tfjs_wasm).
        if y_fits and is_sub and _all(x, 0) and node.attrs["T"]["type"] in _FLOATS:
            node.op, node.attrs, node.inputs = "Neg", {"T": node.attrs["T"]}, [y]
            continue
        if y_fits and is_div and _all(x, 1) and node.attrs["T"]["type"] in _FLOATS:
            node.op, node.attrs, node.inputs = "Reciprocal", {"T": node.attrs["T"]}, [y]
            continue
        y_zero = _all(y, 0)
        if ((is_mul or is_div) and not y_zero and _all(y, 1)) or ((is_add or is_sub) and y_zero):
            if x_fits:
                moved[(id(node), 0)] = x
            elif y_fits:
                _broadcast_to(graph, node, x)


def constant_selects_and_logic(graph: Graph, kept) -> None:
    """Selects on a constant condition and ``x | False``, ``x & True`` as the operand they give."""
    moved: dict[tuple[int, int], Tensor] = {}
    for node in graph.nodes:
        node.inputs = [moved.get((id(t.node), t.index), t) for t in node.inputs]
        if id(node) in kept:
            continue
        picked = None
        if node.op == "SelectV2":
            cond, x, y = node.inputs
            picked = x if _all(cond, True) else y if _all(cond, False) else None
        elif node.op in ("LogicalOr", "LogicalAnd"):
            identity = node.op == "LogicalAnd"
            x, y = node.inputs
            picked = x if _all(y, identity) else y if _all(x, identity) else None
        out = node.outputs[0][1]
        if picked is not None and picked.shape.dims == out and None not in out:
            moved[(id(node), 0)] = picked


def squared_differences(graph: Graph, kept) -> None:
    """FuseSquaredDiff above (not for complex values, whose Square is not the squared modulus)."""
    readers = collections.Counter((id(t.node), t.index) for n in graph.nodes for t in n.inputs)
    for node in graph.nodes:
        if node.op != "Square" or id(node) in kept or node.attrs["T"]["type"].startswith("DT_COMPLEX"):
            continue
        sub = node.inputs[0]
        if sub.node.op == "Sub" and readers[(id(sub.node), 0)] == 1 and id(sub.node) not in kept:
            node.op, node.inputs = "SquaredDifference", list(sub.node.inputs)


def negations_removed(graph: Graph, kept) -> None:
    """The arithmetic optimizer's RemoveNegation: ``a + -b`` is ``a - b``, ``-a + b`` is ``b - a``,
    ``a - -b`` is ``a + b`` (IEEE subtraction is the addition of the negation: exact)."""
    for node in graph.nodes:
        if id(node) in kept or node.op not in (*_ADDS, "Sub") or node.attrs["T"]["type"] == "DT_STRING":
            continue
        x, y = node.inputs
        if node.op == "Sub":
            if y.node.op == "Neg":
                node.op, node.inputs = "AddV2", [x, y.node.inputs[0]]
        elif x.node.op == "Neg":
            node.op, node.inputs = "Sub", [y, x.node.inputs[0]]
        elif y.node.op == "Neg":
            node.op, node.inputs = "Sub", [x, y.node.inputs[0]]


def tiles_for_broadcasting_muls(graph: Graph, kept) -> None:
    """A float32 Mul(x, ones) that only broadcasts x, as Tile (ReplaceMulWithBroadcastByTile)."""
    for node in list(graph.nodes):
        if node.op != "Mul" or id(node) in kept or node.attrs.get("T") != {"type": "DT_FLOAT"}:
            continue
        x, ones = node.inputs
        out = node.outputs[0][1]
        if (x.constant is not None or ones.node.op != "Const" or not _all(ones, 1)
                or x.shape.dims == out or not len(x.shape.dims) == len(ones.shape.dims) == len(out)
                or None in out or None in x.shape.dims):
            continue
        multiples = np.asarray([o // i for o, i in zip(out, x.shape.dims)], dtype=np.int32)
        node.op, node.attrs = "Tile", {"T": node.attrs["T"], "Tmultiples": ops.type_attr(ops.as_dtype(np.int32))}
        node.inputs = [x, constant_before(graph, node, node.name + "/multiples", multiples)]


def _add_n(node: Node, inputs: list[Tensor], dtype_attr: dict) -> None:
    node.op, node.inputs = "AddN", inputs
    node.attrs = {**dtype_attr, "N": ops.int_attr(len(inputs))}


def _integer_constants_summed(graph: Graph, root: Node, leaves: list[Tensor]) -> list[Tensor]:
    """An integer add tree's constant leaves as one constant, the last leaf: constant folding's
    push-down on TF's path (``(b + 2) - 1`` of a run-time size is ``b + 1`` there), exact for
    wrapping integer sums. (A float's is not made: it changes the rounding, see the module's doc.)
    A run-time size is then one AddV2, which TF.js's WebGPU backend computes on the CPU where its
    operands are; as an AddN it ran on the GPU, and the reader's synchronous readback of it gave 0
    in headless Chromium (slice:symbolic_limit, dynamic_slice:symbolic_operand)."""
    constants = [leaf for leaf in leaves if leaf.constant is not None]
    if len(constants) < 2 or constants[0].constant.dtype.kind not in "iu":
        return leaves
    total = np.atleast_1d(constants[0].constant)
    for c in constants[1:]:
        total = np.add(total, np.atleast_1d(c.constant), dtype=total.dtype)  # wraps, as the kernels do
    shape = np.broadcast_shapes(*(c.constant.shape for c in constants))
    summed = constant_before(graph, root, root.name + "/summed", total.reshape(shape))
    return [leaf for leaf in leaves if leaf.constant is None] + [summed]


def add_trees_as_add_n(graph: Graph, kept) -> None:
    """AddOpsRewrite above: roots taken last node first, as grappler's queue pops them."""
    readers = collections.Counter((id(t.node), t.index) for n in graph.nodes for t in n.inputs)
    done: set[int] = set()

    def addable(node: Node) -> bool:
        return (node.op in (*_ADDS, "AddN") and id(node) not in kept and id(node) not in done
                and node.attrs["T"]["type"] != "DT_STRING")

    for root in reversed(list(graph.nodes)):
        if not addable(root):
            continue
        leaves, absorbed, stack = [], [], list(reversed(root.inputs))
        while stack:
            tensor = stack.pop()
            source = tensor.node
            if addable(source) and readers[(id(source), 0)] == 1:
                absorbed.append(source)
                stack.extend(reversed(source.inputs))
            else:
                leaves.append(tensor)
        if not absorbed or any(None in leaf.shape.dims for leaf in leaves):  # unknown sizes: left as adds
            continue
        done.update(id(n) for n in (root, *absorbed))
        leaves = _integer_constants_summed(graph, root, leaves)
        if len(leaves) == 2 and leaves[0].shape.dims == leaves[1].shape.dims:
            root.op, root.inputs, root.attrs = "AddV2", leaves, {"T": root.attrs["T"]}
            continue
        by_shape: dict[tuple, list[Tensor]] = {}
        for leaf in leaves:
            by_shape.setdefault(leaf.shape.dims, []).append(leaf)
        shapes = sorted(by_shape, key=lambda s: int(np.prod(s, dtype=np.int64)))  # grappler: smaller first
        dtype_attr = {"T": root.attrs["T"]}
        dtype = root.outputs[0][0]

        if len(shapes) == 1:
            _add_n(root, leaves, dtype_attr)
            continue
        sums = []
        for i, shape in enumerate(shapes):
            group = by_shape[shape]
            if len(group) == 1:
                sums.append(group[0])
                continue
            node = Node(graph.unique_name(f"{root.name}/Leaf_{i}"), "AddN", [], {}, [(dtype, shape)])
            _add_n(node, group, dtype_attr)
            graph.nodes.insert(graph.nodes.index(root), node)
            done.add(id(node))
            sums.append(node.output(0))
        total = sums[0]
        for i, addend in enumerate(sums[1:]):
            last = i == len(sums) - 2
            node = root if last else Node(graph.unique_name(f"{root.name}/Internal_{i}"), "AddV2", [], {},
                                          [(dtype, np.broadcast_shapes(total.shape.dims, addend.shape.dims))])
            node.op, node.attrs, node.inputs = "AddV2", dict(dtype_attr), [total, addend]
            if not last:
                graph.nodes.insert(graph.nodes.index(root), node)
                done.add(id(node))
            total = node.output(0)
