"""Quantized .tflite files from LiteRT's quantizer (noxla/writers/tflite/quantize.py): the graph's float file
quantized without TensorFlow, byte-identical from one export to the next (TF 2.21's int8 quantizer
is not: lstm_classifier's file was 74,920 or 75,520 bytes), and TF's converter where the quantizer
is not installed or is turned off. tests/test_quantize.py holds every zoo model to its error bounds
on both paths."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pytest

import noxla
from noxla.errors import tensorflow_installed
from noxla.pipeline.graph_path import why_tflite_needs_tensorflow
from noxla.pipeline.preflight import ExportOptions
from noxla.runtimes import run_tflite
from noxla.writers.tflite import quantize as tflite_quantize
from tests import zoo
from tests.test_tflite_infinities import INFINITE_CALIBRATIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = zoo.build()
QUANTIZER = "quantize {mode} (LiteRT's quantizer)"
needs_quantizer = pytest.mark.skipif(not tflite_quantize.installed(), reason="ai-edge-quantizer is not installed")


def _export(name: str, mode: str, path, steps: list | None = None) -> bytes:
    model = MODELS[name]
    samples = model.calibration_samples(16) if mode == "int8" else None
    on_step = None if steps is None else (lambda step, seconds: steps.append(step))
    with open(noxla.export_tflite(model.fun, *model.inputs(1), path=str(path), quantize=mode, overwrite=True,
                                  representative_data=samples, on_step=on_step), "rb") as f:
        return f.read()


@needs_quantizer
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["float16", "dynamic_int8", "int8"])
def test_repeated_exports_are_byte_identical(mode, tmp_path):
    # lstm_classifier: the model TF 2.21's int8 quantizer wrote two ways in one process.
    steps = []
    first = _export("lstm_classifier", mode, tmp_path / "a.tflite", steps)
    assert QUANTIZER.format(mode=mode) in steps, steps
    for again in range(2):
        assert _export("lstm_classifier", mode, tmp_path / f"b{again}.tflite") == first, again


@needs_quantizer
def test_the_environment_chooses_the_quantizer(tmp_path):
    steps = []
    with mock.patch.dict(os.environ, {tflite_quantize.ENV: "tf"}):
        if tensorflow_installed():
            _export("mlp", "float16", tmp_path / "tf.tflite", steps)
            assert not any("LiteRT's quantizer" in s for s in steps), steps
            assert any(f"{tflite_quantize.ENV}=tf" in s for s in steps), steps
    steps.clear()
    with mock.patch.dict(os.environ, {tflite_quantize.ENV: "litert"}):
        _export("mlp", "float16", tmp_path / "litert.tflite", steps)
    assert QUANTIZER.format(mode="float16") in steps, steps


def test_without_the_quantizer_tf_converter_quantizes_and_the_reason_names_the_extra():
    options = ExportOptions(tflite="m.tflite", quantize="int8")
    with mock.patch.object(tflite_quantize, "installed", return_value=False):
        reason = why_tflite_needs_tensorflow(options)
    assert "TF's converter" in reason and 'pip install "noxla[quantize]"' in reason, reason


def _run_without(tmp_path, blocked: list[str], body: str) -> str:
    """``body`` in a fresh process where importing each of ``blocked`` fails, as where it is not installed."""
    script = "".join(f"import sys; sys.modules[{name!r}] = None\n" for name in blocked) + textwrap.dedent(f"""
        sys.path.insert(0, {ROOT!r})
        import os
        import numpy as np
        import noxla
        from noxla.errors import TensorFlowMissing
        from tests import zoo
        MODELS = zoo.build()
    """) + textwrap.dedent(body) + "\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=900)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.stdout[-2000:], proc.stderr[-4000:])
    return proc.stdout


@needs_quantizer
@pytest.mark.slow
def test_quantized_exports_without_tensorflow(tmp_path):
    # tests/test_quantize.py's bounds (max error relative to the output's scale), in LiteRT.
    _run_without(tmp_path, ["tensorflow"], f"""
        from noxla.runtimes import run_tflite
        from noxla.front.tracing import trace
        from noxla.runtimes.verify import jax_outputs
        for name in ("cnn", "llama"):
            model = MODELS[name]
            args = model.inputs(1)
            program = trace(model.fun, tuple(args))
            expected = jax_outputs(model.fun, args)
            scale = max(1.0, max(float(np.max(np.abs(e))) for e in expected))
            for mode, bound in (("float16", 1e-2), ("dynamic_int8", 0.1), ("int8", 0.3)):
                steps, samples = [], model.calibration_samples(16) if mode == "int8" else None
                path = noxla.export_tflite(model.fun, *args, path={str(tmp_path)!r} + f"/{{name}}_{{mode}}.tflite",
                                           quantize=mode, on_step=lambda step, s: steps.append(step),
                                           representative_data=samples)
                assert f"quantize {{mode}} (LiteRT's quantizer)" in steps, steps
                got = run_tflite(path, dict(zip(program.in_names, args)))
                error = max(float(np.max(np.abs(got[n] - e))) for n, e in zip(program.out_names, expected)) / scale
                assert error <= bound, (name, mode, error)
        assert sys.modules["tensorflow"] is None
    """)


def test_without_tensorflow_or_the_quantizer_the_error_names_both_extras(tmp_path):
    _run_without(tmp_path, ["tensorflow", "ai_edge_quantizer"], f"""
        x = np.ones((2, 3), np.float32)
        try:
            noxla.export_tflite(lambda x: x * 2.0, x, path={str(tmp_path / "m.tflite")!r}, quantize="float16")
        except TensorFlowMissing as e:
            assert 'pip install "noxla[quantize]"' in str(e) and 'pip install "noxla[tf]"' in str(e), e
        else:
            raise AssertionError("no TensorFlowMissing")
        assert not os.listdir({str(tmp_path)!r}), os.listdir({str(tmp_path)!r})
    """)


def test_tensor_names_shared_across_subgraphs_are_kept():
    # A While body's tensors may be named as the main graph's; the quantizer wants them unique.
    from noxla.writers.tflite.flatbuffer.schema import schema
    model = schema.ModelT()
    model.subgraphs = []
    for names in ([b"x", b"t0"], [b"x", b"t0", b""]):
        graph = schema.SubGraphT()
        graph.tensors = []
        for name in names:
            graph.tensors.append(schema.TensorT())
            graph.tensors[-1].name = name
        model.subgraphs.append(graph)
    renamed = tflite_quantize._unique_tensor_names(model)
    unique = [t.name for g in model.subgraphs for t in g.tensors]
    assert len(set(unique)) == len(unique), unique
    tflite_quantize._restore_tensor_names(model, renamed)
    assert [[t.name for t in g.tensors] for g in model.subgraphs] == [[b"x", b"t0"], [b"x", b"t0", b""]]


@needs_quantizer
@pytest.mark.slow
@INFINITE_CALIBRATIONS
def test_int8_leaves_ops_on_infinite_values_float(fun, sample, tmp_path):
    # An int8 range must be finite: an op that reads or writes an infinite value on the samples stays
    # float (TF's converter refuses such data instead, tests/test_tflite_infinities.py), so the
    # infinity comes out as JAX computes it, where an int8 op would clamp it to its range's end.
    x = np.ones((1, 3), np.float32)
    path = noxla.export_tflite(fun, x, path=str(tmp_path / "m.tflite"), quantize="int8",
                               representative_data=lambda: [[sample], [x * 0.5]])
    np.testing.assert_allclose(run_tflite(path, {"x": sample})["output"], np.asarray(fun(sample)), rtol=1e-6)
