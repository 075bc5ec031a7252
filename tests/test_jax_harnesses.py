"""JAX's own primitive harnesses (tests/jax_harnesses.py) in TF eager and tf.function: each matches
JAX (or is a valid answer where the result is not unique: tests/gauge.py) or is rejected up front.

All 5,483 take about 15 minutes of CPU in eager and graph (0.17 s each, measured), beyond the
suite's budget; the suite runs a stratified seeded sample (every harness group, the harnesses
that crashed or differed before, then more of each group in turn) and the full run is the tool
command: ``python3 -m tests.jax_harnesses tf tfgraph`` (counts in docs/testing.md).
"""
import functools
import tempfile

import numpy as np
import pytest

from tests import jax_harnesses as jh
from tests.gauge import mismatch

# The harnesses that crashed after the check or differed silently (issue 22): every harness of
# those groups, and the dot_generals mixing complex64 or the two half floats.
REGRESSION_GROUPS = ("cholesky", "eig", "eigh", "select_and_gather_add", "select_and_scatter_add",
                     "integer_pow", "approx_top_k")

SLOW_SAMPLE, SLOW_CHUNKS, FAST_SAMPLE = 1600, 16, 100


def _regressions() -> list[str]:
    return [n for n, h in jh.all_harnesses().items() if h.group_name in REGRESSION_GROUPS or (
        h.group_name == "dot_general" and ("complex64" in n or ("bfloat16" in n and "float16" in n)))]


@functools.cache
def _slow_sample() -> list[str]:
    return jh.stratified(SLOW_SAMPLE, seed=0, always=_regressions())


def _run(names, targets, tfjs=None):
    with tempfile.TemporaryDirectory(prefix="noxla_harness_") as scratch:
        runners = {t: jh.runner(t, scratch, tfjs) for t in targets}
        outcomes = []
        for name in names:
            hp = jh.build(name)
            outcomes += [jh.run_harness(name, t, *runners[t], hp=hp) for t in targets]
    return outcomes


def _assert_all_right(outcomes, least_matched=0.8):
    """No crash after the check, no silent mismatch; and at least ``least_matched`` of the runs
    matched (the rest rejected up front), so that a check rejecting everything cannot pass."""
    failures = [f"{o.name} [{o.target}]: {o.result}\n{o.detail}" for o in outcomes
                if o.result not in ("matched", "rejected", "invalid")]
    assert not failures, "\n".join(failures)
    tried = [o for o in outcomes if o.result != "invalid"]
    matched = sum(o.result == "matched" for o in tried)
    assert matched >= least_matched * len(tried), f"only {matched} of {len(tried)} matched: the rest rejected up front"


# The fast loop: a stratified sample of 100 in TF eager (about 13 CPU-s, measured).
def test_harness_sample_in_tf_eager():
    names = jh.stratified(FAST_SAMPLE, seed=1)
    assert len({jh.all_harnesses()[n].group_name for n in names}) == FAST_SAMPLE  # one of 100 groups each
    _assert_all_right(_run(names, ["tf"]))


# Slow: 1,600 harnesses (every group, the regressions) in eager and graph, in 16 chunks of 100:
# measured 17 CPU-s a chunk (4.5 CPU-minutes in all, about 2.3 minutes of the full suite at -n 2).
@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(SLOW_CHUNKS))
def test_harness_sample_in_tf_eager_and_graph(chunk):
    names = _slow_sample()[chunk::SLOW_CHUNKS]
    _assert_all_right(_run(names, ["tf", "tfgraph"]))


# Slow: one harness of each of 100 groups exported to TFLite (run in LiteRT) and TF.js (run in Node,
# cpu and wasm), in 4 chunks. The full runs are the tool's (all 5,483 in TFLite, 1,500 in TF.js);
# there TFLite matched 84% and TF.js 29% (its dtypes: no int64, float16, uint8 outputs...), so the
# floor is lower than in TF.
@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_harness_sample_in_tflite_and_tfjs(chunk, tfjs_runner):
    names = jh.stratified(FAST_SAMPLE, seed=2)[chunk::4]
    _assert_all_right(_run(names, ["tflite", "tfjs"], tfjs_runner), least_matched=0.25)


