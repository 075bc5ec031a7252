"""Browser latency per zoo model in headless Chromium: noxla's .tflite on LiteRT.js wasm against
noxla's TF.js export on TF.js wasm and jax2onnx's ONNX export of the same function on
onnxruntime-web wasm (the path a browser user would pick instead); optionally WebGPU for LiteRT.js
and onnxruntime-web (SwiftShader here: correctness only, its latency means nothing for speed).

    python tools/browser_benchmark.py [--models cnn,mlp] [--real vae_decoder_64,...] [--rounds 9] [--webgpu]
                                      [--out FILE]

--models picks zoo models (tests/zoo.py, default all); --real adds tools/real_models.py models at
full size (default: the ones a browser page runs in seconds: REAL_DEFAULT; "none" for the zoo only).

Every artifact's outputs are checked against JAX first; a path that fails or differs is not timed.
All paths of a model are then timed interleaved (tools/benchmark.py's `interleaved`): per round one
batch of k in-page runs per path (each run makes its input tensors, runs and reads every output back; the
batch's mean per run), alternating the order; a path's latency is
the median over rounds, and LiteRT.js wasm / other is the median of the per-round ratios, so load
from other processes cancels out of the ratios. Standalone, so tools/benchmark.py is left as is.

Both anchors are installed on first use under ~/.cache/noxla-bench, as tools/benchmark.py does for
its venvs, so the project's own installs stay as they are: jax2onnx 0.17.1 in a venv of its own
(--jax2onnx-python; it would upgrade the main environment's protobuf and onnx), onnxruntime-web
1.30.0 in a node_modules of its own (--ort-modules; 140 MB that only this benchmark reads).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ORT_DIR = os.path.join(REPO, "tools", "ort_web")
DEFAULT_OUT = os.path.join(REPO, "tools", "benchmark_results", "browser_benchmark.md")
DEFAULT_VENV_PYTHON = os.path.expanduser("~/.cache/noxla-bench/jax2onnx-venv/bin/python")
DEFAULT_ORT_MODULES = os.path.expanduser("~/.cache/noxla-bench/npm/node_modules")
ORT_WEB_VERSION, JAX2ONNX_VERSION = "1.30.0", "0.17.1"  # the versions the committed report measured
# Real-size models: a browser tab runs each in seconds per path (ViT-B/16, 338 MB of float32 weights,
# about 1-2 s per run and two minutes of the benchmark's time; BERT-base is left to --real).
REAL_DEFAULT = ("vae_decoder_64", "keras_mobilenet_v3_small", "keras_efficientnet_b0", "vit_b16")
WASM_PATHS = ("LiteRT.js wasm", "TF.js wasm", "ORT-web wasm")
WEBGPU_PATHS = ("LiteRT.js WebGPU", "ORT-web WebGPU")
# float32 kernels on wasm agree with JAX's XLA CPU to ~1e-6 relative; WebGPU's approximate
# built-ins (exp, tanh) to ~1e-5. Beyond these an artifact computes something else.
TOLERANCE = {"wasm": 1e-4, "webgpu": 1e-3}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo model names (default: all)")
    parser.add_argument("--real", default=",".join(REAL_DEFAULT),
                        help="comma-separated tools/real_models.py names to add ('none': zoo only)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds per model")
    parser.add_argument("--batch-ms", type=float, default=40.0,
                        help="each round's batch of runs lasts about this long for the fastest path")
    parser.add_argument("--warmup-ms", type=float, default=1500.0)
    parser.add_argument("--webgpu", action="store_true", help="also LiteRT.js and onnxruntime-web on WebGPU")
    parser.add_argument("--out", default=DEFAULT_OUT, help="the Markdown report")
    parser.add_argument("--jax2onnx-python", default=DEFAULT_VENV_PYTHON)
    parser.add_argument("--ort-modules", default=None,
                        help="a node_modules holding onnxruntime-web (default: the checkout's, else "
                             "~/.cache/noxla-bench/npm/node_modules)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


# ---- the report -------------------------------------------------------------------------------

def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return " ".join(str(value).split())[:90].replace("|", "/")


def ratio_to_best(ratios: dict[str, float]) -> tuple[float | None, str | None]:
    """LiteRT.js wasm / the fastest other wasm path: the largest of the per-path median ratios."""
    if not ratios:
        return None, None
    other = max(ratios, key=ratios.get)
    return ratios[other], other


def table(results: dict[str, dict], paths: tuple[str, ...]) -> list[str]:
    """One row per model: each path's median ms (or why it was not timed) and error vs JAX, then
    the per-round ratios LiteRT.js wasm / other and the verdict of issue 20's bar."""
    head = ["model", *[f"{p} ms" for p in paths], *[f"{p} error" for p in paths],
            "LiteRT.js / TF.js wasm", "LiteRT.js / ORT-web wasm", "LiteRT.js / best other", "<= both"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in results.items():
        ms, errors, notes, ratios = r.get("ms", {}), r.get("errors", {}), r.get("notes", {}), r.get("ratios", {})
        best, _ = ratio_to_best(ratios)
        verdict = "-" if best is None else ("yes" if best <= 1.0 and len(ratios) == 2 else
                                            "no" if best > 1.0 else "partly (not all paths timed)")
        cells = [name, *[_cell(ms.get(p, notes.get(p))) for p in paths],
                 *[f"{errors[p]:.1e}" if isinstance(errors.get(p), float) else "-" for p in paths],
                 _cell(ratios.get("TF.js wasm")), _cell(ratios.get("ORT-web wasm")), _cell(best), verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def untimed(results: dict[str, dict]) -> list[str]:
    """Why each path left out of a model's timing was left out, in full (the table cuts it)."""
    lines = [f"- {name}, {path}: {note}" for name, r in results.items() for path, note in r.get("notes", {}).items()]
    return ["Paths not timed, and why:", "", *lines] if lines else []


def write_report(path: str, results: dict, paths: tuple[str, ...], command: str, environment: str,
                 rounds: int) -> None:
    text = ["# Browser benchmark: LiteRT.js wasm against TF.js wasm and onnxruntime-web wasm", "",
            f"Command: `{command}`", "", environment, "",
            f"Batch 1. Each model's paths were timed interleaved in {rounds} rounds (one batch of in-page runs "
            "per path per round, order alternating, after a warm-up); ms = median over rounds of the per-run "
            "mean in the batch (performance.now() is coarsened to 0.1 ms in the page); ratios = median over "
            "rounds of the per-round ratio LiteRT.js wasm / that path (<1: LiteRT.js faster). "
            "Errors: max |runtime - JAX| / max(1, max |JAX|) on the model's example inputs, checked "
            "before timing; a path that fails or differs is not timed and its cell says why. WebGPU columns, when "
            "present, ran on SwiftShader (the GPU emulated on the CPU): not meaningful for speed.", "",
            *table(results, paths), "", *untimed(results), ""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(text))


# ---- jax2onnx in its own venv -------------------------------------------------------------------

def export_onnx_child(names: list[str], out: str) -> None:
    """Runs in the jax2onnx venv: each zoo model's function at batch 1 to ``out/<name>.onnx``;
    prints {name: {inputs, outputs} | {failure}} as the last line."""
    import jax
    import onnx
    from jax2onnx import to_onnx

    models, results = build_models(names), {}
    for name in names:
        path = os.path.join(out, f"{name}.onnx")
        try:
            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in models[name].inputs(1)]
            to_onnx(models[name].fun, specs, return_mode="file", output_path=path)
            graph = onnx.load(path, load_external_data=False).graph
            initializers = {i.name for i in graph.initializer}
            # jax2onnx stores large weights in files beside the .onnx (<name>.onnx.data), which
            # onnxruntime-web only reads when the page hands them over (session option externalData).
            external = sorted({e.value for i in graph.initializer for e in i.external_data if e.key == "location"})
            results[name] = {"path": path, "inputs": [i.name for i in graph.input if i.name not in initializers],
                             "outputs": [o.name for o in graph.output], "external": external}
        except Exception as e:  # noqa: BLE001 - recorded in the table
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            results[name] = {"failure": f"jax2onnx: {type(e).__name__}: {first}"}
    print(json.dumps(results))


def build_models(names: list[str]) -> dict:
    """Zoo models by name, then tools/real_models.py ones (full size); both give name, fun, inputs(1)."""
    from tests import zoo
    from tools import real_models
    models = {n: m for n, m in zoo.build().items() if n in names}
    real = [n for n in names if n not in models]
    unknown = [n for n in real if n not in real_models.NAMES]
    if unknown:
        raise SystemExit(f"not zoo or real models: {', '.join(unknown)} (real: {', '.join(real_models.NAMES)})")
    return {**models, **(real_models.build(real) if real else {})}


def export_onnx(python: str, names: list[str], out: str) -> dict:
    """Per model, {path, inputs, outputs} of jax2onnx's export or {failure}; one child process
    (the venv's jax, flax and jax2onnx load once)."""
    if not os.path.exists(python):
        return {n: {"failure": f"no jax2onnx venv at {python}"} for n in names}
    proc = subprocess.run([python, os.path.abspath(__file__), "--export-onnx-child", ",".join(names), out],
                          capture_output=True, text=True, cwd=REPO, timeout=1800)
    if proc.returncode != 0:
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        return {n: {"failure": "jax2onnx: " + (lines[-1] if lines else f"exit {proc.returncode}")} for n in names}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- onnxruntime-web in Chromium ----------------------------------------------------------------

def ort_modules(explicit: str | None) -> str | None:
    """A node_modules holding onnxruntime-web, installed under ~/.cache/noxla-bench when missing."""
    def has_ort(candidate):
        return candidate and os.path.isdir(os.path.join(candidate, "onnxruntime-web", "dist"))
    if explicit or has_ort(DEFAULT_ORT_MODULES):
        return explicit if has_ort(explicit) else (None if explicit else DEFAULT_ORT_MODULES)
    prefix = os.path.dirname(DEFAULT_ORT_MODULES)
    print(f"installing onnxruntime-web {ORT_WEB_VERSION} in {prefix} ...", file=sys.stderr, flush=True)
    os.makedirs(prefix, exist_ok=True)
    done = subprocess.run(["npm", "install", "--prefix", prefix, "--no-save", "--no-audit", "--no-fund",
                           f"onnxruntime-web@{ORT_WEB_VERSION}"], check=False)
    return DEFAULT_ORT_MODULES if done.returncode == 0 and has_ort(DEFAULT_ORT_MODULES) else None


def jax2onnx_python(given: str) -> str:
    """The jax2onnx venv's python, creating the venv on first use (system packages visible: jax, flax)."""
    if os.path.exists(given) or given != DEFAULT_VENV_PYTHON:
        return given
    root = os.path.dirname(os.path.dirname(given))
    print(f"creating the jax2onnx venv in {root} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", root], check=True)
    subprocess.run([given, "-m", "pip", "install", "-q", f"jax2onnx=={JAX2ONNX_VERSION}"], check=True)
    return given


