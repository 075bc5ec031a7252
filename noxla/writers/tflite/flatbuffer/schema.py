"""The TFLite flatbuffer schema every pass over a .tflite reads and writes models with, and the two
steps between a file's bytes and its unpacked objects (``ModelT``).

The schema is ai-edge-litert's copy (a dependency of noxla, as its runtime), so that no pass needs
TensorFlow (issue 41). TensorFlow's copy (its ``lite.python`` package's) is the
same schema a few fields older, but its classes are other classes: objects of the two must never
meet in one model (the passes test option tables with ``isinstance``), so every pass takes this one.

``read_model`` keeps what TensorFlow's ``flatbuffer_utils.read_model_from_bytearray`` gives the
passes (ai-edge-litert's own reader also compacts the empty buffers and turns index arrays into
lists, which would renumber buffers and change the bytes written): buffers and index vectors as
NumPy arrays, read-only views of ``data``."""
from __future__ import annotations

import flatbuffers
from ai_edge_litert import schema_py_generated as schema

__all__ = ["FILE_IDENTIFIER", "model_bytes", "read_model", "read_model_file", "schema"]

FILE_IDENTIFIER = b"TFL3"


def read_model(data) -> schema.ModelT:
    """The model in ``data`` (bytes or bytearray), unpacked. What a file past
    2 GB keeps after its flatbuffer (a buffer's or an operator's large custom options, as offset and
    size from the file's start) is read into the model as slices of ``data``, the offsets cleared."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    for buffer in model.buffers or []:
        if buffer.offset:
            buffer.data = data[buffer.offset:buffer.offset + buffer.size]
            buffer.offset = buffer.size = 0
    for graph in model.subgraphs or []:
        for op in graph.operators or []:
            if op.largeCustomOptionsOffset:
                start = op.largeCustomOptionsOffset
                op.customOptions = data[start:start + op.largeCustomOptionsSize]
                op.largeCustomOptionsOffset = op.largeCustomOptionsSize = 0
    return model


def model_bytes(model: schema.ModelT) -> bytes:
    """``model`` packed into one flatbuffer (below the 2 GB limit; ``noxla.writers.tflite.flatbuffer.large`` writes
    larger ones, and without copying the weights)."""
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def read_model_file(path) -> schema.ModelT:
    with open(path, "rb") as f:
        return read_model(f.read())
