"""``c - transpose(x)`` and ``c / transpose(x)`` kept in their operand order through the TFLite converter.

TF 2.21's converter moves a TRANSPOSE behind an elementwise op whose other operand is a constant
(its pass ``push-transpose-through-ewise``: ``op(tpose(x), c) -> tpose(op(x, tpose^-1(c)))``), and
builds the new op with the transposed operand first whichever side it came from. For ADD, MUL,
MAXIMUM and MINIMUM that is harmless; for SUB and DIV it swaps the operands: in LiteRT
``5 - x.T`` returned ``x.T - 5`` and ``12 / x.T`` returned ``x.T / 12`` (found by tests/fuzz_grad.py
in a sort along a leading axis, whose integer keys are ordered by ``-1 - key`` after a transpose).

This pass does the move itself, in the frozen GraphDef, before the converter sees it:
``op(c, transpose(x, p))`` becomes ``transpose(op(transpose(c, p^-1), x), p)`` (a scalar ``c`` as it
is; a constant ``c``'s transpose is folded), which is the same array for any ``c`` of the same rank,
broadcasting included. The converter then finds no transpose operand to move. A Reshape that keeps
its input's shape (the converter drops it) is looked through, as are Identity ops.

Loop and branch bodies (library functions), where the converter sinks the constants a body reads and
moves its transposes the same way, get the move for a scalar Const operand only: no shapes are known
there, and JAX's other operand is either a scalar literal or an array of the op's full shape
(``5 - x.T`` in a ``while_loop`` body was wrong in LiteRT; ``jnp.ones((3, 3)) - x.T`` there still is).
"""
from __future__ import annotations

import numpy as np

# TF ops the converter legalizes to the pass's ops (TFL ADD, MUL, MAXIMUM, MINIMUM, SUB, DIV); SUB and
# DIV are the ones whose operands it swaps.
_PUSHED = frozenset({"AddV2", "Add", "Mul", "Maximum", "Minimum", "Sub", "RealDiv", "Div"})
_ORDERED = frozenset({"Sub", "RealDiv", "Div"})
_THROUGH = frozenset({"Identity", "Snapshot"})


def keep_operand_order(graph_def) -> bool:
    """Moves, in place, the transposes of ``graph_def``'s main graph that the converter would move,
    as it would but keeping the operand order: ``op(c, transpose(x))`` with ``c`` computed from
    constants only, of rank 0 or the transpose's, the transpose read once and no broadcast widening it.
    Ops of the pass's list before a SUB or DIV are moved too (the converter moves a transpose down a
    chain ``c - (x.T + 1)`` one op at a time). Whether it changed anything."""
    bodies = [_in_body(function) for function in graph_def.library.function]
    return _in_main(graph_def) or any(bodies)


def _in_main(graph_def) -> bool:
    nodes = {n.name: n for n in graph_def.node}
    constant = constant_nodes(graph_def.node)
    if not any(n.op in _ORDERED and len(n.input) >= 2 and node_name(n.input[0]) in constant
               and node_name(n.input[1]) not in constant for n in graph_def.node):
        return False
    if not any(n.op == "Transpose" for n in graph_def.node):
        return False
    shapes = _static_shapes(graph_def)
    dead: set = set()
    progress = True
    while progress:
        progress = False
        readers = _readers(graph_def.node, dead)
        for node in list(graph_def.node):
            if node.op not in _PUSHED or len(node.input) < 2 or node.input[1].startswith("^") or node.name in dead:
                continue
            move = _movable(nodes, shapes, readers, constant, node)
            if move is not None:
                _rewrite(graph_def, nodes, shapes, dead, constant, node, *move)
                progress = True
    if dead:  # removed last: the kept nodes are copied, which the rewrites' references would miss
        kept = [n for n in graph_def.node if n.name not in dead]
        del graph_def.node[:]
        graph_def.node.extend(kept)
    return bool(dead)


def _in_body(function) -> bool:
    """The same moves in a loop or branch body, for a scalar Const operand only (no shapes are known
    there): ``op(c, transpose(x))`` becomes ``transpose(op(c, x))``. A body names an op's output by its
    output argument (``sub:z:0``); the op's node becomes a Transpose, whose output is ``y``."""
    import tensorflow as tf
    nodes = {n.name: n for n in function.node_def}
    dead: set = set()
    progress = True
    while progress:
        progress = False
        readers = _readers(function.node_def, dead, extra=function.ret.values())
        for node in list(function.node_def):
            if node.op not in _PUSHED or len(node.input) < 2 or node.input[1].startswith("^") or node.name in dead:
                continue
            for position in (0, 1):
                found = _transpose_below(nodes, readers, node.input[position], body=True)
                other = nodes.get(node_name(node.input[1 - position]))
                if (found is None or found[1] is not None or other is None or other.op != "Const"
                        or other.attr["value"].tensor.tensor_shape.dim):
                    continue
                transpose, _, passed = found
                base = f"{node.name}/noxla_untransposed"
                inner = function.node_def.add()
                inner.CopyFrom(node)
                inner.name = base
                inner.input[position] = transpose.input[0]
                nodes[base] = inner
                dtype = node.attr["T"].type
                old_ref, new_ref = f"{node.name}:z:0", f"{node.name}:y:0"
                node.op = "Transpose"
                node.ClearField("attr")
                node.attr["T"].type = dtype
                node.attr["Tperm"].type = tf.int32.as_datatype_enum
                node.attr["Tperm"].CopyFrom(transpose.attr["Tperm"])
                del node.input[:]
                node.input.extend([f"{base}:z:0", transpose.input[1]])
                for n in function.node_def:
                    n.input[:] = [new_ref if i == old_ref else i for i in n.input]
                for key, value in function.ret.items():
                    if value == old_ref:
                        function.ret[key] = new_ref
                dead.update(n.name for n in passed)
                progress = True
                break
    if dead:
        kept = [n for n in function.node_def if n.name not in dead]
        del function.node_def[:]
        function.node_def.extend(kept)
    return bool(dead)


