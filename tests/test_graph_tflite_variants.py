"""The graph's TFLite writer's strict and WebGPU variants (``noxla.writers.tflite.VARIANTS``): strict
files keep JAX's NaN/inf semantics and IEEE arithmetic (the strict rule cases on LiteRT, as
tests/test_rules.py holds TF's path's strict file), the WebGPU file runs on LiteRT.js's WebGPU
delegate in headless Chromium, and both are the default export for their options."""
from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import noxla
from lowering_rules.core.vocabulary import Target
from noxla.front.tracing import trace
from noxla.graph.dtypes import Uncovered
from noxla.pipeline.preflight import full_check
from noxla.runtimes import run_tflite
from noxla.writers.tflite import graph_tflite_chunks
from tests import zoo
from tests.differential import assert_matches, grouped_cases, traced
from tests.small_cnn import CNN_INPUT, small_cnn
from tests.test_rules import STRICT_CASES

MODELS = zoo.build()


def _bytes(program, strict: bool = False, webgpu: bool = False) -> bytes:
    return b"".join(bytes(c() if callable(c) else c)
                    for c in graph_tflite_chunks(program, strict=strict, webgpu=webgpu))


def _op_counts(data) -> collections.Counter:
    from noxla.writers.tflite.flatbuffer.merge import builtin_code
    from noxla.writers.tflite.flatbuffer.schema import read_model, schema
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    model = read_model(data)
    return collections.Counter(names[builtin_code(model, op)] for g in model.subgraphs for op in g.operators or [])


@pytest.mark.parametrize("case", grouped_cases(STRICT_CASES))
def test_strict_case_through_the_graph_matches_jax(case):
    """tests/test_rules.py's strict cases (test_case_strict), written by the graph's strict variant."""
    program, args, expected = traced(case)
    if isinstance(expected, Exception) or not full_check(program.closed_jaxpr, Target.TFLITE).ok:
        pytest.skip("JAX cannot run it or TFLite's check refuses it (tests/test_rules.py holds it to that)")
    try:
        data = _bytes(program, strict=True)
    except Uncovered as e:
        pytest.skip(f"the graph's TFLite writer does not cover it ({e}); TF's path exports it")
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol,
                   f"{case.id} [tflite, graph, strict]")


def test_strict_division_by_a_constant_is_jax_s_product_by_its_reciprocal():
    """XLA computes x / c, c a constant, as x * (1 / c): an ulp off IEEE division for some x, and inf
    where 1 / c overflows. The strict file keeps that fold (as TF's path's does): JAX's values, bit
    for bit, the infinities included."""
    x = np.random.default_rng(0).standard_normal((4096, 3)).astype(np.float32)
    x[0] = 1e-10
    c = np.array([3.0, 7.0, 1e-39], np.float32)
    fun = lambda x: x / c  # noqa: E731
    program = trace(fun, (x,))
    expected = np.asarray(jax.jit(fun)(x))
    with np.errstate(over="ignore"):
        assert not np.array_equal(expected, x / c) and np.isinf(expected[0, 2])   # the test's premise
    strict = _bytes(program, strict=True)
    assert set(_op_counts(strict)) == {"MUL"}
    np.testing.assert_array_equal(run_tflite(strict, {"x": x})[program.out_names[0]], expected)


def _head(x, w):
    h = jax.nn.relu(x @ w * 0.5)
    return jax.nn.log_softmax(h, axis=-1), jnp.mean(h, axis=-1), jax.nn.softmax(h, axis=-1)


