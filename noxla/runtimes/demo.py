"""The demo page beside every TF.js export, `noxla serve`, and verifying an export in Chromium.

``write_demo`` puts ``index.html`` (noxla/runtimes/tfjs_runner/index.html, the page the tests drive too) and
``demo_data.json`` (example inputs and JAX's outputs on them, base64 little-endian) next to
``model.json``. The page loads TF.js from ``tfjs/`` beside itself, which ``noxla serve`` maps to the
pinned npm packages, and otherwise from cdn.jsdelivr.net at the converter's version (4.22.0).
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import socketserver
from collections.abc import Callable, Sequence
from typing import ClassVar

import jax
import numpy as np

from noxla import runtimes
from noxla.runtimes.verify import jax_outputs

DEMO_DATA = "demo_data.json"


def example_inputs(example_args: Sequence, seed: int = 0) -> list[np.ndarray]:
    """Concrete inputs for the page: the example arrays themselves, or random ones of the shapes
    and dtypes of ``jax.ShapeDtypeStruct`` examples."""
    rng = np.random.default_rng(seed)
    out = []
    for arg in example_args:
        if isinstance(arg, np.ndarray) or np.isscalar(arg) or hasattr(arg, "__array__"):
            out.append(np.asarray(arg))
            continue
        # A symbolic dimension (a polymorphic batch) takes size 1 on the page.
        shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
        dtype = np.dtype(arg.dtype)
        if dtype == np.bool_:
            out.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            out.append(rng.integers(0, 10, size=shape).astype(dtype))
        else:
            out.append(rng.standard_normal(shape).astype(dtype))
    return out


def write_demo(model_dir: str, fun: Callable, program, example_args: Sequence, title: str = "") -> None:
    """index.html and demo_data.json beside model.json. The data is left out (the page then says
    so) when an input or output has a dtype TF.js tensors cannot hold."""
    shutil.copyfile(runtimes.DEMO_PAGE, os.path.join(model_dir, "index.html"))
    # The program's inputs are the leaves of the example arguments (dicts, lists, ... of arrays).
    leaves, tree = jax.tree_util.tree_flatten(list(example_args))
    inputs = example_inputs(leaves)
    args = jax.tree_util.tree_unflatten(tree, inputs)
    try:
        data = {
            "title": title or f"noxla: {_model_name(fun, model_dir)}",
            "inputs": {n: runtimes._encode(a) for n, a in zip(program.in_names, inputs)},
            "expected": {n: runtimes._encode(a) for n, a in zip(program.out_names, jax_outputs(fun, args))},
            "tolerance": runtimes.BROWSER_TOLERANCE,
            "rejected": backend_rejections(program),
        }
    except ValueError:  # e.g. a float16 or int64 input: TF.js has no such tensors
        return
    with open(os.path.join(model_dir, DEMO_DATA), "w") as f:
        json.dump(data, f)


def backend_rejections(program) -> dict[str, str]:
    """Per TF.js backend that noxla's check rejects the program for (WebGL: whole 32-bit words; WebGPU:
    what its kernels compute wrong), the report saying why; the page shows it instead of running
    there, and --verify-browser reports it."""
    from limitations.engine import check_jaxpr
    from lowering_rules.core.vocabulary import Target

    rejected = {}
    for backend, target in (("webgl", Target.TFJS_WEBGL), ("webgpu", Target.TFJS_WEBGPU)):
        report = check_jaxpr(program.closed_jaxpr, target)  # TF.js itself passed the export's check
        if not report.ok:
            rejected[backend] = report.format()
    return rejected


def _model_name(fun: Callable, model_dir: str) -> str:
    name = getattr(fun, "__name__", "")
    return name if name.isidentifier() else os.path.basename(os.path.normpath(model_dir))


def verify_in_browser(model_dir: str, screenshot: str | None = None) -> dict[str, dict] | str:
    """Run the export's own page in headless Chromium on every backend it offers: per backend the
    max error against JAX's outputs in demo_data.json and the median latency (ms); or why not
    (``error``; ``rejected``: the report of noxla's check for that backend, which the page shows)."""
    if not os.path.exists(os.path.join(model_dir, DEMO_DATA)):
        return "browser not verified: the export has no demo_data.json"
    try:
        runner = runtimes.BrowserRunner()
    except runtimes.BrowserUnavailable as e:
        return f"browser not verified: {e}"
    try:
        results = {}
        for backend in runner.backends():
            reply = runner.request({"demo": os.path.abspath(model_dir), "backend": backend,
                                    **({"screenshot": os.path.abspath(screenshot)}
                                       if screenshot and backend == "webgl" else {})})
            if "rejected" in reply:
                results[backend] = {"rejected": reply["rejected"]}
            else:
                results[backend] = ({"error": reply["error"]} if "error" in reply else
                                    {"max_error": reply["maxError"], "ms": reply["ms"]})
        return results
    finally:
        runner.close()


def tfjs_bundle_dir() -> dict[str, str]:
    """The files the page asks for under tfjs/, from the pinned npm packages (empty when absent)."""
    modules = runtimes.node_modules_dir()
    files = {}
    if modules:
        for package, names in (("tfjs", ["tf.min.js"]),
                               ("tfjs-backend-wasm", ["tf-backend-wasm.min.js", "tfjs-backend-wasm.wasm",
                                                      "tfjs-backend-wasm-simd.wasm",
                                                      "tfjs-backend-wasm-threaded-simd.wasm"]),
                               ("tfjs-backend-webgpu", ["tf-backend-webgpu.min.js"])):
            for name in names:
                path = os.path.join(modules, "@tensorflow", package, "dist", name)
                if os.path.exists(path):
                    files[name] = path
    return files


class NoStoreHandler(http.server.SimpleHTTPRequestHandler):
    """A page's directory, served quietly and never cached (a re-export shows at once); the
    runtime's own files from ``bundles``, mapped by ``translate_path`` in a subclass."""
    bundles: ClassVar[dict[str, str]] = {}

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args):
        pass


