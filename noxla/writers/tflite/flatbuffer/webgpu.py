"""Rewrites of a converted .tflite, exact, at most one op more each (mostly for LiteRT.js).

``copy_passthrough_outputs`` for every .tflite (LiteRT.js returns garbage for an output that is an
input, and LiteRT mixes up a WHILE body's swapped carries), ``negations_as_products`` for every one
TF's converter wrote (LiteRT's NEG loses the sign of a zero); ``unfuse_transpose_conv_activations``
only for one exported with ``target="litertjs-webgpu"``, where the TFLite converter's fusion makes
an op its WebGPU delegate refuses (it then runs on wasm), and ``not_equal_as_negated_equal``,
``integer_differences_from_constants`` and ``distinct_operands`` there too.
"""
from __future__ import annotations

import copy

import numpy as np

# TFLite's ActivationFunctionType -> the builtin that applies it on its own.
_ACTIVATION_OPS = {1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH"}


def unfuse_transpose_conv_activations(model) -> int:
    """Move every activation fused into a TRANSPOSE_CONV (``ModelT``, unpacked) into its own op after
    it; returns how many. The converter fuses a following RELU into the op, which makes it version 4,
    and LiteRT.js 2.5.3's delegate takes versions up to 3 ("Max version supported: 3. Requested
    version 4"): the VAE decoder's two transposed convolutions left the GPU, and everything after them."""
    from noxla.writers.tflite.flatbuffer.schema import schema

    ops = schema.BuiltinOperator
    codes = model.operatorCodes
    rewritten = 0
    for graph in model.subgraphs:
        new_ops = []
        for op in graph.operators or []:
            new_ops.append(op)
            code = codes[op.opcodeIndex]
            options = op.builtinOptions
            if (max(code.builtinCode, code.deprecatedBuiltinCode) != ops.TRANSPOSE_CONV
                    or not isinstance(options, schema.TransposeConvOptionsT)
                    or options.fusedActivationFunction not in _ACTIVATION_OPS):
                continue
            activation = getattr(ops, _ACTIVATION_OPS[options.fusedActivationFunction])
            options.fusedActivationFunction = 0
            new_ops.append(_then(model, graph, op, activation, b"/before_activation"))
            rewritten += 1
        graph.operators = new_ops
    for code in codes:  # none fuses an activation now: 4 is the version that asks for one (noxla's
        # graph writer gives every TRANSPOSE_CONV 4); 3 takes the bias input
        if max(code.builtinCode, code.deprecatedBuiltinCode) == ops.TRANSPOSE_CONV and code.version == 4:
            code.version = 3
    return rewritten


def _then(model, graph, op, builtin: int, suffix: bytes):
    """A new one-input operator ``builtin`` that takes over ``op``'s output, ``op`` now writing a
    fresh tensor of the same type and shape (named with ``suffix``) that it reads; returned for the
    caller to place after ``op``."""
    from noxla.writers.tflite.flatbuffer.merge import (
        opcode_index,  # imported here: noxla.errors imports the rules, and TF
    )
    from noxla.writers.tflite.flatbuffer.schema import schema
    out = graph.tensors[op.outputs[0]]
    middle = copy.copy(out)
    middle.name, middle.buffer = out.name + suffix, 0
    graph.tensors.append(middle)
    then = schema.OperatorT()
    then.opcodeIndex = opcode_index(model, builtin)
    then.inputs, then.outputs = [len(graph.tensors) - 1], [op.outputs[0]]
    op.outputs = [len(graph.tensors) - 1]
    return then


def copy_passthrough_outputs(model) -> int:
    """Give an output that is an input its own tensor (``_copy``); returns how many. In the main
    subgraph every such output (a value returned unchanged, such as the real part of
    ``lax.complex(a, b)``): LiteRT.js 2.5.3 returns garbage for one, on wasm and WebGPU (LiteRT returns
    the input). In a WHILE body each carry returned at another position (a swap of two carries):
    LiteRT gave (t, t) for a body returning (t, x) twice over (x, t), reading a carry it had already
    overwritten with another (TF's own converter writes the same file)."""
    from noxla.writers.tflite.flatbuffer.schema import schema

    copied = 0
    graph = model.subgraphs[0]
    inputs = set(graph.inputs if graph.inputs is not None else [])
    outputs = [int(t) for t in (graph.outputs if graph.outputs is not None else [])]
    for i, t in enumerate(outputs):
        if t in inputs:
            outputs[i] = _copy(model, graph, t)
            copied += 1
    graph.outputs = outputs
    for op in [op for g in model.subgraphs for op in g.operators or []]:
        if not isinstance(op.builtinOptions, schema.WhileOptionsT):
            continue
        body = model.subgraphs[op.builtinOptions.bodySubgraphIndex]
        carries, returned = [int(t) for t in body.inputs], [int(t) for t in body.outputs]
        for i, t in enumerate(returned):
            if t in carries and carries.index(t) != i:
                returned[i] = _copy(model, body, t)
                copied += 1
        body.outputs = returned
    return copied


def _copy(model, graph, t: int) -> int:
    """A new tensor of ``graph`` holding tensor ``t``'s value, through a RESHAPE to its shape. A
    polymorphic size makes the shape a SHAPE op's, read at run time: ``shape`` holds 1 there, and
    reshaping to it failed every input of another size."""
    from noxla.writers.tflite.flatbuffer.merge import (
        opcode_index,  # imported here: noxla.errors imports the rules, and TF
    )
    from noxla.writers.tflite.flatbuffer.schema import schema
    source = graph.tensors[t]
    shape = np.asarray(source.shape, np.int32)
    dynamic = source.shapeSignature is not None and -1 in list(source.shapeSignature)
    shape_tensor = schema.TensorT()
    shape_tensor.shape, shape_tensor.type = [len(shape)], schema.TensorType.INT32
    shape_tensor.buffer, shape_tensor.name = 0, source.name + b"/shape"
    if not dynamic:
        buffer = schema.BufferT()
        buffer.data = shape.view(np.uint8)
        model.buffers.append(buffer)
        shape_tensor.buffer = len(model.buffers) - 1
    out = copy.copy(source)
    out.name, out.buffer = source.name + b"/output", 0
    graph.tensors += [shape_tensor, out]
    if dynamic:
        read = schema.OperatorT()
        read.opcodeIndex = opcode_index(model, schema.BuiltinOperator.SHAPE)
        read.inputs, read.outputs = [t], [len(graph.tensors) - 2]
        read.builtinOptionsType = schema.BuiltinOptions.ShapeOptions
        read.builtinOptions = schema.ShapeOptionsT()
        read.builtinOptions.outType = schema.TensorType.INT32
        graph.operators = [*(graph.operators or []), read]
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(model, schema.BuiltinOperator.RESHAPE)
    op.inputs, op.outputs = [t, len(graph.tensors) - 2], [len(graph.tensors) - 1]
    if not dynamic:
        op.builtinOptionsType = schema.BuiltinOptions.ReshapeOptions
        op.builtinOptions = schema.ReshapeOptionsT()
        op.builtinOptions.newShape = [int(d) for d in shape]
    graph.operators = [*(graph.operators or []), op]
    return len(graph.tensors) - 1


def distinct_operands(model) -> int:
    """Give each matrix product that reads one tensor as two operands (TF's converter writes
    ``x @ x.T`` as FULLY_CONNECTED(x, x)) a copy of it for the second read (``_copy``, placed just
    before the product); returns how many. LiteRT.js 2.5.3's WebGPU delegate aborts the page on
    building such a model ("Check failed: !IsInput(consumer, value) Node 0 is already a consumer of
    the value 0"). Other operators reading a tensor twice (MUL(x, x), EQUAL(x, x)) build: the
    delegate runs them, or leaves them to wasm, and copying those instead moved a uint32 SELECT
    onto the GPU, which aborted (searchsorted's scan)."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code
    from noxla.writers.tflite.flatbuffer.schema import schema
    products = (schema.BuiltinOperator.FULLY_CONNECTED, schema.BuiltinOperator.BATCH_MATMUL)
    copies = 0
    for graph in model.subgraphs:
        new_ops = []
        for op in graph.operators or []:
            if builtin_code(model, op) not in products:
                new_ops.append(op)
                continue
            inputs, seen = list(op.inputs if op.inputs is not None else []), set()
            for i, t in enumerate(inputs):
                if t < 0 or t not in seen:
                    seen.add(t)
                    continue
                before = len(graph.operators or [])
                inputs[i] = _copy(model, graph, t)
                new_ops += graph.operators[before:]  # the copy's ops, before their reader
                graph.operators = graph.operators[:before]
                copies += 1
            op.inputs = inputs
            new_ops.append(op)
        graph.operators = new_ops
    return copies


_FLOATS = (0, 1)  # TensorType FLOAT32, FLOAT16


def not_equal_as_negated_equal(model) -> int:
    """Write every float NOT_EQUAL (``ModelT``, unpacked) as LOGICAL_NOT of EQUAL; returns how many.
    LiteRT.js 2.5.3's WebGPU delegate gives false for NOT_EQUAL(a, b) when a or b is NaN (IEEE, and
    JAX: true), so ``x != y`` and the total order's NaN tests were wrong there: searchsorted counted
    0 keys below a NaN query, not 9. Its EQUAL and LOGICAL_NOT are exact with NaNs, and stay on the
    GPU (the delegate refuses a comparison of a tensor with itself either way: that runs on wasm)."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code, opcode_index
    from noxla.writers.tflite.flatbuffer.schema import schema
    ops = schema.BuiltinOperator
    rewritten = 0
    for graph in model.subgraphs:
        new_ops = []
        for op in graph.operators or []:
            new_ops.append(op)
            if (builtin_code(model, op) != ops.NOT_EQUAL
                    or graph.tensors[op.inputs[0]].type not in _FLOATS):
                continue
            op.opcodeIndex = opcode_index(model, ops.EQUAL)
            op.builtinOptionsType = schema.BuiltinOptions.EqualOptions
            op.builtinOptions = schema.EqualOptionsT()
            negate = _then(model, graph, op, ops.LOGICAL_NOT, b"/equal")
            negate.builtinOptionsType = schema.BuiltinOptions.LogicalNotOptions
            negate.builtinOptions = schema.LogicalNotOptionsT()
            new_ops.append(negate)
            rewritten += 1
        graph.operators = new_ops
    return rewritten


