"""noxla's .tflite exports on LiteRT.js (wasm and WebGPU) in headless Chromium, against JAX.

One Chromium serves every test of this module (started by the first): LiteRT.js loads once.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from noxla.export import export
from noxla.litertjs import TOLERANCE, LiteRtJsRunner
from noxla.runtimes import tflite_op_names
from noxla.verify import jax_outputs, relative_error

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def litertjs():
    # No skip when Chromium or the npm packages are missing: the README's test command installs them.
    runner = LiteRtJsRunner()
    yield runner
    runner.close()


def _export(fun, args, tmp_path, name="m"):
    exported = export(fun, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args],
                      tflite=str(tmp_path / f"{name}.tflite"), demo_page=False)
    return exported.written["tflite"], exported.program


def _run_and_compare(litertjs, fun, args, tmp_path, accelerators=("wasm", "webgpu")):
    path, program = _export(fun, args, tmp_path)
    expected = jax_outputs(fun, args)
    infos = {}
    for accelerator in accelerators:
        outs, info = litertjs.run_timed(path, dict(zip(program.in_names, args)), accelerator)
        for name, e in zip(program.out_names, expected):
            assert outs[name].shape == e.shape, (accelerator, name)
            assert relative_error(e, outs[name]) <= TOLERANCE[accelerator], (accelerator, name)
        infos[accelerator] = info
    return path, infos


def test_cnn_on_wasm_and_webgpu_with_its_placement(litertjs, tmp_path):
    from noxla.example import mnist_cnn
    x = np.random.default_rng(0).standard_normal((1, 28, 28, 1)).astype(np.float32)
    path, infos = _run_and_compare(litertjs, mnist_cnn, [x], tmp_path)
    assert "webgpu" in litertjs.accelerators()
    placement = infos["webgpu"]["placement"]
    ops = tflite_op_names(path)
    # The delegate's own counts add up to the model's ops, and each op it refused is one of them.
    assert placement["gpuOps"] + placement["cpuOps"] == len(ops), (placement, ops)
    assert {u["op"] for u in placement["unsupported"]} <= set(ops)
    assert placement["fullyAccelerated"] == (placement["cpuOps"] == 0)


def test_same_dtype_inputs_go_by_name(litertjs, tmp_path):
    # LiteRT.js swaps two same-dtype inputs passed by position when the model orders them otherwise;
    # the runner passes them by signature name, here in the reverse of the model's order.
    def f(a, b):
        return a - 2.0 * b
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = -np.ones((2, 3), np.float32)
    path, program = _export(f, [a, b], tmp_path)
    named = dict(reversed(list(zip(program.in_names, [a, b]))))
    for accelerator in litertjs.accelerators():
        out = litertjs.run(path, named, accelerator)[program.out_names[0]]
        np.testing.assert_allclose(out, a - 2.0 * b, err_msg=accelerator)


def test_int32_inputs_and_outputs(litertjs, tmp_path):
    def f(tokens, x):
        return jnp.argmax(x, axis=-1).astype(jnp.int32) + tokens
    tokens = np.array([[3, 1, 4]], np.int32)
    x = np.random.default_rng(1).standard_normal((1, 3, 5)).astype(np.float32)
    _run_and_compare(litertjs, f, [tokens, x], tmp_path)
