"""Matrix-vector products that read one input, joined into one (an unpacked TFLite flatbuffer,
``ModelT``; flatbuffer objects in, flatbuffer objects out).

A decode step projects each token's hidden vector several times: queries, keys and values, then
the MLP's gate and up projections. Each FULLY_CONNECTED is one XNNPACK operator and one parallel
region of the thread pool, and a narrow one splits badly among threads (SmolLM-135M's key and
value projections are 192 rows: 6 tiles of XNNPACK's 32 columns for 4 threads). Joined, the
products read one weight with their rows stacked, [sum of rows, in], and each original output is a
SLICE of the joined one. Every output element is the same dot product of the same row with the
same input, so the values are bit-identical (``tests/test_tflite_projections.py``).

A weight is stored once: projections are joined only where every operator of the file that reads
one of their weights is a FULLY_CONNECTED of a group with exactly the same weights (a prefill
signature's projections read the joined weight too, so only the joined one is written). The groups
of a weight set are joined only if one of them is a matrix-vector product (one row of input): with
many rows the products are large already, and the slices would copy every row."""
from __future__ import annotations

import copy
import math

import numpy as np

from noxla.writers.tflite.flatbuffer.merge import builtin_code, opcode_index
from noxla.writers.tflite.flatbuffer.reshapes import int32_constant, static_shape
from noxla.writers.tflite.flatbuffer.schema import schema


def join_matrix_vector_projections(model, stubs=None) -> int:
    """Join the FULLY_CONNECTEDs of ``model`` that read the same input with constant float32
    weights (``stubs``: ``noxla.writers.tf.weight_stubs.WeightStubs``, whose stand-ins' placeholders are
    joined when written) as described above. Returns the number of operators joined away."""
    by_weights: dict[tuple, list] = {}
    for graph in model.subgraphs:
        by_input: dict[tuple, list] = {}
        for op in graph.operators or []:
            key = _join_key(model, graph, op)
            if key is not None:
                by_input.setdefault(key, []).append(op)
        for ops in by_input.values():
            if len(ops) > 1:
                ops.sort(key=lambda op: graph.tensors[op.inputs[1]].buffer)
                weights = tuple(graph.tensors[op.inputs[1]].buffer for op in ops)
                by_weights.setdefault(weights, []).append((graph, ops))
    reads = _constant_reads(model)
    joined = 0
    for weights, groups in by_weights.items():
        if (len(set(weights)) < len(weights) or any(reads.get(b, 0) != len(groups) for b in weights)
                or not any(_rows(graph, ops[0]) == 1 for graph, ops in groups)):
            continue
        datas = [model.buffers[b].data for b in weights]
        buffer = schema.BufferT()
        if stubs is not None and any(stubs.is_placeholder(d) for d in datas):
            graph, ops = groups[0]
            buffer.data = stubs.joined(datas, [graph.tensors[op.inputs[1]].shape for op in ops])
        else:
            buffer.data = np.concatenate([_bytes(d) for d in datas])
        model.buffers.append(buffer)
        index = len(model.buffers) - 1
        for graph, ops in groups:
            _join(model, graph, ops, index)
            joined += len(ops) - 1
        for b in weights:  # nothing reads them any more: not written
            model.buffers[b].data = None
    return joined


def _join_key(model, graph, op) -> tuple | None:
    """What FULLY_CONNECTEDs must share to be joined (input, options, whether biased), or None if
    ``op`` is not one that can be: float32, a constant 2-D weight, a constant bias or none, static
    shapes."""
    options = op.builtinOptions
    if (builtin_code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED
            or not isinstance(options, schema.FullyConnectedOptionsT)
            or options.weightsFormat != schema.FullyConnectedOptionsWeightsFormat.DEFAULT
            or len(op.outputs) != 1 or len(op.inputs) < 2):
        return None
    x, weight, out = (graph.tensors[t] for t in (op.inputs[0], op.inputs[1], op.outputs[0]))
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    if (any(t.type != schema.TensorType.FLOAT32 or static_shape(t) is None for t in (x, weight, out))
            or len(weight.shape) != 2 or _constant(model, weight) is None
            or bias is not None and (graph.tensors[bias].type != schema.TensorType.FLOAT32
                                     or _constant(model, graph.tensors[bias]) is None)):
        return None
    return (int(op.inputs[0]), options.fusedActivationFunction, options.keepNumDims, bias is not None)


