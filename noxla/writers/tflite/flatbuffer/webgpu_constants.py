"""Constant operands of binary elementwise ops, in a layout LiteRT.js's WebGPU delegate reads right.

The delegate holds a tensor of rank 1-3 as BHWC with its first axis as the batch (rank 2: B, C;
rank 3: B, W, C), and a constant operand as HWC with no batch: it reads only the constant's first
batch. ``x + w`` with ``w`` a constant (3, 4) of the result's shape added row 0 of ``w`` to every row
(off by up to 1.85 for values in [-1, 1]); a (12,) constant read as its first element, a (2, 3, 4)
one as its first (3, 4) twice. A constant whose leading axis (aligned to the result's rank) is 1
is read right, and so is one of a rank-4 result. So each such op runs one rank up, on a leading unit
axis: its runtime operands reshaped to ``(1, *shape)``, its constant given that shape (the same
buffer, no RESHAPE: a RESHAPE of a constant is run on wasm, and everything reading it after), its
result reshaped back. Measured in ``tests/test_litertjs.py`` (``test_constant_operands_on_webgpu``).
"""
from __future__ import annotations

import copy

import numpy as np

from noxla.writers.tflite.flatbuffer.merge import builtin_code, opcode_index
from noxla.writers.tflite.flatbuffer.reshapes import int32_constant, static_shape
from noxla.writers.tflite.flatbuffer.schema import schema

_OP = schema.BuiltinOperator
# Every builtin the delegate runs as an elementwise op of two operands, either of which may be constant.
_BINARY = {_OP.ADD, _OP.SUB, _OP.MUL, _OP.DIV, _OP.FLOOR_DIV, _OP.FLOOR_MOD, _OP.MAXIMUM, _OP.MINIMUM,
           _OP.POW, _OP.SQUARED_DIFFERENCE, _OP.ATAN2, _OP.LESS, _OP.LESS_EQUAL, _OP.GREATER,
           _OP.GREATER_EQUAL, _OP.EQUAL, _OP.NOT_EQUAL}
_BATCHLESS_RANKS = (1, 2, 3)  # the ranks whose first axis the delegate holds as the batch


def constants_with_unit_batch(model) -> int:
    """Run every binary elementwise op (``ModelT``, unpacked) with a constant operand whose first
    axis, aligned to the result's rank 1-3, is longer than 1, one rank up on a leading unit axis
    (module docstring); returns how many."""
    rewritten = 0
    for graph in model.subgraphs:
        new_ops = []
        for op in graph.operators or []:
            out_shape = _lifted_shape(model, graph, op)
            if out_shape is None:
                new_ops.append(op)
                continue
            rank = len(out_shape)
            inputs = []
            for t in op.inputs:
                tensor = graph.tensors[t]
                aligned = (1,) * (rank - len(tensor.shape)) + tuple(int(d) for d in tensor.shape)
                if _is_constant(model, tensor):
                    inputs.append(_tensor_like(graph, tensor, (1, *aligned), keep_buffer=True))
                else:
                    inputs.append(_tensor_like(graph, tensor, (1, *aligned)))
                    new_ops.append(_reshape(model, graph, t, inputs[-1]))
            lifted = _tensor_like(graph, graph.tensors[op.outputs[0]], (1, *out_shape))
            new_ops.append(op)
            new_ops.append(_reshape(model, graph, lifted, op.outputs[0]))
            op.inputs, op.outputs = inputs, [lifted]
            rewritten += 1
        graph.operators = new_ops
    return rewritten


def _lifted_shape(model, graph, op) -> tuple | None:
    """The result's shape when ``op`` is one to lift, else None."""
    if builtin_code(model, op) not in _BINARY or op.inputs is None or len(op.inputs) != 2:
        return None
    shapes = [static_shape(graph.tensors[t]) for t in (*op.inputs, op.outputs[0])]
    if any(s is None for s in shapes) or len(shapes[2]) not in _BATCHLESS_RANKS:
        return None
    rank = len(shapes[2])
    for t, shape in zip(op.inputs, shapes):
        aligned = (1,) * (rank - len(shape)) + shape
        if _is_constant(model, graph.tensors[t]) and aligned[0] > 1:
            return shapes[2]
    return None


def _is_constant(model, tensor) -> bool:
    return tensor.buffer > 0 and model.buffers[tensor.buffer].data is not None


def _tensor_like(graph, tensor, shape, keep_buffer: bool = False) -> int:
    """A new tensor of ``tensor``'s type (and buffer, if ``keep_buffer``) with ``shape``; its index."""
    made = copy.copy(tensor)
    made.shape = np.asarray(shape, np.int32)
    made.shapeSignature = None
    made.buffer = tensor.buffer if keep_buffer else 0
    made.name = tensor.name + b"/unit_batch"
    graph.tensors.append(made)
    return len(graph.tensors) - 1


def _reshape(model, graph, source: int, target: int):
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(model, _OP.RESHAPE)
    shape = [int(d) for d in graph.tensors[target].shape]
    op.inputs, op.outputs = [source, int32_constant(model, graph, shape)], [target]
    op.builtinOptionsType = schema.BuiltinOptions.ReshapeOptions
    op.builtinOptions = schema.ReshapeOptionsT()
    op.builtinOptions.newShape = shape
    return op