def _scalar(model, graph, kind: int, value, name: bytes) -> int:
    """A new scalar constant tensor of ``graph`` (TensorType ``kind``) holding ``value``; its index."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    buffer = schema.BufferT()
    buffer.data = np.asarray(value).reshape(1).view(np.uint8)
    model.buffers.append(buffer)
    constant = schema.TensorT()
    constant.shape, constant.type, constant.buffer, constant.name = [], kind, len(model.buffers) - 1, name
    graph.tensors.append(constant)
    return len(graph.tensors) - 1


def integer_differences_from_constants(model) -> int:
    """Write every int32 SUB whose first operand is a constant of more than one element (``ModelT``,
    unpacked) as ``x * -1 + c``; returns how many. LiteRT.js 2.5.3's WebGPU delegate computes such a
    SUB with its operands swapped (``[1, 2, 3, 4] - x`` gave ``x - [1, 2, 3, 4]``), so an int32
    negation (``zeros - x``) returned x and ``lax.div(x, -1)`` was x; its int32 MUL by a scalar and
    ADD are exact (wrapping as SUB does, INT_MIN included). A scalar constant is read right."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code, opcode_index
    from noxla.writers.tflite.flatbuffer.schema import schema
    ops = schema.BuiltinOperator
    rewritten = 0
    for graph in model.subgraphs:
        new_ops, minus_one = [], None
        for op in graph.operators or []:
            new_ops.append(op)
            if builtin_code(model, op) != ops.SUB or graph.tensors[op.inputs[0]].type != schema.TensorType.INT32:
                continue
            constant = graph.tensors[op.inputs[0]]
            data = model.buffers[constant.buffer].data if constant.buffer else None
            if data is None or len(data) <= 4:
                continue
            if minus_one is None:
                minus_one = _scalar(model, graph, schema.TensorType.INT32, np.int32(-1), b"difference/minus_one")
            c, x = op.inputs
            op.opcodeIndex, op.inputs = opcode_index(model, ops.MUL), [x, minus_one]
            op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.MulOptions, schema.MulOptionsT()
            add = _then(model, graph, op, ops.ADD, b"/negated")
            add.inputs = [add.inputs[0], c]
            add.builtinOptionsType, add.builtinOptions = schema.BuiltinOptions.AddOptions, schema.AddOptionsT()
            new_ops.append(add)
            rewritten += 1
        graph.operators = new_ops
    return rewritten


