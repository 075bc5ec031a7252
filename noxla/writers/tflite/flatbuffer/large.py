"""A .tflite past the 2 GB flatbuffer limit, written the way LiteRT reads large models: the
flatbuffer holds every large buffer as an ``offset`` and ``size`` (from the file's start) instead of
its bytes, and the bytes follow the flatbuffer. LiteRT reads a buffer at an offset greater than 1
from the file it maps (TF's converter writes this form with ``_experimental_use_buffer_offset``;
measured: ai-edge-litert runs such a file with outputs bit-identical to the inline one).

Below the limit a model is serialized as usual, one flatbuffer. Either way the large buffers'
bytes are not copied into it: the flatbuffer is built around room left for them, and they are
written into that room from their arrays (or made from a weight stand-in's, one at a time) as the
file is written."""
from __future__ import annotations

import mmap
from typing import Callable, Iterator

import flatbuffers
import numpy as np

from noxla.errors import ExportError

FLATBUFFER_LIMIT = 2**31 - 1
# Room left for the flatbuffer's tables (ops, tensors, names), which stay inline.
_TABLES_MARGIN = 64 * 2**20
_ALIGN = 64
_OUTSIDE = 4096  # buffers of at least this many bytes go after the flatbuffer
# The room the builder's tables may take: virtual memory, the pages only taken where written.
_BUILDER_ROOM = 2**30


def serving_signature(schema, in_names, inputs, out_names, outputs):
    """The ``serving_default`` signature LiteRT's signature runner reads names from: inputs and
    outputs by name, at the subgraph's tensor indices (``schema``: the flatbuffer module in use)."""
    def tensor_map(name, index):
        entry = schema.TensorMapT()
        entry.name, entry.tensorIndex = name, int(index)
        return entry
    signature = schema.SignatureDefT()
    signature.signatureKey, signature.subgraphIndex = "serving_default", 0
    signature.inputs = [tensor_map(n, i) for n, i in zip(in_names, inputs)]
    signature.outputs = [tensor_map(n, i) for n, i in zip(out_names, outputs)]
    return signature


def buffer_bytes(model) -> int:
    return sum(b.data.size for b in model.buffers if b.data is not None and not isinstance(b.data, list))


def fits_inline(nbytes: int, limit: int | None = None) -> bool:
    """Whether buffers of ``nbytes`` in all fit in one flatbuffer with its tables."""
    return nbytes + _TABLES_MARGIN <= (FLATBUFFER_LIMIT if limit is None else limit)


def needs_offsets(model, limit: int | None = None) -> bool:
    return not fits_inline(buffer_bytes(model), limit)


def serialized(model, limit: int | None = None, stubs=None) -> list:
    """The file's bytes as a list of chunks, each bytes or a function making them (``model``, an
    unpacked ``ModelT``, is modified): one flatbuffer, or past ``limit`` the flatbuffer with
    offsets and the buffers' bytes after it. ``stubs``: the ``WeightStubs`` whose placeholders
    ``model``'s buffers hold."""
    from noxla.writers.tflite.flatbuffer.schema import model_bytes
    limit = FLATBUFFER_LIMIT if limit is None else limit
    if not needs_offsets(model, limit):
        return packed(model, stubs)
    outside = []
    for buffer in model.buffers:
        data = buffer.data
        if data is not None and not isinstance(data, list) and data.size >= _OUTSIDE:
            outside.append((buffer, _chunk(data, stubs)))
            # Nonzero placeholders, so that the fields are written (a zero is a default, left out)
            # and the flatbuffer keeps its size once the real offsets are filled in.
            buffer.data, buffer.offset, buffer.size = None, 2**62, 2**62
    size = len(model_bytes(model))
    position = _aligned(size)
    for buffer, data in outside:
        buffer.offset, buffer.size = position, _size(data)
        position = _aligned(position + buffer.size)
    head = model_bytes(model)
    if len(head) != size or size > limit:
        raise ExportError(f"the flatbuffer's tables alone take {size} bytes, past the {limit}-byte limit")
    return list(_chunks(head, outside))


def packed(model, stubs=None) -> list:
    """The flatbuffer as chunks: the bytes of its buffers of at least ``_OUTSIDE`` bytes are left
    out of the builder and follow as their own chunks, where the builder left room for them. The
    builder works in an anonymous mapping sized up front (``flatbuffers.Builder`` grows a bytearray
    by doubling and copies the result twice: 1.5 GB above the weights for a 0.54 GB model); the
    room it leaves is never touched, so takes no memory."""
    builder = _RoomLeavingBuilder(buffer_bytes(model) + _BUILDER_ROOM, stubs)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    chunks, position = [], builder.Head()
    view = memoryview(builder.Bytes)
    for start, data in sorted(builder.left, key=lambda entry: entry[0]):
        chunks += [view[position:start], data]
        position = start + _size(data)
    chunks.append(view[position:])
    return chunks


class _RoomLeavingBuilder(flatbuffers.Builder):
    """A builder that leaves room for large byte vectors instead of copying them in, working in an
    anonymous mapping of ``size`` bytes (``left``: where each vector's bytes go, and the chunk)."""

    def __init__(self, size: int, stubs):
        super().__init__(0)
        self.Bytes, self.head = mmap.mmap(-1, size), size
        self.left: list = []
        self._stubs = stubs

    def CreateNumpyVector(self, x):  # noqa: N802  (flatbuffers' name)
        if x.dtype.itemsize != 1 or x.nbytes < _OUTSIDE:
            return super().CreateNumpyVector(x)
        # ``CreateNumpyVector`` without the copy: the same alignment, length and room.
        self.StartVector(x.itemsize, x.size, x.dtype.alignment)
        self.head -= x.nbytes
        self.left.append((self.head, _chunk(x, self._stubs)))
        self.vectorNumElems = x.size
        return self.EndVector()

    def GrowByteBuffer(self):  # noqa: N802
        raise ExportError(f"the flatbuffer's tables outgrew the {_BUILDER_ROOM} bytes left for them")


def _chunk(data, stubs):
    """A buffer's bytes, or for a stand-in's placeholder the function that makes them."""
    if stubs is not None and stubs.is_placeholder(data):
        return _Made(data.size, lambda: stubs.content(data))
    return np.ascontiguousarray(data)


class _Made:
    """A chunk made when written: ``size`` bytes from ``make()``."""

    def __init__(self, size: int, make: Callable):
        self.size, self._make = size, make

    def __call__(self):
        data = self._make()
        if data.nbytes != self.size:
            raise ExportError(f"a weight made {data.nbytes} bytes for a buffer of {self.size}")
        return data


def _size(chunk) -> int:
    return chunk.size if isinstance(chunk, _Made) else chunk.nbytes


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _chunks(head: bytes, outside: list) -> Iterator:
    yield head
    end = len(head)
    for buffer, data in outside:
        yield bytes(buffer.offset - end)
        yield data
        end = buffer.offset + buffer.size
