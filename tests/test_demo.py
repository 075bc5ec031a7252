"""The demo page written beside every TF.js export, run as a user runs it: in headless Chromium.

``export_tfjs`` writes index.html and demo_data.json (example inputs, JAX's outputs on them); the
page loads the model, runs it on each backend and reports its error against JAX. The WebGL run's
screenshot is what a user sees. Set NOXLA_UPDATE_SCREENSHOT=1 to refresh the committed copy,
tools/demo_screenshot.png, from this test.
"""
from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

import noxla
from noxla import runtimes
from noxla.runtimes.demo import DEMO_DATA, verify_in_browser
from tests import zoo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED_SCREENSHOT = os.path.join(ROOT, "tools", "demo_screenshot.png")


def _png_size(path: str) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def test_tfjs_export_writes_the_demo_page(tmp_path):
    model = zoo.build()["cnn"]
    path = noxla.export_tfjs(model.fun, *model.inputs(1), path=str(tmp_path / "cnn"))
    assert os.path.exists(os.path.join(path, "index.html"))
    with open(os.path.join(path, DEMO_DATA)) as f:
        data = json.load(f)
    assert set(data["inputs"]) and set(data["expected"]) and data["tolerance"]["webgl"] > 0


@pytest.mark.slow
def test_demo_page_matches_jax_in_chromium(tmp_path):
    try:
        runtimes.BrowserRunner().close()
    except runtimes.BrowserUnavailable as e:  # the README's test command installs Chromium
        pytest.fail(f"Chromium is required for the browser tests: {e}")
    model = zoo.build()["cnn"]
    path = noxla.export_tfjs(model.fun, *model.inputs(1), path=str(tmp_path / "cnn"))
    screenshot = str(tmp_path / "demo.png")
    results = verify_in_browser(path, screenshot=screenshot)
    assert isinstance(results, dict), results
    assert {"webgl", "wasm", "cpu"} <= set(results), results
    for backend in ("webgl", "wasm", "cpu"):
        result = results[backend]
        assert "error" not in result, (backend, result)
        assert result["max_error"] <= runtimes.BROWSER_TOLERANCE[backend], (backend, result)
        assert result["ms"] > 0
    width, height = _png_size(screenshot)
    assert width >= 200 and height >= 100
    if os.environ.get("NOXLA_UPDATE_SCREENSHOT"):
        shutil.copyfile(screenshot, COMMITTED_SCREENSHOT)


@pytest.mark.slow
def test_demo_page_reports_a_webgl_rejection_instead_of_a_number(tmp_path):
    """A model the check rejects for TF.js on WebGL (a shift of int32 words) still exports for TF.js; its
    page and --verify-browser say why WebGL does not run it, and wasm and cpu match JAX."""
    from jax import lax

    from noxla.cli.report import browser_errors

    def scramble(x):
        return lax.shift_left(x, np.int32(21)) + 1

    path = noxla.export_tfjs(scramble, np.arange(-3, 3, dtype=np.int32), path=str(tmp_path / "words"))
    with open(os.path.join(path, DEMO_DATA)) as f:
        rejected = json.load(f)["rejected"]
    assert set(rejected) == {"webgl"} and "shift_left" in rejected["webgl"], rejected
    results = verify_in_browser(path)
    assert isinstance(results, dict), results
    assert results["webgl"] == {"rejected": rejected["webgl"]}, results
    assert results["wasm"]["max_error"] == 0 and results["cpu"]["max_error"] == 0, results
    row = browser_errors(results)["chromium_webgl"]
    assert row.startswith("not run, rejected up front: shift_left: dtype=int32"), row


@pytest.mark.slow
def test_demo_page_loads_a_model_of_more_weight_files_than_connections(tmp_path):
    """Seven 4 MB weight files (the default shard size), served over HTTP/1.1: TF.js's own loader
    awaits every response before reading a body, and Chromium stops reading the six connections it
    opens per host, so the page stalled at "load model.json" (ViT-B/16's 83 files, ResNet50's) until it
    read each body as it arrived (fetchWhole in tfjs_runner/index.html)."""
    weights = np.random.default_rng(0).standard_normal((7 << 14, 64)).astype(np.float32)  # 28 MiB

    def project(x):
        return x @ weights

    path = noxla.export_tfjs(project, np.ones((1, weights.shape[0]), np.float32), path=str(tmp_path / "wide"))
    assert sum(name.endswith(".bin") for name in os.listdir(path)) == 7
    runner = runtimes.BrowserRunner()
    try:
        reply = runner.request({"demo": os.path.abspath(path), "backend": "wasm"})
    finally:
        runner.close()
    assert "error" not in reply, reply
    assert reply["maxError"] is not None and reply["maxError"] <= reply["tolerance"], reply


def test_committed_screenshot_is_a_png():
    width, height = _png_size(COMMITTED_SCREENSHOT)
    assert width >= 200 and height >= 100
