"""The LiteRT.js page of a .tflite export, `noxla serve` for it, and running it in headless Chromium.

For ``m.tflite`` the page lives in ``m_litertjs/``: ``index.html`` (noxla/runtimes/litertjs_runner/index.html,
the page the tests drive too), ``model.tflite`` (a hard link to the export where the file system
allows) and ``demo_data.json`` (example inputs by signature name and JAX's outputs on them, with
noxla's check per accelerator). It is written on request (``--litertjs-page``, ``--verify-browser``):
a page beside every .tflite would double each export on disk where links are not possible.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
from collections.abc import Callable, Sequence

import jax

from noxla import runtimes
from noxla.runtimes import litertjs
from noxla.runtimes.demo import NoStoreHandler, example_inputs
from noxla.runtimes.verify import jax_outputs

DEMO_DATA = "demo_data.json"
MODEL = "model.tflite"


def page_dir_for(tflite_path: str) -> str:
    root, _ = os.path.splitext(os.path.abspath(tflite_path))
    return f"{root}_litertjs"


def accelerator_rejections(program) -> dict[str, str]:
    """Per accelerator noxla's check rejects the program for, the report (the page shows it instead
    of running there). The .tflite itself passed TFLite's check at export."""
    from limitations.engine import check_jaxpr
    from lowering_rules.core.vocabulary import Target

    out = {}
    for accelerator, target in (("wasm", Target.LITERTJS), ("webgpu", Target.LITERTJS_WEBGPU)):
        report = check_jaxpr(program.closed_jaxpr, target)
        if not report.ok:
            out[accelerator] = report.format()
    return out


def write_page(tflite_path: str, fun: Callable, program, example_args: Sequence, title: str = "") -> str:
    """``<stem>_litertjs/`` beside the .tflite (replaced when present); returns its path."""
    page_dir = page_dir_for(tflite_path)
    os.makedirs(page_dir, exist_ok=True)
    shutil.copyfile(litertjs.PAGE, os.path.join(page_dir, "index.html"))
    model = os.path.join(page_dir, MODEL)
    if os.path.lexists(model):
        os.remove(model)
    try:
        os.link(tflite_path, model)
    except OSError:
        shutil.copyfile(tflite_path, model)
    leaves, tree = jax.tree_util.tree_flatten(list(example_args))
    inputs = example_inputs(leaves)
    rejected = accelerator_rejections(program)
    data = {"title": title or f"noxla on LiteRT.js: {os.path.basename(tflite_path)}",
            "tolerance": litertjs.TOLERANCE, "rejected": rejected, "inputs": {}, "expected": {}}
    if "wasm" not in rejected:  # LiteRT.js can hold every input and output
        args = jax.tree_util.tree_unflatten(tree, inputs)
        data["inputs"] = {n: litertjs.encode(a) for n, a in zip(program.in_names, inputs)}
        data["expected"] = {n: litertjs.encode(a) for n, a in zip(program.out_names, jax_outputs(fun, args))}
    with open(os.path.join(page_dir, DEMO_DATA), "w") as f:
        json.dump(data, f)
    return page_dir


def verify_in_browser(page_dir: str, screenshot: str | None = None) -> dict[str, dict] | str:
    """Run the page in headless Chromium on wasm and WebGPU: per accelerator ``max_error`` against
    JAX, ``ms`` (median latency) and ``placement``; or ``error``, or ``rejected`` (noxla's report)."""
    try:
        runner = litertjs.LiteRtJsRunner()
    except runtimes.BrowserUnavailable as e:
        return f"LiteRT.js not verified: {e}"
    try:
        reply = runner.request({"demo": os.path.abspath(page_dir),
                                **({"screenshot": os.path.abspath(screenshot)} if screenshot else {})})
    finally:
        runner.close()
    if "error" in reply:
        return f"LiteRT.js page failed: {reply['error']}"
    results = {}
    for r in reply["results"]:
        if "rejected" in r:
            results[r["accelerator"]] = {"rejected": r["rejected"]}
        elif "error" in r:
            results[r["accelerator"]] = {"error": r["error"]}
        else:
            results[r["accelerator"]] = {"max_error": r["maxError"], "ms": r["ms"], "placement": r["placement"]}
    return results


def placement_text(placement: dict) -> str:
    """One line: where WebGPU's delegate put the ops, and why each op it refused left the GPU."""
    # The delegate's counts first: isFullyAccelerated said true for a model whose TRANSPOSE_CONV
    # ops (version 4) the delegate had just refused.
    if placement.get("cpuOps") == 0 or (placement.get("gpuOps") is None and placement.get("fullyAccelerated")):
        return "every op on WebGPU"
    refused = "; ".join(f"{u['op']} ({u['reason'].rstrip('.')})" for u in placement.get("unsupported", []))
    return (f"{placement.get('gpuOps')} ops on WebGPU, {placement.get('cpuOps')} on wasm"
            + (f"; left the GPU: {refused}" if refused else ""))


def bundle_dirs() -> dict[str, str]:
    """Where the page's litertjs/<part>/ files come from: the pinned npm packages."""
    modules = runtimes.node_modules_dir() or ""
    return {"core": os.path.join(modules, "@litertjs", "core", "dist"),
            "wasm": os.path.join(modules, "@litertjs", "core", "wasm"),
            "wasm-utils": os.path.join(modules, "@litertjs", "wasm-utils", "dist")}


class _Handler(NoStoreHandler):
    def translate_path(self, path):
        parts = path.split("?", 1)[0].split("/")
        if len(parts) >= 3 and parts[-3] == "litertjs" and parts[-2] in self.bundles:
            return os.path.join(self.bundles[parts[-2]], os.path.basename(parts[-1]))
        return super().translate_path(path)


def serve(page_dir: str, port: int = 8000, host: str = "127.0.0.1", ready: Callable[[str], None] = print):
    """Serve the page directory (and LiteRT.js under litertjs/) until interrupted; ``ready(url)`` first."""
    handler = type("Handler", (_Handler,), {"bundles": bundle_dirs()})
    handler.extensions_map = {**handler.extensions_map, ".wasm": "application/wasm", ".js": "text/javascript"}
    factory = functools.partial(handler, directory=os.path.abspath(page_dir))
    with http.server.ThreadingHTTPServer((host, port), factory) as httpd:
        ready(f"http://{host}:{httpd.server_address[1]}/index.html")
        httpd.serve_forever()
