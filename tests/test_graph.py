"""noxla's graph (noxla/graph, issue 41 stage 1): the rules' ops recorded without TensorFlow.

- Every rule case the TF target accepts and the recorder covers, replayed as real TF ops (each node
  the NodeDef it is; TF checks the recorded dtypes and shapes), computes what JAX computes.
- The recorder's NumPy folds compute what TF's kernels compute on the same constants.
- The zoo models through the graph path to TF.js: no TensorFlow imported (a fresh process), JAX's
  outputs on TF.js's cpu and wasm backends in Node, and no more ops than TF's path writes.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from lowering_rules import RULES
from noxla.graph.lower import record_program
from noxla.pipeline.graph_path import ENV
from noxla.writers.tf.replay import replay_numpy
from tests.differential import assert_matches, grouped_cases
from tests.zoo import build
from tools.graph_coverage import DECLARED_DIFFERENCES, replay_case

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = build()
CASES = [c for rule in RULES.values() for c in rule.cases if c.id not in DECLARED_DIFFERENCES]

@pytest.mark.slow
@pytest.mark.parametrize("case", grouped_cases(CASES))
def test_rule_case_recorded_and_replayed_in_tf_matches_jax(case):
    if case.skip:
        pytest.skip(f"{case.id}: {case.skip}")
    outcome = replay_case(case)
    if outcome.startswith("uncovered"):
        pytest.skip(f"not recorded yet ({outcome}): exported through TensorFlow")
    if outcome == "rejected":
        pytest.skip("rejected for TF up front (or JAX cannot run it): nothing to record")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_recorded_and_replayed_in_tf_matches_jax(name):
    from noxla.front.tracing import trace
    from noxla.runtimes.verify import jax_outputs
    model = MODELS[name]
    args = model.inputs(2)
    program = trace(model.fun, args)
    recorded = record_program(program)
    actual = replay_numpy(recorded.graph, recorded.inputs, recorded.outputs, args)
    assert_matches(jax_outputs(model.fun, args), actual, program.out_names, where=f"{name} [graph in TF]",
                   atol=1e-5, rtol=0.0)


def _fold_and_tf(fn, *args):
    """``fn(tf, *args)`` recorded on constants (folded in NumPy) and run by TF itself."""
    import tensorflow as tf

    from noxla.graph import api
    from noxla.graph.core import Graph
    from noxla.graph.ops import recording
    with recording(Graph()):
        recorder = api.recorder()
        folded = fn(recorder, *[recorder.constant(a) for a in args])
        assert folded.constant is not None, "not folded"
        folded = folded.constant
    expected = fn(tf, *[tf.constant(a) for a in args]).numpy()
    return folded, expected


FLOATS = np.array([-7.5, -3.0, -2.5, -0.5, 0.0, 0.5, 2.5, 3.0, 7.25], np.float32)
INTS = np.array([-7, -3, -2, -1, 0, 1, 2, 3, 7], np.int32)
FLOAT_DIVISORS = np.float32([2.5, -2, 2, -2, 2, 3, -3, 2, -1.5])


@pytest.mark.parametrize("what,fn,args", [
    ("floormod_f32", lambda tf, x, y: tf.math.floormod(x, y), (FLOATS, FLOAT_DIVISORS)),
    ("floordiv_f32", lambda tf, x, y: tf.math.floordiv(x, y), (FLOATS, FLOAT_DIVISORS)),
    ("floormod_i32", lambda tf, x, y: tf.math.floormod(x, y), (INTS, np.int32([2, -2, 2, -2, 3, 3, -3, 2, -5]))),
    ("floordiv_i32", lambda tf, x, y: x // y, (INTS, np.int32([2, -2, 2, -2, 3, 3, -3, 2, -5]))),
    ("cast_f32_i32_truncates", lambda tf, x: tf.cast(x, tf.int32), (FLOATS,)),
    ("cast_i32_u8_wraps", lambda tf, x: tf.cast(x, tf.uint8), (INTS * 100,)),
    ("cast_f32_bool", lambda tf, x: tf.cast(x, tf.bool), (FLOATS,)),
    ("round_half_even", lambda tf, x: tf.round(x), (FLOATS,)),
    ("getitem_masks", lambda tf, x: x[1:, ::-2, None, 0], (np.arange(60, dtype=np.float32).reshape(3, 4, 5),)),
    ("getitem_ellipsis", lambda tf, x: x[..., -1], (np.arange(60, dtype=np.int32).reshape(3, 4, 5),)),
    ("strided_slice_clamps", lambda tf, x: tf.strided_slice(x, [-9, 1], [9, 100], [1, 3]), (
        np.arange(20, dtype=np.float32).reshape(4, 5),)),
    ("cumsum_reverse_exclusive", lambda tf, x: tf.math.cumsum(x, axis=1, exclusive=True, reverse=True), (
        np.arange(12, dtype=np.int32).reshape(3, 4),)),
    ("reduce_sum_i32_wraps", lambda tf, x: tf.reduce_sum(x, axis=0), (np.full((3, 2), 2 ** 30, np.int32),)),
    ("reduce_mean_keepdims", lambda tf, x: tf.reduce_mean(x, axis=[0, 2], keepdims=True), (
        np.arange(24, dtype=np.float32).reshape(2, 3, 4),)),
    ("where_broadcasts", lambda tf, c, x: tf.where(c, x, 0.5), (np.array([[True], [False]]), FLOATS)),
    ("gather_axis1", lambda tf, x, i: tf.gather(x, i, axis=1), (np.arange(12, dtype=np.float32).reshape(3, 4),
                                                                np.array([[3, 0], [1, 1]], np.int32))),
    ("split_sizes", lambda tf, x: tf.split(x, [1, -1], axis=1)[1], (np.arange(12, dtype=np.float32).reshape(3, 4),)),
    ("pad_value", lambda tf, x: tf.pad(x, [[1, 0], [0, 2]], constant_values=3), (INTS.reshape(3, 3),)),
    ("matmul_transposed", lambda tf, a, b: tf.linalg.matmul(a, b, transpose_b=True), (
        np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(12, dtype=np.float32).reshape(4, 3))),
])
def test_folds_compute_what_tf_computes(what, fn, args):
    folded, expected = _fold_and_tf(fn, *args)
    assert folded.dtype == expected.dtype and folded.shape == expected.shape, what
    np.testing.assert_array_equal(folded, expected, err_msg=what)


def _arithmetic(x, y, z):
    import jax.numpy as jnp
    tiled = x[:, :1] * jnp.ones((1, 3), jnp.float32)          # Mul by ones that broadcasts: Tile
    summed = (x + y) + (y * 2.0) + z                          # a tree of adds: AddN (z: a BiasAdd)
    inverse = 1.0 / jnp.sum(x, axis=1)                        # Reciprocal
    negated = 0.0 - y                                         # Neg
    plus = summed - (-tiled)                                  # a Sub of a Neg: AddV2
    same = y * jnp.ones((2, 3), jnp.float32) + jnp.zeros((1, 3), jnp.float32)  # bypassed
    widened = x[:1] + jnp.zeros((2, 3), jnp.float32)          # BroadcastTo
    return plus, inverse, negated, same, widened


def test_grappler_arithmetic_rewrites_keep_jax_values():
    """tfjs_arithmetic's rewrites, each made (the ops TF's path gets) and replayed in TF equal to JAX."""
    import collections

    from noxla.front.tracing import trace
    from noxla.writers.tfjs.passes import optimize_for_tfjs
    rng = np.random.default_rng(0)
    args = [rng.normal(size=s).astype(np.float32) for s in ((2, 3), (2, 3), (3,))]
    recorded = record_program(trace(_arithmetic, args), uint32_as_int32=True)
    optimize_for_tfjs(recorded.graph, recorded.outputs, recorded.inputs)
    counts = collections.Counter(n.op for n in recorded.graph.nodes)
    for op in ("Tile", "AddN", "Reciprocal", "Neg", "BroadcastTo"):
        assert counts[op] >= 1, (op, dict(counts))
    assert counts["Mul"] == 1 and counts["RealDiv"] == 0, dict(counts)  # y * 2 only
    assert counts["Neg"] == 1 and counts["Sub"] == 0, dict(counts)  # 0 - y only
    from noxla.writers.tf.replay import replay
    got = replay(recorded.graph, recorded.inputs, recorded.outputs, args)
    import jax
    for g, want in zip(got, jax.jit(_arithmetic)(*args)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-6, atol=1e-6)


def _loop_with_captures(x, s):
    from jax import lax

    def body(carry):  # reads ``s`` (an input: captured by the While, passed on to the If inside it)
        k, c = carry
        return k + 1, lax.cond(c.sum() > s, lambda c: c * 0.5, lambda c: c + s, c)
    return lax.while_loop(lambda carry: carry[0] < 5, body, (0, x))[1]


def test_while_and_cond_recorded_with_bodies_and_captures_replay_as_jax():
    from noxla.front.tracing import trace
    args = [np.float32([0.5, -1.0, 2.0]), np.float32(1.5)]
    recorded = record_program(trace(_loop_with_captures, args))
    whiles = [n for n in recorded.graph.nodes if n.op == "StatelessWhile"]
    assert len(whiles) == 1, [n.op for n in recorded.graph.nodes]
    inner = [n for w in whiles for n in w.functions["body"].graph.nodes if n.op == "StatelessIf"]
    assert len(inner) == 1 and set(inner[0].functions) == {"then_branch", "else_branch"}
    assert inner[0].inputs[1].node.op == "_Arg"  # ``s``, captured by the loop body, then by the If
    import jax
    got = replay_numpy(recorded.graph, recorded.inputs, recorded.outputs, args)
    np.testing.assert_allclose(got[0], np.asarray(jax.jit(_loop_with_captures)(*args)), rtol=1e-6)


def _default_env() -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop(ENV, None)
    return env


def test_default_tfjs_export_of_zoo_models_imports_no_tensorflow(tmp_path):
    code = (
        "import sys, json\n"
        "import noxla\n"
        "from tests.zoo import build\n"
        "models = build()\n"
        "for name in sorted(models):\n"
        f"    out = {str(tmp_path)!r} + '/' + name\n"
        "    path = noxla.export_tfjs(models[name].fun, *models[name].inputs(1), path=out)\n"
        "    assert json.load(open(path + '/model.json'))['generatedBy'] == 'noxla.graph', name\n"
        "print(sorted(m for m in sys.modules if m == 'tensorflow' or m.startswith('tensorflow.')))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_default_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


@pytest.fixture(scope="module")
def graph_exports(tmp_path_factory, default_tfjs_path):
    """Each zoo model exported to TF.js by default (through the graph) and through TF's path (batch 2)."""
    import noxla
    from noxla.pipeline.tf_path import export as tf_path
    root = tmp_path_factory.mktemp("graph_tfjs")
    out = {}
    for name, model in sorted(MODELS.items()):
        args = model.inputs(2)
        graph_dir, tf_dir = str(root / f"{name}_graph"), str(root / f"{name}_tf")
        noxla.export_tfjs(model.fun, *args, path=graph_dir)
        tf_path(model.fun, args, tfjs=tf_dir)
        out[name] = (graph_dir, tf_dir, args)
    return out


