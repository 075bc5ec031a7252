"""Run exported models in their real runtimes: LiteRT for .tflite, TF.js in Node and in headless
Chromium for graph models.

Used by the CLI's verify step and by the differential tests.
"""
from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import subprocess
import threading
import warnings
from typing import Mapping, Sequence

import numpy as np

RUNNER_JS = os.path.join(os.path.dirname(__file__), "tfjs_runner", "runner.js")
BROWSER_JS = os.path.join(os.path.dirname(__file__), "tfjs_runner", "browser.js")
DEMO_PAGE = os.path.join(os.path.dirname(__file__), "tfjs_runner", "index.html")


def run_tflite(model: bytes | str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the model's default signature; input shapes may differ from the exported ones.

    LiteRT refuses to copy zero-size tensors in or out ("Invalid tensor size"), so empty inputs
    are only resized and empty outputs are rebuilt from their shapes.
    """
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_content=model) if isinstance(model, bytes) else Interpreter(model_path=model)
    runner = interpreter.get_signature_runner()
    input_index = {name: d["index"] for name, d in runner.get_input_details().items()}
    output_index = {name: d["index"] for name, d in runner.get_output_details().items()}
    del runner  # it holds the interpreter's internals, which resizing refuses while referenced
    inputs = {name: np.asarray(value) for name, value in inputs.items()}
    for name, value in inputs.items():
        interpreter.resize_tensor_input(input_index[name], value.shape, strict=False)
    interpreter.allocate_tensors()
    for name, value in inputs.items():
        if value.size:
            interpreter.set_tensor(input_index[name], value)
    interpreter.invoke()
    by_index = {d["index"]: d for d in interpreter.get_output_details()}
    results = {}
    for name, index in output_index.items():
        detail = by_index[index]
        results[name] = (np.zeros(detail["shape"], detail["dtype"]) if 0 in detail["shape"]
                         else np.array(interpreter.get_tensor(index)))
    return results


def tflite_op_names(model: bytes | str) -> list[str]:
    """The operator codes a .tflite model uses, one per operator in its main subgraph(s)."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_content=model) if isinstance(model, bytes) else Interpreter(model_path=model)
    return [op["op_name"] for op in interpreter._get_ops_details()]


def _encode(array: np.ndarray) -> dict:
    array = np.asarray(array, order="C")  # not ascontiguousarray: it turns 0-d into 1-d
    if array.dtype == np.uint32:  # TF.js has no uint32: the model takes the int32 with the same bits
        array = array.view(np.int32)
    dtype = {"float32": "float32", "int32": "int32", "bool": "bool"}.get(array.dtype.name)
    if dtype is None:
        raise ValueError(f"TF.js has no {array.dtype} tensors")
    data = array.astype(np.uint8) if dtype == "bool" else array
    return {"dtype": dtype, "shape": list(array.shape), "data": base64.b64encode(data.tobytes()).decode()}


def _decode(tensor: dict) -> np.ndarray:
    raw = base64.b64decode(tensor["data"])
    dtype = {"float32": np.float32, "int32": np.int32, "bool": np.uint8, "complex64": np.complex64}[tensor["dtype"]]
    array = np.frombuffer(raw, dtype=dtype).reshape(tensor["shape"])
    return array.astype(bool) if tensor["dtype"] == "bool" else array


def npm_hint(packages: str) -> str:
    """How to get the npm ``packages`` where ``node_modules_dir`` finds them, from a checkout or a wheel."""
    return (f"run `npm install {packages}` in the folder you run noxla from (`npm ci` in a noxla checkout), "
            "or set NOXLA_NODE_MODULES to a node_modules folder that has them")


def node_modules_dir() -> str | None:
    """Where @tensorflow/tfjs is installed: NOXLA_NODE_MODULES, or a node_modules above this package."""
    candidates = [os.environ.get("NOXLA_NODE_MODULES", "")]
    here = os.path.dirname(os.path.abspath(__file__))
    while True:
        candidates.append(os.path.join(here, "node_modules"))
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    candidates.append(os.path.join(os.getcwd(), "node_modules"))
    for c in candidates:
        if c and os.path.isdir(os.path.join(c, "@tensorflow", "tfjs")):
            return c
    return None


class TfjsUnavailable(RuntimeError):
    pass


class BrowserUnavailable(TfjsUnavailable):
    pass


class _LineRunner:
    """One long-lived Node process that answers JSON requests, one per line (tfjs_runner/*.js)."""

    restart_after_error = True
    label = "TF.js"

    def __init__(self, command: list[str], env: dict):
        self._command = command
        self._env = env
        self._lock = threading.Lock()
        self._start()
        atexit.register(self.close)

    def _start(self) -> None:
        self._proc = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=self._env, text=True, bufsize=1)

    def request(self, request: dict) -> dict:
        with self._lock:
            if self._proc.poll() is not None:
                self._start()
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
            reply = json.loads(line) if line else {"error": f"the {self.label} runner process died"}
            if "recovered" in reply:  # the browser hung once and was replaced (tfjs_runner/chromium.js)
                warnings.warn(f"{self.label}: {reply['recovered']}", RuntimeWarning, stacklevel=3)
            if "error" in reply and (self.restart_after_error or self._proc.poll() is not None):
                self.close()
                self._start()
        return reply

    def run_timed(self, model_dir: str, inputs: Mapping[str, np.ndarray], backend: str = "cpu",
                  repeats: int = 0, outputs: Sequence[str] | None = None) -> tuple[dict[str, np.ndarray], dict]:
        """The outputs (``outputs``: those keys only, computed from ``inputs`` alone; by default all),
        and what the runner measured (``ms``: median latency of ``repeats`` runs)."""
        request = {"model": os.path.abspath(model_dir), "backend": backend, "repeats": repeats,
                   "inputs": {k: _encode(np.asarray(v)) for k, v in inputs.items()}}
        if outputs is not None:
            request["outputs"] = list(outputs)
        reply = self.request(request)
        if "error" in reply:
            raise RuntimeError(f"{self.label} ({backend}) failed: {reply['error']}")
        return {k: _decode(v) for k, v in reply["outputs"].items()}, {k: v for k, v in reply.items() if k != "outputs"}

    def run(self, model_dir: str, inputs: Mapping[str, np.ndarray], backend: str = "cpu",
            outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        return self.run_timed(model_dir, inputs, backend, outputs=outputs)[0]

    def time(self, model_dir: str, inputs: Mapping[str, np.ndarray], backend: str, repeats: int) -> list[float]:
        """Milliseconds per run (outputs read back) of ``repeats`` runs after a first one, timed by the runner."""
        return self.run_timed(model_dir, inputs, backend, repeats)[1]["times"]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()


class TfjsRunner(_LineRunner):
    """One Node process that loads graph models from disk and runs them on the cpu or wasm backend."""

    def __init__(self):
        node = shutil.which("node")
        modules = node_modules_dir()
        if node is None or modules is None:
            raise TfjsUnavailable(
                "running TF.js needs Node 20 and the npm packages @tensorflow/tfjs and "
                f"@tensorflow/tfjs-backend-wasm: {npm_hint('@tensorflow/tfjs @tensorflow/tfjs-backend-wasm')}")
        # A failed kernel can leave the wasm backend corrupted: later runs get a fresh process.
        super().__init__([node, RUNNER_JS], dict(os.environ, NODE_PATH=modules))


def chromium_path() -> str | None:
    """The Chromium to drive: NOXLA_CHROMIUM, or Debian's `chromium` (or another Chrome) on PATH."""
    explicit = os.environ.get("NOXLA_CHROMIUM")
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


# What each browser backend is compared with JAX to, relative to the output's scale.
# cpu and wasm compute in float32 like TF's CPU kernels. WebGL stores tensors in float32 textures
# (WEBGL_RENDER_FLOAT32_ENABLED, true with SwiftShader and any GPU with EXT_color_buffer_float)
# but evaluates exp/log/tanh/pow with the GPU's approximate built-ins and sums in shader order;
# WebGPU is alike.
BROWSER_TOLERANCE = {"cpu": 1e-5, "wasm": 1e-5, "webgl": 1e-4, "webgpu": 1e-4}


class BrowserRunner(_LineRunner):
    """One headless Chromium (driven from Node by puppeteer-core) that runs graph models on
    webgl, wasm, cpu (and webgpu when this Chromium offers it); see tfjs_runner/browser.js."""

    label = "Chromium"
    restart_after_error = False  # the runner reloads its page after an error; the browser stays

    def __init__(self):
        node = shutil.which("node")
        modules = node_modules_dir()
        chromium = chromium_path()
        if chromium is None:
            raise BrowserUnavailable("Chromium is not installed (apt-get install chromium, or set NOXLA_CHROMIUM)")
        if node is None or modules is None or not os.path.isdir(os.path.join(modules, "puppeteer-core")):
            raise BrowserUnavailable("driving Chromium needs Node 20 and the npm packages puppeteer-core and "
                                     f"@tensorflow/tfjs: {npm_hint('puppeteer-core @tensorflow/tfjs')}")
        super().__init__([node, BROWSER_JS], dict(os.environ, NODE_PATH=modules, NOXLA_CHROMIUM=chromium))
        self._backends: list[str] | None = None

    def backends(self) -> list[str]:
        """The TF.js backends this Chromium offers (webgpu only where it has an adapter)."""
        if self._backends is None:
            reply = self.request({"probe": True})
            if "error" in reply:
                raise BrowserUnavailable(f"Chromium did not start: {reply['error']}")
            self._backends = reply["backends"]
        return self._backends
