"""Run .tflite exports on LiteRT.js (Google's .tflite runtime for the web) in headless Chromium,
on its wasm (XNNPACK) and WebGPU accelerators, and read where WebGPU placed each op.

LiteRT.js loads its JSPI build, so an op WebGPU's delegate cannot run falls back to wasm instead of
failing; the delegate only says so on the console, which the page (litertjs_runner/index.html)
parses into a placement: ops on the GPU, ops on the CPU, and the ops it refused with its reason.
"""
from __future__ import annotations

import base64
import os
import shutil
from typing import Mapping

import numpy as np

from noxla import runtimes

RUNNER_DIR = os.path.join(os.path.dirname(__file__), "litertjs_runner")
BROWSER_JS = os.path.join(RUNNER_DIR, "browser.js")
PAGE = os.path.join(RUNNER_DIR, "index.html")
ACCELERATORS = ("wasm", "webgpu")
# wasm computes in float32 with XNNPACK, like LiteRT on the CPU; WebGPU's shaders (SwiftShader here,
# a GPU elsewhere) evaluate exp/log/tanh with approximate built-ins and sum in their own order.
TOLERANCE = {"wasm": 1e-5, "webgpu": 1e-4}
# LiteRT.js tensors: what a model's inputs and outputs may hold.
DTYPES = ("float32", "int32", "uint8")


class LiteRtJsUnavailable(runtimes.BrowserUnavailable):
    pass


def encode(array: np.ndarray) -> dict:
    array = np.asarray(array, order="C")
    if array.dtype.name not in DTYPES:
        raise ValueError(f"LiteRT.js has no {array.dtype} tensors (only {', '.join(DTYPES)})")
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": base64.b64encode(array.tobytes()).decode()}


def decode(tensor: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(tensor["data"]), dtype=np.dtype(tensor["dtype"])).reshape(tensor["shape"])


class LiteRtJsRunner(runtimes._LineRunner):
    """One headless Chromium (driven by puppeteer-core) that runs .tflite files on LiteRT.js."""

    label = "LiteRT.js in Chromium"
    restart_after_error = False  # the runner replaces its page after an error; the browser stays

    def __init__(self, build: str = "jspi"):
        """``build``: LiteRT.js's JSPI build (wasm and WebGPU, whose unsupported ops fall back to
        wasm) or its ``"default"`` build (wasm only; what a page without WebGPU loads, 4-10 us less
        per call)."""
        if build not in ("jspi", "default"):
            raise ValueError(f"LiteRT.js build {build!r}: 'jspi' or 'default'")
        node = shutil.which("node")
        modules = runtimes.node_modules_dir()
        chromium = runtimes.chromium_path()
        if chromium is None:
            raise LiteRtJsUnavailable("Chromium is not installed (apt-get install chromium, or set NOXLA_CHROMIUM)")
        if node is None or modules is None or not all(
                os.path.isdir(os.path.join(modules, *p)) for p in (("puppeteer-core",), ("@litertjs", "core"))):
            raise LiteRtJsUnavailable("running LiteRT.js needs Node 20 and the npm packages @litertjs/core and "
                                      f"puppeteer-core: {runtimes.npm_hint('@litertjs/core puppeteer-core')}")
        super().__init__([node, BROWSER_JS], dict(os.environ, NODE_PATH=modules, NOXLA_CHROMIUM=chromium,
                                                  NOXLA_LITERTJS_BUILD=build))
        self._accelerators: list[str] | None = None

    def accelerators(self) -> list[str]:
        """wasm, and webgpu where this Chromium has an adapter and the JSPI build is loaded."""
        if self._accelerators is None:
            reply = self.request({"probe": True})
            if "error" in reply:
                raise LiteRtJsUnavailable(f"Chromium did not start LiteRT.js: {reply['error']}")
            self._accelerators = reply["accelerators"]
        return self._accelerators

    def run_timed(self, model: str, inputs: Mapping[str, np.ndarray], accelerator: str = "wasm",
                  repeats: int = 0, signature: str | None = None) -> tuple[dict[str, np.ndarray], dict]:
        """Outputs by signature name, and what the page measured: ``ms`` (median of ``repeats``
        runs after the first, outputs read back) and ``placement`` (``gpuOps``, ``cpuOps``,
        ``unsupported``: [{op, reason}], ``fullyAccelerated``). Inputs go by signature name, to the
        default signature or to ``signature`` (a shape bucket's)."""
        reply = self.request({"model": os.path.abspath(model), "accelerator": accelerator, "repeats": repeats,
                              "inputs": {k: encode(v) for k, v in inputs.items()},
                              **({"signature": signature} if signature else {})})
        if "error" in reply:
            raise RuntimeError(f"LiteRT.js ({accelerator}) failed: {reply['error']}")
        return {k: decode(v) for k, v in reply["outputs"].items()}, {k: v for k, v in reply.items() if k != "outputs"}

    def run(self, model: str, inputs: Mapping[str, np.ndarray], accelerator: str = "wasm",
            signature: str | None = None) -> dict[str, np.ndarray]:
        return self.run_timed(model, inputs, accelerator, signature=signature)[0]
