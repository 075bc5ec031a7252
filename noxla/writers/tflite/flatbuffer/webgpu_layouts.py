"""PAD and CUMSUM on the axes LiteRT.js's WebGPU delegate computes right, and PADs it does not merge.

The delegate holds a tensor of rank 1-3 as BHWC with its first axis as the batch
(webgpu_constants.py). Measured with LiteRT.js 2.5.3 (tests/browser_sweep.py, tests/test_litertjs.py):
a PAD of a rank-3 tensor with a batch over 1 padded the wrong axis (a 1-D convolution's explicit
padding: every output wrong); a CUMSUM along any axis but the last of a rank-2 tensor, or of a rank-1
one, summed wrong (the running sums sort and top_k rank ties by). Rank-4 PADs and last-axis CUMSUMs
are right. So a rank-3 PAD runs on ``(B, 1, W, C)``, and a CUMSUM on the last axis of a rank-2 or
higher tensor: transposed there and back, a vector as ``(1, n)``. And a pooling reads a PAD through
a MUL by 1, which keeps the delegate from merging the PAD into the pooling (``_times_one``).
"""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.flatbuffer.merge import builtin_code, opcode_index
from noxla.writers.tflite.flatbuffer.reshapes import int32_constant, static_shape
from noxla.writers.tflite.flatbuffer.schema import schema
from noxla.writers.tflite.flatbuffer.webgpu_constants import _reshape, _tensor_like

_OP = schema.BuiltinOperator


def pads_and_cumsums_in_layouts(model) -> int:
    """Rewrite every rank-3 PAD/PADV2 with constant paddings and every CUMSUM not along a last axis
    of rank >= 2 (``ModelT``, unpacked) as the module docstring says, and put a MUL by 1 between a
    PAD and the pooling that reads it; returns how many."""
    rewritten = 0
    for graph in model.subgraphs:
        new_ops, padded = [], set()  # the tensors a PAD wrote
        for op in graph.operators or []:
            code = builtin_code(model, op)
            if code in (_OP.AVERAGE_POOL_2D, _OP.MAX_POOL_2D) and op.inputs[0] in padded:
                new_ops.append(_times_one(model, graph, op))
                rewritten += 1
            if code in (_OP.PAD, _OP.PADV2):
                padded.add(op.outputs[0])
            made = (_lifted_pad(model, graph, op) if code in (_OP.PAD, _OP.PADV2)
                    else _last_axis_cumsum(model, graph, op) if code == _OP.CUMSUM else None)
            new_ops.extend(made or [op])
            rewritten += made is not None
        graph.operators = new_ops
    return rewritten


def _constant(model, graph, t: int) -> np.ndarray | None:
    tensor = graph.tensors[t]
    data = model.buffers[tensor.buffer].data if tensor.buffer else None
    if data is None or tensor.type != schema.TensorType.INT32:
        return None
    return np.asarray(data, np.uint8).view("<i4").reshape([int(d) for d in tensor.shape])


def _lifted_pad(model, graph, op) -> list | None:
    shape = static_shape(graph.tensors[op.inputs[0]])
    out_shape = static_shape(graph.tensors[op.outputs[0]])
    paddings = _constant(model, graph, op.inputs[1])
    if shape is None or out_shape is None or len(shape) != 3 or shape[0] == 1 or paddings is None:
        return None
    b, w, c = shape
    lifted_in = _tensor_like(graph, graph.tensors[op.inputs[0]], (b, 1, w, c))
    lifted_out = _tensor_like(graph, graph.tensors[op.outputs[0]], (out_shape[0], 1, *out_shape[1:]))
    rows = [list(paddings[0]), [0, 0], list(paddings[1]), list(paddings[2])]
    pads = int32_constant(model, graph, np.asarray(rows, np.int32).reshape(-1))
    graph.tensors[pads].shape = np.array([4, 2], np.int32)
    first = _reshape(model, graph, op.inputs[0], lifted_in)
    last = _reshape(model, graph, lifted_out, op.outputs[0])
    op.inputs, op.outputs = [lifted_in, pads, *op.inputs[2:]], [lifted_out]
    return [first, op, last]


def _last_axis_cumsum(model, graph, op) -> list | None:
    shape = static_shape(graph.tensors[op.inputs[0]])
    axis = _constant(model, graph, op.inputs[1])
    if shape is None or axis is None or axis.size != 1:
        return None
    rank, axis = len(shape), int(axis.reshape(-1)[0]) % max(len(shape), 1)
    if rank == 0 or (rank >= 2 and axis == rank - 1):
        return None
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if rank == 1:
        lifted_in, lifted_out = _tensor_like(graph, x, (1, shape[0])), _tensor_like(graph, out, (1, shape[0]))
        first, last = _reshape(model, graph, op.inputs[0], lifted_in), _reshape(model, graph, lifted_out, op.outputs[0])
    else:
        order = [d for d in range(rank) if d != axis] + [axis]
        moved = tuple(shape[d] for d in order)
        lifted_in, lifted_out = _tensor_like(graph, x, moved), _tensor_like(graph, out, moved)
        first = _transpose(model, graph, op.inputs[0], lifted_in, order)
        last = _transpose(model, graph, lifted_out, op.outputs[0], [order.index(d) for d in range(rank)])
    last_axis = int32_constant(model, graph, [max(rank, 2) - 1])
    graph.tensors[last_axis].shape = np.array([], np.int32)
    op.inputs, op.outputs = [lifted_in, last_axis], [lifted_out]
    return [first, op, last]


def _times_one(model, graph, op):
    """A MUL by 1 between pooling ``op`` and the PAD it reads, returned to run before it. The
    delegate merges a PAD into the pooling right after it, as that pooling's own padding, and computes
    an asymmetric one wrong (flax's avg_pool(padding="SAME"), stride 2: off by 0.3; a max of a
    padded window too); with an op between, it does not (measured)."""
    from noxla.writers.tflite.flatbuffer.webgpu import _scalar
    source = graph.tensors[op.inputs[0]]
    kind = np.float16 if source.type == schema.TensorType.FLOAT16 else np.float32
    one = _scalar(model, graph, source.type, kind(1), source.name + b"/one")
    moved = _tensor_like(graph, source, tuple(int(d) for d in source.shape))
    mul = schema.OperatorT()
    mul.opcodeIndex = opcode_index(model, _OP.MUL)
    mul.inputs, mul.outputs = [op.inputs[0], one], [moved]
    mul.builtinOptionsType, mul.builtinOptions = schema.BuiltinOptions.MulOptions, schema.MulOptionsT()
    op.inputs = [moved, *op.inputs[1:]]
    return mul


def _transpose(model, graph, source: int, target: int, permutation):
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(model, _OP.TRANSPOSE)
    op.inputs, op.outputs = [source, int32_constant(model, graph, permutation)], [target]
    op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.TransposeOptions, schema.TransposeOptionsT()
    return op
