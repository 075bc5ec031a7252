"""TF's path's passes on the file its TFLite converter wrote (``finish_tflite``): the signature
the converter's GraphDef entry leaves out, the weights' stand-ins and infinities put back, exact
constant outputs, the flatbuffer passes (reshape and transpose pairs, caches read by BATCH_MATMUL,
LiteRT.js WebGPU's layouts), equal buffers shared and ``keepNumDims``. noxla's graph writer runs
the same passes on its own file where they write it shorter (``noxla.writers.tflite.Passes``)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from noxla.writers.tf.weight_stubs import WeightStubs, fold_into_stand_ins
from noxla.writers.tflite.converter import infinities as tflite_infinities
from noxla.writers.tflite.flatbuffer import large as large_tflite
from noxla.writers.tflite.flatbuffer.merge import builtin_code, share_constant_buffers
from noxla.writers.tflite.flatbuffer.reshapes import (
    fold_transpose_pairs,
    read_caches_in_batch_matmul,
    remove_reshape_pairs,
)
from noxla.writers.tflite.flatbuffer.webgpu import (
    copy_passthrough_outputs,
    distinct_operands,
    integer_differences_from_constants,
    negations_as_products,
    not_equal_as_negated_equal,
    unfuse_transpose_conv_activations,
    wide_integer_scalars,
)
from noxla.writers.tflite.flatbuffer.webgpu_constants import constants_with_unit_batch
from noxla.writers.tflite.flatbuffer.webgpu_layouts import pads_sums_and_reverses


def finish_tflite(data: bytes, in_names: Sequence[str], out_names: Sequence[str],
                  stubs: WeightStubs | None = None, webgpu: bool = False,
                  constants: Sequence[np.ndarray] | None = None,
                  infinite: Mapping[str, np.ndarray] | None = None) -> bytes:
    """The converted model with its ``serving_default`` signature (inputs and outputs by name, in
    the subgraph's order: the concrete function's inputs, its outputs flattened in key order) and
    ``keep_num_dims`` on every FULLY_CONNECTED whose input and output are 2-D, as the native
    path's converter writes it. TF's MatMul converts without it; on a 2-D input both give the same
    [batch, units] output, but without it XNNPACK adds a reshape per op: 5% of the mlp's LiteRT
    latency (1.62 vs 1.53 us, interleaved). Equal constant buffers are shared, as the converter's
    own last step (skipped by ``tflite_bytes``) does. ``constants``: the exact values of outputs
    the converter folded (``noxla.pipeline.tf_tflite._outputs_of_a_constant_program``).
    ``infinite``: the infinite constants handed to the converter as inputs
    (``noxla.writers.tflite.converter.infinities``). One unpack and pack of the flatbuffer; with
    ``stubs``, the unpacked model (``ModelT``), its weights placeholders (see ``WeightStubs.attach``)."""
    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model, schema
    # Read from the bytes themselves: the buffers become read-only views of them, not of a copy
    # (nothing here writes into a buffer's data; sharing only re-points tensors).
    model = read_model(data)
    main = model.subgraphs[0]
    if stubs is not None:  # the stand-ins become constants with the weights' bytes
        stubs.attach(model)
        fold_into_stand_ins(model, stubs)
    tflite_infinities.attach(model, infinite or {})
    if constants is not None:
        _write_constant_outputs(schema, model, constants)
    copy_passthrough_outputs(model)
    negations_as_products(model)  # LiteRT's NEG gives +0.0 for +0.0
    remove_reshape_pairs(model)  # reshapes that move nothing around elementwise chains (attention's mask)
    if not webgpu:  # WebGPU's BATCH_MATMUL is not known to broadcast batch axes of unequal rank
        read_caches_in_batch_matmul(model)
    fold_transpose_pairs(model)  # the converter folds a pair only when nothing else reads the first
    if webgpu:  # the delegate reads a constant operand's first batch only, and NOT_EQUAL of a NaN as false
        wide_integer_scalars(model)  # and reads a one-element int32 constant as a float32
        pads_sums_and_reverses(model)  # pads, sums and reverses some layouts wrong
        constants_with_unit_batch(model)
        not_equal_as_negated_equal(model)
        integer_differences_from_constants(model)  # it swaps a constant vector's SUB operands

    model.signatureDefs = [large_tflite.serving_signature(schema, in_names, main.inputs, out_names, main.outputs)]
    share_constant_buffers(model, stubs)
    if webgpu:  # and a tensor read twice by one operator aborts the delegate
        unfuse_transpose_conv_activations(model)
        distinct_operands(model)
    for graph in model.subgraphs:
        for op in graph.operators or []:
            if builtin_code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED:
                continue
            options = op.builtinOptions
            ranks = {len(graph.tensors[op.inputs[0]].shape), len(graph.tensors[op.outputs[0]].shape)}
            if isinstance(options, schema.FullyConnectedOptionsT) and ranks == {2}:
                options.keepNumDims = True
    if stubs is not None:
        return model
    return model_bytes(model)


def _write_constant_outputs(schema, model, values: Sequence[np.ndarray]) -> None:
    """Each output of the main subgraph that is a constant gets its own buffer holding ``values``'
    bytes (the converter's copy has the largest finite float where the value is infinite)."""
    graph = model.subgraphs[0]
    for t, value in zip(graph.outputs, values):
        tensor = graph.tensors[t]
        data = model.buffers[tensor.buffer].data if tensor.buffer else None
        exact = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        if data is None or len(data) != exact.size:
            continue
        buffer = schema.BufferT()
        buffer.data = exact
        model.buffers.append(buffer)
        tensor.buffer = len(model.buffers) - 1