def negations_as_products(model) -> int:
    """Write every float NEG (``ModelT``, unpacked) as a MUL by -1; returns how many. LiteRT's NEG
    (XNNPACK's) gives +0.0 for +0.0, where JAX's negation gives -0.0 (seen through a division or
    atan2); a product by -1 is exact for every float, and as fast. noxla's graph writer legalizes
    Neg so itself (``noxla.writers.tflite.legalize``); this is for TF's converter's files."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code, opcode_index
    from noxla.writers.tflite.flatbuffer.schema import schema
    ops = schema.BuiltinOperator
    numpy_types = {schema.TensorType.FLOAT32: np.float32, schema.TensorType.FLOAT16: np.float16}
    rewritten = 0
    for graph in model.subgraphs:
        minus_one = {}   # tensor type -> this graph's scalar -1 of it
        for op in graph.operators or []:
            kind = graph.tensors[op.inputs[0]].type if op.inputs is not None and len(op.inputs) else None
            if builtin_code(model, op) != ops.NEG or kind not in numpy_types:
                continue
            if kind not in minus_one:
                minus_one[kind] = _scalar(model, graph, kind, numpy_types[kind](-1), b"negation/minus_one")
            op.opcodeIndex = opcode_index(model, ops.MUL)
            op.inputs = [op.inputs[0], minus_one[kind]]
            op.builtinOptionsType = schema.BuiltinOptions.MulOptions
            op.builtinOptions = schema.MulOptionsT()
            rewritten += 1
    return rewritten


def wide_integer_scalars(model) -> int:
    """Give every binary elementwise op (``ModelT``, unpacked) whose operand is a one-element int32
    constant that float32 cannot hold (beyond 2^24) that value in a form the delegate reads exact;
    returns how many operands. LiteRT.js 2.5.3's WebGPU delegate reads a one-element constant operand
    as a float32 scalar, so ``x + 16777217`` added 16777216 (and ``x == c``, ``max(x, c)``, ``x % c``
    were off alike); a constant of more elements is read exact. So the value becomes a constant of the
    result's shape (run before ``constants_with_unit_batch``, which lays it out), or, for a result of
    one element or of more than 2^20, a sum computed at run time, ``hi + lo`` (``hi`` the value with
    its low 8 bits cleared, ``lo`` those bits, both exact in float32), which the delegate leaves to
    wasm: exact, but the graph is split there."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code
    from noxla.writers.tflite.flatbuffer.reshapes import static_shape
    from noxla.writers.tflite.flatbuffer.schema import schema
    from noxla.writers.tflite.flatbuffer.webgpu_constants import _BINARY
    rewritten = 0
    for graph in model.subgraphs:
        made, head = {}, []  # (value, shape) -> the tensor holding it; the ADDs computing sums
        for op in graph.operators or []:
            if builtin_code(model, op) not in _BINARY or op.inputs is None:
                continue
            for i, t in enumerate(op.inputs):
                tensor = graph.tensors[t]
                data = model.buffers[tensor.buffer].data if tensor.buffer else None
                if tensor.type != schema.TensorType.INT32 or data is None or len(data) != 4:
                    continue
                value = int(np.asarray(data, np.uint8).view(np.int32)[0])
                if int(np.float32(value)) == value:
                    continue
                shape = static_shape(graph.tensors[op.outputs[0]])
                size = None if shape is None else int(np.prod(shape))
                key = (value, shape if size is not None and 1 < size <= 2 ** 20 else None)
                if key not in made:
                    if key[1] is not None:
                        made[key] = constant_like(model, graph, tensor, np.full(key[1], value, np.int32))
                    else:
                        made[key], add = _sum_at_run_time(model, graph, tensor, value)
                        head.append(add)
                op.inputs[i] = made[key]
                rewritten += 1
        graph.operators = head + list(graph.operators or [])
    return rewritten


