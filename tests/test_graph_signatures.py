"""Several signatures in one .tflite written by noxla's graph (``noxla.pipeline.graph_signatures``): by
default (NOXLA_TFLITE_GRAPH=0: TF's path), where the graph's TFLite writer covers every signature, each
one equals JAX in LiteRT's signature runners, the weights they share are stored once, and the
export imports no TensorFlow; where it covers one signature only, TF's path writes them all."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import noxla
from noxla.writers.tflite.flatbuffer.schema import read_model_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(4)
VOCAB, HIDDEN, FFN = 256, 64, 256
EMBED = (RNG.standard_normal((VOCAB, HIDDEN)) * 0.3).astype(np.float32)
W_UP = (RNG.standard_normal((HIDDEN, FFN)) / 8).astype(np.float32)
W_DOWN = (RNG.standard_normal((FFN, HIDDEN)) / 16).astype(np.float32)
WEIGHT_BYTES = EMBED.nbytes + W_UP.nbytes + W_DOWN.nbytes


def _hidden(tokens):
    h = jnp.take(EMBED, tokens[0], axis=0)
    return h + jax.nn.gelu(h @ W_UP) @ W_DOWN


def prefill(tokens):   # a prompt's last logits (the tied embedding as the output projection)
    return {"last_logits": _hidden(tokens)[-1:] @ EMBED.T}


def decode(tokens):
    return {"logits": _hidden(tokens) @ EMBED.T}


def scaled(x):          # another pair: one reads a weight twice, the other once
    return {"y": jnp.tanh(x @ W_UP) @ W_DOWN + jnp.sum(W_DOWN, axis=0)}


def projected(x):
    return {"y": x @ W_UP}


DECODER = {"prefill_8": (prefill, (np.array([[3, 17, 42, 5, 9, 11, 2, 60]], np.int32),)),
           "decode": (decode, (np.array([[7]], np.int32),))}
PAIR = {"scaled": (scaled, (RNG.standard_normal((2, HIDDEN)).astype(np.float32),)),
        "projected": (projected, (RNG.standard_normal((3, HIDDEN)).astype(np.float32),))}


def _check(path: str, signatures: dict, weight_bytes: int) -> None:
    """Each signature equals JAX in its runner; every large buffer is stored once, and the file holds
    the weights once (plus tables and small constants), not once per signature."""
    from ai_edge_litert.interpreter import Interpreter

    from noxla.front.tracing import trace
    interpreter = Interpreter(model_path=path)
    assert set(interpreter.get_signature_list()) == set(signatures)
    for key, (fun, args) in signatures.items():
        program = trace(fun, args)
        outs = interpreter.get_signature_runner(key)(**dict(zip(program.in_names, args)))
        for name, want in zip(program.out_names, jax.tree_util.tree_leaves(jax.jit(fun)(*args))):
            np.testing.assert_allclose(outs[name], np.asarray(want), rtol=1e-5, atol=1e-5, err_msg=f"{key}: {name}")
    large = [bytes(b.data) for b in read_model_file(path).buffers if b.data is not None and len(b.data) >= 1024]
    assert len(set(large)) == len(large), "a large buffer stored twice"
    assert os.path.getsize(path) < weight_bytes + 16384, (os.path.getsize(path), weight_bytes)


def test_two_signatures_through_the_graph_equal_jax_and_store_shared_weights_once_without_tensorflow(tmp_path):
    """In a fresh process, by default (NOXLA_TFLITE_GRAPH unset): prefill and decode steps that share an embedding
    (also their output projection) and an MLP, written by the graph and merged, without TensorFlow."""
    path = str(tmp_path / "decoder.tflite")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        import noxla
        from tests.test_graph_signatures import DECODER
        steps = []
        noxla.export_tflite(DECODER, path={path!r}, on_step=lambda name, s: steps.append(name))
        assert "tensorflow" not in sys.modules, "the graph's several-signature export imported TensorFlow"
        print(steps)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path),
                          env={**{k: v for k, v in os.environ.items() if k != "NOXLA_TFLITE_GRAPH"},
                               "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = proc.stdout.strip().splitlines()[-1]
    assert "lower+write prefill_8 (graph tflite)" in steps and "lower+write decode (graph tflite)" in steps, steps
    assert "merge signatures" in steps and "convert tflite" not in steps, steps
    _check(path, DECODER, WEIGHT_BYTES)


@pytest.mark.parametrize("case", ["pair", "buckets"])
def test_signatures_through_the_graph_equal_jax(case, tmp_path, monkeypatch):
    """Two functions sharing a weight (one also reading it as a constant operand), and a function's
    shape buckets (noxla.front.shape_buckets: one signature per size); by default."""
    monkeypatch.delenv("NOXLA_TFLITE_GRAPH", raising=False)
    steps = []
    path = str(tmp_path / "m.tflite")
    on_step = lambda name, seconds: steps.append(name)  # noqa: E731
    if case == "pair":
        signatures = PAIR
        noxla.export_tflite(PAIR, path=path, on_step=on_step)
        weight_bytes = W_UP.nbytes + W_DOWN.nbytes
    else:
        x1, x4 = (RNG.standard_normal((n, HIDDEN)).astype(np.float32) for n in (1, 4))
        signatures = {"b1": (scaled, (x1,)), "b4": (scaled, (x4,))}
        noxla.export_tflite(scaled, x4, path=path, polymorphic_shapes=[f"(b, {HIDDEN})"], shape_buckets={"b": [1, 4]},
                            on_step=on_step)
        weight_bytes = W_UP.nbytes + W_DOWN.nbytes
    assert all(f"lower+write {key} (graph tflite)" in steps for key in signatures), steps
    assert not any(s.startswith("convert tflite") for s in steps), steps
    _check(path, signatures, weight_bytes)


def test_a_signature_the_graph_does_not_cover_sends_every_signature_through_tensorflow(tmp_path, monkeypatch):
    """A TF function called through ``call_tf`` (TensorFlow by definition: the graph records no TF
    function): the step says which signature and why, and TF's path writes both, equal to JAX."""
    import tensorflow as tf
    from jax.experimental import jax2tf
    monkeypatch.delenv("NOXLA_TFLITE_GRAPH", raising=False)

    def write(x):
        return {"called": jax2tf.call_tf(tf.math.cos)(x @ W_UP)}
    x = RNG.standard_normal((2, HIDDEN)).astype(np.float32)
    signatures = {"projected": PAIR["projected"], "write": (write, (x,))}
    steps = []
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"),
                               on_step=lambda name, seconds: steps.append(name))
    assert any(s.startswith("graph tflite writer: signature write:") for s in steps), steps
    assert "convert tflite projected" in steps and "convert tflite write" in steps, steps
    _check(path, signatures, W_UP.nbytes)


