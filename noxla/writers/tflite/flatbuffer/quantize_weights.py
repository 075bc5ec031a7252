"""LiteRT's quantizer's int8 / int4 recipes applied weight by weight to the model noxla.llm writes,
before it is serialized: the quantized weights are what ai-edge-quantizer writes (its own functions
compute each weight's scales and values, ``naive_min_max_quantize.get_tensor_quant_params``, and
pack them, ``transformation_utils.pack_data``), but no float .tflite is ever made or read back.

Why: ``noxla.llm.quantize.quantize_tflite`` hands the quantizer the whole float file, which it
unpacks and copies several times (with Gemma 3 1B's shapes, 4 GB of float32 weights, far past this
machine's memory, and past the 2 GB a flatbuffer holds inline). Here the float weights stay the
caller's arrays (``noxla.writers.tf.weight_stubs``: the flatbuffer holds placeholders for them until written)
and each is quantized in blocks of rows (a row's scales depend on that row alone, per channel or
per block of 32 along it), so the only float copy is a block, or one weight the converter stores
transposed. The quantized bytes (an eighth of the float ones at int4) are held until written.

What changes, as in the quantizer's output for these recipes (compute in float, weights only, no
op added): each FULLY_CONNECTED weight and EMBEDDING_LOOKUP table (a GATHER of whole rows is made
one first, ``embedding_lookups``) of at least the recipe's ``min_weight_elements`` gets the
integer type, its quantized bytes and its quantization parameters: int8 and int4 a scale and zero
point per output channel; int4_b32 a float16 scale tensor [rows, columns / 32] named
``<weight>_scales`` (``BlockwiseQuantization``). A weight several tensors read (the signatures share theirs) is
quantized once, and its scales are stored once.
"""
from __future__ import annotations

import copy

import numpy as np

_ROWS_BYTES = 64 * 2**20  # float bytes quantized at a time


def quantize_weights(model, stubs, recipe_name: str) -> int:
    """Quantize ``model``'s (an unpacked ``ModelT``) weights in place with the quantizer's recipe
    ``recipe_name`` (``noxla.llm.quantize.QUANTIZER_MODES``); ``stubs``: the ``WeightStubs`` whose
    placeholders its buffers may hold, or None. Returns how many weights were quantized."""
    from ai_edge_quantizer import qtyping, recipe, recipe_manager

    from noxla.writers.tflite.flatbuffer.merge import builtin_code
    from noxla.writers.tflite.flatbuffer.schema import schema
    manager = recipe_manager.RecipeManager()
    manager.load_quantization_recipe(getattr(recipe, recipe_name)())
    embedding_lookups(model)
    kinds = {schema.BuiltinOperator.FULLY_CONNECTED: qtyping.TFLOperationName.FULLY_CONNECTED,
             schema.BuiltinOperator.EMBEDDING_LOOKUP: qtyping.TFLOperationName.EMBEDDING_LOOKUP}
    read_otherwise, float_buffers = _read_otherwise(model, set(kinds), builtin_code)
    done: dict[int, tuple] = {}  # buffer -> (tensor type, quantization params, scales buffer or None, buffer)
    for graph in model.subgraphs:
        scales_tensors: dict[int, int] = {}  # scales buffer -> this graph's tensor of it
        own_tensors: dict[int, int] = {}  # a tensor also read as a float -> its weight readers' copy
        for index, op in enumerate(graph.operators or []):
            kind = kinds.get(builtin_code(model, op))
            if kind is None or op.inputs is None or len(op.inputs) < 2 or op.inputs[1] < 0:
                continue
            tensor = graph.tensors[op.inputs[1]]
            data = model.buffers[tensor.buffer].data if tensor.buffer > 0 else None
            if tensor.type != schema.TensorType.FLOAT32 or data is None or len(data) == 0:
                continue
            if tensor.buffer not in done:
                name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
                algorithm, config = manager.get_quantization_configs(kind, name)
                if (algorithm == recipe_manager.AlgorithmName.NO_QUANTIZE or config.weight_tensor_config is None
                        or int(np.prod(tensor.shape)) < config.min_weight_elements):
                    continue
                info = qtyping.OpInfo(op=op, op_name=kind, subgraph_op_index=index, op_quant_config=config)
                done[tensor.buffer] = _quantized(model, tensor, _weight(data, stubs, tensor.shape), info, schema,
                                                 own_buffer=tensor.buffer in float_buffers)
            if (id(graph), op.inputs[1]) in read_otherwise:
                # TF's converter writes a tensor per reader, noxla's graph one per constant: the
                # weight's readers get a tensor of their own, on the quantized buffer.
                if op.inputs[1] not in own_tensors:
                    graph.tensors.append(copy.copy(tensor))
                    own_tensors[op.inputs[1]] = len(graph.tensors) - 1
                op.inputs[1] = own_tensors[op.inputs[1]]
                tensor = graph.tensors[op.inputs[1]]
            tensor_type, params, scales_buffer, tensor.buffer = done[tensor.buffer]
            tensor.type = tensor_type
            tensor.quantization = _params_here(params, scales_buffer, graph, scales_tensors, tensor, schema)
    return len(done)