def _movable(nodes, shapes, readers, constant, node):
    """(the transposed operand's position, its Transpose node, the permutation, the other operand's
    rank) when the converter's pass would move ``node``'s transpose operand; else None."""
    for position in (0, 1):
        found = _transpose_below(nodes, readers, node.input[position])
        if found is None:
            continue
        transpose, reshape, passed = found
        other = node.input[1 - position]
        if reshape is not None and shapes.get(_tensor(reshape.input[0])) != shapes.get(_tensor(reshape.name)):
            return None  # a Reshape that moves elements: no transpose operand for the converter
        perm = _const_value(nodes, transpose.input[1])
        other_shape, out_shape = shapes.get(_tensor(other)), shapes.get(_tensor(node.name))
        if (perm is None or node_name(other) not in constant or other_shape is None
                or len(other_shape) not in (0, len(np.ravel(perm)))
                or shapes.get(_tensor(node.input[position])) != out_shape or out_shape is None):
            return None
        return position, transpose, passed, [int(p) for p in np.ravel(perm)], len(other_shape)
    return None


def _readers(graph_nodes, dead: set, extra=()) -> dict:
    """Node name -> how many data inputs of live nodes (and ``extra`` names: a body's results) read
    one of its outputs."""
    counts: dict = {}
    for i in [*extra, *(i for n in graph_nodes if n.name not in dead for i in n.input)]:
        if not i.startswith("^"):
            counts[node_name(i)] = counts.get(node_name(i), 0) + 1
    return counts


def _tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def node_name(name: str) -> str:
    """The node a GraphDef input names (``^ctrl``, ``op:1``)."""
    return name.lstrip("^").split(":")[0]


def _transpose_below(nodes, readers, name, body: bool = False):
    """(the Transpose, the Reshape passed on the way or None, every node passed) that the tensor
    ``name`` is, through Identity ops and one Reshape, each read once; None if it is none."""
    reshape, passed = None, []
    while True:
        if ":" in name and not name.endswith(":0") or (body and name.count(":") != 2):
            return None  # another output; in a body, a function argument (no node)
        node = nodes.get(node_name(name))
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


def constant_nodes(graph_nodes) -> set[str]:
    """The names of the nodes computed from Const nodes only (no input, no stateful or random op), in
    one pass in dependency order (a large model's graph is too deep for recursion). A control input
    counts: a node that must run after a program input (call_tf's saved functions tie their ops to
    the inputs so) is no constant, and computing it alone would need the input fed."""
    waiting, readers, ready, ops = {}, {}, [], {}
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


def _static_shapes(graph_def) -> dict:
    """Tensor name -> its static shape (a tuple; None where a size is unknown), by TF's shape inference."""
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    shapes = {}
    for op in graph.get_operations():
        for t in op.outputs:
            shape = t.shape
            shapes[t.name] = tuple(shape.as_list()) if shape.rank is not None and shape.is_fully_defined() else None
    return shapes


def _rewrite(graph_def, nodes, shapes, dead: set, constant: set, node, position: int, transpose, passed,
             perm: list[int], other_rank: int) -> None:
    """``node`` = op(.., transpose(x, perm), ..) becomes transpose(op(.., x, ..), perm), the other
    operand transposed back (a scalar as it is), each operand at its own position. The nodes
    ``passed`` (the transpose and the Identity ops after it), read by ``node`` only, join ``dead``:
    counted, they would be a second reader of ``x`` when ``x`` is a transpose moved before."""
    import tensorflow as tf
    from tensorflow.core.framework import node_def_pb2
    base = f"{node.name}/noxla_untransposed"
    other = node.input[1 - position]
    inverse_perm = np.argsort(perm)
    back = lambda shape: tuple(shape[i] for i in inverse_perm) if shape else shape  # noqa: E731
    shapes[f"{base}:0"] = back(shapes[_tensor(node.name)])  # for the moves after this one
    if other_rank:
        inverse = graph_def.node.add(name=f"{base}/inverse_perm", op="Const")
        inverse.attr["dtype"].type = tf.int32.as_datatype_enum
        inverse.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(inverse_perm.astype(np.int32)))
        moved = graph_def.node.add(name=f"{base}/operand", op="Transpose", input=[other, inverse.name])
        moved.attr["T"].CopyFrom(node.attr["T"])
        moved.attr["Tperm"].type = tf.int32.as_datatype_enum
        nodes[inverse.name], nodes[moved.name] = inverse, moved
        constant.update((inverse.name, moved.name))
        shapes[f"{moved.name}:0"] = back(shapes[_tensor(other)])
        other = moved.name
    inner = node_def_pb2.NodeDef()
    inner.CopyFrom(node)
    inner.name = base
    operands = [other, transpose.input[0]] if position == 1 else [transpose.input[0], other]
    del inner.input[:]
    inner.input.extend([*operands, *node.input[2:]])
    inner.attr.pop("_output_shapes", None)
    graph_def.node.append(inner)
    nodes[base] = graph_def.node[-1]
    # The op's own node becomes the transpose of the result, so its readers read it unchanged.
    dtype = node.attr["T"].type
    node.op = "Transpose"
    node.ClearField("attr")
    node.attr["T"].type = dtype
    node.attr["Tperm"].CopyFrom(transpose.attr["Tperm"])
    del node.input[:]
    node.input.extend([base, transpose.input[1]])
    dead.update(n.name for n in passed)