def test_a_rewrite_of_the_merged_model_gives_tf_paths_values(tmp_path, monkeypatch):
    """``export_signatures``' ``rewrite`` (noxla.llm's int8 weights, ``quantize_weights``) runs on the
    graph's merged model as on TF's: the same three weights quantized, the same values in LiteRT."""
    from ai_edge_litert.interpreter import Interpreter

    from noxla.front.tracing import trace
    from noxla.pipeline.tf_path import export_signatures
    from noxla.writers.tflite.flatbuffer.quantize_weights import quantize_weights
    outputs = {}
    for graph in ("1", "0"):
        monkeypatch.setenv("NOXLA_TFLITE_GRAPH", graph)
        steps, quantized = [], []
        path = export_signatures(DECODER, tflite=str(tmp_path / f"m{graph}.tflite"),
                                 on_step=lambda name, seconds, steps=steps: steps.append(name),
                                 rewrite=lambda model, stubs, quantized=quantized: quantized.append(
                                     quantize_weights(model, stubs, "dynamic_wi8_afp32")))["tflite"]
        assert ("lower+write decode (graph tflite)" in steps) == (graph == "1"), steps
        assert quantized == [3], quantized
        interpreter = Interpreter(model_path=path)
        for key, (fun, args) in DECODER.items():
            program = trace(fun, args)
            outputs[graph, key] = interpreter.get_signature_runner(key)(**dict(zip(program.in_names, args)))
    for key in DECODER:
        for name, value in outputs["0", key].items():
            np.testing.assert_allclose(outputs["1", key][name], value, rtol=1e-6, atol=1e-6, err_msg=f"{key}: {name}")


def _operators(path: str) -> dict:
    """{signature key: its subgraph's operator count} (While/If bodies are not made here)."""
    from noxla.writers.tflite.flatbuffer.schema import read_model_file
    model = read_model_file(path)
    return {s.signatureKey.decode(): len(model.subgraphs[s.subgraphIndex].operators) for s in model.signatureDefs}


def _tf_path(signatures: dict, path: str, monkeypatch, **options) -> str | None:
    """TF's path's file of the same export (None without TensorFlow)."""
    from noxla.errors import tensorflow_installed
    if not tensorflow_installed():
        return None
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")
    steps = []
    noxla.export_tflite(signatures, path=path, on_step=lambda name, s: steps.append(name), **options)
    monkeypatch.delenv("NOXLA_TFLITE_GRAPH")
    assert all(f"convert tflite {key}" in steps for key in signatures), steps
    return path


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_quantizer") is None, reason="ai-edge-quantizer is not installed")
@pytest.mark.parametrize("mode", ["float16", "dynamic_int8"])
def test_quantized_signatures_through_the_graph_and_litert_s_quantizer(mode, tmp_path, monkeypatch):
    """float16 and dynamic_int8 of several signatures (noxla.llm's converter modes among them): the
    graph's merged file quantized by LiteRT's quantizer, each signature within tests/test_quantize.py's
    bound of JAX, each shared weight stored once, and no more operators per signature than TF's
    path's file (TF's converter quantizing each signature)."""
    from noxla.front.tracing import trace
    from noxla.writers.tflite.quantize import ENV
    from tests.test_quantize import TFLITE_BOUNDS, _error
    monkeypatch.delenv("NOXLA_TFLITE_GRAPH", raising=False)
    monkeypatch.delenv(ENV, raising=False)
    steps = []
    path = noxla.export_tflite(DECODER, path=str(tmp_path / "q.tflite"), quantize=mode,
                               on_step=lambda name, s: steps.append(name))
    assert all(f"lower+write {key} (graph tflite)" in steps for key in DECODER), steps
    assert f"quantize {mode} (LiteRT's quantizer)" in steps and not any("convert tflite" in s for s in steps), steps
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=path)
    for key, (fun, args) in DECODER.items():
        program = trace(fun, args)
        got = interpreter.get_signature_runner(key)(**dict(zip(program.in_names, args)))
        expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(fun)(*args))]
        assert _error(expected, got, program.out_names) <= TFLITE_BOUNDS[mode], key
    large = [bytes(b.data) for b in read_model_file(path).buffers if b.data is not None and len(b.data) >= 1024]
    assert len(set(large)) == len(large), "a large buffer stored twice"
    assert os.path.getsize(path) < 0.6 * WEIGHT_BYTES, os.path.getsize(path)
    tf_path = _tf_path(DECODER, str(tmp_path / "tf.tflite"), monkeypatch, quantize=mode)
    if tf_path is not None:
        graph, tf = _operators(path), _operators(tf_path)
        assert all(graph[key] <= tf[key] for key in DECODER), (graph, tf)
