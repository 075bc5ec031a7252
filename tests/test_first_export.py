"""A single function's .tflite converted with its large weights as stand-ins (noxla.writers.tf.weight_stubs), as
the multi-signature export is: the converter never sees the weights' bytes, and the model has the
operators a conversion of the real constants gives and computes what JAX computes."""
from __future__ import annotations

import numpy as np

import noxla
from noxla.front.lowering import serving_function
from noxla.front.tracing import trace
from noxla.pipeline.tf_tflite import tflite_bytes
from noxla.runtimes import tflite_op_names
from noxla.writers.tf import weight_stubs

RNG = np.random.default_rng(3)
# 256 x 256 float32: 256 KiB each, past weight_stubs.STUB_BYTES; the bias (1 KiB) stays a Const.
W1, W2 = (RNG.standard_normal((256, 256)).astype(np.float32) * 0.05 for _ in range(2))
BIAS = RNG.standard_normal(256).astype(np.float32)
X = RNG.standard_normal((4, 256)).astype(np.float32)


def mlp(x):
    import jax
    return jax.nn.relu(x @ W1 + BIAS) @ W2


def _tf_path_tflite(fun, path) -> str:
    """The .tflite the TF path writes (``noxla.pipeline.tf_path.export``; ``export_tflite`` writes a program
    like ``mlp`` without TF, noxla.writers.tflite)."""
    from noxla.pipeline.tf_path import export
    return export(fun, (X,), tflite=str(path)).written["tflite"]


def _run(path):
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=path)
    runner = interpreter.get_signature_runner("serving_default")
    return next(iter(runner(x=X).values()))


def test_the_converter_gets_stand_ins_and_the_model_is_the_real_constants_one(tmp_path, monkeypatch):
    from tensorflow.lite.python import convert
    graph_bytes, original = [], convert.convert_graphdef  # the size of each graph the converter gets
    with monkeypatch.context() as patch:
        patch.setattr(convert, "convert_graphdef", lambda graph_def, *args, **kwargs: (
            graph_bytes.append(len(graph_def.SerializeToString())) or original(graph_def, *args, **kwargs)))
        path = _tf_path_tflite(mlp, tmp_path / "m.tflite")
    assert len(graph_bytes) == 1 and graph_bytes[0] < W1.nbytes, graph_bytes
    # The same program converted the way a .tflite was converted before: its weights as Consts.
    real = tmp_path / "real.tflite"
    real.write_bytes(tflite_bytes(serving_function(trace(mlp, (X,)))))
    assert tflite_op_names(path) == tflite_op_names(str(real))
    got = _run(path)
    np.testing.assert_array_equal(got, _run(str(real)))
    np.testing.assert_allclose(got, np.asarray(mlp(X)), atol=1e-5, rtol=1e-5)
    assert abs(len(open(path, "rb").read()) - (W1.nbytes + W2.nbytes)) < 0.1 * W1.nbytes


def test_a_weight_the_converter_changes_is_converted_from_its_real_bytes(tmp_path, monkeypatch):
    calls = []

    def changed(self, model):
        calls.append(1)
        raise weight_stubs.StubMismatch("as if the converter had folded a weight")
    monkeypatch.setattr(weight_stubs.WeightStubs, "attach", changed)
    path = _tf_path_tflite(mlp, tmp_path / "m.tflite")
    assert calls == [1]
    np.testing.assert_allclose(_run(path), np.asarray(mlp(X)), atol=1e-5, rtol=1e-5)


G, B = (RNG.standard_normal(256).astype(np.float32) for _ in range(2))


def normed_projections(x):
    """LayerNorm offsets before biased projections: the converter folds ``fc(x + b, w, c)`` into
    ``fc(x, w, fc(b, w, c))`` and computes the inner one only when ``w`` is a constant."""
    import jax.numpy as jnp
    for w in (W1, W2):
        mean = x.mean(-1, keepdims=True)
        x = (x - mean) / jnp.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * G + B
        x = x @ w + BIAS
    return x


def _tf_path_strict(fun, tmp_path) -> str:
    """``fun``'s strict .tflite from TF's path (``noxla.pipeline.tf_path.export`` takes no graph writer), whose
    weight stand-ins these tests hold; the graph's strict file folds no scale (it changes values)."""
    from noxla.pipeline.tf_path import export
    return export(fun, [X], tflite=str(tmp_path / "strict.tflite"), strict=True).written["tflite"]


def _normed_like_the_converter(fun, tmp_path) -> None:
    """``fun`` (LayerNorms before projections) exported strict has the operators of the converter
    given the real constants; by default each gain G ([1, 256], which the converter leaves as a
    MUL) is folded into the weights too (WeightStubs.reassociate): one MUL less each. Both as JAX."""
    strict = _tf_path_strict(fun, tmp_path)
    real = tmp_path / "real.tflite"
    real.write_bytes(tflite_bytes(serving_function(trace(fun, (X,)), strict=True)))
    real_ops = tflite_op_names(str(real))
    assert tflite_op_names(strict) == real_ops
    path = noxla.export_tflite(fun, X, path=str(tmp_path / "m.tflite"))
    gains = [i for i, op in enumerate(real_ops) if op == "MUL" and real_ops[i + 1] == "FULLY_CONNECTED"]
    assert len(gains) == 2, real_ops
    assert tflite_op_names(path) == [op for i, op in enumerate(real_ops) if i not in gains]
    for model in (strict, path):
        np.testing.assert_allclose(_run(model), np.asarray(fun(X)), atol=1e-5, rtol=1e-5)


