"""Unpacked TFLite flatbuffers (``ModelT``) joined and deduplicated: several converted models under
one signature key each, and equal constant buffers stored once. A leaf: flatbuffer objects in,
flatbuffer objects out."""
from __future__ import annotations

import hashlib
from typing import Mapping

import numpy as np

from noxla.errors import ExportError


def share_constant_buffers(model, stubs=None) -> None:
    """Point the constant tensors with equal data at one buffer and empty the others' (an unpacked
    flatbuffer model, ``ModelT``). A constant: a tensor that ops only read (not variables, not a
    mutated operand), that no op writes and that is no subgraph input or output. ``stubs``: the
    weights its placeholders stand for, compared by their bytes (``WeightStubs.content``)."""
    # A digest of the data -> the buffers that keep data with it: the weights' bytes as keys would
    # be one more copy of them all.
    first: dict[bytes, list[int]] = {}
    dropped = set()
    for graph in model.subgraphs:
        read = set()
        for op in graph.operators or []:
            mutated = op.mutatingVariableInputs
            read.update(t for i, t in enumerate(op.inputs if op.inputs is not None else [])
                        if t >= 0 and not graph.tensors[t].isVariable
                        and not (mutated is not None and i < len(mutated) and mutated[i]))
        for op in graph.operators or []:
            read.difference_update(op.outputs if op.outputs is not None else [])
            read.difference_update(op.intermediates if op.intermediates is not None else [])
        read.difference_update(graph.inputs if graph.inputs is not None else [])
        read.difference_update(graph.outputs if graph.outputs is not None else [])
        for t in sorted(read):
            tensor = graph.tensors[t]
            data = model.buffers[tensor.buffer].data if tensor.buffer > 0 else None
            if data is None or isinstance(data, list) or data.size == 0:
                continue
            digest = stubs.digest(data, _buffer_digest) if stubs is not None else _buffer_digest(data)
            kept = _equal_buffer(model, first.setdefault(digest, []), data, tensor.buffer, stubs)
            if kept != tensor.buffer:
                dropped.add(tensor.buffer)
                tensor.buffer = kept
    for b in dropped - {t.buffer for graph in model.subgraphs for t in graph.tensors}:
        model.buffers[b].data = None


def _buffer_digest(data: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(data).view(np.uint8), digest_size=16).digest()


def _equal_buffer(model, candidates: list, data: np.ndarray, buffer: int, stubs) -> int:
    """The first of ``candidates`` (buffers with ``data``'s digest) that holds the same bytes, else
    ``buffer``, which joins them."""
    def content(data):
        return (stubs.content(data) if stubs is not None else data).view(np.uint8)
    for kept in candidates:
        if kept == buffer or np.array_equal(content(model.buffers[kept].data), content(data)):
            return kept
    candidates.append(buffer)
    return buffer


def merge_tflite(models: Mapping[str, bytes]) -> bytes:
    """``merged_model`` serialized (below the 2 GB limit)."""
    from tensorflow.lite.tools import flatbuffer_utils
    return bytes(flatbuffer_utils.convert_object_to_bytearray(merged_model(models)))


def merged_model(models: Mapping[str, bytes], stubs=None):
    """One flatbuffer holding each model (as ``finish_tflite`` writes them: one ``serving_default``
    signature; bytes, or unpacked with ``stubs``) under its own signature key, in the given order.
    Subgraphs, buffers and operator codes are appended with their indices remapped; equal constant
    buffers are then shared across all signatures (``share_constant_buffers``): the weights are
    stored once."""
    from tensorflow.lite.tools import flatbuffer_utils
    merged = None
    for key, data in models.items():
        # Views of the bytes, as in ``finish_tflite``.
        model = data if stubs is not None else flatbuffer_utils.read_model_from_bytearray(data)
        if len(model.signatureDefs or []) != 1:
            raise ExportError(f"signature {key!r}: expected one signature in its converted model")
        if merged is None:
            merged = model
            _rename_signature(merged, 0, key)
            continue
        _append_model(merged, model, key)
    share_constant_buffers(merged, stubs)
    return merged


def _rename_signature(model, subgraph_offset: int, key: str) -> None:
    signature = model.signatureDefs[-1]
    signature.signatureKey = key
    signature.subgraphIndex += subgraph_offset
    model.subgraphs[signature.subgraphIndex].name = key


def _append_model(merged, model, key: str) -> None:
    buffer_map = {0: 0}  # buffer 0 is the flatbuffer's shared empty buffer
    for b, buffer in enumerate(model.buffers):
        if b:
            buffer_map[b] = len(merged.buffers)
            merged.buffers.append(buffer)
    codes = {_code_key(c): i for i, c in enumerate(merged.operatorCodes)}
    code_map = {}
    for i, code in enumerate(model.operatorCodes):
        if _code_key(code) not in codes:
            codes[_code_key(code)] = len(merged.operatorCodes)
            merged.operatorCodes.append(code)
        code_map[i] = codes[_code_key(code)]
    offset = len(merged.subgraphs)
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            tensor.buffer = buffer_map[tensor.buffer]
        for op in graph.operators or []:
            op.opcodeIndex = code_map[op.opcodeIndex]
            for options in (op.builtinOptions, getattr(op, "builtinOptions2", None)):
                _shift_subgraph_indices(options, offset)
        merged.subgraphs.append(graph)
    merged.signatureDefs.append(model.signatureDefs[0])
    _rename_signature(merged, offset, key)


def _code_key(code) -> tuple:
    return (code.builtinCode, code.deprecatedBuiltinCode, code.customCode, code.version)


def _shift_subgraph_indices(options, offset: int) -> None:
    """Control-flow ops name their bodies by subgraph index (WHILE's cond and body, IF's branches,
    CALL_ONCE, a composite's decomposition): shifted with the subgraphs they point at."""
    if options is None:
        return
    for name, value in vars(options).items():
        if "subgraph" in name.lower() and isinstance(value, int):
            setattr(options, name, value + offset)
