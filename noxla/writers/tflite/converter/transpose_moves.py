"""The moves ``noxla.writers.tflite.converter.transposes`` makes, in one graph: the main graph or a loop or branch body
(a ``Scope``). ``op(c, transpose(x, p))`` becomes ``transpose(op(transpose(c, p^-1), x), p)``; see
that module for why.
"""
from __future__ import annotations

import numpy as np

# TF ops the converter legalizes to the pass's ops (TFL ADD, MUL, MAXIMUM, MINIMUM, SUB, DIV); SUB and
# DIV are the ones whose operands it swaps.
_PUSHED = frozenset({"AddV2", "Add", "Mul", "Maximum", "Minimum", "Sub", "RealDiv", "Div"})
ORDERED = frozenset({"Sub", "RealDiv", "Div"})
_THROUGH = frozenset({"Identity", "Snapshot"})
# A body names an op's output by its output argument (``sub:z:0``).
_OUTPUT_ARG = {"Transpose": "y", "Const": "output", "Identity": "output", "Snapshot": "output",
               "Reshape": "output", **{op: "z" for op in _PUSHED}}


class Scope:
    """The main graph, or one library function's body, as the moves read and grow it. ``nodes``: its
    NodeDefs (a repeated field); ``shapes``: tensor name (as its inputs name it) -> static shape;
    ``constant``: the names computed from constants only; ``function``: the FunctionDef of a body."""

    def __init__(self, nodes, shapes: dict, constant: set, function=None):
        self.nodes, self.shapes, self.constant, self.function = nodes, shapes, constant, function
        self.by_name = {n.name: n for n in nodes}

    def output(self, name: str, op: str) -> str:
        """How an input names the first output of the node ``name`` running ``op``."""
        return name if self.function is None else f"{name}:{_OUTPUT_ARG[op]}:0"

    def shape(self, name: str):
        return self.shapes.get(self._key(name))

    def set_shape(self, name: str, shape) -> None:
        self.shapes[self._key(name)] = shape

    def _key(self, name: str) -> str:
        return name if self.function is not None or ":" in name else f"{name}:0"

    def results(self):
        return self.function.ret.values() if self.function is not None else ()


def move_transposes(scope: Scope) -> bool:
    """Every move ``scope`` holds, until none is left; whether there was one."""
    dead: set = set()
    progress = True
    while progress:
        progress = False
        readers = _readers(scope.nodes, dead, extra=scope.results())
        for node in list(scope.nodes):
            if (node.op not in _PUSHED or len(node.input) < 2 or node.input[1].startswith("^") or node.name in dead
                    or all(node_name(i) in scope.constant for i in node.input[:2])):
                continue  # (the converter folds an op of constants; moved, it would move again)
            move = _movable(scope, readers, node)
            if move is not None:
                _rewrite(scope, dead, node, *move)
                progress = True
    if dead:  # removed last: the kept nodes are copied, which the rewrites' references would miss
        kept = [n for n in scope.nodes if n.name not in dead]
        del scope.nodes[:]
        scope.nodes.extend(kept)
    return bool(dead)


def _movable(scope: Scope, readers, node):
    """(the transposed operand's position, its Transpose node, the nodes passed, the permutation, the
    other operand's rank) when the converter's pass would move ``node``'s transpose operand; else None.
    Either operand may be the transposed one (``c - x.T`` moved once leaves ``T(c) - x``, and ``x`` may
    be a transpose moved before)."""
    for position in (0, 1):
        found = _transpose_below(scope, readers, node.input[position])
        if found is None:
            continue
        transpose, reshape, passed = found
        other = node.input[1 - position]
        if reshape is not None and not _keeps_shape(scope, reshape):
            continue  # a Reshape that moves elements: no transpose operand for the converter
        perm = _const_value(scope.by_name, transpose.input[1])
        other_shape, out_shape = scope.shape(other), scope.shape(scope.output(node.name, node.op))
        if (perm is None or node_name(other) not in scope.constant or other_shape is None
                or len(other_shape) not in (0, len(np.ravel(perm)))
                or scope.shape(node.input[position]) != out_shape or out_shape is None):
            continue
        return position, transpose, passed, [int(p) for p in np.ravel(perm)], len(other_shape)
    return None


def _keeps_shape(scope: Scope, reshape) -> bool:
    shape = scope.shape(reshape.input[0])
    return shape is not None and None not in shape and shape == scope.shape(scope.output(reshape.name, "Reshape"))


def _readers(graph_nodes, dead: set, extra=()) -> dict:
    """Node name -> how many data inputs of live nodes (and ``extra`` names: a body's results) read
    one of its outputs."""
    counts: dict = {}
    for i in [*extra, *(i for n in graph_nodes if n.name not in dead for i in n.input)]:
        if not i.startswith("^"):
            counts[node_name(i)] = counts.get(node_name(i), 0) + 1
    return counts


def node_name(name: str) -> str:
    """The node a GraphDef input names (``^ctrl``, ``op:1``, a body's ``op:z:0``)."""
    return name.lstrip("^").split(":")[0]


