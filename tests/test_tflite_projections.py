"""Matrix-vector products that read one input, joined into one FULLY_CONNECTED and SLICEs
(``noxla.writers.tflite.flatbuffer.projections``): joined in a decode step, its prefill reading the joined weight too,
and left alone where a join would store a weight twice or the products have many rows; outputs
bit-identical to the unjoined export (LiteRT with and without XNNPACK) and equal to JAX's."""
from __future__ import annotations

import collections
import os

import jax
import numpy as np
import pytest

import noxla
import noxla.pipeline.graph_signatures
import noxla.pipeline.tf_path
import noxla.writers.tflite.flatbuffer.projections

RNG = np.random.default_rng(0)
HIDDEN = 64
# 64 x 320 float32 is 80 KiB: past noxla.writers.tf.weight_stubs.STUB_BYTES, so a stand-in while converting;
# the small ones are plain constants. Both kinds are joined.
W_Q, W_K, W_V = (RNG.standard_normal((HIDDEN, n)).astype(np.float32) for n in (320, 24, 24))
W_GATE, W_UP = (RNG.standard_normal((HIDDEN, 96)).astype(np.float32) for _ in range(2))
BIAS = RNG.standard_normal(24).astype(np.float32)


def step(x):
    """A decode step's projections: queries, keys and values, then gate and up, of one input each."""
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    h = jax.nn.silu(x @ W_GATE) * (x @ W_UP)
    return {"q": q, "k": k, "v": v, "h": h}


def biased(x):  # the converter fuses the bias and the relu into each FULLY_CONNECTED
    return {"k": jax.nn.relu(x @ W_K + BIAS), "v": jax.nn.relu(x @ W_V + BIAS[::-1])}


def key_read_twice(x, y):  # W_K also projects another input: joined, it would be stored twice
    return {"q": x @ W_Q, "k": x @ W_K, "other": y @ W_K}


def _ops(path: str) -> dict[str, collections.Counter]:
    """Per signature key, its operators."""
    from noxla.writers.tflite.flatbuffer.schema import read_model, schema
    with open(path, "rb") as f:
        model = read_model(bytearray(f.read()))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    codes = [names[max(c.builtinCode, c.deprecatedBuiltinCode)] for c in model.operatorCodes]
    return {s.signatureKey.decode(): collections.Counter(codes[op.opcodeIndex]
                                                         for op in model.subgraphs[s.subgraphIndex].operators)
            for s in model.signatureDefs}


def _export(target, args, path, monkeypatch, joined: bool) -> str:
    with monkeypatch.context() as patch:
        if not joined:   # TF's path's call and the graph's (several signatures, by default)
            # TF's path's name for it, and the module the graph's merged passes read it from.
            for module in (noxla.pipeline.tf_path, noxla.writers.tflite.flatbuffer.projections):
                patch.setattr(module, "join_matrix_vector_projections", lambda model, stubs=None: 0)
        if isinstance(target, dict):
            return str(noxla.export_tflite(target, path=path, overwrite=True))
        return str(noxla.export_tflite(target, *args, path=path, overwrite=True))


def _run(path: str, key: str, inputs: dict, delegates: bool) -> dict:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = OpResolverType.AUTO if delegates else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    return Interpreter(model_path=path, experimental_op_resolver_type=resolver).get_signature_runner(key)(**inputs)


def _same_values(after: str, before: str, key: str, inputs: dict, expected: dict) -> None:
    for delegates in (True, False):
        got, unjoined = _run(after, key, inputs, delegates), _run(before, key, inputs, delegates)
        assert got.keys() == expected.keys()
        for name, want in expected.items():
            np.testing.assert_array_equal(got[name], unjoined[name], err_msg=name)  # the same dot products
            np.testing.assert_allclose(got[name], np.asarray(want), rtol=2e-5, atol=2e-4, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("fun, fc_before, fc_after", [(step, 5, 1), (biased, 2, 1)])
def test_decode_projections_are_joined(fun, fc_before, fc_after, tmp_path, monkeypatch):
    x = RNG.standard_normal((1, HIDDEN)).astype(np.float32)
    before = _export(fun, [x], str(tmp_path / "without.tflite"), monkeypatch, joined=False)
    after = _export(fun, [x], str(tmp_path / "with.tflite"), monkeypatch, joined=True)
    ops_before, ops_after = _ops(before)["serving_default"], _ops(after)["serving_default"]
    assert ops_before["FULLY_CONNECTED"] == fc_before, ops_before
    assert ops_after["FULLY_CONNECTED"] == fc_after, ops_after
    assert ops_after["SLICE"] == ops_before["SLICE"] + fc_before, ops_after
    # The parts' weights are written joined, not beside the join.
    assert os.path.getsize(after) <= os.path.getsize(before) + 2048
    _same_values(after, before, "serving_default", {"x": x}, fun(x))


@pytest.mark.slow
@pytest.mark.parametrize("graph", ["1", "0"], ids=["graph", "tf_path"])
def test_prefill_reads_the_joined_weight(graph, tmp_path, monkeypatch):
    """A decode step joins its projections; the prefill's, with 8 rows, then read the joined
    weight too: each weight is stored once, as without the join. On noxla's graph (the default
    for several signatures) and on TF's path, which join the merged model alike."""
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", graph)
    x1, x8 = (RNG.standard_normal((n, HIDDEN)).astype(np.float32) for n in (1, 8))
    signatures = {"prefill_8": (step, (x8,)), "decode": (step, (x1,))}
    before = _export(signatures, None, str(tmp_path / "without.tflite"), monkeypatch, joined=False)
    after = _export(signatures, None, str(tmp_path / "with.tflite"), monkeypatch, joined=True)
    for key in signatures:
        assert _ops(before)[key]["FULLY_CONNECTED"] == 5 and _ops(after)[key]["FULLY_CONNECTED"] == 1, key
    assert os.path.getsize(after) <= os.path.getsize(before) + 4096
    for key, x in (("prefill_8", x8), ("decode", x1)):
        _same_values(after, before, key, {"x": x}, step(x))


@pytest.mark.slow
@pytest.mark.parametrize("fun, shapes", [
    (step, [(8, HIDDEN)]),                        # 8 rows: large products already
    (key_read_twice, [(1, HIDDEN), (1, HIDDEN)]),  # a weight something else reads
])
def test_left_alone(fun, shapes, tmp_path, monkeypatch):
    args = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    before = _export(fun, args, str(tmp_path / "without.tflite"), monkeypatch, joined=False)
    after = _export(fun, args, str(tmp_path / "with.tflite"), monkeypatch, joined=True)
    assert _ops(after) == _ops(before)
    assert os.path.getsize(after) == os.path.getsize(before)
