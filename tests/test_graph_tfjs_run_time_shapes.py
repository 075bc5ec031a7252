"""Sizes known only at run time, read by the TF.js ops that take them as a tensor: ScatterNd's
``shape``, SplitV's ``size_splits`` and Conv2DBackpropInput's ``input_sizes``, computed from the
inputs' Shape (a polymorphic batch). TF.js's executors read each of these inputs when the node runs
(tfjs-converter's ``getParamValue``: the tensor's ``dataSync()``, for a ``number[]`` parameter), on
every backend, so noxla's graph writes them as it records them, as the TFLite writer does
(tests/test_graph_tflite_poly.py's programs). Each model is the default export's, run at two sizes
against JAX on Node's cpu and wasm and, with the browser tests (slow), on Chromium's webgl, wasm, cpu and webgpu."""
from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest
from jax import lax

import noxla
from noxla.front.tracing import trace
from noxla.pipeline.graph_path import ENV
from noxla.runtimes import BROWSER_TOLERANCE
from noxla.runtimes.verify import relative_error
from tests.differential import CHROMIUM_BACKENDS, chromium
from tests.test_graph_tflite_poly import PROGRAMS

# program -> (the op reading a run-time size, the index of the input holding it)
READERS = {"conv_transpose": ("Conv2DBackpropInput", 0), "split_sizes": ("SplitV", 1),
           "split_halves": ("SplitV", 1), "scatter_add": ("ScatterNd", 2)}
NODE_TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each program's default TF.js export (noxla's graph's, checked), by name."""
    root = tmp_path_factory.mktemp("run_time_shapes")
    paths = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENV, raising=False)
        for name in READERS:
            fun, shapes, args, _ = PROGRAMS[name]
            paths[name] = noxla.export_tfjs(fun, *args, path=str(root / name), polymorphic_shapes=shapes)
    return paths


def _model(path: str) -> dict:
    with open(os.path.join(path, "model.json")) as f:
        return json.load(f)


def _errors(name, path, run) -> list[float]:
    """The largest error relative to JAX's output's scale at the traced sizes and at other sizes."""
    fun, shapes, args, other = PROGRAMS[name]
    program = trace(fun, tuple(args), shapes)
    errors = []
    for inputs in (args, other):
        outs = run(path, dict(zip(program.in_names, inputs)))
        expected = jax.tree_util.tree_leaves(jax.jit(fun)(*inputs))
        actual = [outs[k] for k in program.out_names]
        assert [a.shape for a in actual] == [np.shape(e) for e in expected], name
        errors.append(max(relative_error(np.asarray(e), a) for e, a in zip(expected, actual)))
    return errors


@pytest.mark.parametrize("name", sorted(READERS))
def test_run_time_size_is_read_by_its_op_from_the_graph(name, exported):
    model = _model(exported[name])
    assert model["generatedBy"] == "noxla.graph"
    nodes = {n["name"]: n for n in model["modelTopology"]["node"]}
    op, index = READERS[name]
    (reader,) = [n for n in nodes.values() if n["op"] == op]
    size = nodes[reader["input"][index].partition(":")[0]]
    assert size["op"] != "Const", size  # computed at run time, from the input's Shape
    assert any(d["size"] == "-1" for spec in model["signature"]["inputs"].values()
               for d in spec["tensorShape"]["dim"])


@pytest.mark.parametrize("backend", ["cpu", "wasm"])
@pytest.mark.parametrize("name", sorted(READERS))
def test_run_time_size_matches_jax_on_node(name, backend, exported, tfjs_runner):
    errors = _errors(name, exported[name], lambda path, inputs: tfjs_runner.run(path, inputs, backend))
    assert max(errors) <= NODE_TOLERANCE, (name, backend, errors)


@pytest.mark.slow
@pytest.mark.parametrize("backend", CHROMIUM_BACKENDS)
def test_run_time_sizes_match_jax_in_chromium(backend, exported, browser_runner):
    browser = chromium(browser_runner, backend)
    bad = {}
    for name in sorted(READERS):
        errors = _errors(name, exported[name], lambda path, inputs: browser.run(path, inputs, backend))
        if not max(errors) <= BROWSER_TOLERANCE[backend]:
            bad[name] = errors
    assert not bad, (backend, bad)