@pytest.fixture(scope="module")
def default_tfjs_path():
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENV, raising=False)
        yield patch


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "wasm"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_through_the_graph_matches_jax_in_tfjs(name, backend, graph_exports, tfjs_runner):
    import json

    from noxla.front.tracing import trace
    from noxla.runtimes.verify import jax_outputs
    graph_dir, _, args = graph_exports[name]
    with open(os.path.join(graph_dir, "model.json")) as f:
        assert json.load(f)["generatedBy"] == "noxla.graph"
    model = MODELS[name]
    program = trace(model.fun, args)
    outs = tfjs_runner.run(graph_dir, dict(zip(program.in_names, args)), backend=backend)
    assert_matches(jax_outputs(model.fun, args), [outs[n] for n in program.out_names], program.out_names,
                   where=f"{name} [graph, tfjs_{backend}]", atol=1e-5, rtol=0.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_through_the_graph_has_no_more_tfjs_ops_than_tf_path(name, graph_exports):
    from tools.op_census import tfjs_ops
    graph_dir, tf_dir, _ = graph_exports[name]
    graph_ops, tf_ops = tfjs_ops(graph_dir), tfjs_ops(tf_dir)
    assert sum(graph_ops.values()) <= sum(tf_ops.values()), (dict(graph_ops), dict(tf_ops))


# Loops and conditionals written with their bodies (library functions) and run in TF.js: a sample of
# the control-flow rule cases (captures, nested bodies, Snapshots of a multi-output node, loops' carries).
CONTROL_FLOW_SAMPLE = (
    "cond:data_dependent_pred", "cond:several_operands_and_outputs", "cond:switch3", "cond:two_output_cond_in_branch",
    "cond:top_k_in_branch", "while:data_dependent_trips", "while:consts_in_cond_and_body", "while:swapped_carries",
    "while:two_output_cond_in_body", "while:vmapped_steps_past_10", "while:fori_dynamic_bound",
    "scan:loop_carry_and_stacked", "scan:loop_reverse_with_consts", "scan:loop_int_and_bool_outputs",
    "scan:cond_inside_scan", "scan:loop_sort_in_body")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "wasm"])
