"""Quantized exports of every zoo model: smaller than the float export, and close to float JAX.

Bounds are on max |quantized - JAX| relative to the output's scale (max |JAX output|, at least 1),
from the storage step of each mode, with a margin for error accumulating through the layers:
- float16 weights (TFLite and TF.js): relative rounding 2**-11 per weight, computation in float32:
  1e-2 (a bug such as a dropped bias or a transposed kernel is O(1)).
- TF.js uint16: a step of (max - min) / 65535 per weight tensor, finer than float16 for the weight
  ranges here: 1e-2.
- TF.js uint8 and TFLite dynamic_int8: a step of range / 255 per weight tensor (per channel for
  TFLite) and, for dynamic_int8, activations quantized per tensor on the fly: 0.1.
- TFLite int8: also every activation in int8, its range calibrated on CALIBRATION_SAMPLES other
  random inputs (a step of range / 255 per tensor, through every layer): 0.1, except in INT8_BOUNDS.
"""
import os
from unittest import mock

import numpy as np
import pytest

import noxla
from noxla.errors import tensorflow_installed
from noxla.front.tracing import trace
from noxla.runtimes import run_tflite
from noxla.runtimes.verify import jax_outputs
from noxla.writers.tflite import quantize as tflite_quantize
from tests import zoo

MODELS = zoo.build()
pytestmark = pytest.mark.slow

TFLITE_BOUNDS = {"float16": 1e-2, "dynamic_int8": 0.1, "int8": 0.1}
CALIBRATION_SAMPLES = 16
_INT8_SAMPLING = {
    # One token drawn from int8 logits: a logit that moves by a step can draw another token, an
    # all-or-nothing difference no error bound describes (the logits' own error is cnn-like).
    "categorical_sampling_head": None,
}
# {quantizer: {model: bound}}, measured in session 25 (tests/zoo.py, LiteRT's quantizer against TF's converter).
INT8_BOUNDS = {
    # Attention scores, softmax and RMSNorm each in int8 per tensor (measured 0.22 through TF's
    # converter, 0.21 through LiteRT's quantizer).
    "tf": {"llama": 0.3, **_INT8_SAMPLING},
    "litert": {"llama": 0.3, **_INT8_SAMPLING},
}
# int8 models that may outgrow the float one: LiteRT has no int8 kernel for some of their ops, which
# stay float between a quantize and a dequantize op (the LSTM's unrolled gates), or
# the weights are too few for int8 to pay for the scales it adds (mobilenet_block; 1.29 of TF's float
# file, 1.28 of the graph's). TF 2.21's int8 quantizer is not deterministic on the LSTM: repeated
# exports in one process write 74,920 or 75,520 bytes (1.35 or 1.36 of TF's float file), as it runs
# one gate's SPLIT in int8 or in float between a DEQUANTIZE and three QUANTIZEs. LiteRT's quantizer
# writes 73,168 bytes every time, 1.67 of the graph's float file (43,808 bytes: TF's has the
# converter's metadata).
INT8_MAY_GROW = {
    "tf": {"lstm_classifier": 1.37, "mobilenet_block": 1.35},
    "litert": {"lstm_classifier": 1.7, "mobilenet_block": 1.3},
}
TFJS_BOUNDS = {"float16": 1e-2, "uint16": 1e-2, "uint8": 0.1}
# Below this float size the weights are a few hundred values: quantization metadata (per-tensor
# scales, TF.js manifest entries) can outweigh the savings, and dynamic_int8 leaves tensors under
# 1024 elements float. Such models (mobilenet_block, resnet_block) may grow a little, not shrink.
SMALL_MODEL_BYTES = 8 * 1024


def _assert_smaller(size: int, float_size: int) -> None:
    if float_size < SMALL_MODEL_BYTES:
        assert size <= 1.1 * float_size, (size, float_size)
    else:
        assert size < float_size, (size, float_size)


def _error(expected: list, got: dict, names: list) -> float:
    scale = max(1.0, max(float(np.max(np.abs(e))) for e in expected))
    return max(float(np.max(np.abs(got[n] - e))) for n, e in zip(names, expected)) / scale


def _size(path: str) -> int:
    """The model's bytes: a .tflite, or a TF.js model.json and its weight shards (not the demo page)."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f == "model.json" or f.endswith(".bin"))


def _weight_bytes(path: str) -> int:
    """The bytes of a .tflite's constant buffers."""
    from noxla.writers.tflite.flatbuffer.schema import read_model_file
    model = read_model_file(path)
    return sum(len(b.data) for b in model.buffers if b.data is not None)


@pytest.fixture(scope="module")
def float_exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("float")
    cache = {}

    def get(name: str, kind: str) -> str:
        """``kind``: "tflite" (the graph's file, which LiteRT's quantizer quantizes), "tf_tflite" (TF's
        path's, which its converter quantizes: a file with the converter's metadata) or "tfjs"."""
        if (name, kind) not in cache:
            model = MODELS[name]
            path = str(root / f"{name}.{kind}")
            args = model.inputs(1)
            from noxla.pipeline.tf_path import export  # TF's pipeline
            cache[name, kind] = (export(model.fun, args, tflite=path).written["tflite"] if kind == "tf_tflite"
                                 else noxla.export_tflite(model.fun, *args, path=path) if kind == "tflite"
                                 else noxla.export_tfjs(model.fun, *args, path=path))
        return cache[name, kind]
    return get