# Slow: the graph's .tflite writer (noxla.writers.tflite) on these groups, the default lowering
# it stands in for. A harness it does not cover is "uncovered" (the TF path exports it).
DIRECT_GROUPS = ("add", "sub", "mul", "div", "max", "min", "neg", "abs", "tanh", "logistic", "sqrt", "sin", "cos",
                 "floor", "ceil", "integer_pow", "reshape", "broadcast_in_dim")


@pytest.mark.slow
def test_harnesses_on_the_graph_tflite_writer():
    names = [n for n, h in jh.all_harnesses().items() if h.group_name in DIRECT_GROUPS]
    outcomes = _run(names, ["tflitegraph+fast"])
    failures = [f"{o.name}: {o.result}\n{o.detail}" for o in outcomes
                if o.result not in ("matched", "rejected", "invalid", "uncovered", "nonfinite")]
    assert not failures, "\n".join(failures)
    # The full run (docs/testing.md) matched 50 here: most harnesses take other dtypes than float32.
    assert sum(o.result == "matched" for o in outcomes) >= 40, "the graph tflite writer covered almost none"


def test_slow_sample_covers_every_group_and_the_regressions():
    sample = set(_slow_sample())
    assert len(sample) == SLOW_SAMPLE
    assert {h.group_name for h in jh.all_harnesses().values()} == {jh.all_harnesses()[n].group_name for n in sample}
    assert set(_regressions()) <= sample and len(_regressions()) > 150


# ----------------------------------------------------------------------------- the gauge checks

def _harness(name):
    hp = jh.build(name)
    assert not isinstance(hp, str), hp
    return hp


def _named(group, *parts):
    return next(n for n, h in jh.all_harnesses().items() if h.group_name == group and all(p in n for p in parts))


def test_gauge_accepts_another_valid_eigh_and_rejects_a_wrong_one():
    hp = _harness(_named("eigh", "float32_2_20_20", "lower_True"))
    v, w = (np.array(x) for x in hp.expected)
    flipped = v.copy()
    flipped[..., 3] *= -1  # an eigenvector's sign is free
    assert mismatch(hp, [v, w]) is None
    assert mismatch(hp, [flipped, w]) is None
    wrong = v.copy()
    wrong[..., [3, 4]] = wrong[..., [4, 3]]  # the vectors no longer belong to their eigenvalues
    assert "own check fails" in mismatch(hp, [wrong, w])


def test_gauge_accepts_another_svd_complement_and_rejects_a_wrong_factor():
    hp = _harness(_named("svd", "float32_2_7_", "fullmatrices_True_computeuv_True"))
    s, u, vh = (np.array(x) for x in hp.expected)
    k = s.shape[-1]
    rotated = vh.copy()  # the rows of Vh past k span the null space: any orthonormal basis of it
    c, si = np.cos(0.3), np.sin(0.3)
    rotated[..., k, :], rotated[..., k + 1, :] = c * vh[..., k, :] - si * vh[..., k + 1, :], \
        si * vh[..., k, :] + c * vh[..., k + 1, :]
    assert mismatch(hp, [s, u, rotated]) is None
    assert "own check fails" in mismatch(hp, [s, u, vh * 1.01])


def test_gauge_ignores_cholesky_upper_triangle_only():
    hp = _harness(_named("cholesky", "float32_4_4"))
    (factor,) = (np.array(x) for x in hp.expected)
    assert mismatch(hp, [factor + np.triu(np.ones_like(factor), 1)]) is None
    assert mismatch(hp, [factor + np.tril(np.ones_like(factor) * 0.1)]) is not None