@pytest.mark.parametrize("case_id", CONTROL_FLOW_SAMPLE)
def test_control_flow_through_the_graph_matches_jax_in_tfjs(case_id, backend, tfjs_runner, tmp_path):
    from noxla.writers.tfjs.from_graph import write_tfjs
    from tests.differential import default_mode_inputs
    case = next(c for c in CASES if c.id == case_id)
    program, args, expected = default_mode_inputs(case)
    recorded = record_program(program, uint32_as_int32=True)
    assert any(n.functions for n in recorded.graph.nodes), "no While/If recorded"
    write_tfjs(recorded, str(tmp_path / "m"))
    outs = tfjs_runner.run(str(tmp_path / "m"), dict(zip(program.in_names, args)), backend=backend)
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol,
                   where=f"{case_id} [graph, tfjs_{backend}]")


# Models whose work is inside a loop (a While body: the trip count depends on the data, so JAX keeps
# the loop): the TF.js rewrites run in bodies as grappler runs in function bodies on TF's path.
_W = np.random.default_rng(0).normal(size=(8, 8)).astype(np.float32)
_B = np.random.default_rng(1).normal(size=(8,)).astype(np.float32)


def _dense_loop(x):
    import jax
    import jax.numpy as jnp

    def body(carry):
        i, x = carry
        y = jax.nn.relu(x @ _W + _B)
        return i + 1, y * 1.0 + 0.0 - (-x) * 0.5
    return jax.lax.while_loop(lambda c: (c[0] < 3) & (jnp.sum(c[1]) < 1e6), body, (0, x))[1]