# Who quantizes: LiteRT's quantizer (the default where it is installed, noxla.writers.tflite.quantize) or TF's
# converter (NOXLA_TFLITE_QUANTIZER=tf), held to the same bounds.
QUANTIZERS = {"litert": "quantize {mode} (LiteRT's quantizer)", "tf": "NOXLA_TFLITE_QUANTIZER=tf"}


@pytest.mark.parametrize("quantizer", list(QUANTIZERS))
@pytest.mark.parametrize("mode", list(TFLITE_BOUNDS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_tflite_quantized(name, mode, quantizer, float_exports, tmp_path):
    if quantizer == "tf" and not tensorflow_installed():
        pytest.skip("TF's converter: TensorFlow is not installed")
    if quantizer == "litert" and not tflite_quantize.installed():
        pytest.skip('LiteRT\'s quantizer is not installed (pip install "noxla[llm]")')
    model = MODELS[name]
    args = model.inputs(1)
    samples = model.calibration_samples(CALIBRATION_SAMPLES) if mode == "int8" else None
    steps = []
    with mock.patch.dict(os.environ, {tflite_quantize.ENV: quantizer}):
        path = noxla.export_tflite(model.fun, *args, path=str(tmp_path / "q.tflite"), quantize=mode,
                                   representative_data=samples, on_step=lambda step, seconds: steps.append(step))
    assert any(QUANTIZERS[quantizer].format(mode=mode) in step for step in steps), steps
    program = trace(model.fun, args)
    error = _error(jax_outputs(model.fun, args), run_tflite(path, dict(zip(program.in_names, args))),
                   program.out_names)
    float_path = float_exports(name, "tflite" if quantizer == "litert" else "tf_tflite")
    size, float_size = _size(path), _size(float_path)
    print(f"{name} tflite {mode} [{quantizer}]: {size / 1024:.1f} KiB ({size / float_size:.2f} of float), "
          f"error {error:.2e}")
    if mode == "int8" and name in INT8_MAY_GROW[quantizer]:
        assert size <= INT8_MAY_GROW[quantizer][name] * float_size, (size, float_size)
    elif float_size < SMALL_MODEL_BYTES:
        # A few hundred weights: the file is mostly operators and tensor names, which TF 2.21's
        # converter writes longer for a quantized graph (mobilenet_block float16: 2,796 bytes against
        # 2,428); what quantizing must shrink is the weights.
        _assert_smaller(_weight_bytes(path), _weight_bytes(float_path))
    else:
        _assert_smaller(size, float_size)
    bound = INT8_BOUNDS[quantizer].get(name, TFLITE_BOUNDS[mode]) if mode == "int8" else TFLITE_BOUNDS[mode]
    assert bound is None or error <= bound, error


# The sampling models' uint8/uint16 runs hold their PRNG's exact float32 tables unquantized
# (noxla.writers.quantize.tfjs_quantized): rounded, they drew other samples.
@pytest.mark.parametrize("mode", list(TFJS_BOUNDS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_tfjs_quantized(name, mode, float_exports, tfjs_runner, tmp_path):
    model = MODELS[name]
    args = model.inputs(1)
    path = noxla.export_tfjs(model.fun, *args, path=str(tmp_path / "q_js"), quantize=mode)
    program = trace(model.fun, args)
    named = dict(zip(program.in_names, args))
    expected = jax_outputs(model.fun, args)
    size, float_size = _size(path), _size(float_exports(name, "tfjs"))
    for backend in ("cpu", "wasm"):
        error = _error(expected, tfjs_runner.run(path, named, backend), program.out_names)
        print(f"{name} tfjs {mode} [{backend}]: {size / 1024:.1f} KiB ({size / float_size:.2f} of float), "
              f"error {error:.2e}")
        assert error <= TFJS_BOUNDS[mode], (backend, error)
    _assert_smaller(size, float_size)


def test_tfjs_weights_sharded(tfjs_runner, tmp_path):
    model = MODELS["cnn"]
    args = model.inputs(1)
    path = noxla.export_tfjs(model.fun, *args, path=str(tmp_path / "js"), weight_shard_size_bytes=4096)
    shards = [f for f in os.listdir(path) if f.endswith(".bin")]
    assert len(shards) > 1 and all(os.path.getsize(os.path.join(path, f)) <= 4096 for f in shards), shards
    program = trace(model.fun, args)
    got = tfjs_runner.run(path, dict(zip(program.in_names, args)), "wasm")
    assert _error(jax_outputs(model.fun, args), got, program.out_names) <= 1e-5


def test_bad_quantize_modes_are_refused_before_any_work(tmp_path):
    model = MODELS["mlp"]
    with pytest.raises(ValueError, match="uint8"):
        noxla.export_tfjs(model.fun, *model.inputs(1), path=str(tmp_path / "js"), quantize="int4")
    with pytest.raises(ValueError, match="dynamic_int8"):
        noxla.export_tflite(model.fun, *model.inputs(1), path=str(tmp_path / "m.tflite"), quantize="uint8")
    with pytest.raises(ValueError, match="needs representative_data"):
        noxla.export_tflite(model.fun, *model.inputs(1), path=str(tmp_path / "m.tflite"), quantize="int8")
    with pytest.raises(ValueError, match="calibrates quantize='int8' only"):
        noxla.export_tflite(model.fun, *model.inputs(1), path=str(tmp_path / "m.tflite"), quantize="float16",
                            representative_data=[model.inputs(4)[0]])
    with pytest.raises(ValueError, match="expected inputs shaped"):  # samples without their batch axis
        noxla.export_tflite(model.fun, *model.inputs(1), path=str(tmp_path / "m.tflite"), quantize="int8",
                            representative_data=[model.inputs(1)[0][0]])
    assert not os.listdir(tmp_path)
