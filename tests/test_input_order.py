"""Exported models take their inputs in the function's parameter order, so that a positional call
(TF.js's ``model.execute([...])``/``predict``, LiteRT's ``get_input_details()`` order) feeds each
tensor to its own parameter. Same-shaped inputs make a swap silent, so these tests use them and
compare with JAX."""
from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest


def two(s, t):
    return s - 2 * t


def three(x, a, b):
    return x * 100 + a * 10 + b


CASES = [(two, ("s", "t")), (three, ("x", "a", "b"))]


def _export(tmp_path, fun, n):
    from noxla.pipeline.tf_path import export
    args = [np.arange(4, dtype=np.float32) + 10 * (i + 1) for i in range(n)]
    exported = export(fun, args, tfjs=str(tmp_path / "tfjs"), tflite=str(tmp_path / "m.tflite"), demo_page=False)
    return args, np.asarray(jax.jit(fun)(*args)), exported.written


@pytest.mark.slow
@pytest.mark.parametrize("fun,params", CASES, ids=[f.__name__ for f, _ in CASES])
def test_tfjs_inputs_follow_the_parameters(tmp_path, fun, params):
    from noxla import runtimes
    args, expected, written = _export(tmp_path, fun, len(params))
    with open(os.path.join(written["tfjs"], "model.json")) as f:
        model = json.load(f)
    assert list(model["signature"]["inputs"]) == list(params)
    placeholders = [n["name"] for n in model["modelTopology"]["node"] if n["op"] == "Placeholder"]
    assert placeholders == list(params)
    try:
        runner = runtimes.TfjsRunner()
    except runtimes.TfjsUnavailable as e:
        pytest.skip(str(e))
    try:
        reply = runner.request({"model": written["tfjs"], "backend": "cpu",
                                "inputs": [runtimes._encode(a) for a in args]})  # positional
    finally:
        runner.close()
    assert "error" not in reply, reply
    assert reply["inputNames"] == list(params)  # model.inputs
    (output,) = reply["outputs"].values()
    np.testing.assert_allclose(runtimes._decode(output), expected, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("fun,params", CASES, ids=[f.__name__ for f, _ in CASES])
def test_tflite_inputs_follow_the_parameters(tmp_path, fun, params):
    from ai_edge_litert.interpreter import Interpreter
    args, expected, written = _export(tmp_path, fun, len(params))
    interpreter = Interpreter(model_path=written["tflite"])
    details = interpreter.get_input_details()
    assert [d["name"] for d in details] == list(params)
    signature = interpreter._get_full_signature_list()["serving_default"]["inputs"]
    assert sorted(signature, key=signature.get) == list(params)  # name -> the subgraph input it feeds
    interpreter.allocate_tensors()
    for detail, value in zip(details, args):  # positional
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    (out,) = interpreter.get_output_details()
    np.testing.assert_allclose(interpreter.get_tensor(out["index"]), expected, rtol=1e-6)
