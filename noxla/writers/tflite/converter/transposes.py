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

Loop and branch bodies (library functions) get the same moves (``noxla.writers.tflite.converter.transposes_bodies``):
the converter sinks a loop-invariant constant into the body that reads it, and moved
``jnp.ones((3, 3)) - x.T`` there as it did in the main graph.
"""
from __future__ import annotations

from noxla.writers.tflite.converter.transpose_moves import (
    ORDERED,
    Scope,
    constant_nodes,
    move_transposes,
    node_name,
    static_shape,
)
from noxla.writers.tflite.converter.transposes_bodies import body_scopes

__all__ = ["keep_operand_order"]


def keep_operand_order(graph_def) -> bool:
    """Moves, in place, the transposes of ``graph_def`` (its main graph and its loop and branch bodies)
    that the converter would move, as it would but keeping the operand order: ``op(c, transpose(x))``
    with ``c`` computed from constants only, of rank 0 or the transpose's, the transpose read once and
    no broadcast widening it. Ops of the pass's list before a SUB or DIV are moved too (the converter
    moves a transpose down a chain ``c - (x.T + 1)`` one op at a time). Whether it changed anything."""
    changed = False
    constant = constant_nodes(graph_def.node)
    if _may_swap(graph_def.node, constant) and any(n.op == "Transpose" for n in graph_def.node):
        changed = move_transposes(Scope(graph_def.node, _static_shapes(graph_def), constant))
    for scope in body_scopes(graph_def, constant, _may_swap):
        changed = move_transposes(scope) or changed
    return changed


def _may_swap(graph_nodes, constant: set) -> bool:
    """Whether a SUB or DIV reads a constant first and a computed value second (cheap, before shapes)."""
    return any(n.op in ORDERED and len(n.input) >= 2 and node_name(n.input[0]) in constant
               and node_name(n.input[1]) not in constant for n in graph_nodes)


def _static_shapes(graph_def) -> dict:
    """Tensor name -> its static shape (a tuple; None where a size is unknown), by TF's shape inference."""
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return {t.name: static_shape(t) for op in graph.get_operations() for t in op.outputs}


