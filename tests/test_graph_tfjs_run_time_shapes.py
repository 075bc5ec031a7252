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