def constant_like(model, graph, like, values: np.ndarray) -> int:
    """A new constant tensor like ``like`` (its type) holding ``values`` (their shape); its index."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(values).tobytes(), np.uint8)
    model.buffers.append(buffer)
    made = copy.copy(like)
    made.shape, made.shapeSignature = np.asarray(values.shape, np.int32), None
    made.buffer, made.name = len(model.buffers) - 1, like.name + b"/constant"
    graph.tensors.append(made)
    return len(graph.tensors) - 1


def binary_op(model, builtin: str, a: int, b: int, out: int):
    """A new ADD or MUL operator (``builtin``) of tensors ``a`` and ``b`` into ``out``."""
    from noxla.writers.tflite.flatbuffer.merge import opcode_index
    from noxla.writers.tflite.flatbuffer.schema import schema
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(model, getattr(schema.BuiltinOperator, builtin))
    op.inputs, op.outputs = [a, b], [out]
    options = builtin.capitalize()
    op.builtinOptionsType = getattr(schema.BuiltinOptions, f"{options}Options")
    op.builtinOptions = getattr(schema, f"{options}OptionsT")()
    return op


def _sum_at_run_time(model, graph, tensor, value: int):
    """A new tensor like ``tensor`` computed as ``hi + lo`` (see wide_integer_scalars), and the ADD."""
    parts = [_scalar(model, graph, tensor.type, np.int32(v), tensor.name + suffix)
             for v, suffix in ((value & ~0xFF, b"/high"), (value & 0xFF, b"/low"))]
    for part in parts:
        graph.tensors[part].shape = tensor.shape
    total = copy.copy(tensor)
    total.buffer, total.name = 0, tensor.name + b"/sum"
    graph.tensors.append(total)
    return len(graph.tensors) - 1, binary_op(model, "ADD", *parts, len(graph.tensors) - 1)
