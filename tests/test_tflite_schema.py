"""The one TFLite schema of noxla's flatbuffer passes (``noxla.writers.tflite.flatbuffer.schema``, ai-edge-litert's):
no module reads or writes a .tflite with TensorFlow's copy, and a file's bytes survive a read and
a write, also a file past 2 GB's form (buffers after the flatbuffer)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np

from noxla.writers.tflite.flatbuffer import large as large_tflite
from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model, schema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# TensorFlow's copies of what noxla.writers.tflite.flatbuffer.schema gives (their objects are other classes), as
# imported: ``from tensorflow.lite.tools import flatbuffer_utils`` or by the dotted name.
TF_FLATBUFFER_IMPORT = re.compile(r"tensorflow\.lite\.(python|tools)(\.| import )"
                                  r"(schema_py_generated|flatbuffer_utils)")


def test_no_module_reads_a_tflite_with_tensorflows_schema():
    bad = {}
    for package in ("noxla", "tests", "tools"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
            for f in files:
                path = os.path.join(dirpath, f)
                if f.endswith(".py") and path != os.path.abspath(__file__):
                    with open(path) as source:
                        found = [m.group(0) for m in TF_FLATBUFFER_IMPORT.finditer(source.read())]
                    if found:
                        bad[os.path.relpath(path, ROOT)] = found
    assert not bad, f"read and write .tflite files with noxla.writers.tflite.flatbuffer.schema: {bad}"


def _model() -> schema.ModelT:
    """A model of one ADD of two constants, one large enough to go after the flatbuffer."""
    model = schema.ModelT()
    model.version, model.buffers = 3, [schema.BufferT()]
    graph = schema.SubGraphT()
    graph.tensors, graph.inputs, graph.outputs = [], np.zeros(0, np.int32), np.asarray([2], np.int32)
    for i, values in enumerate([np.arange(2048, dtype=np.float32), np.full(2048, 0.5, np.float32), None]):
        tensor = schema.TensorT()
        tensor.shape, tensor.type, tensor.name = np.asarray([2048], np.int32), schema.TensorType.FLOAT32, f"t{i}"
        tensor.buffer = 0
        if values is not None:
            buffer = schema.BufferT()
            buffer.data = values.view(np.uint8)
            model.buffers.append(buffer)
            tensor.buffer = len(model.buffers) - 1
        graph.tensors.append(tensor)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, np.asarray([0, 1], np.int32), np.asarray([2], np.int32)
    graph.operators = [op]
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.ADD
    model.operatorCodes, model.subgraphs = [code], [graph]
    model.signatureDefs = [large_tflite.serving_signature(schema, [], [], ["sum"], [2])]
    return model


def test_read_then_written_gives_the_same_bytes_also_with_buffers_after_the_flatbuffer():
    from noxla.runtimes import run_tflite
    inline = model_bytes(_model())
    assert model_bytes(read_model(inline)) == inline
    chunks = large_tflite.serialized(read_model(inline), limit=large_tflite._TABLES_MARGIN + 1)
    offsets = b"".join(bytes(c) for c in chunks)
    assert len(offsets) > len(inline) and offsets[:len(inline)] != inline   # the form with offsets
    assert model_bytes(read_model(offsets)) == inline
    expected = np.arange(2048, dtype=np.float32) + 0.5
    for data in (inline, offsets):
        np.testing.assert_array_equal(run_tflite(data, {})["sum"], expected)


def test_the_flatbuffer_passes_import_no_tensorflow():
    """In a fresh process: signatures merged, a model written past the 2 GB form's limit, the int8
    DIV pass and the sequence passes of TF's path, without importing TensorFlow."""
    script = textwrap.dedent("""
        import sys
        from noxla.writers.tflite.flatbuffer import large as large_tflite
        from noxla.writers.tflite.flatbuffer import merge as tflite_merge
        from noxla.writers.tflite.flatbuffer import projections as tflite_projections
        from noxla.writers.tflite.flatbuffer import reshapes as tflite_reshapes
        from noxla.writers import quantize
        from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model
        from tests.test_tflite_schema import _model
        data = model_bytes(_model())
        merged = tflite_merge.merge_tflite({"a": data, "b": data})
        assert quantize.float_divisions(merged) == merged
        model = read_model(merged)
        tflite_projections.join_matrix_vector_projections(model)
        tflite_reshapes.remove_reshape_pairs(model)
        large_tflite.serialized(model, limit=large_tflite._TABLES_MARGIN + 1)
        print("tensorflow" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0 and proc.stdout.strip() == "False", (proc.stdout, proc.stderr[-2000:])
