"""float16 inside a TF.js model written from noxla's graph (noxla/writers/tfjs/graph_half_floats.py): carried
in float32, each result rounded back as TF's path rounds it, against JAX op by op and bit for bit
on TF.js's Node cpu and wasm backends (and, slow, Chromium's webgl, wasm, cpu and webgpu), with no
more ops than TF's path's model. (bfloat16, carried the same way: tests/test_graph_bfloat16.py.)"""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import noxla
from noxla.pipeline.graph_path import ENV
from tests.differential import CHROMIUM_BACKENDS, chromium
from tests.test_tfjs_half_floats import _run
from tests.test_tflite_bfloat16 import _op_by_op, _same_bits

F16 = jnp.float16
BACKENDS = ("cpu", "wasm")


@pytest.fixture(autouse=True)
def _graph_path(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def _graph_export(fun, args, path) -> str:
    """The default TF.js export, which must be the graph's (not TF's path)."""
    steps = []
    noxla.export_tfjs(fun, *args, path=str(path), on_step=lambda name, s: steps.append(name) if s is None else None)
    with open(os.path.join(path, "model.json")) as f:
        model = json.load(f)
    assert model["generatedBy"] == "noxla.graph", steps
    held = [n for n in _nodes(model) if "DT_HALF" in json.dumps(n.get("attr", {}))]
    assert not held, held[:3]  # TF.js would read them as float32 and compute without rounding
    return str(path)


def _nodes(model: dict) -> list[dict]:
    topology = model["modelTopology"]
    return [*topology["node"], *(n for f in topology.get("library", {}).get("function", []) for n in f["nodeDef"])]


def _same_bits_on_node(tfjs_runner, path, inputs, expected) -> None:
    for backend in BACKENDS:
        for want, got in zip(expected, _run(tfjs_runner, path, inputs, backend)):
            _same_bits(want, got)


def _rounding():
    # Ties to even, overflow to infinity, float16's subnormals, -0.0, infinities and NaN.
    from tests.test_tfjs_half_floats import _dense_float32
    x = np.concatenate([_dense_float32(), np.float32([np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.996, 65520])])
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float32)
    return lambda v: v.astype(F16).astype(jnp.float32), {"v": x}, [expected]


def _arithmetic():
    # +, -, *, / and sqrt on float16 are float32's rounded once (24 >= 2 * 11 + 2): bit for bit.
    # Chains of them (each product rounded before the next) are where TF.js's float32 would differ.
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(4096).astype(F16).astype(np.float32) * 8 for _ in range(2))

    def fun(x, y):
        a, b = x.astype(F16), y.astype(F16)
        return [r.astype(jnp.float32) for r in (a + b, a - b, a * b, a / b, jnp.sqrt(jnp.abs(a)), (a * b + a) / b,
                                                 a * b * a * b * a)]
    return fun, {"x": x, "y": y}, _op_by_op(fun, x, y)


def _control_flow():
    from jax import lax
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64) * 4).astype(np.float16).astype(np.float32)

    def fun(x):
        h = x.astype(F16)
        looped = lax.while_loop(lambda c: c[0] < x[0] + 6, lambda c: (c[0] + 1, c[1] * h / (c[1] + 3) + h),
                                (x[0], h))[1]
        tested = lax.cond(x[1] > 0, lambda v: v * v + h, lambda v: v / (h + 5), looped)
        return looped.astype(jnp.float32), tested.astype(jnp.float32)
    return fun, {"x": x}, _op_by_op(fun, x)


def test_float16_rounding_is_round_to_nearest_even_bit_for_bit(tmp_path, tfjs_runner):
    fun, inputs, expected = _rounding()
    path = _graph_export(fun, tuple(inputs.values()), tmp_path / "m")
    _same_bits(np.asarray(jax.jit(fun)(inputs["v"])), expected[0])  # JAX rounds as numpy
    _same_bits_on_node(tfjs_runner, path, inputs, expected)