def test_strict_file_keeps_nan_and_inf_as_jax():
    """NaN and inf rows through a product, relu, mean, softmax and log_softmax: the default file
    fuses them (SOFTMAX, LOG_SOFTMAX, MEAN, the scale in the weights) and may differ from JAX there;
    the strict file equals JAX, NaNs where JAX has them."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    x[1, 2], x[2, 0], x[3, 1] = np.nan, np.inf, -np.inf
    fun = lambda x: _head(x, w)  # noqa: E731
    program = trace(fun, (x,))
    default, strict = _op_counts(_bytes(program)), _op_counts(_bytes(program, strict=True))
    assert {"SOFTMAX", "LOG_SOFTMAX", "MEAN"} <= set(default), default
    assert not {"SOFTMAX", "LOG_SOFTMAX", "MEAN", "RELU"} & set(strict), strict
    outs = run_tflite(_bytes(program, strict=True), {"x": x})
    expected = [np.asarray(e) for e in jax.jit(fun)(x)]
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, 1e-6, 1e-6, "strict head")


@pytest.mark.parametrize("target", ["tflite", "litertjs-webgpu"])
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_export_takes_the_graph_for_strict_and_webgpu(target, strict, tmp_path):
    steps = []
    path = noxla.export_tflite(small_cnn, CNN_INPUT, path=str(tmp_path / "m.tflite"), strict=strict, target=target,
                               on_step=lambda name, s: steps.append(name))
    assert "lower+write (graph tflite)" in steps, steps
    (got,) = run_tflite(path, {"x": CNN_INPUT}).values()
    np.testing.assert_allclose(got, np.asarray(jax.jit(small_cnn)(CNN_INPUT)), rtol=1e-5, atol=1e-6)


def _tf_path(model, args, tmp_path, **options) -> bytes:
    from noxla.pipeline.tf_path import export
    path = str(tmp_path / "tf_path.tflite")
    export(model.fun, args, tflite=path, **options)   # TF's path (noxla.pipeline.tf_path.export takes no graph writer)
    with open(path, "rb") as f:
        return f.read()


def _logical_ops_of_a_constant(data) -> int:
    """LOGICAL_OR and LOGICAL_AND operators reading a constant (grappler folds them on TF's path)."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code
    from noxla.writers.tflite.flatbuffer.schema import read_model, schema
    model = read_model(data)
    logical = {schema.BuiltinOperator.LOGICAL_OR, schema.BuiltinOperator.LOGICAL_AND}
    return sum(builtin_code(model, op) in logical and any(model.buffers[g.tensors[t].buffer].data is not None
                                                          for t in op.inputs)
               for g in model.subgraphs for op in g.operators or [])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_strict_through_the_graph_matches_jax(name, tmp_path):
    """Every zoo model written strict (transformer_encoder's squeeze before a batched product with
    TF's path's passes run on the file), equal to JAX, no LOGICAL_OR or LOGICAL_AND of a constant
    left (the strict relu's ``isnan(x) | isnan(0)``: mobilenet_v2's file had 18)."""
    model = MODELS[name]
    args = model.inputs(2)
    program = trace(model.fun, tuple(args))
    data = _bytes(program, strict=True)
    assert _logical_ops_of_a_constant(data) == 0
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(model.fun)(*args))]
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, 1e-5, 1e-5,
                   f"{name} [tflite, graph, strict]")


@pytest.fixture(scope="module")
def litertjs():
    from tests.litertjs_harness import runner
    return runner()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_for_webgpu_through_the_graph_runs_on_litertjs_webgpu(name, litertjs, tmp_path):
    """Each zoo model WebGPU's check accepts, written by the graph's WebGPU variant, equals JAX on
    LiteRT.js's WebGPU delegate (SwiftShader in this Chromium), every op it leaves on wasm a declared
    fallback, and has no more operators than TF's path's WebGPU file."""
    from limitations.engine import check_jaxpr
    from limitations.targets import declared_fallback
    from noxla.runtimes.litertjs import TOLERANCE
    from noxla.runtimes.verify import jax_outputs, relative_error
    model = MODELS[name]
    args = model.inputs(1)
    program = trace(model.fun, tuple(args))
    report = check_jaxpr(program.closed_jaxpr, Target.LITERTJS_WEBGPU)
    if not report.ok:
        assert all(v.declared for v in report.violations), report.format()
        pytest.skip("WebGPU's declared limitations refuse it (tests/test_litertjs.py holds it to that)")
    path = tmp_path / "graph.tflite"
    path.write_bytes(_bytes(program, webgpu=True))
    assert "webgpu" in litertjs.accelerators()
    outs, info = litertjs.run_timed(str(path), dict(zip(program.in_names, args)), "webgpu")
    for n, e in zip(program.out_names, jax_outputs(model.fun, args)):
        assert outs[n].shape == e.shape and relative_error(e, outs[n]) <= TOLERANCE["webgpu"], (name, n)
    undeclared = {(u["op"], u["reason"]) for u in info["placement"]["unsupported"]
                  if declared_fallback(u["op"], u["reason"]) is None}
    assert not undeclared, undeclared
    converted = _tf_path(model, args, tmp_path, tflite_target=Target.LITERTJS_WEBGPU)
    graph = _op_counts(path.read_bytes())
    assert sum(graph.values()) <= sum(_op_counts(converted).values()), (graph - _op_counts(converted),
                                                                         _op_counts(converted) - graph)