ORT_DTYPES = {"float32": "float32", "int32": "int32", "int64": "int64", "uint8": "uint8", "bool": "bool"}


def _ort_encode(array) -> dict:
    import numpy as np
    array = np.asarray(array, order="C")
    data = array.astype(np.uint8) if array.dtype == bool else array
    return {"dtype": ORT_DTYPES[array.dtype.name], "shape": list(array.shape),
            "data": base64.b64encode(data.tobytes()).decode()}


def _ort_decode(tensor: dict):
    import numpy as np
    array = np.frombuffer(base64.b64decode(tensor["data"]), dtype=np.dtype(tensor["dtype"]))
    return array.reshape(tensor["shape"])


def ort_runner(modules: str):
    from noxla.runtimes import _LineRunner, chromium_path, node_modules_dir

    class OrtWebRunner(_LineRunner):
        label = "onnxruntime-web in Chromium"
        restart_after_error = False

    shared = node_modules_dir() or modules
    env = dict(os.environ, NODE_PATH=shared, NOXLA_CHROMIUM=chromium_path() or "/usr/bin/chromium",
               ORT_DIST=os.path.join(modules, "onnxruntime-web", "dist"),
               NOXLA_CHROMIUM_JS=os.path.join(REPO, "noxla", "runtimes", "tfjs_runner", "chromium.js"))
    return OrtWebRunner([shutil.which("node"), os.path.join(ORT_DIR, "browser.js")], env)


