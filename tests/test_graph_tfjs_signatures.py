"""Several signatures in one TF.js model written by noxla's graph (noxla/writers/tfjs/signatures.py):
each signature run alone (its inputs only, its outputs only) on TF.js's Node cpu and wasm backends
and (slow, with the browser tests) on Chromium's webgl, wasm, cpu and webgpu equals JAX, the weights the
signatures share are stored once, and loop bodies of the same name in two signatures stay apart."""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import noxla
from noxla.errors import ExportError
from noxla.pipeline.graph_path import ENV
from noxla.runtimes import BROWSER_TOLERANCE
from tests.differential import CHROMIUM_BACKENDS, assert_matches, chromium
from tests.test_tflite_bfloat16 import _op_by_op

BACKENDS = ("cpu", "wasm")
RNG = np.random.default_rng(7)
W = RNG.standard_normal((16, 16)).astype(np.float32) / 4   # read by every signature
B = RNG.standard_normal(16).astype(np.float32)


def prefill(tokens):
    h = jnp.tanh(tokens @ W + B)
    return {"hidden": h, "last": h[-1]}


def decode(token, steps):
    # A data-dependent loop (JAX keeps the While): its body's name is the other signature's too.
    def body(c):
        i, h = c
        return i + 1, jnp.tanh(h @ W + B)
    return {"hidden": jax.lax.while_loop(lambda c: c[0] < steps, body, (0, jnp.tanh(token @ W)))[1]}


def halves(x):
    def body(c):
        i, h = c
        return i + 1, h * h / (h + 3) + 1  # (not / 3: XLA divides by a constant as a product by 1/3)
    return {"y": jax.lax.while_loop(lambda c: c[0] < 3 + (x[0] > 9), body,
                                    (0, x.astype(jnp.float16)))[1].astype(jnp.float32)}


SIGNATURES = {
    "prefill": (prefill, (RNG.standard_normal((4, 16)).astype(np.float32),)),
    "decode": (decode, (RNG.standard_normal(16).astype(np.float32), np.int32(3))),
    "halves": (halves, (RNG.standard_normal(16).astype(np.float32),)),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENV, raising=False)
        path = str(tmp_path_factory.mktemp("signatures") / "m")
        return noxla.export_tfjs(SIGNATURES, path=path)


def _model(path) -> dict:
    with open(os.path.join(path, "model.json")) as f:
        return json.load(f)


def _run_alone(key, exported, runner, backend, where, tolerance) -> float:
    """One signature's outputs from its inputs alone, against JAX: the largest error relative to scale."""
    fun, args = SIGNATURES[key]
    listed = _model(exported)["userDefinedMetadata"]["signatures"][key]
    inputs = {f"{key}/{name}": np.asarray(a) for name, a in zip(listed["inputs"], args)}
    outs = runner.run(exported, inputs, backend, outputs=[f"{key}/{n}" for n in listed["outputs"]])
    assert sorted(outs) == sorted(f"{key}/{n}" for n in listed["outputs"]), sorted(outs)
    expected = _op_by_op(fun, *args)  # float16 rounded op by op (jit fuses in float32)
    return assert_matches(expected, [outs[f"{key}/{n}"] for n in listed["outputs"]], listed["outputs"],
                          where=f"{key} [graph signatures, {where}]", atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("key", sorted(SIGNATURES))
def test_each_signature_run_alone_matches_jax(key, backend, exported, tfjs_runner):
    _run_alone(key, exported, tfjs_runner, backend, f"tfjs_{backend}", 1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("backend", CHROMIUM_BACKENDS)
def test_each_signature_run_alone_matches_jax_in_chromium(backend, exported, browser_runner):
    browser = chromium(browser_runner, backend)
    for key in sorted(SIGNATURES):
        _run_alone(key, exported, browser, backend, f"chromium_{backend}", BROWSER_TOLERANCE[backend])


def test_one_model_keyed_by_signature_with_shared_weights_stored_once(exported):
    model = _model(exported)
    assert model["generatedBy"] == "noxla.graph"
    assert sorted(model["signature"]["inputs"]) == ["decode/steps", "decode/token", "halves/x", "prefill/tokens"]
    assert sorted(model["signature"]["outputs"]) == ["decode/hidden", "halves/y", "prefill/hidden", "prefill/last"]
    # W, read by prefill's and decode's main graphs, once (a loop body's copy is its own, as in a lone export).
    functions = [f["signature"]["name"] for f in model["modelTopology"]["library"]["function"]]
    weights = [w["name"] for w in model["weightsManifest"][0]["weights"] if w["shape"] == [16, 16]]
    assert len([w for w in weights if not w.startswith(tuple(functions))]) == 1, weights
    assert len(functions) == len(set(functions)) >= 4, functions


def test_several_signatures_to_tfjs_are_refused_where_the_graph_does_not_record_one(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    import tensorflow as tf
    from jax.experimental import jax2tf
    called = (lambda x: jax2tf.call_tf(tf.math.cos)(x) * 3, (np.ones(3, np.float32),))  # no TF function recorded
    with pytest.raises(ExportError, match="signature 'called'"):
        noxla.export_tfjs({"ok": SIGNATURES["prefill"], "called": called}, path=str(tmp_path / "m"))
    assert not os.path.exists(tmp_path / "m")
    with pytest.raises(ExportError, match="alone"):
        noxla.api.export(SIGNATURES, (), tfjs=str(tmp_path / "j"), tflite=str(tmp_path / "m.tflite"))