@pytest.fixture(scope="module")
def polymorphic_rule_models(tmp_path_factory):
    """Each polymorphic rule case the TF.js check accepts and the graph writes: (case, program, its
    inputs, the model's path)."""
    from limitations.engine import check_jaxpr
    from lowering_rules.core.vocabulary import Target
    from noxla.graph.dtypes import Uncovered
    from noxla.pipeline.graph_path import write_program_tfjs
    from tests.differential import default_mode_inputs
    from tests.test_graph import POLY_CASES
    root, models = tmp_path_factory.mktemp("polymorphic_rule_cases"), []
    for i, case in enumerate(POLY_CASES):
        program, args, _ = default_mode_inputs(case)
        if not check_jaxpr(program.closed_jaxpr, Target.TFJS).ok:
            continue
        try:
            write_program_tfjs(program, str(root / str(i)))
        except Uncovered:
            continue   # TF's path writes it (test_graph.py's polymorphic tests list these)
        models.append((case, program, args, str(root / str(i))))
    return models


# Runs known to fail, by (backend, case): none since session 29. The four listed before failed on TF's
# path's model too: WebGL and WebGPU reduced an empty input's run-time infinity as rows of 0 / 0
# elements (now a constant: noxla.graph.structural.reduce); WebGPU computed run-time pad amounts (a
# FloorMod, an AddN) on the GPU and read them back as 0 (noxla.writers.tfjs.run_time_sizes).
KNOWN_WRONG: dict[tuple[str, str], str] = {}


@pytest.mark.slow
@pytest.mark.parametrize("backend", CHROMIUM_BACKENDS)
def test_polymorphic_rule_cases_from_the_graph_match_jax_in_chromium(backend, polymorphic_rule_models,
                                                                     browser_runner):
    """Every polymorphic rule case the graph writes for TF.js (its run-time shape arithmetic: Shape,
    StridedSlice, Pack, Reshape, Fill, BroadcastTo, Range, pads and slices at run-time sizes, and
    the three ops above), at two sizes, on Chromium's backends (tests/test_graph.py: Node's); those
    in KNOWN_WRONG fail, and only those."""
    from noxla.runtimes.verify import jax_outputs
    from tests.differential import assert_matches
    from tests.test_graph import SIZE_STEPS, _inputs_at
    browser = chromium(browser_runner, backend)
    assert len(polymorphic_rule_models) >= 80, len(polymorphic_rule_models)
    bad, failed = [], set()
    for case, program, args, path in polymorphic_rule_models:
        for step in SIZE_STEPS[:2]:
            sized = _inputs_at(program, args, step)
            try:
                outs = browser.run(path, dict(zip(program.in_names, sized)), backend)
                assert_matches(jax_outputs(case.fun, sized), [outs[n] for n in program.out_names],
                               program.out_names, case.atol, case.rtol, where=f"{case.id} [sizes +{step}]",
                               floor=BROWSER_TOLERANCE[backend])
            except (AssertionError, RuntimeError) as e:
                failed.add(case.id)
                if (backend, case.id) not in KNOWN_WRONG:
                    bad.append(f"{case.id} +{step}: {str(e)[:300]}")
    assert not bad, f"{len(bad)} of {2 * len(polymorphic_rule_models)} runs on {backend}:\n" + "\n".join(bad)
    known = {case_id for b, case_id in KNOWN_WRONG if b == backend}
    assert known <= failed, f"now right on {backend} (remove from KNOWN_WRONG): {sorted(known - failed)}"


def test_an_integer_add_trees_constants_are_summed_as_on_tf_path(tmp_path, tfjs_runner):
    """``(b + 2) - 1`` (a slice to a run-time stop) is ``b + 1``, one AddV2, as TF's path's constant
    folding writes it (an AddN of the size and two constants ran on WebGPU's GPU and read back 0);
    the sum wraps as the kernels' (and JAX's) int32 adds do."""
    from tools.op_census import tfjs_ops
    path = noxla.export_tfjs(lambda x: lax.slice(x, (1, 0), (x.shape[0] - 1, 4)), np.zeros((5, 4), np.float32),
                             path=str(tmp_path / "slice"), polymorphic_shapes=["(b + 2, 4)"])
    assert tfjs_ops(path)["AddV2"] == 1 and "AddN" not in tfjs_ops(path), tfjs_ops(path)
    wrapping = lambda i: i * 3 + np.int32(2 ** 31 - 1) + np.int32(5)  # noqa: E731
    i = np.array([-7, 0, 3, 2 ** 30], np.int32)
    path = noxla.export_tfjs(wrapping, i, path=str(tmp_path / "wrapping"))
    assert tfjs_ops(path)["AddV2"] == 1 and "AddN" not in tfjs_ops(path), tfjs_ops(path)
    for backend in ("cpu", "wasm"):
        (out,) = tfjs_runner.run(path, {"i": i}, backend).values()
        np.testing.assert_array_equal(out, np.asarray(jax.jit(wrapping)(i)))


def _padded_to_multiples(x):
    """pad:symbolic_amounts' program: amounts ``b % 3`` and ``(-b) % 4``, and a crop of the padded axis."""
    return lax.pad(x, 1.0, [(x.shape[1] % 3, 1, 0), (-1, (-x.shape[1]) % 4, 0)])