def _read_otherwise(model, kinds: set, builtin_code) -> tuple[set, set]:
    """The tensors (as ``(id(graph), index)``) that some op reads other than as the weight of one
    of ``kinds`` (or a signature returns), and the buffers any such tensor holds. Such a tensor stays float (its
    weight readers read a copy); a quantized tensor on such a buffer gets a buffer of its own (as the
    quantizer does), the float one kept."""
    other = set()
    for graph in model.subgraphs:
        for op in graph.operators or []:
            weight = builtin_code(model, op) in kinds
            other.update((id(graph), t) for i, t in enumerate(op.inputs if op.inputs is not None else [])
                         if t >= 0 and not (weight and i == 1))
        other.update((id(graph), t) for t in (graph.outputs if graph.outputs is not None else []))
    buffers = {graph.tensors[t].buffer for graph in model.subgraphs for t in range(len(graph.tensors))
               if (id(graph), t) in other and graph.tensors[t].buffer > 0}
    return other, buffers


def _weight(data, stubs, shape) -> np.ndarray:
    """The float32 weight a buffer holds or (a stand-in's placeholder) stands for."""
    content = stubs.content(data) if stubs is not None and stubs.is_placeholder(data) else data
    return np.asarray(content).reshape(-1).view(np.float32).reshape(tuple(shape))