def _norm_loop(x):
    import jax
    import jax.numpy as jnp

    def body(carry):
        i, total, ys = carry
        xi = x[i]
        mean = jnp.mean(xi, -1, keepdims=True)
        var = jnp.mean((xi - mean) ** 2, -1, keepdims=True)
        y = (xi - mean) / jnp.sqrt(var + 1e-5) * jnp.ones(8) + jnp.zeros(8)
        return i + 1, total + jnp.sum(y * y) + 0.0, ys.at[i].set(y @ _W + _B)
    return jax.lax.while_loop(lambda c: (c[0] < x.shape[0]) & (c[1] < 1e6), body,
                              (0, jnp.float32(0), jnp.zeros_like(x)))


LOOP_MODELS = {"dense_loop": (_dense_loop, (np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8),)),
               "norm_loop": (_norm_loop, (np.linspace(-2, 2, 96, dtype=np.float32).reshape(4, 3, 8),))}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOOP_MODELS))
def test_loop_model_through_the_graph_has_no_more_tfjs_ops_than_tf_path_and_matches_jax(
        name, tmp_path, default_tfjs_path, tfjs_runner):
    import json

    import noxla
    from noxla.front.tracing import trace
    from noxla.pipeline.tf_path import export as tf_path
    from noxla.runtimes.verify import jax_outputs
    from tools.op_census import tfjs_ops
    fun, args = LOOP_MODELS[name]
    graph_dir = noxla.export_tfjs(fun, *args, path=str(tmp_path / "graph"))
    tf_path(fun, args, tfjs=str(tmp_path / "tf"))
    with open(os.path.join(graph_dir, "model.json")) as f:
        assert json.load(f)["generatedBy"] == "noxla.graph"
    graph_ops, tf_ops = tfjs_ops(graph_dir), tfjs_ops(str(tmp_path / "tf"))
    assert graph_ops["StatelessWhile"] == 1, graph_ops
    assert sum(graph_ops.values()) <= sum(tf_ops.values()), (dict(graph_ops), dict(tf_ops))
    program = trace(fun, args)
    for backend in ("cpu", "wasm"):
        outs = tfjs_runner.run(graph_dir, dict(zip(program.in_names, args)), backend=backend)
        assert_matches(jax_outputs(fun, args), [outs[n] for n in program.out_names], program.out_names,
                       where=f"{name} [graph, tfjs_{backend}]", atol=1e-5, rtol=0.0)