@pytest.mark.parametrize("backend", ["cpu", "wasm"])
def test_run_time_pad_amounts_are_computed_without_floor_mod_or_add_n(backend, tmp_path, tfjs_runner):
    """Pad amounts that are a polymorphic size's FloorMod by a constant, summed with it: FloorDiv, Mul
    and Sub, and AddV2s, which TF.js's WebGPU computes where the sizes are (its FloorMod and AddN ran
    on the GPU and the pad read 0 back: the Chromium test's pad:symbolic_amounts and
    conv_general_dilated:symbolic_zero_pad); right at sizes on both sides of each multiple."""
    from tools.op_census import tfjs_ops
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    path = noxla.export_tfjs(_padded_to_multiples, x, path=str(tmp_path / "pad"), polymorphic_shapes=["(2, b)"])
    assert not {"FloorMod", "AddN"} & set(tfjs_ops(path)) and "FloorDiv" in tfjs_ops(path), tfjs_ops(path)
    for size in (5, 6, 7, 8, 9, 12, 13):
        x = np.arange(2 * size, dtype=np.float32).reshape(2, size) - 3
        (out,) = tfjs_runner.run(path, {"x": x}, backend).values()
        np.testing.assert_array_equal(out, np.asarray(jax.jit(_padded_to_multiples)(x)))


def test_only_a_run_time_sizes_floor_mod_and_add_n_are_rewritten():
    """The rewrites above are for sizes only: a FloorMod or AddN of the program's data stays one
    (TF.js's wasm divides int32 through float32, inexact past 2**24)."""
    from noxla.graph import api, ops
    from noxla.graph.core import Graph
    from noxla.writers.tfjs.arithmetic import add_trees_as_add_n
    from noxla.writers.tfjs.run_time_sizes import sizes_on_the_cpu
    tf = api.recorder()
    with ops.recording(Graph()) as graph:
        x, y = (graph.add("Placeholder", [], {"dtype": ops.type_attr(tf.int32)}, [(tf.int32, shape)],
                          name=name).output(0) for name, shape in (("x", (None, 5)), ("y", (4,))))
        size, data = (-tf.shape(x)[0]) % 8, y % 8
        sizes, datas = size + tf.shape(x)[0] + 3, y + data + y
    add_trees_as_add_n(graph, set())
    assert (sizes.node.op, datas.node.op) == ("AddN", "AddN"), graph.nodes
    sizes_on_the_cpu(graph)
    assert [t.node.op for t in (size, data, sizes, datas)] == ["Sub", "FloorMod", "AddV2", "AddN"], graph.nodes
    assert [n.op for n in graph.nodes].count("FloorDiv") == 1, graph.nodes
    assert sizes.node.inputs[0].node.op == "AddV2" and len(sizes.node.inputs) == 2, sizes.node.inputs


def test_a_reduction_over_an_axis_of_size_zero_is_its_identity(tmp_path, tfjs_runner):
    """A sum over an axis of static size 0 beside a polymorphic one is 0 at every size: the graph
    records a constant (computed, TF.js's WebGL and WebGPU reduce it as rows of 0 / 0 elements: the
    Chromium test's reduce_max:only_input_empty_symbolic, whose run-time infinity sums the empty
    input). An unknown output shape is left to the kernel."""
    from noxla.graph import api, ops
    from noxla.graph.core import Graph
    from tools.op_census import tfjs_ops
    tf = api.recorder()
    with ops.recording(Graph()) as graph:
        x = graph.add("Placeholder", [], {"dtype": ops.type_attr(tf.float32)}, [(tf.float32, (0, None, 3))],
                      name="x").output(0)
        total, product, anything = tf.reduce_sum(x, axis=[0, 1]), tf.reduce_prod(x), tf.reduce_any(x[:, :, 0] > 0)
        kept = tf.reduce_sum(x, axis=0)
    assert [t.node.op for t in (total, product, anything, kept)] == ["Const", "Const", "Const", "Sum"], graph.nodes
    np.testing.assert_array_equal(total.constant, np.zeros(3, np.float32))
    assert product.constant == 1 and anything.constant == np.False_
    path = noxla.export_tfjs(lambda x: lax.reduce_max(x, (0, 1)), np.zeros((0, 3), np.float32),
                             path=str(tmp_path / "max"), polymorphic_shapes=["(0, b)"])
    assert not tfjs_ops(path), tfjs_ops(path)
    for backend in ("cpu", "wasm"):
        (out,) = tfjs_runner.run(path, {"x": np.zeros((0, 4), np.float32)}, backend).values()
        assert out == -np.inf, (backend, out)