def _quantized(model, tensor, weight: np.ndarray, info, schema, own_buffer: bool) -> tuple:
    """Quantize ``weight`` into its buffer (``own_buffer``: a new one), in blocks of rows:
    (type, params, scales buffer, the quantized bytes' buffer)."""
    from ai_edge_quantizer.algorithms.uniform_quantize import naive_min_max_quantize, uniform_quantize_tensor
    from ai_edge_quantizer.transformations import transformation_utils
    config = info.op_quant_config.weight_tensor_config
    rows = max(1, _ROWS_BYTES // max(1, weight[0].nbytes))
    packed, scales, zero_points = [], [], []
    for start in range(0, weight.shape[0], rows):
        block = np.ascontiguousarray(weight[start:start + rows])
        p = naive_min_max_quantize.get_tensor_quant_params(info, config, block)
        values = np.ravel(np.asarray(p.quantized_data)).view(np.uint8)
        packed.append(transformation_utils.pack_data(p.num_bits, values))
        scales.append(np.asarray(p.scale, np.float32))
        zero_points.append(np.asarray(p.zero_point))
    target = tensor.buffer
    if own_buffer:
        model.buffers.append(schema.BufferT())
        target = len(model.buffers) - 1
    model.buffers[target].data = np.concatenate(packed)
    bits = config.num_bits
    tensor_type = {4: schema.TensorType.INT4, 8: schema.TensorType.INT8}[bits]
    scale = np.concatenate(scales)
    if uniform_quantize_tensor.is_blockwise(config.granularity):
        # As the quantizer stores blockwise scales: float16 holding values rounded to bfloat16's
        # 7-bit mantissa (they already are, ``tensor_zp_scale_from_min_max``).
        import ml_dtypes
        buffer = schema.BufferT()
        buffer.data = np.ascontiguousarray(scale.astype(ml_dtypes.bfloat16).astype(np.float16)).reshape(-1).view(
            np.uint8)
        model.buffers.append(buffer)
        block = uniform_quantize_tensor.extract_block_size_from_granularity(config.granularity)
        return tensor_type, ("blockwise", scale.shape, block), len(model.buffers) - 1, target
    return tensor_type, ("channelwise", np.ravel(scale), np.ravel(np.concatenate(zero_points)).astype(np.int64),
                         p.quantized_dimension), None, target


def _params_here(params, scales_buffer, graph, scales_tensors: dict, tensor, schema):
    """The tensor's QuantizationParametersT in ``graph`` (a blockwise weight's scales tensor is
    made once per graph, on the shared buffer)."""
    q = schema.QuantizationParametersT()
    if params[0] == "channelwise":
        _, q.scale, q.zeroPoint, q.quantizedDimension = params
        return q
    _, shape, block = params
    if scales_buffer not in scales_tensors:
        scales = schema.TensorT()
        scales.name, scales.shape = tensor.name + b"_scales", list(shape)
        scales.type, scales.buffer = schema.TensorType.FLOAT16, scales_buffer
        graph.tensors.append(scales)
        scales_tensors[scales_buffer] = len(graph.tensors) - 1
    details = schema.BlockwiseQuantizationT()
    details.scales, details.zeroPoints, details.blockSize = scales_tensors[scales_buffer], -1, block
    q.detailsType, q.details, q.quantizedDimension = schema.QuantizationDetails.BlockwiseQuantization, details, 0
    return q


def embedding_lookups(model) -> None:
    """Rewrite each GATHER of whole rows of a constant float32 table (axis 0, no batch
    dimensions, int32 indices [1, ..., 1, T]) into EMBEDDING_LOOKUP, which computes the same
    (``out[i] = table[ids[i]]``) and which the quantizer's recipes quantize. EMBEDDING_LOOKUP takes
    1-D ids: ids of a higher rank (keras-hub embeds tokens [1, T]) are reshaped to [T] before it and
    the rows [T, hidden] to the GATHER's output shape after it."""
    from noxla.writers.tflite.flatbuffer.merge import opcode_index
    from noxla.writers.tflite.flatbuffer.schema import schema
    opcodes = model.operatorCodes
    gathers = {i for i, c in enumerate(opcodes)
               if max(c.builtinCode, c.deprecatedBuiltinCode) == schema.BuiltinOperator.GATHER}
    for graph in model.subgraphs:
        operators = []
        for op in graph.operators or []:
            if op.opcodeIndex not in gathers or not _is_row_lookup(model, graph, op, schema):
                operators.append(op)
                continue
            table, ids = op.inputs
            op.opcodeIndex = opcode_index(model, schema.BuiltinOperator.EMBEDDING_LOOKUP)
            op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.NONE, None
            if len(graph.tensors[ids].shape) == 1:
                op.inputs = [ids, table]
                operators.append(op)
                continue
            out = op.outputs[0]
            count, hidden = int(graph.tensors[ids].shape[-1]), int(graph.tensors[table].shape[1])
            flat = _tensor(graph, graph.tensors[ids].name + b"/flat", schema.TensorType.INT32, [count], schema)
            rows = _tensor(graph, graph.tensors[out].name + b"/rows", schema.TensorType.FLOAT32, [count, hidden],
                           schema)
            op.inputs, op.outputs = [flat, table], [rows]
            operators += [_reshape(model, graph, ids, flat, schema), op, _reshape(model, graph, rows, out, schema)]
        graph.operators = operators


def _tensor(graph, name: bytes, tensor_type: int, shape: list, schema, buffer: int = 0) -> int:
    tensor = schema.TensorT()
    tensor.name, tensor.type, tensor.shape, tensor.buffer = name, tensor_type, list(shape), buffer
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def _reshape(model, graph, source: int, target: int, schema):
    """A RESHAPE of ``source`` to ``target``'s shape (given as a constant input and as options)."""
    import numpy as np

    from noxla.writers.tflite.flatbuffer.merge import opcode_index
    shape = [int(d) for d in graph.tensors[target].shape]
    buffer = schema.BufferT()
    buffer.data = np.asarray(shape, np.int32).view(np.uint8)
    model.buffers.append(buffer)
    shape_tensor = _tensor(graph, graph.tensors[target].name + b"/shape", schema.TensorType.INT32, [len(shape)],
                           schema, len(model.buffers) - 1)
    op = schema.OperatorT()
    op.opcodeIndex = opcode_index(model, schema.BuiltinOperator.RESHAPE)
    op.inputs, op.outputs = [source, shape_tensor], [target]
    op.builtinOptionsType = schema.BuiltinOptions.ReshapeOptions
    op.builtinOptions = schema.ReshapeOptionsT()
    op.builtinOptions.newShape = shape
    return op


def _is_row_lookup(model, graph, op, schema) -> bool:
    options = op.builtinOptions
    if options is None or options.axis != 0 or options.batchDims != 0 or len(op.inputs) != 2:
        return False
    table, ids = (graph.tensors[i] for i in op.inputs)
    data = model.buffers[table.buffer].data if table.buffer > 0 else None
    return (table.type == schema.TensorType.FLOAT32 and len(table.shape) == 2 and data is not None
            and len(data) > 0 and ids.type == schema.TensorType.INT32 and len(ids.shape) >= 1
            and all(int(d) == 1 for d in ids.shape[:-1]))