def _steps_and_writer(monkeypatch, tmp_path, fun, args, env=None, **options):
    import json

    import noxla
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    steps = []
    path = noxla.export_tfjs(fun, *args, path=str(tmp_path / f"m{len(list(tmp_path.iterdir()))}"),
                             on_step=lambda name, seconds: steps.append(name) if seconds is None else None, **options)
    with open(os.path.join(path, "model.json")) as f:
        return steps, json.load(f)["generatedBy"]


def test_tfjs_export_takes_the_graph_by_default_and_says_which_path_it_took(monkeypatch, tmp_path):
    import jax.numpy as jnp
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    steps, by = _steps_and_writer(monkeypatch, tmp_path, jnp.tanh, (x,))
    assert by == "noxla.graph" and "lower (noxla's graph, no TensorFlow)" in steps, steps
    steps, by = _steps_and_writer(monkeypatch, tmp_path, jnp.tanh, (x,), env="0")
    assert by != "noxla.graph" and f"tfjs through TensorFlow: {ENV}=0" in steps, steps
    # What the graph does not cover (a TF function called by call_tf) goes through TensorFlow, and the
    # steps say what.
    import tensorflow as tf
    from jax.experimental import jax2tf
    steps, by = _steps_and_writer(monkeypatch, tmp_path, lambda v: jnp.sin(jax2tf.call_tf(tf.math.cos)(v)), (x,))
    assert by != "noxla.graph" and "tfjs through TensorFlow: noxla's graph does not record tf.config" in steps, steps
    # float16 and bfloat16 inside are written by the graph, each result rounded
    # (tests/test_graph_tfjs_half_floats.py, tests/test_graph_bfloat16.py).
    def times_3_in(half):
        return lambda v: (v.astype(half) * 3).astype(jnp.float32)
    for half in (jnp.float16, jnp.bfloat16):
        steps, by = _steps_and_writer(monkeypatch, tmp_path, times_3_in(half), (x,))
        assert by == "noxla.graph" and not any(s.startswith("tfjs through TensorFlow") for s in steps), steps
    # Symbolic sizes are recorded too (the model's -1 sizes), not sent to TensorFlow.
    steps, by = _steps_and_writer(monkeypatch, tmp_path, jnp.tanh, (x,), polymorphic_shapes=["(b, 3)"])
    assert by == "noxla.graph" and not any(s.startswith("tfjs through TensorFlow") for s in steps), steps


# Polymorphic programs: symbolic sizes recorded as unknown (None; -1 in model.json), computed at run
# time from the inputs' Shape ops. Each case runs at its own sizes and at larger ones (the same graph).
POLY_CASES = [c for c in CASES if c.polymorphic_shapes and not c.skip]
SIZE_STEPS = (0, 1, 3)  # each symbolic size's growth: the case's own sizes, then two others


def _dim_values(program, args) -> dict:
    """The case's value of each dimension variable, read back from its inputs' sizes."""
    import itertools

    from lowering_rules.core.jax_compat import evaluate_dim, is_constant_dim
    dims = [(d, np.shape(a)[i]) for aval, a in zip(program.in_avals, args) for i, d in enumerate(aval.shape)
            if not is_constant_dim(d)]
    names = sorted({v for d, _ in dims for v in d._get_vars()})
    for values in itertools.product(range(0, 33), repeat=len(names)):
        env = dict(zip(names, values))
        if all(evaluate_dim(d, env, max, min) == size for d, size in dims):
            return env
    raise AssertionError(f"no dimension variables give the sizes {dims}")


