"""Every fused and layout form noxla writes (tests/emitted_forms.py), on every backend, against JAX.

A backend that implements a form can still compute it wrong: TF.js 4.22's wasm _FusedMatMul with
transpose_b and a bias did (noxla/writers/tfjs/fusions.py). Each case first asserts that its export holds
the forms it is there for, then runs it on TF.js (Node cpu and wasm; Chromium webgl, wasm, cpu,
webgpu, one page for all) and its .tflite on LiteRT and LiteRT.js (wasm, WebGPU). A sample runs in
the fast loop (Node and LiteRT only); the sweep is slow. NOXLA_FORMS_REPORT=path writes each
backend's error per case as JSON (the table in docs/testing.md).
"""
from __future__ import annotations

import contextlib
import json
import os

import pytest

import noxla
import noxla.api as noxla_api
from noxla import runtimes
from noxla.front.tracing import trace
from noxla.runtimes.litertjs import TOLERANCE as LITERTJS_TOLERANCE
from noxla.runtimes.verify import jax_outputs, relative_error
from tests import emitted_forms as ef

CASES = {c.name: c for c in ef.all_cases()}
TFJS_BACKENDS = ("node_cpu", "node_wasm", "chromium_webgl", "chromium_wasm", "chromium_cpu", "chromium_webgpu")
# *_tfpath: the .tflite of the TF path (NOXLA_TFLITE_GRAPH=0), not the graph tflite writer's of export_tflite.
TFLITE_RUNTIMES = ("litert", "litert_tfpath", "litertjs_wasm", "litertjs_wasm_tfpath", "litertjs_webgpu")
TOLERANCE = {"node_cpu": 1e-5, "node_wasm": 1e-5, "litert": 1e-5, "litert_tfpath": 1e-5,
             "litertjs_wasm_tfpath": LITERTJS_TOLERANCE["wasm"],
             **{f"chromium_{b}": t for b, t in runtimes.BROWSER_TOLERANCE.items()},
             **{f"litertjs_{a}": t for a, t in LITERTJS_TOLERANCE.items()}}
_REPORT: dict = {}


@contextlib.contextmanager
def _tf_path_tflite():
    """NOXLA_TFLITE_GRAPH=0 while it lasts: the .tflite from TF's path (the TF.js model still from
    noxla's graph, NOXLA_TFJS_GRAPH)."""
    before = os.environ.get("NOXLA_TFLITE_GRAPH")
    os.environ["NOXLA_TFLITE_GRAPH"] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["NOXLA_TFLITE_GRAPH"]
        else:
            os.environ["NOXLA_TFLITE_GRAPH"] = before


class Exported:
    """One case's exports and JAX's outputs: TF.js with the TF path's .tflite (one ``noxla.api.export``),
    export_tflite's .tflite (the graph tflite writer's where it covers the program), and, when asked, the
    .tflite for LiteRT.js WebGPU."""

    def __init__(self, case: ef.Case, root):
        self.case = case
        self.named = dict(zip(trace(case.fun, case.args).in_names, case.args))
        self.expected = jax_outputs(case.fun, case.args)
        assert len(self.expected) == 1, case.name
        with _tf_path_tflite():
            both = noxla_api.export(case.fun, case.args, tfjs=str(root / f"{case.name}_js"),
                                    tflite=str(root / f"{case.name}_tf.tflite"))
        self.tfjs, self.tflite_tf = both.written["tfjs"], both.written["tflite"]
        self.tflite = noxla.export_tflite(case.fun, *case.args, path=str(root / f"{case.name}.tflite"))
        self._webgpu = None
        self._root = root

    def tflite_webgpu(self) -> str:
        if self._webgpu is None:
            self._webgpu = noxla.export_tflite(self.case.fun, *self.case.args, target="litertjs-webgpu",
                                               path=str(self._root / f"{self.case.name}_webgpu.tflite"))
        return self._webgpu

    def missing_forms(self) -> list[str]:
        """The forms the case is for that are not in what was written (without them it proves nothing)."""
        problems = []
        for kind, wanted, written in (("model.json", self.case.tfjs, ef.tfjs_forms(self.tfjs)),
                                      (".tflite", self.case.tflite, ef.tflite_forms(self.tflite)),
                                      ("TF path .tflite", self.case.tflite_tf_forms, ef.tflite_forms(self.tflite_tf))):
            missing = [f for f in wanted if f not in written]
            if missing:
                problems.append(f"{self.case.name}: {kind} lacks {missing}; it has {sorted(written)}")
        return problems

    def error(self, outputs: dict) -> float:
        (actual,) = outputs.values()
        assert actual.shape == self.expected[0].shape, (self.case.name, actual.shape)
        return relative_error(self.expected[0], actual)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms")
    cache: dict[str, Exported] = {}

    def get(name: str) -> Exported:
        if name not in cache:
            cache[name] = Exported(CASES.get(name) or {c.name: c for c in ef.fast_sample()}[name], root)
        return cache[name]
    yield get
    path = os.environ.get("NOXLA_FORMS_REPORT")
    if path and _REPORT:
        old = json.load(open(path)) if os.path.exists(path) else {}
        for backend, errors in _REPORT.items():
            old.setdefault(backend, {}).update(errors)
        with open(path, "w") as f:
            json.dump(old, f, indent=1, sort_keys=True)