def per_run_ms(reply: dict) -> float:
    """The mean of a batch's in-page times, not their median: a page that is not cross-origin
    isolated gets performance.now() coarsened to 0.1 ms (with jitter), so a 0.1 ms model's median
    is 0.0 or 0.1 while the mean over the batch is not biased."""
    times = reply.get("times") or [reply["ms"]]
    return sum(times) / len(times)


# ---- one model ----------------------------------------------------------------------------------

def measure(model, runners: dict, work: str, onnx: dict, args) -> dict:
    """Exports, checks against JAX, then times every path that matched, interleaved."""
    from noxla.api import export
    from noxla.runtimes.verify import jax_outputs, relative_error
    from tools.benchmark import interleaved

    example = model.inputs(1)
    expected = jax_outputs(model.fun, example)
    result: dict = {"ms": {}, "errors": {}, "notes": {}, "ratios": {}}
    ort_paths = ["ORT-web wasm", *(["ORT-web WebGPU"] if args.webgpu else [])]
    calls: dict = {}  # path -> (runner call returning (outputs in JAX's order, ms))
    try:
        exported = export(model.fun, example, tflite=os.path.join(work, f"{model.name}.tflite"),
                          tfjs=os.path.join(work, f"{model.name}_tfjs"), overwrite=True, demo_page=False)
        program = exported.program
        named = dict(zip(program.in_names, example))
        tflite, tfjs = exported.written.get("tflite"), exported.written.get("tfjs")

        def litert(accelerator):
            def call(k):
                runner = runners["litert" if accelerator == "wasm" else "litert_webgpu"]
                outs, info = runner.run_timed(tflite, named, accelerator, k)
                return [outs[n] for n in program.out_names], per_run_ms(info)
            return call

        def tfjs_call(k):
            outs, info = runners["tfjs"].run_timed(tfjs, named, "wasm", k)
            return [outs[n] for n in program.out_names], per_run_ms(info)
        if tflite:
            calls["LiteRT.js wasm"] = litert("wasm")
            if args.webgpu:
                calls["LiteRT.js WebGPU"] = litert("webgpu")
        if tfjs:
            calls["TF.js wasm"] = tfjs_call
    except Exception as e:  # noqa: BLE001 - recorded in the table
        for p in ("LiteRT.js wasm", "TF.js wasm", *(["LiteRT.js WebGPU"] if args.webgpu else [])):
            result["notes"][p] = f"noxla export fails: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    if "failure" in onnx:
        for path in ort_paths:
            result["notes"][path] = onnx["failure"]
    elif runners.get("ort") is None:
        for path in ort_paths:
            result["notes"][path] = "onnxruntime-web not installed"
    else:
        feed = {n: _ort_encode(a) for n, a in zip(onnx["inputs"], example)}

        def ort(ep):
            def call(k):
                reply = runners["ort"].request({"model": onnx["path"], "external": onnx.get("external", []),
                                                "ep": ep, "inputs": feed, "repeats": k})
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return [_ort_decode(reply["outputs"][n]) for n in onnx["outputs"]], per_run_ms(reply)
            return call
        calls["ORT-web wasm"] = ort("wasm")
        if args.webgpu:
            calls["ORT-web WebGPU"] = ort("webgpu")

    timers = {}
    for path, call in calls.items():
        try:
            outs, _ = call(0)
            if len(outs) != len(expected) or any(o.shape != e.shape for o, e in zip(outs, expected)):
                raise ValueError(f"outputs {[o.shape for o in outs]} where JAX gives {[e.shape for e in expected]}")
            error = max(relative_error(e, o) for o, e in zip(outs, expected))
        except Exception as e:  # noqa: BLE001 - recorded in the table
            result["notes"][path] = f"fails: {' '.join(str(e).split())[:400]}"
            continue
        result["errors"][path] = error
        if error > TOLERANCE["webgpu" if "WebGPU" in path else "wasm"]:
            result["notes"][path] = f"differs from JAX ({error:.1e})"
            continue
        timers[path] = (lambda c: lambda k: c(k)[1])(call)
    if len(timers) > 0:
        ms, ratios = interleaved(timers, args.rounds, args.batch_ms, args.warmup_ms)
        result["ms"] = ms
        result["ratios"] = {b: r for (a, b), r in ratios.items()
                            if a == "LiteRT.js wasm" and b in ("TF.js wasm", "ORT-web wasm")}
    return result


