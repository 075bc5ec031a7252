"""A .tflite past the 2 GB flatbuffer limit, written the way LiteRT reads large models: the
flatbuffer holds every large buffer as an ``offset`` and ``size`` (from the file's start) instead of
its bytes, and the bytes follow the flatbuffer. LiteRT reads a buffer at an offset greater than 1
from the file it maps (TF's converter writes this form with ``_experimental_use_buffer_offset``;
measured: ai-edge-litert runs such a file with outputs bit-identical to the inline one).

Below the limit a model is serialized as usual, one flatbuffer."""
from __future__ import annotations

from typing import Iterator

from noxla.errors import ExportError

FLATBUFFER_LIMIT = 2**31 - 1
# Room left for the flatbuffer's tables (ops, tensors, names), which stay inline.
_TABLES_MARGIN = 64 * 2**20
_ALIGN = 64
_OUTSIDE = 4096  # buffers of at least this many bytes go after the flatbuffer


def buffer_bytes(model) -> int:
    return sum(b.data.size for b in model.buffers if b.data is not None and not isinstance(b.data, list))


def needs_offsets(model, limit: int | None = None) -> bool:
    return buffer_bytes(model) + _TABLES_MARGIN > (FLATBUFFER_LIMIT if limit is None else limit)


def serialized(model, limit: int | None = None) -> list:
    """The file's bytes as a list of chunks (``model``, an unpacked ``ModelT``, is modified):
    one flatbuffer, or past ``limit`` the flatbuffer with offsets and the buffers' bytes after it."""
    from tensorflow.lite.tools import flatbuffer_utils
    limit = FLATBUFFER_LIMIT if limit is None else limit
    if not needs_offsets(model, limit):
        return [packed(model)]
    outside = []
    for buffer in model.buffers:
        data = buffer.data
        if data is not None and not isinstance(data, list) and data.size >= _OUTSIDE:
            outside.append((buffer, data))
            # Nonzero placeholders, so that the fields are written (a zero is a default, left out)
            # and the flatbuffer keeps its size once the real offsets are filled in.
            buffer.data, buffer.offset, buffer.size = None, 2**62, 2**62
    size = len(flatbuffer_utils.convert_object_to_bytearray(model))
    position = _aligned(size)
    for buffer, data in outside:
        buffer.offset, buffer.size = position, data.size
        position = _aligned(position + data.size)
    head = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    if len(head) != size or size > limit:
        raise ExportError(f"the flatbuffer's tables alone take {size} bytes, past the {limit}-byte limit")
    return list(_chunks(head, outside))


def packed(model) -> memoryview:
    """The flatbuffer, packed into a builder sized for the buffers up front and returned as a view
    of it: ``flatbuffer_utils.convert_object_to_bytearray`` grows its builder by doubling and copies
    the result twice (1.5 GB above the weights for a 0.54 GB model)."""
    import flatbuffers
    builder = flatbuffers.Builder(buffer_bytes(model) + _TABLES_MARGIN)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return memoryview(builder.Bytes)[builder.Head():]


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _chunks(head: bytes, outside: list) -> Iterator:
    yield head
    end = len(head)
    for buffer, data in outside:
        yield bytes(buffer.offset - end)
        yield data
        end = buffer.offset + data.size