def test_a_projection_of_constants_left_by_a_stand_in_is_folded(tmp_path):
    _normed_like_the_converter(normed_projections, tmp_path)


def scaled_projections(x):
    """Constant scales on both sides of projections: a sampler's sqrt(2) on its input, a
    temperature's 1 / 0.8 on the logits. The converter folds each into a constant weight."""
    import jax
    h = jax.nn.relu((x * np.float32(np.sqrt(2))) @ W1 + BIAS)
    return (h @ W2) / np.float32(0.8)


def test_a_constant_scale_beside_a_stand_in_is_folded_into_its_weight(tmp_path):
    path = noxla.export_tflite(scaled_projections, X, path=str(tmp_path / "m.tflite"))
    real = tmp_path / "real.tflite"
    real.write_bytes(tflite_bytes(serving_function(trace(scaled_projections, (X,)))))
    assert "MUL" not in tflite_op_names(str(real))  # what the test stands on: both scales folded there
    assert tflite_op_names(path) == tflite_op_names(str(real))
    got = _run(path)
    np.testing.assert_array_equal(got, _run(str(real)))
    np.testing.assert_allclose(got, np.asarray(scaled_projections(X)), atol=1e-5, rtol=1e-5)
    # The scaled weights take the unscaled ones' place: neither is written twice.
    assert abs(len(open(path, "rb").read()) - (W1.nbytes + W2.nbytes)) < 0.1 * W1.nbytes


def test_a_scale_after_a_normed_projection_scales_its_folded_bias(tmp_path):
    """BERT's queries: a LayerNorm's offset through a biased projection, then the attention's
    1 / 8. The offset's projection must be folded into the bias before the scale is, or the
    scale finds no constant bias to scale and stays a MUL."""
    def queries(x):
        return normed_projections(x) * np.float32(0.125)

    _normed_like_the_converter(queries, tmp_path)


def chained_scales(x):
    """Two per-input scales before a projection (the first foldable only once the second is) and
    two after the next one ([1, 256] once lowered: the converter leaves those before as MULs)."""
    return ((((x * G) * B) @ W1) @ W2) * np.float32(0.5) * G


def test_a_chain_of_scales_folds_into_the_stand_in_weights(tmp_path):
    path = noxla.export_tflite(chained_scales, X, path=str(tmp_path / "m.tflite"))
    assert tflite_op_names(path) == ["FULLY_CONNECTED", "FULLY_CONNECTED"]
    strict = _tf_path_strict(chained_scales, tmp_path)
    assert tflite_op_names(strict) == ["MUL", "MUL", "FULLY_CONNECTED", "FULLY_CONNECTED"]
    for model in (path, strict):
        np.testing.assert_allclose(_run(model), np.asarray(chained_scales(X)), atol=1e-5, rtol=1e-5)


def test_a_function_only_frozen_converts_as_the_tf_function_does():
    """serving_function(sequenced=False), the lowering a .tflite export freezes, skips tf.function's
    sequencing of stateful ops: without control flow the frozen graph is the same and the .tflite the
    same bytes; with loops and a branch the .tflite has the same subgraphs, operators, tensors and
    buffers, its tensor names the same but for the process-wide counters in branch names."""
    import re

    import jax

    from noxla.pipeline.tf_function import frozen_graph_def
    from noxla.writers.tflite.flatbuffer.schema import read_model
    straight = trace(mlp, (X,))
    graph_defs = [frozen_graph_def(serving_function(straight, sequenced=s))[0] for s in (False, True)]
    assert graph_defs[0] == graph_defs[1]  # (their maps serialize in no fixed order)
    assert tflite_bytes(serving_function(straight, sequenced=False)) == tflite_bytes(serving_function(straight))

    def f(x, n):
        y = jax.lax.fori_loop(0, 3, lambda i, c: jax.nn.relu(c @ W1) + i, x)
        z = jax.lax.cond(n > 0, lambda v: v * 2.0, lambda v: v - 1.0, y)
        w = jax.lax.while_loop(lambda c: c[1] < n + 3, lambda c: (c[0] * 0.5, c[1] + 1), (z, 0))[0]
        return {"b": y.sum(axis=1), "a": w @ W2}
    program = trace(f, (X, np.int32(1)))

    def contents(sequenced):
        model = read_model(
            bytearray(tflite_bytes(serving_function(program, sequenced=sequenced))))
        return [([(op.opcodeIndex, list(op.inputs), list(op.outputs)) for op in graph.operators],
                 [(re.sub(rb"_[0-9]+_", b"_", t.name), list(t.shape), t.type, t.buffer) for t in graph.tensors])
                for graph in model.subgraphs], [bytes(b.data) if b.data is not None else None for b in model.buffers]
    unsequenced = contents(False)
    assert len(unsequenced[0]) == 5 and unsequenced == contents(True)
