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
    # Buffers are bucketed by their size and a sample of their bytes, which reads almost none of
    # them; only a bucket that gets a second buffer has its buffers digested, and equal digests
    # are then compared in full. Digesting every buffer (a stand-in's weight made, transposed, to
    # be hashed) was a tenth of a small model's first export (Whisper-tiny: 0.11 of 1.3 CPU s).
    # The buffers kept are the same: the first of those holding the same bytes.
    buckets: dict[tuple, list] = {}
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
            bucket = buckets.setdefault((data.nbytes, _sample(data, stubs).tobytes()), [])
            kept = _equal_buffer(model, bucket, data, tensor.buffer, stubs)
            if kept != tensor.buffer:
                dropped.add(tensor.buffer)
                tensor.buffer = kept
    for b in dropped - {t.buffer for graph in model.subgraphs for t in graph.tensors}:
        model.buffers[b].data = None


_SAMPLES = 64  # bytes sampled from a buffer, evenly spaced, for its bucket


def _sample(data: np.ndarray, stubs) -> np.ndarray:
    """``_SAMPLES`` of the bytes ``data`` holds (or, a stand-in's placeholder, stands for)."""
    positions = np.linspace(0, data.nbytes - 1, min(_SAMPLES, data.nbytes)).astype(np.int64)
    if stubs is not None:
        return stubs.sample(data, positions)
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)[positions]


def _buffer_digest(data: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(data).view(np.uint8), digest_size=16).digest()


def _equal_buffer(model, bucket: list, data: np.ndarray, buffer: int, stubs) -> int:
    """The first buffer of ``bucket`` (``[buffer, its digest or None]`` entries whose size and
    sample are ``data``'s) that holds the same bytes as ``data``, else ``buffer``, which joins it."""
    if any(kept == buffer for kept, _ in bucket):
        return buffer
    digest = None
    if bucket:
        def content(data):
            return (stubs.content(data) if stubs is not None else data).view(np.uint8)

        def digest_of(data):
            return stubs.digest(data, _buffer_digest) if stubs is not None else _buffer_digest(data)
        digest = digest_of(data)
        for entry in bucket:
            kept_data = model.buffers[entry[0]].data
            if entry[1] is None:
                entry[1] = digest_of(kept_data)
            if entry[1] == digest and np.array_equal(content(kept_data), content(data)):
                return entry[0]
    bucket.append([buffer, digest])
    return buffer


def merge_tflite(models: Mapping[str, bytes]) -> bytes:
    """``merged_model`` serialized (below the 2 GB limit)."""
    from noxla.writers.tflite.flatbuffer.schema import model_bytes
    return model_bytes(merged_model(models))


def merged_model(models: Mapping[str, bytes], stubs=None):
    """One flatbuffer holding each model (as ``finish_tflite`` writes them: one ``serving_default``
    signature; bytes, or unpacked with ``stubs``) under its own signature key, in the given order.
    Subgraphs, buffers and operator codes are appended with their indices remapped; equal constant
    buffers are then shared across all signatures (``share_constant_buffers``): the weights are
    stored once."""
    from noxla.writers.tflite.flatbuffer.schema import read_model
    merged = None
    for key, data in models.items():
        # Views of the bytes, as in ``finish_tflite``.
        model = data if stubs is not None else read_model(data)
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


def builtin_code(model, op) -> int:
    """The builtin operator of ``op`` in the unpacked ``model`` (codes above 127 are only in
    ``builtinCode``, older files' only in ``deprecatedBuiltinCode``)."""
    code = model.operatorCodes[op.opcodeIndex]
    return max(code.builtinCode, code.deprecatedBuiltinCode)


def opcode_index(model, builtin: int) -> int:
    """The index of ``builtin``'s operator code in the unpacked ``model``, added if missing."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    for i, code in enumerate(model.operatorCodes):
        if max(code.builtinCode, code.deprecatedBuiltinCode) == builtin and not code.customCode:
            return i
    code = schema.OperatorCodeT()
    # deprecatedBuiltinCode holds codes below 127, as readers older than the wider field expect.
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), 1
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def buffer_holders(model) -> dict[int, int]:
    """Per buffer index, how many tensors of all the model's subgraphs hold it."""
    held: dict[int, int] = {}
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            held[tensor.buffer] = held.get(tensor.buffer, 0) + 1
    return held


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