@pytest.mark.slow
def test_webgpu_file_takes_the_flatbuffer_passes_the_delegate_needs(litertjs, tmp_path):
    """What the WebGPU delegate computes wrong unless TF's path's WebGPU passes ran
    (tests/test_litertjs.py: test_not_equal_with_nan_on_webgpu, test_constant_operands_on_webgpu),
    in the graph's WebGPU file: ``x != y`` with NaNs, ``x + w`` with a constant w of the result's
    shape (the delegate read its first row only). Both on the GPU, as JAX."""
    from noxla.runtimes.litertjs import TOLERANCE
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    x = np.array([np.nan, 1.0, np.nan, -np.inf, np.inf, 0.0, 2.0], np.float32)
    y = np.array([np.nan, np.nan, 1.0, np.nan, np.nan, 0.0, 3.0], np.float32)
    cases = {"not_equal": (lambda x, y: (x != y).astype(jnp.float32), (x, y)),
             "constant": (lambda x: x + w, (rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32),))}
    for name, (fun, args) in cases.items():
        program = trace(fun, args)
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(_bytes(program, webgpu=True))
        outs, info = litertjs.run_timed(str(path), dict(zip(program.in_names, args)), "webgpu")
        assert info["placement"]["fullyAccelerated"], (name, info["placement"])
        assert_matches([np.asarray(jax.jit(fun)(*args))], [outs[n] for n in program.out_names], program.out_names,
                       where=f"{name} [litertjs_webgpu, graph]", floor=TOLERANCE["webgpu"])


@pytest.mark.parametrize("options", [{"strict": True}, {"target": "litertjs-webgpu"},
                                     {"target": "litertjs-webgpu", "strict": True}], ids=["strict", "webgpu", "both"])
def test_several_signatures_strict_and_webgpu_from_the_graph(options, tmp_path, monkeypatch):
    """By default several strict or WebGPU signatures are written by the graph's variant, their merge
    taking the variant's passes (``Passes.merged``: TF's path's strict ones; none for WebGPU, as on
    TF's path), each signature equal to JAX on LiteRT."""
    from tests.test_graph_signatures import PAIR, W_DOWN, W_UP, _check
    monkeypatch.delenv("NOXLA_TFLITE_GRAPH", raising=False)
    steps = []
    path = str(tmp_path / "m.tflite")
    noxla.export_tflite(PAIR, path=path, on_step=lambda name, s: steps.append(name), **options)
    assert not any(s.startswith("graph tflite writer: ") or s.startswith("convert tflite") for s in steps), steps
    assert all(f"lower+write {key} (graph tflite)" in steps for key in PAIR), steps
    _check(path, PAIR, W_UP.nbytes + W_DOWN.nbytes)


@pytest.mark.slow
@pytest.mark.parametrize("signatures", ["pair", "decoder"])
def test_several_signatures_for_webgpu_run_on_litertjs_webgpu(signatures, litertjs, tmp_path, monkeypatch):
    """Several signatures for LiteRT.js's WebGPU, from the graph: each signature equals JAX on the
    delegate in headless Chromium (every op on the GPU), with no more operators than TF's path's
    WebGPU file (each signature's converted file with its WebGPU passes, merged)."""
    from noxla.runtimes.litertjs import TOLERANCE
    from noxla.runtimes.verify import jax_outputs, relative_error
    from tests.test_graph_signatures import DECODER, PAIR, _operators, _tf_path
    chosen = {"pair": PAIR, "decoder": DECODER}[signatures]
    monkeypatch.delenv("NOXLA_TFLITE_GRAPH", raising=False)
    steps = []
    path = noxla.export_tflite(chosen, path=str(tmp_path / "m.tflite"), target="litertjs-webgpu",
                               on_step=lambda name, s: steps.append(name))
    assert all(f"lower+write {key} (graph tflite)" in steps for key in chosen), steps
    for key, (fun, args) in chosen.items():
        program = trace(fun, args)
        outs, info = litertjs.run_timed(path, dict(zip(program.in_names, args)), "webgpu", signature=key)
        assert info["placement"]["fullyAccelerated"], (key, info["placement"])
        for n, e in zip(program.out_names, jax_outputs(fun, args)):
            assert outs[n].shape == e.shape and relative_error(e, outs[n]) <= TOLERANCE["webgpu"], (key, n)
    tf_path = _tf_path(chosen, str(tmp_path / "tf.tflite"), monkeypatch, target="litertjs-webgpu")
    if tf_path is not None:
        graph, tf = _operators(path), _operators(tf_path)
        assert all(graph[key] <= tf[key] for key in chosen), (graph, tf)