def _inputs_at(program, args, step: int) -> list:
    """The case's inputs with every dimension variable grown by ``step``: each array cycled along
    its symbolic axes (values stay in the case's ranges; indices into a symbolic axis stay valid)."""
    from lowering_rules.core.jax_compat import evaluate_dim, is_constant_dim
    env = {v: n + step for v, n in _dim_values(program, args).items()}
    out = []
    for aval, a in zip(program.in_avals, args):
        a = np.asarray(a)
        for axis, d in enumerate(aval.shape):
            if not is_constant_dim(d):
                size = evaluate_dim(d, env, max, min)
                a = np.take(a, np.arange(size) % a.shape[axis], axis=axis) if a.shape[axis] else \
                    np.zeros(a.shape[:axis] + (size,) + a.shape[axis + 1:], a.dtype)
        out.append(a)
    return out


def _recorded_poly(case):
    from tests.differential import default_mode_inputs
    outcome = replay_case(case)  # recorded, replayed at the case's sizes and checked against JAX
    if outcome != "matched":
        pytest.skip(f"{outcome}: exported through TensorFlow" if outcome.startswith("uncovered")
                    else "rejected for TF up front (or JAX cannot run it): nothing to record")
    program, args, _ = default_mode_inputs(case)
    return program, args, record_program(program)


@pytest.mark.slow
@pytest.mark.parametrize("case", grouped_cases(POLY_CASES))
def test_polymorphic_case_replayed_in_tf_matches_jax_at_several_sizes(case):
    from noxla.runtimes.verify import jax_outputs
    program, args, recorded = _recorded_poly(case)
    assert any(d is None for t in recorded.inputs for d in t.shape.dims), "no symbolic size recorded"
    assert any(n.op == "Shape" for n in recorded.graph.nodes), "symbolic sizes baked in"
    for step in SIZE_STEPS:
        sized = _inputs_at(program, args, step)
        actual = replay_numpy(recorded.graph, recorded.inputs, recorded.outputs, sized)
        assert_matches(jax_outputs(case.fun, sized), actual, program.out_names, case.atol, case.rtol,
                       where=f"{case.id} [graph replayed in TF, sizes +{step}]")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "wasm"])
@pytest.mark.parametrize("case", grouped_cases(POLY_CASES))
def test_polymorphic_case_through_the_graph_matches_jax_in_tfjs_at_several_sizes(case, backend, tfjs_runner,
                                                                                  tmp_path):
    import json

    from limitations.engine import check_jaxpr
    from lowering_rules.core.vocabulary import Target
    from noxla.graph.dtypes import Uncovered
    from noxla.pipeline.graph_path import write_program_tfjs
    from noxla.runtimes.verify import jax_outputs
    from tests.differential import default_mode_inputs
    program, args, _ = default_mode_inputs(case)
    if not check_jaxpr(program.closed_jaxpr, Target.TFJS).ok:
        pytest.skip("rejected for TF.js up front: nothing to write")
    try:
        write_program_tfjs(program, str(tmp_path / "m"))
    except Uncovered as e:
        pytest.skip(f"not recorded yet (uncovered: {e}): exported through TensorFlow")
    with open(tmp_path / "m" / "model.json") as f:
        inputs = json.load(f)["signature"]["inputs"]
    assert any(d["size"] == "-1" for spec in inputs.values() for d in spec["tensorShape"].get("dim", [])), inputs
    for step in SIZE_STEPS[:2]:
        sized = _inputs_at(program, args, step)
        outs = tfjs_runner.run(str(tmp_path / "m"), dict(zip(program.in_names, sized)), backend=backend)
        assert_matches(jax_outputs(case.fun, sized), [outs[n] for n in program.out_names], program.out_names,
                       case.atol, case.rtol, where=f"{case.id} [graph, tfjs_{backend}, sizes +{step}]")