def _run(exp: Exported, backend: str, tfjs_runner, browser, litertjs) -> dict:
    place, _, name = backend.removesuffix("_tfpath").partition("_")
    tflite = exp.tflite_tf if backend.endswith("_tfpath") else exp.tflite_webgpu() if name == "webgpu" else exp.tflite
    if place == "node":
        return tfjs_runner.run(exp.tfjs, exp.named, name)
    if place == "chromium":
        return browser.run(exp.tfjs, exp.named, name)
    if place == "litert":
        return runtimes.run_tflite(tflite, exp.named)
    return litertjs.run(tflite, exp.named, name)


def _sweep(names, backend, exported, tfjs_runner, browser=None, litertjs=None) -> list[str]:
    """Every case on one backend: the cases whose forms were not written or that are off JAX by more
    than the tolerance."""
    bad = []
    for name in names:
        exp = exported(name)
        bad += exp.missing_forms()
        try:
            error = exp.error(_run(exp, backend, tfjs_runner, browser, litertjs))
        except RuntimeError as e:
            error = str(e)
        _REPORT.setdefault(backend, {})[name] = error
        if isinstance(error, str) or not error <= TOLERANCE[backend]:
            bad.append(f"{name} [{backend}]: {error}")
    return bad


def _assert_none(bad: list[str], cases: int) -> None:
    assert not bad, f"{len(bad)} failures in {cases} cases: forms not written or off JAX:\n  " + "\n  ".join(bad)


def test_fast_sample_matches_jax_on_node_and_litert(exported, tfjs_runner):
    """The wasm regression's shapes, a fused dense and a fused convolution, without a browser."""
    names = [c.name for c in ef.fast_sample()]
    _assert_none([problem for backend in ("node_cpu", "node_wasm", "litert", "litert_tfpath")
                  for problem in _sweep(names, backend, exported, tfjs_runner)], len(names))


def test_webgpu_export_crops_an_uneven_same_transposed_convolution_itself(tmp_path):
    """LiteRT.js's WebGPU delegate crops SAME's uneven transposed-convolution padding from the wrong
    side (the sweep: off by 1.2 relative): its export writes VALID and a crop; the default keeps SAME."""
    case = CASES["transpose_conv_k3_SAME_bias"]
    webgpu = noxla.export_tflite(case.fun, *case.args, target="litertjs-webgpu", path=str(tmp_path / "g.tflite"))
    default = noxla.export_tflite(case.fun, *case.args, path=str(tmp_path / "d.tflite"))
    assert "TRANSPOSE_CONV(VALID,bias)" in ef.tflite_forms(webgpu), ef.tflite_forms(webgpu)
    assert "TRANSPOSE_CONV(SAME,bias)" in ef.tflite_forms(default), ef.tflite_forms(default)
    even = CASES["transpose_conv_k4_SAME_bias"]  # an even crop stays SAME for WebGPU too
    webgpu = noxla.export_tflite(even.fun, *even.args, target="litertjs-webgpu", path=str(tmp_path / "e.tflite"))
    assert "TRANSPOSE_CONV(SAME,bias)" in ef.tflite_forms(webgpu), ef.tflite_forms(webgpu)


@pytest.mark.slow
@pytest.mark.parametrize("backend", TFJS_BACKENDS + TFLITE_RUNTIMES)
def test_every_form_matches_jax(backend, exported, tfjs_runner, browser_runner):
    browser = litertjs = None
    if backend.startswith("chromium"):
        browser = browser_runner()
        assert backend.partition("_")[2] in browser.backends(), browser.backends()
    if backend.startswith("litertjs"):
        from tests.litertjs_harness import runner
        litertjs = runner()
    _assert_none(_sweep(sorted(CASES), backend, exported, tfjs_runner, browser, litertjs), len(CASES))


@pytest.mark.slow
def test_tfjs_wasm_fused_matmul_is_still_wrong_only_when_transposed():
    """Why noxla fuses no transposed MatMul (noxla/writers/tfjs/fusions.py): TF.js's wasm fused matMul, kernel
    by kernel against its cpu one, is wrong with transposeA or transposeB and a bias, and exact
    untransposed. When a TF.js upgrade fixes it this fails: the fusion may then come back."""
    import subprocess
    script = os.path.join(os.path.dirname(__file__), "tfjs_fused_matmul_probe.js")
    env = dict(os.environ, NODE_PATH=runtimes.node_modules_dir())
    lines = subprocess.run(["node", script], env=env, capture_output=True, text=True, check=True,
                           timeout=120).stdout.splitlines()
    cases = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(cases) == 5 * 16, lines
    untransposed = [c for c in cases if not c["ta"] and not c["tb"]]
    assert all(c["diff"] <= 1e-4 for c in untransposed), [c for c in untransposed if c["diff"] > 1e-4]
    transposed_bias = [c for c in cases if (c["ta"] or c["tb"]) and c["bias"]]
    assert all(c["diff"] > 0.1 for c in transposed_bias), [c for c in transposed_bias if c["diff"] <= 0.1]