def test_gauge_accepts_an_unstable_sort_order_of_ties_only():
    hp = _harness(_named("sort", "num_arrays_2_shape_int32_100", "isstable_False_num_keys_1"))
    keys, values = (np.array(x) for x in hp.expected)
    tie = next(i for i in range(len(keys) - 1) if keys[i] == keys[i + 1] and values[i] != values[i + 1])
    swapped = values.copy()
    swapped[[tie, tie + 1]] = swapped[[tie + 1, tie]]
    assert mismatch(hp, [keys, swapped]) is None
    # Another key's row holding another value: swapping equal values would change nothing.
    other = next(i for i in range(len(keys)) if keys[i] != keys[tie] and values[i] != values[tie])
    moved = values.copy()
    moved[[tie, other]] = moved[[other, tie]]  # a value moved to another key's rows
    assert mismatch(hp, [keys, moved]) is not None


def test_harness_arguments_have_the_dtypes_jax_takes():
    # JAX's gather harnesses make int64 indices, which JAX takes as int32: TF.js's and TFLite's
    # models take only int32 there, and crashed on int64 arguments before.
    name = "gather_batchdims_shape_1_2_start_indices_shape_1_2_slice_sizes_1_1_enable_xla_True"
    harness = jh.all_harnesses()[name]
    raw = harness.dyn_args_maker(np.random.RandomState(0))
    assert any(np.asarray(a).dtype == np.int64 for a in raw)
    hp = jh.build(name)
    assert [a.dtype for a in hp.args] == [aval.dtype for aval in hp.program.in_avals]


def test_tfjs_model_of_a_freed_program_is_not_given_to_a_new_one_with_its_id(tmp_path):
    # A harness worker frees each harness's program; CPython may give the next one the same id(),
    # and the TF.js runtime then ran the previous harness's model (a scatter_max of the TF.js
    # sample scattered at the other harness's constant indices). Simulated: B takes A's cache slots.
    from noxla.front.tracing import trace
    from tests.differential import Runtimes
    runtimes = Runtimes(str(tmp_path), None)
    x = np.zeros(3, np.float32)
    a, b = trace(lambda v: v + 1.0, (x,)), trace(lambda v: v * 3.0, (x,))
    path_a, lowering_a = runtimes.tfjs_model(a), runtimes.tfjs_lowering(a)
    caches = (runtimes._tfjs_models, runtimes._tfjs_lowerings, runtimes._graph_models)
    assert any((id(a), False) in cache for cache in caches[::2])  # the model is cached by one path or the other
    for cache in caches:
        if (id(a), False) in cache:
            cache[(id(b), False)] = cache.pop((id(a), False))
    assert runtimes.tfjs_lowering(b) is not lowering_a
    assert runtimes.tfjs_model(b) != path_a


# ----------------------------------------------------------------------------- the tflite target's writer

def _on_tflite(name, tmp_path):
    run, check, writer = jh.runner("tflite+fast", str(tmp_path))
    return jh.run_harness(name, "tflite+fast", run, check, writer)


def test_tflite_target_runs_the_exports_file_and_names_its_writer(tmp_path, monkeypatch):
    # The target runs what noxla.export_tflite writes: the graph's TFLite writer by default (it
    # ran TF's path alone before session 26), TF's path where the graph is turned off.
    name = _named("add", "float32")
    graph = _on_tflite(name, tmp_path)
    assert (graph.result, graph.writer) == ("matched", "graph"), graph
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")
    tf_path = _on_tflite(name, tmp_path)
    assert (tf_path.result, tf_path.writer) == ("matched", "tf"), tf_path
    assert "written by noxla's graph 1 (matched 1), by TF's path 1 (matched 1)" in jh.summary("t", [graph, tf_path])


def test_tflite_target_counts_an_export_that_needs_missing_tensorflow_apart(tmp_path, monkeypatch):
    # Without TensorFlow, an export the graph does not take raises TensorFlowMissing before writing:
    # counted as "needs_tf", not as a crash (any other error stays a crash).
    import noxla.errors
    monkeypatch.setattr(noxla.errors, "tensorflow_installed", lambda: False)
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")
    outcome = _on_tflite(_named("add", "float32"), tmp_path)
    assert (outcome.result, outcome.writer) == ("needs_tf", "tf"), outcome
    assert "TensorFlowMissing" in outcome.detail and "NOXLA_TFLITE_GRAPH=0" in outcome.detail
    assert "needed TensorFlow (not installed: TensorFlowMissing) 1" in jh.summary("t", [outcome])