class _Handler(NoStoreHandler):
    def translate_path(self, path):
        name = path.split("?", 1)[0].rsplit("/", 1)[-1]
        if "/tfjs/" in path and name in self.bundles:
            return self.bundles[name]
        return super().translate_path(path)


def serve(model_dir: str, port: int = 8000, host: str = "127.0.0.1", ready: Callable[[str], None] = print):
    """Serve the export's directory (and TF.js under tfjs/) until interrupted; ``ready(url)`` first."""
    if not os.path.exists(os.path.join(model_dir, "model.json")):
        raise FileNotFoundError(f"{model_dir} has no model.json: export it with `noxla export --tfjs {model_dir}`")
    handler = type("Handler", (_Handler,), {"bundles": tfjs_bundle_dir()})
    handler.extensions_map = {**handler.extensions_map, ".wasm": "application/wasm", ".js": "text/javascript"}
    factory = functools.partial(handler, directory=os.path.abspath(model_dir))
    socketserver.TCPServer.allow_reuse_address = True
    with http.server.ThreadingHTTPServer((host, port), factory) as httpd:
        ready(f"http://{host}:{httpd.server_address[1]}/index.html")
        httpd.serve_forever()


def browser_latency(model_dir: str, inputs: dict, backends: Sequence[str] = ("webgl",), repeats: int = 10,
                    runner: runtimes.BrowserRunner | None = None) -> dict[str, float | str]:
    """Median latency (ms, outputs downloaded) of a TF.js export in headless Chromium per backend,
    after one warm-up run that compiles the shaders; a string says why a backend was not measured.
    For tools/benchmark.py's browser columns: pass one ``runner`` for many models."""
    own = runner is None
    try:
        runner = runner or runtimes.BrowserRunner()
    except runtimes.BrowserUnavailable as e:
        return {b: f"not measured: {e}" for b in backends}
    try:
        out: dict[str, float | str] = {}
        for backend in backends:
            if backend not in runner.backends():
                out[backend] = "not offered by this Chromium"
                continue
            try:
                out[backend] = runner.run_timed(model_dir, inputs, backend, repeats=repeats)[1]["ms"]
            except RuntimeError as e:
                out[backend] = f"failed: {str(e).splitlines()[0][:200]}"
        return out
    finally:
        if own:
            runner.close()