def _constant(model, tensor):
    data = model.buffers[tensor.buffer].data if tensor.buffer > 0 else None
    return data if isinstance(data, np.ndarray) and data.size else None


def _bytes(data: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


def _constant_reads(model) -> dict[int, int]:
    """Per constant buffer, how many operator inputs of the whole model read it."""
    reads: dict[int, int] = {}
    for graph in model.subgraphs:
        for op in graph.operators or []:
            for t in op.inputs if op.inputs is not None else []:
                if t >= 0 and graph.tensors[t].buffer > 0:
                    b = graph.tensors[t].buffer
                    reads[b] = reads.get(b, 0) + 1
    return reads


def _rows(graph, op) -> int:
    x = graph.tensors[op.inputs[0]]
    return math.prod(int(d) for d in x.shape) // int(x.shape[-1])


def _join(model, graph, ops, buffer: int) -> None:
    """Replace ``ops`` (in ``graph``, sorted by weight) with one FULLY_CONNECTED reading the joined
    weight in ``buffer`` and a SLICE per original output, where the first of them ran."""
    rows = [int(graph.tensors[op.inputs[1]].shape[0]) for op in ops]
    weight = _new_tensor(graph, ops[0].inputs[1], [sum(rows), int(graph.tensors[ops[0].inputs[1]].shape[1])])
    graph.tensors[weight].buffer = buffer
    inputs = [ops[0].inputs[0], weight]
    if len(ops[0].inputs) > 2 and ops[0].inputs[2] >= 0:
        bias = _new_tensor(graph, ops[0].inputs[2], [sum(rows)])
        data = np.concatenate([_bytes(model.buffers[graph.tensors[op.inputs[2]].buffer].data) for op in ops])
        graph.tensors[bias].buffer = _new_buffer(model, data)
        inputs.append(bias)
    shape = [int(d) for d in graph.tensors[ops[0].outputs[0]].shape]
    out = _new_tensor(graph, ops[0].outputs[0], shape[:-1] + [sum(rows)])
    joined = copy.copy(ops[0])
    joined.inputs, joined.outputs = inputs, [out]
    joined.builtinOptions = copy.copy(ops[0].builtinOptions)
    made = [joined]
    offset, slice_code = 0, opcode_index(model, schema.BuiltinOperator.SLICE)
    for op, n in zip(ops, rows):
        part = schema.OperatorT()
        part.opcodeIndex = slice_code
        begin = int32_constant(model, graph, [0] * (len(shape) - 1) + [offset])
        size = int32_constant(model, graph, shape[:-1] + [n])
        part.inputs, part.outputs = [out, begin, size], [int(op.outputs[0])]
        part.builtinOptionsType, part.builtinOptions = schema.BuiltinOptions.SliceOptions, schema.SliceOptionsT()
        made.append(part)
        offset += n
    first = min(graph.operators.index(op) for op in ops)
    gone = {id(op) for op in ops}
    kept = [op for op in graph.operators[:first] if id(op) not in gone]
    graph.operators = kept + made + [op for op in graph.operators[first:] if id(op) not in gone]


def _new_tensor(graph, like: int, shape: list[int]) -> int:
    tensor = copy.copy(graph.tensors[like])
    tensor.shape, tensor.shapeSignature = np.array(shape, np.int32), None
    tensor.name = (tensor.name or b"") + b"/joined"
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def _new_buffer(model, data: np.ndarray) -> int:
    buffer = schema.BufferT()
    buffer.data = data
    model.buffers.append(buffer)
    return len(model.buffers) - 1