def main(argv=None) -> int:
    if argv is None and len(sys.argv) == 4 and sys.argv[1] == "--export-onnx-child":
        export_onnx_child(sys.argv[2].split(","), sys.argv[3])
        return 0
    args = parse_args(argv)
    from noxla.runtimes import BrowserRunner
    from noxla.runtimes.litertjs import LiteRtJsRunner
    from tests import zoo

    names = args.models.split(",") if args.models else list(zoo.build())
    names += [] if args.real in ("", "none") else args.real.split(",")
    models = build_models(names)
    paths = WASM_PATHS + (WEBGPU_PATHS if args.webgpu else ())
    modules = ort_modules(args.ort_modules)
    # The wasm columns load each library's default build, as a page that runs on wasm only would
    # (LiteRT.js's JSPI build, which its WebGPU needs, costs 4-10 us more per call: tools/litertjs_call_cost.py).
    runners = {"litert": LiteRtJsRunner(build="default"), "tfjs": BrowserRunner(),
               "litert_webgpu": LiteRtJsRunner() if args.webgpu else None,
               "ort": ort_runner(modules) if modules else None}
    version = runners["tfjs"].request({"probe": True}).get("version", "?")
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    environment = (f"Headless {version}, `nice -n {os.nice(0)}`, on a 2-core machine shared with other jobs (load "
                   f"average {load} over 1/5/15 min at the start). @litertjs/core 2.5.3 (default build on wasm, "
                   "JSPI build on WebGPU), TF.js 4.22.0 wasm backend, onnxruntime-web 1.30.0 (default bundle on "
                   "wasm, WebGPU bundle on WebGPU; 1 wasm thread); jax2onnx 0.17.1. Each timed run makes its "
                   "input tensors from typed arrays, runs, and reads every output back. "
                   f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    given = " ".join(argv if argv is not None else sys.argv[1:])
    command = f"nice -n {os.nice(0)} python tools/browser_benchmark.py {given}"
    results: dict = {}
    try:
        with tempfile.TemporaryDirectory() as work:
            onnx = export_onnx(jax2onnx_python(args.jax2onnx_python), names, work)
            for name in names:
                started = time.perf_counter()
                results[name] = measure(models[name], runners, work, onnx[name], args)
                seconds = time.perf_counter() - started
                print(name, f"{seconds:.0f} s", json.dumps(results[name], default=str), flush=True)
                write_report(args.out, results, paths, command.strip(), environment, args.rounds)
    finally:
        for r in runners.values():
            if r is not None:
                r.close()
    print("\n".join(table(results, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