def test_each_float16_result_is_rounded_as_jax_computes_it(tmp_path, tfjs_runner):
    fun, inputs, expected = _arithmetic()
    path = _graph_export(fun, tuple(inputs.values()), tmp_path / "m")
    float32 = [np.asarray(r) for r in jax.jit(lambda x, y: (x * y * x * y * x,))(*inputs.values())]
    assert not np.array_equal(float32[0], expected[-1])  # the chain's roundings matter on these inputs
    _same_bits_on_node(tfjs_runner, path, inputs, expected)


def test_float16_loops_and_conditionals_round_in_their_bodies(tmp_path, tfjs_runner):
    fun, inputs, expected = _control_flow()
    path = _graph_export(fun, tuple(inputs.values()), tmp_path / "m")
    with open(os.path.join(path, "model.json")) as f:
        assert json.load(f)["modelTopology"]["library"]["function"], "no While/If body written"
    _same_bits_on_node(tfjs_runner, path, inputs, expected)


def _float16_layer(x):
    rng = np.random.default_rng(4)
    w, b = rng.standard_normal((16, 32)).astype(np.float16) / 4, rng.standard_normal(32).astype(np.float16)
    h = jax.nn.gelu(x.astype(F16) @ w + b)
    h = (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + F16(1e-3))
    return jax.nn.softmax(h).astype(jnp.float32)


def test_float16_layer_matches_jax_with_no_more_ops_than_tf_path(tmp_path, tfjs_runner):
    # A float16 layer: matmul, bias, gelu, layer norm and softmax, with float32 in and out.
    from noxla.pipeline.tf_path import export as tf_path
    from noxla.runtimes.verify import relative_error
    from tools.op_census import tfjs_ops
    x = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)
    path = _graph_export(_float16_layer, (x,), tmp_path / "graph")
    tf_path(_float16_layer, (x,), tfjs=str(tmp_path / "tf"))
    graph_ops, tf_ops = tfjs_ops(path), tfjs_ops(str(tmp_path / "tf"))
    assert sum(graph_ops.values()) <= sum(tf_ops.values()), (dict(graph_ops), dict(tf_ops))
    expected = _op_by_op(_float16_layer, x)[0]
    for backend in BACKENDS:
        actual, = _run(tfjs_runner, path, {"x": x}, backend)
        assert relative_error(expected, actual) <= 2 ** -9, backend  # float16's own tolerance (JAX tests: 1e-3)
        assert np.array_equal(actual.astype(np.float16).astype(np.float32), actual), backend


def _flushed(inputs: dict) -> np.ndarray:
    """Where an input is a float32 subnormal, which WebGL and WebGPU flush to zero (docs/testing.md):
    the inputs of these forms have their outputs' shape."""
    return np.logical_or.reduce([(v != 0) & (np.abs(v) < np.finfo(np.float32).tiny) for v in inputs.values()])


@pytest.mark.slow
@pytest.mark.parametrize("backend", CHROMIUM_BACKENDS)
def test_float16_forms_match_jax_in_chromium(backend, tmp_path, browser_runner):
    """The forms above on Chromium's backends: bit for bit (on WebGL and WebGPU where no input is a float32
    subnormal), and the layer within float16's tolerance."""
    from noxla.runtimes.verify import relative_error
    browser = chromium(browser_runner, backend)
    for name, make in {"rounding": _rounding, "arithmetic": _arithmetic, "control_flow": _control_flow}.items():
        fun, inputs, expected = make()
        path = _graph_export(fun, tuple(inputs.values()), tmp_path / name)
        kept = ~_flushed(inputs) if backend in ("webgl", "webgpu") else np.ones(expected[0].shape, bool)
        for want, got in zip(expected, _run(browser, path, inputs, backend)):
            _same_bits(want[kept], got[kept])
    x = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)
    actual, = _run(browser, _graph_export(_float16_layer, (x,), tmp_path / "layer"), {"x": x}, backend)
    assert relative_error(_op_by_op(_float16_layer, x)[0], actual) <= 2 ** -9
    assert np.array_equal(actual.astype(np.float16).astype(np.float32), actual)