def _transpose_below(scope: Scope, readers, name):
    """(the Transpose, the Reshape passed on the way or None, every node passed) that the tensor
    ``name`` is, through Identity ops and one Reshape, each read once; None if it is none."""
    reshape, passed = None, []
    while True:
        first = name.count(":") == 2 and name.endswith(":0") if scope.function is not None else (
            ":" not in name or name.endswith(":0"))
        if not first:
            return None  # another output; in a body, a function argument (no node)
        node = scope.by_name.get(node_name(name))
        if node is None or readers.get(node.name, 0) != 1:
            return None
        passed.append(node)
        if node.op == "Transpose":
            return node, reshape, passed
        if node.op == "Reshape" and reshape is None:
            reshape = node
        elif node.op not in _THROUGH:
            return None
        name = node.input[0]


def constant_nodes(graph_nodes, given=()) -> set[str]:
    """The names of the nodes computed from Const nodes (and the names ``given``: a body's constant
    arguments) only, no stateful or random op, in one pass in dependency order (a large model's
    graph is too deep for recursion); ``given`` included. A control input counts: a node that must
    run after a program input (call_tf's saved functions tie their ops to the inputs so) is no
    constant, and computing it alone would need the input fed."""
    waiting, readers, ready, ops = {}, {}, list(given), {}
    for node in graph_nodes:
        inputs = {node_name(i) for i in node.input}
        waiting[node.name], ops[node.name] = len(inputs), node.op
        for i in inputs:
            readers.setdefault(i, []).append(node.name)
        if not inputs and node.op == "Const":
            ready.append(node.name)
    constant: set[str] = set()
    while ready:
        name = ready.pop()
        constant.add(name)
        for r in readers.get(name, ()):
            waiting[r] -= 1
            if waiting[r] == 0 and not ops[r].startswith(("Placeholder", "Stateful", "Random")):
                ready.append(r)
    return constant


def _const_value(nodes, name):
    import tensorflow as tf
    node = nodes.get(node_name(name))
    while node is not None and node.op in _THROUGH:
        node = nodes.get(node_name(node.input[0]))
    return None if node is None or node.op != "Const" else tf.make_ndarray(node.attr["value"].tensor)


def static_shape(tensor):
    """Its shape as a tuple, None for a size unknown (a polymorphic one); None if the rank is unknown.
    The converter compares such shapes as types (``?x3`` equals ``?x3``), and moves on them too."""
    shape = tensor.shape
    return tuple(shape.as_list()) if shape.rank is not None else None


def _rewrite(scope: Scope, dead: set, node, position: int, transpose, passed, perm: list[int], other_rank: int) -> None:
    """``node`` = op(.., transpose(x, perm), ..) becomes transpose(op(.., x, ..), perm), the other
    operand transposed back (a scalar as it is), each operand at its own position. The nodes
    ``passed`` (the transpose and the Identity ops after it), read by ``node`` only, join ``dead``:
    counted, they would be a second reader of ``x`` when ``x`` is a transpose moved before."""
    import tensorflow as tf
    base = f"{node.name}/noxla_untransposed"
    other = node.input[1 - position]
    inverse_perm = np.argsort(perm)
    back = lambda shape: tuple(shape[i] for i in inverse_perm) if shape else shape  # noqa: E731
    old_output = scope.output(node.name, node.op)
    scope.set_shape(scope.output(base, node.op), back(scope.shape(old_output)))  # for the moves after this one
    if other_rank:
        inverse = scope.nodes.add(name=f"{base}/inverse_perm", op="Const")
        inverse.attr["dtype"].type = tf.int32.as_datatype_enum
        inverse.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(inverse_perm.astype(np.int32)))
        moved = scope.nodes.add(name=f"{base}/operand", op="Transpose",
                                input=[other, scope.output(inverse.name, "Const")])
        moved.attr["T"].CopyFrom(node.attr["T"])
        moved.attr["Tperm"].type = tf.int32.as_datatype_enum
        scope.by_name[inverse.name], scope.by_name[moved.name] = inverse, moved
        scope.constant.update((inverse.name, moved.name))
        other = scope.output(moved.name, "Transpose")
        scope.set_shape(other, back(scope.shape(node.input[1 - position])))
    inner = scope.nodes.add()
    inner.CopyFrom(node)
    inner.name = base
    operands = [other, transpose.input[0]] if position == 1 else [transpose.input[0], other]
    del inner.input[:]
    inner.input.extend([*operands, *node.input[2:]])
    inner.attr.pop("_output_shapes", None)
    scope.by_name[base] = inner
    # The op's own node becomes the transpose of the result, so its readers read it unchanged (a
    # body's readers name the output by its argument, renamed below).
    dtype = node.attr["T"].type
    node.op = "Transpose"
    node.ClearField("attr")
    node.attr["T"].type = dtype
    node.attr["Tperm"].CopyFrom(transpose.attr["Tperm"])
    del node.input[:]
    node.input.extend([scope.output(base, inner.op), transpose.input[1]])
    dead.update(n.name for n in passed)
    if scope.function is not None:
        new_output = scope.output(node.name, "Transpose")
        scope.set_shape(new_output, scope.shape(old_output))
        for n in scope.nodes:
            n.input[:] = [new_output if i == old_output else i for i in n.input]
        for key, value in scope.function.ret.items():
            if value == old_output:
                scope.function.ret[key] = new_output
