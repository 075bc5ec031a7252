"""The judge: noxla against the official JAX -> TFLite path and the old no-XLA path, in one run.

    python tools/benchmark.py [--repeats 50] [--out bench_out] [--self-check] [MODEL ...]
    python tools/benchmark.py --real-size --threads 1 4 --columns LiteRT [--self-check] [MODEL ...]

For every zoo model (batch 1) and every path, it measures op count (main graph + loop bodies),
size, export time (cold: first export in a fresh process, after imports; warm: the next one),
LiteRT latency (XNNPACK; 1 thread, or each of --threads) and TF.js latency in Node (wasm and cpu,
timed inside Node), and checks each artifact against JAX. Latencies interleave all paths of a model
in --repeats rounds (`interleaved`): per path the median per-run time, and noxla / anchor as the
median of the per-round ratios, so that load from other processes cancels out.
--self-check adds noxla against a copy of its own artifacts, which must measure 1.00. The paths:

- noxla (this checkout), in this Python environment, or with --noxla-venv installed from this
  checkout into a venv of its own, as the anchors have theirs (tools/bench_exports.py);
- native: jax2tf's native serialization + TFLiteConverter on the newest TF that installs
  (a venv without tensorflowjs: TF 2.21), builtins only;
- old: jax2tf.convert(enable_xla=False) with JAX 0.4.30 / TF 2.17 / Flax 0.8.5; its TF.js model is
  its SavedModel converted by this environment's tensorflowjs;
- litert: jax.export -> StableHLO -> litert-converter (LiteRT's TensorFlow-free converter), no TF.js.

--real-size measures tools/real_models.py's models (keras.applications CNNs at 224x224, BERT-base,
Whisper-tiny's encoder, ViT-B/16, a SmolLM-135M decode step; random weights) instead of the zoo
(--tiny: the same architectures at toy sizes, to try the tool quickly). Per path it also records the
first export as a user pays it: a fresh process's wall time from its start through its first export
(imports and building the model included) and that process's peak resident memory.

The anchors run the same Flax modules with the same weights (passed as .npz), rebuilt by
tools/bench_anchor.py in their venvs, made under --venv-dir on first use or given with
--native-venv / --old-venv / --litert-venv. Every latency is measured here, in one LiteRT and one
Node, so the runtimes are the same for every path.

Writes OUT/benchmark.md (the tables, with ratios noxla / best anchor) and OUT/benchmark.png.
"""
from __future__ import annotations

import argparse
import collections
import compileall
import functools
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tools"))  # real_models, bench_anchor
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from bench_exports import (  # noqa: E402  (tools/ is on the path from here)
    PATHS,
    anchor_export,
    ensure_venv,
    first_exports,
    noxla_exports,
    refresh_noxla_venv,
    write_anchor_inputs,
)
from interleaving import checkout_version, interleaved, interleaved_both_ways  # noqa: E402

LOAD_AT_START = os.getloadavg()[0]

# ---------------------------------------------------------------------------------------------
# Latency columns. Latencies of 0.003-0.1 ms are far below this shared machine's noise (other
# processes, frequency changes, cache state), so the paths are never timed one after another:
# each column makes one *batch timer* per path (artifacts, named inputs -> a function running a
# batch of k runs and returning ms per run: LiteRT the batch's mean CPU time of the invoking
# thread, since one invoke can last 3 us and LiteRT runs on that one thread; TF.js, whose runs
# Node times one by one (wall clock), the batch's median, which drops V8's garbage collection
# pauses), and `interleaved` times them in rounds, every path once per round in
# alternating order, each batch long enough (>= BATCH_MS) to be well above the timer's resolution.
# A path's latency is the median over rounds; the ratio noxla / anchor is the median over rounds
# of the per-round ratio, so a slow spell hits both sides of a ratio alike. Two copies of one
# artifact measure 1.00 +- 0.02 this way on an idle machine (--self-check prints it per model);
# under load the runtime made first measured slower, so `interleaved_both_ways` makes them in both orders.
# Add a runtime by adding an entry. TF.js WebGL runs in headless Chromium (noxla.runtimes.BrowserRunner,
# WebGL through SwiftShader: the GPU emulated on the CPU, so its latencies rank graphs for WebGL's
# shaders and textures, not a real GPU's speed); its first run compiles the shaders.

BATCH_MS = {"LiteRT": 5.0, "TF.js wasm": 20.0, "TF.js cpu": 20.0, "TF.js WebGL": 50.0}
WARMUP_MS = {"LiteRT": 300.0, "TF.js wasm": 4000.0, "TF.js cpu": 8000.0,  # cpu: JS kernels JIT longer
             "TF.js WebGL": 3000.0}


def litert_timer(artifacts: dict, inputs: dict, threads: int = 1) -> Callable[[int], float] | None:
    from ai_edge_litert.interpreter import Interpreter
    if "tflite" not in artifacts:
        return None
    interpreter = Interpreter(model_path=artifacts["tflite"], num_threads=threads)  # XNNPACK is the default
    interpreter.allocate_tensors()
    details = sorted(interpreter.get_input_details(), key=lambda d: d["index"])
    for detail, value in zip(details, inputs.values()):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()

    # With one thread, XNNPACK runs every op on the calling thread: its CPU time is the invokes'
    # compute without the time other processes take the core away. With more, the wall clock.
    clock = time.thread_time if threads == 1 else time.perf_counter

    def time_batch(k: int) -> float:
        start = clock()
        for _ in range(k):
            interpreter.invoke()
        return (clock() - start) * 1e3 / k
    return time_batch


def litert_column(threads: int) -> str:
    """The latency column of LiteRT on ``threads`` threads ("LiteRT" is one thread)."""
    return "LiteRT" if threads == 1 else f"LiteRT {threads} threads"


def tfjs_timer(backend: str, browser: bool = False) -> Callable:
    """TF.js on ``backend``, in Node (``tfjs_runner``) or in Chromium (``browser``: ``browser_runner``, with TF.js's
    default flags: what a user's page gets, CPU forwarding of small tensors included)."""
    def make(artifacts: dict, inputs: dict) -> Callable[[int], float] | None:
        if "tfjs" not in artifacts:
            return None
        # Timed where it runs, per run up to the outputs' data read back (the request's transfer is not).
        runner = browser_runner if browser else tfjs_runner
        return lambda k: statistics.median(runner().time(artifacts["tfjs"], inputs, backend, k))
    return make


# The error that decides whether a column times an artifact: its own backend's where it has one.
ERROR_KEYS = {"TF.js WebGL": {"tfjs": "tfjs_webgl_error"}}

LATENCY_COLUMNS: dict[str, Callable] = {
    "LiteRT": litert_timer,
    "TF.js wasm": tfjs_timer("wasm"),
    "TF.js cpu": tfjs_timer("cpu"),
    "TF.js WebGL": tfjs_timer("webgl", browser=True),
}
DEFAULT_COLUMNS = tuple(LATENCY_COLUMNS)  # --threads adds "LiteRT N threads" columns


def alone_ms(column: str, artifacts: dict, inputs: dict, repeats: int) -> float | None:
    """One path's latency in one column on its own (median ms per run over `repeats` batches)."""
    timer = LATENCY_COLUMNS[column](artifacts, inputs)
    if timer is None:
        return None
    return interleaved({"one": timer}, repeats, BATCH_MS[column], WARMUP_MS[column])[0]["one"]


_runner = None


def tfjs_runner():
    global _runner
    if _runner is None:
        from noxla.runtimes import TfjsRunner
        _runner = TfjsRunner()
    return _runner


_browser = None


def browser_runner():
    global _browser
    if _browser is None:
        from noxla.runtimes import BrowserRunner
        _browser = BrowserRunner()
    return _browser


def browser_version() -> str:
    try:
        return browser_runner().request({"probe": True}).get("version", "?")
    except Exception as e:  # noqa: BLE001 - Chromium missing: the column then says why per model
        return f"unavailable ({type(e).__name__})"


# ---------------------------------------------------------------------------------------------
# Artifacts: what each path writes, and how big and how many ops.

def tflite_flatbuffer(path: str):
    """The schema and the file's model, read in place: the object API's read copies every weight
    (7 s for BERT-base's file, read for each path's op count and graph)."""
    from ai_edge_litert import schema_py_generated as schema
    with open(path, "rb") as f:
        return schema, schema.Model.GetRootAs(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), 0)


def tflite_op_counts(path: str) -> tuple[int, int]:
    """Operators in the main subgraph, and in all other subgraphs (loop bodies, conditions)."""
    _, model = tflite_flatbuffer(path)
    counts = [model.Subgraphs(i).OperatorsLength() for i in range(model.SubgraphsLength())]
    return counts[0], sum(counts[1:])


def tflite_operators(path: str) -> collections.Counter:
    """The main subgraph's operators, each as its builtin, input and output shapes and options: two
    files with equal counters compute alike, operator for operator, whatever their order."""
    schema, model = tflite_flatbuffer(path)
    graph = model.Subgraphs(0)
    shape = lambda t: tuple(t.ShapeAsNumpy().tolist()) if t.ShapeLength() else ()
    shapes = lambda ids: tuple(shape(graph.Tensors(int(i))) for i in ids if i >= 0)
    operators = collections.Counter()
    for i in range(graph.OperatorsLength()):
        op = schema.OperatorT.InitFromObj(graph.Operators(i))
        code = model.OperatorCodes(op.opcodeIndex)
        options = repr(sorted(vars(op.builtinOptions).items())) if op.builtinOptions is not None else ""
        operators[max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), shapes(op.inputs), shapes(op.outputs),
                  options] += 1
    return operators


def tfjs_op_counts(path: str) -> tuple[int, int]:
    """Graph nodes that compute (not Const/Placeholder), in the main graph and in function bodies."""
    with open(os.path.join(path, "model.json")) as f:
        topology = json.load(f)["modelTopology"]
    skip = {"Const", "Placeholder"}
    main = sum(n["op"] not in skip for n in topology.get("node", []))
    functions = topology.get("library", {}).get("function", [])
    return main, sum(n["op"] not in skip for fn in functions for n in fn.get("nodeDef", []))


def size_bytes(path: str) -> int:
    """A .tflite file's size; a TF.js model's is model.json and its weight shards (not the demo page)."""
    if os.path.isdir(path):
        with open(os.path.join(path, "model.json")) as f:
            shards = [p for group in json.load(f).get("weightsManifest", []) for p in group["paths"]]
        return sum(os.path.getsize(os.path.join(path, f)) for f in ("model.json", *shards))
    return os.path.getsize(path)


def run_artifact(kind: str, path: str, inputs: dict, backend: str = "wasm") -> list:
    """Outputs in the order JAX returns them (output names sort like the pytree's leaves); a TF.js model
    runs on ``backend``: wasm or cpu in Node, webgl in headless Chromium."""
    import numpy as np
    if kind == "tflite" and not has_signature(path):  # the anchors' converters write none
        from ai_edge_litert.interpreter import Interpreter
        interpreter = Interpreter(model_path=path)
        interpreter.allocate_tensors()
        for detail, value in zip(sorted(interpreter.get_input_details(), key=lambda d: d["index"]), inputs.values()):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        return [np.array(interpreter.get_tensor(d["index"]))
                for d in sorted(interpreter.get_output_details(), key=lambda d: d["index"])]
    if kind == "tflite":
        from noxla.runtimes import run_tflite
        outs = run_tflite(path, inputs)
    else:
        outs = (browser_runner() if backend == "webgl" else tfjs_runner()).run(path, inputs, backend)
    return [np.asarray(outs[k]) for k in sorted(outs)]


def has_signature(path: str) -> bool:
    from ai_edge_litert.interpreter import Interpreter
    return bool(Interpreter(model_path=path).get_signature_list())


def failure(e: Exception) -> str:
    return f"fails: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"


def max_error(got: list, expected: list) -> float | str:
    import numpy as np
    if len(got) != len(expected):
        return f"{len(got)} outputs, JAX has {len(expected)}"
    for g, e in zip(got, expected):
        if g.shape != e.shape:
            return f"wrong shape {list(g.shape)}, JAX {list(e.shape)}"
    return max(float(np.max(np.abs(g.astype(np.float64) - e))) for g, e in zip(got, expected))


# ---------------------------------------------------------------------------------------------
# Quantized exports: size and error against float JAX, per mode.

def quantized_rows(name: str, model, work: str, repeats: int) -> list[list[str]]:
    import noxla
    from noxla.front.tracing import trace
    from noxla.runtimes.verify import jax_outputs
    from noxla.writers.quantize import TFJS_MODES, TFLITE_MODES
    example = model.inputs(1)
    expected = jax_outputs(model.fun, example)
    inputs = dict(zip(trace(model.fun, example).in_names, example))
    rows = []
    for kind, modes, export in (("tflite", TFLITE_MODES, noxla.export_tflite),
                                ("tfjs", TFJS_MODES, noxla.export_tfjs)):
        base = export(model.fun, *example, path=os.path.join(work, f"{name}_float.{kind}"), overwrite=True)
        for mode in (None, *modes):
            calibration = {"representative_data": model.calibration_samples()} if mode == "int8" else {}
            try:
                path = base if mode is None else export(
                    model.fun, *example, path=os.path.join(work, f"{name}_{mode}.{kind}"), overwrite=True,
                    quantize=mode, **calibration)
            except Exception as e:  # reported in the table
                rows.append([name, kind, mode or "float", f"fails: {type(e).__name__}", "-", "-", "-"])
                continue
            error = max_error(run_artifact(kind, path, inputs), expected)
            ms = alone_ms("LiteRT" if kind == "tflite" else "TF.js wasm", {kind: path}, inputs, repeats)
            rows.append([name, kind, mode or "float", f"{size_bytes(path) / 1024:.1f}",
                         f"{size_bytes(path) / size_bytes(base):.2f}", fmt(error, 6), fmt(ms)])
    return rows


def quantized_report(rows: list[list[str]]) -> str:
    header = ["model", "format", "quantize", "KiB", "size / float", "max error vs float JAX",
              "latency ms (LiteRT / TF.js wasm)"]
    lines = ["", "## Quantized exports (noxla)", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The run.

class LazyModels(dict):
    """name -> model, each built on first use by ``make(name)``; ``drop`` frees one and JAX's caches."""

    def __init__(self, make: Callable):
        super().__init__()
        self.make = make

    def __missing__(self, name: str):
        self[name] = self.make(name)
        return self[name]

    def drop(self, name: str) -> None:
        import gc

        import jax
        self.pop(name, None)
        jax.clear_caches()
        gc.collect()


def measure(name: str, model, args, work: str, pythons: dict) -> dict:

    from noxla.front.tracing import trace
    from noxla.runtimes.verify import jax_outputs
    example = model.inputs(1)
    expected = jax_outputs(model.fun, example)
    in_names = trace(model.fun, example).in_names
    inputs = dict(zip(in_names, example))
    source = ("tiny" if args.tiny else "real") if args.real_size else "zoo"
    # The real-size models are measured for LiteRT (the anchors' common target); the zoo for both.
    kinds = ("tflite",) if args.real_size else ("tflite", "tfjs")
    exports = {"noxla": lambda: noxla_exports(name, work, source, kinds, pythons.get("noxla"))}
    # The anchor venvs rebuild Flax modules from their weights; the sampling models are plain functions.
    rebuildable = hasattr(model.fun, "flax") or hasattr(model, "spec")
    anchors = {mode: python for mode, python in pythons.items() if mode != "noxla"}
    if any(anchors.values()) and rebuildable:
        write_anchor_inputs(name, model, example, expected, work)
    failures = {}
    for mode, python in anchors.items():
        if not python:
            failures[mode] = {"failure": "no venv"}
        elif not rebuildable:
            failures[mode] = {"failure": "not a Flax module (the anchors rebuild Flax models)"}
        else:
            exports[mode] = functools.partial(anchor_export, mode, python, name, work)
    results = {**first_exports(exports, args.first_runs), **failures}
    for path, r in results.items():
        for kind, counter in (("tflite", tflite_op_counts), ("tfjs", tfjs_op_counts)):
            if kind not in r:
                continue
            r[f"{kind}_ops"] = counter(r[kind])
            r[f"{kind}_size"] = size_bytes(r[kind])
            try:
                # Anchors' inputs are positional; their order is the function's, as noxla's is.
                feed = inputs if path == "noxla" else positional_feed(r[kind], kind, example)
                r[f"{kind}_error"] = max_error(run_artifact(kind, r[kind], feed), expected)
            except Exception as e:
                r[f"{kind}_error"] = failure(e)
        if "tfjs" in r and "TF.js WebGL" in args.columns:
            # Checked on WebGL itself: the old path's exports of some models run there but not on wasm
            # (no Einsum or Complex kernel), and WebGL computes in float32 textures.
            try:
                feed = inputs if path == "noxla" else positional_feed(r["tfjs"], "tfjs", example)
                r["tfjs_webgl_error"] = max_error(run_artifact("tfjs", r["tfjs"], feed, "webgl"), expected)
            except Exception as e:
                r["tfjs_webgl_error"] = failure(e)
    if isinstance(results["noxla"].get("tflite_error"), float):
        # Latency ratios within 1.02 count as equal only between graphs identical operator for operator.
        ours = tflite_operators(results["noxla"]["tflite"])
        results["noxla"]["same_graph_as"] = [path for path, r in results.items() if path != "noxla"
                                             and isinstance(r.get("tflite_error"), float)
                                             and tflite_operators(r["tflite"]) == ours]
    latencies(results, inputs, example, expected, args)
    return results


def latencies(results: dict, inputs: dict, example: list, expected: list, args) -> None:
    """Every latency column, all paths interleaved (see `interleaved`). Sets results[path][column]
    (ms) and results["noxla"][column + " ratio"]: noxla / best anchor, i.e. the largest of the
    per-anchor median round ratios. With --self-check, also noxla against a copy of its own artifacts."""
    import numpy as np
    scale = max(1.0, max(float(np.max(np.abs(e))) for e in expected))
    if args.self_check:
        copies = {k: copy_artifact(results["noxla"][k]) for k in ("tflite", "tfjs") if k in results["noxla"]}
    for column in args.columns:
        make = LATENCY_COLUMNS[column]
        makers = {}
        for path, r in results.items():
            errors = {k: r.get(ERROR_KEYS.get(column, {}).get(k, f"{k}_error")) for k in ("tflite", "tfjs")}
            usable = {k: r[k] for k in ("tflite", "tfjs") if k in r and isinstance(errors[k], float)
                      and errors[k] <= 1e-3 * scale}
            feed = inputs if path == "noxla" else positional_feeds(usable, example)
            try:
                timer = make(usable, feed)
                if timer is not None:
                    timer(1)  # fails here rather than mid-round
                    makers[path] = functools.partial(make, usable, feed)
                del timer
            except Exception as e:
                r[column] = f"fails: {type(e).__name__}"
        if args.self_check and "noxla" in makers:
            makers["noxla copy"] = functools.partial(make, copies, inputs)
        if not makers:
            continue
        ms, ratios = interleaved_both_ways(makers, args.repeats, BATCH_MS[column], WARMUP_MS[column])
        for path, value in ms.items():
            if path in results:
                results[path][column] = value
        anchors = [p for p in makers if p not in ("noxla", "noxla copy")]
        if "noxla" in makers and anchors:
            results["noxla"][f"{column} ratio"] = max(ratios[("noxla", a)] for a in anchors)
        if "noxla copy" in makers:
            results["noxla"][f"{column} self ratio"] = ratios[("noxla", "noxla copy")]


def copy_artifact(path: str) -> str:
    import shutil
    copy = path.rstrip("/") + "_copy" + (".tflite" if path.endswith(".tflite") else "")
    (shutil.copytree if os.path.isdir(path) else shutil.copyfile)(path, copy)
    return copy


def positional_feed(path: str, kind: str, example: list) -> dict:
    """Named inputs for an anchor's artifact, in the order of its signature's inputs."""
    if kind == "tflite":  # fed by position (see run_artifact); the names only key the dict
        return {f"input_{i}": x for i, x in enumerate(example)}
    else:
        with open(os.path.join(path, "model.json")) as f:
            names = list(json.load(f)["signature"]["inputs"])
    return dict(zip(sorted(names), example))


def positional_feeds(usable: dict, example: list) -> dict:
    # LiteRT feeds by position, TF.js by signature name: take the names from the TF.js model if any.
    for kind in ("tfjs", "tflite"):
        if kind in usable:
            return positional_feed(usable[kind], kind, example)
    return {}


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return f"{value[0]}+{value[1]}" if value[1] else str(value[0])
    return f"{value:.{digits}f}"


def ratio(ours, theirs: list) -> str:
    theirs = [t for t in theirs if isinstance(t, (int, float))]
    if not isinstance(ours, (int, float)) or not theirs:
        return "-"
    return f"{ours / min(theirs):.2f}"


def report(all_results: dict, args) -> str:
    lines = ["# noxla benchmark", "",
             (f"noxla at {checkout_version()}"
              + (", installed into a venv of its own as a user installs it. " if args.noxla_venv is not None
                 else ", in the benchmark's own Python environment. ")
              + f"Batch 1. LiteRT: XNNPACK, 1 thread (the 'LiteRT' column: CPU time of the invoking thread) or N "
              f"('LiteRT N threads': wall time). TF.js: Node {tfjs_version()}, timed in Node (outputs read "
             f"back). Latency: all paths of a model interleaved in {args.repeats} rounds, each round one batch "
             f"of k runs per path (k: the fastest path's batch lasts {BATCH_MS['LiteRT']:g} ms in LiteRT, "
             f"{BATCH_MS['TF.js wasm']:g} ms in TF.js), after a warm-up; ms = median over rounds of the "
             "batch's per-run ms (LiteRT: mean CPU time of its one thread, TF.js: median wall time), ratio = "
             "median over rounds of the per-round ratio against each anchor, the largest of those; the runtimes "
             "made in one order for half the rounds, in the reverse for the other (mean ms, geometric mean ratio). "
             "Ops: main graph + loop bodies/conditions. Export: cold = first export in a fresh process "
             "(after imports), warm = the next one; wall seconds, and in the ratio table also the export "
             "process's CPU seconds (all threads), which other load on the machine does not inflate. "
             f"Load average (1 min) at the start and end of the run: {LOAD_AT_START:.1f}, "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. Error: max |artifact - JAX| on a random input "
             "(TF.js on wasm; the WebGL error column: on WebGL)."
             + (f" TF.js WebGL: headless {browser_version()}, WebGL through SwiftShader (the GPU emulated on "
                "the CPU), timed in the page (median wall time per run, outputs read back; k = 1 when a run "
                f"lasts {BATCH_MS['TF.js WebGL']:g} ms or more); `tools/browser_report.py` gives its errors."
                if "TF.js WebGL" in args.columns else "")), ""]
    latency = list(args.columns)
    webgl = "TF.js WebGL" in latency
    header = ["model", "path", "TFLite ops", "TFLite KiB", "TFLite export s (cold/warm)",
              "first TFLite export s (fresh process)", "of which not building the model s", "peak MB", "TFLite error",
              *[f"{c} ms" for c in latency], "TF.js ops", "TF.js KiB", "TF.js export s (cold/warm)",
              "TF.js error", *(["TF.js WebGL error"] if webgl else [])]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, results in all_results.items():
        for path in PATHS:
            if path not in results:  # --no-anchors / --export-only
                continue
            r = results[path]
            if "failure" in r and "tflite" not in r and "tfjs" not in r:
                lines.append(f"| {name} | {path} | {r['failure']} |" + " |" * (len(header) - 3))
                continue
            row = [name, path, fmt(r.get("tflite_ops")), fmt(r.get("tflite_size", 0) / 1024, 1) if "tflite" in r
                   else "-", export_cell(r, "tflite"), fmt(r.get("tflite_first_s"), 2),
                   fmt(r.get("tflite_exporter_s"), 2), fmt(r.get("tflite_peak_mb"), 0),
                   fmt(r.get("tflite_error"), 6) if "tflite" in r else "-",
                   *[fmt(r.get(c)) for c in latency], fmt(r.get("tfjs_ops")),
                   fmt(r.get("tfjs_size", 0) / 1024, 1) if "tfjs" in r else "-", export_cell(r, "tfjs"),
                   fmt(r.get("tfjs_error"), 6) if "tfjs" in r else r.get("tfjs_failure", "-"),
                   *([fmt(r.get("tfjs_webgl_error"), 6)] if webgl else [])]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Ratios: noxla / best anchor (at most 1: noxla is as good or better)", "",
              "(= litert's): noxla's graph is that anchor's operator for operator (builtins, shapes, options; "
              "in any order), so a latency ratio within 1.02 is the measurement's noise.", ""]
    header = ["model", "TFLite ops / fewest of native's and litert's", *[f"{c} latency" for c in latency],
              "first TFLite export s / litert's", "the same less building the model", "peak MB / litert's",
              "noxla cold TFLite export s (<= 1), wall (cpu)", "noxla cold TF.js export s (<= 3), wall (cpu)"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    geo: dict[str, list] = {}
    total_ops = lambda r: sum(r["tflite_ops"]) if isinstance(r.get("tflite_error"), float) else None
    for name, results in all_results.items():
        ours = results.get("noxla", {})
        anchors = [results.get(p, {}) for p in PATHS[1:]]
        row = [name, ratio(total_ops(ours), [total_ops(results.get(p, {})) for p in ("native", "litert")])
               + "".join(f" (= {p}'s)" for p in ours.get("same_graph_as", []))]
        for c in latency:
            measured = ours.get(f"{c} ratio")  # per-round ratios, interleaved (see `interleaved`)
            cell = f"{measured:.2f}" if isinstance(measured, float) else ratio(ours.get(c), [a.get(c) for a in anchors])
            row.append(cell)
            if cell != "-":
                geo.setdefault(c, []).append(float(cell))
        litert = results.get("litert", {})
        row += [ratio(ours.get("tflite_first_s"), [litert.get("tflite_first_s")]),
                ratio(ours.get("tflite_exporter_s"), [litert.get("tflite_exporter_s")]),
                ratio(ours.get("tflite_peak_mb"), [litert.get("tflite_peak_mb")]),
                cold_cell(ours, "tflite"), cold_cell(ours, "tfjs")]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for c, values in geo.items():
        lines.append(f"- geometric mean of the {c} latency ratio: {statistics.geometric_mean(values):.2f} "
                     f"over {len(values)} models")
    checks = {name: [r.get("noxla", {}).get(f"{c} self ratio") for c in latency] for name, r in all_results.items()}
    if any(isinstance(v, float) for row in checks.values() for v in row):
        lines += ["", "## Measurement check: noxla against a copy of its own artifact (1.00 when the "
                  "measurement is sound)", "", "| model | " + " | ".join(latency) + " |",
                  "|" + "---|" * (len(latency) + 1)]
        lines += [f"| {name} | " + " | ".join(fmt(v, 2) for v in row) + " |" for name, row in checks.items()]
        lines.append("")
    imports = [r["noxla"]["tflite_import_s"] for r in all_results.values()
               if "tflite_import_s" in r.get("noxla", {})]
    if imports:
        lines.append("- `import noxla, noxla.writers.tflite` (JAX and numpy with them) in a fresh process: "
                     f"{statistics.median(imports):.2f} s wall (median)")
    return "\n".join(lines) + "\n"


def cold_cell(r: dict, kind: str) -> str:
    """Cold export wall seconds, and the process's CPU seconds in parentheses when measured."""
    cpu = r.get(f"{kind}_cold_cpu_s")
    return fmt(r.get(f"{kind}_cold_s"), 2) + (f" ({cpu:.2f})" if isinstance(cpu, float) else "")


def export_cell(r: dict, kind: str) -> str:
    if f"{kind}_cold_s" not in r:
        return "-"
    return f"{r[f'{kind}_cold_s']:.2f} / {r[f'{kind}_warm_s']:.2f}"


def tfjs_version() -> str:
    try:
        return subprocess.run(["node", "--version"], check=False, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def chart(all_results: dict, path: str, columns: list[str]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    names = list(all_results)
    fig, axes = plt.subplots(len(columns), 1, figsize=(max(8, 1.3 * len(names)), 3.2 * len(columns)))
    width = 0.8 / len(PATHS)
    for ax, column in zip(np.atleast_1d(axes), columns):
        for i, p in enumerate(PATHS):
            values = [all_results[n].get(p, {}).get(column) for n in names]
            heights = [v if isinstance(v, float) else np.nan for v in values]
            x = np.arange(len(names)) + (i - 1) * width
            ax.bar(x, heights, width, label=p, color=f"C{i}")
            for xi, v in zip(x, values):
                if not isinstance(v, float):  # no bar on a log axis: mark the missing artifact
                    ax.text(xi, 0.02, "x", color=f"C{i}", ha="center", transform=ax.get_xaxis_transform())
        ax.set_yscale("log")
        present = [all_results[n].get(p, {}).get(column) for n in names for p in PATHS]
        present = [v for v in present if isinstance(v, float) and v > 0]
        if present:
            ax.set_ylim(min(present) / 3, max(present) * 3)
        ax.set_ylabel(f"{column} ms (log)")
        ax.set_xticks(np.arange(len(names)), names, rotation=20, fontsize=8)
        ax.legend(fontsize=8)
    axes = np.atleast_1d(axes)
    axes[0].set_title("Latency per model, batch 1 (x: no working artifact)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", default="bench_out", help="directory for benchmark.md and benchmark.png")
    parser.add_argument("--venv-dir", default=os.path.expanduser("~/.cache/noxla-bench"))
    parser.add_argument("--native-venv", help="an existing venv for the native path (skip creating one)")
    parser.add_argument("--old-venv", help="an existing venv for the old no-XLA path")
    parser.add_argument("--litert-venv", help="an existing venv for litert-converter")
    parser.add_argument("--anchors", nargs="+", choices=PATHS[1:], default=list(PATHS[1:]),
                        help="anchor paths to measure (default: all)")
    parser.add_argument("--real-size", action="store_true",
                        help="tools/real_models.py's real-size models instead of the zoo (LiteRT only)")
    parser.add_argument("--tiny", action="store_true", help="with --real-size: the same models at toy sizes")
    parser.add_argument("--first-runs", type=int, default=1,
                        help="fresh processes per path whose median first-export time and peak memory are reported")
    parser.add_argument("--threads", nargs="+", type=int, default=[1],
                        help="LiteRT thread counts, one latency column each (default: 1)")
    parser.add_argument("--no-anchors", action="store_true", help="measure noxla only")
    parser.add_argument("--quantized", action="store_true",
                        help="also every quantized export: size and max error against float JAX")
    parser.add_argument("--self-check", action="store_true",
                        help="also time noxla against a copy of its own artifacts (should measure 1.00)")
    parser.add_argument("--columns", nargs="+", choices=list(LATENCY_COLUMNS), default=list(DEFAULT_COLUMNS),
                        metavar="COLUMN", help=f"latency columns to measure (default: {', '.join(LATENCY_COLUMNS)})")
    parser.add_argument("--export-only", action="store_true",
                        help="noxla's exports only (op counts, sizes, errors, cold/warm export times): "
                             "no anchors, no latencies")
    parser.add_argument("--no-latency", action="store_true",
                        help="every path's exports (ops, sizes, errors, export times, peak memory), no latencies")
    parser.add_argument("--noxla-venv", nargs="?", const="", metavar="VENV",
                        help="export with noxla installed from this checkout into a venv, as a user installs "
                             "it (bare: one made under --venv-dir) instead of in this environment")
    args = parser.parse_args()
    for threads in args.threads:  # LiteRT's columns, one per thread count
        column = litert_column(threads)
        LATENCY_COLUMNS[column] = functools.partial(litert_timer, threads=threads)
        BATCH_MS[column], WARMUP_MS[column] = BATCH_MS["LiteRT"], WARMUP_MS["LiteRT"]
    if args.real_size and args.columns == list(DEFAULT_COLUMNS):
        args.columns = ["LiteRT"]
    if "LiteRT" in args.columns:
        at = args.columns.index("LiteRT")
        args.columns[at:at + 1] = [litert_column(t) for t in args.threads]
    if args.export_only:
        args.no_anchors, args.columns = True, []
    if args.no_latency:
        args.columns = []

    if args.real_size:
        import real_models
        names = args.models or list(real_models.NAMES)
        # Built one at a time and dropped after measuring: together with what JAX caches for each,
        # the real-size models outgrow a shared machine's memory (the run was OOM-killed at BERT).
        models = LazyModels(lambda name: real_models.build([name], tiny=args.tiny)[name])
    else:
        from tests import zoo
        models = zoo.build()
        names = args.models or list(models)
    given = {"native": args.native_venv, "old": args.old_venv, "litert": args.litert_venv}
    pythons = {} if args.no_anchors else {
        mode: ensure_venv(mode, given[mode], args.venv_dir) for mode in args.anchors}
    if args.noxla_venv is not None:
        pythons["noxla"] = ensure_venv("noxla", args.noxla_venv or None, args.venv_dir)
        if not pythons["noxla"]:
            return 1
        refresh_noxla_venv(pythons["noxla"])
    os.makedirs(args.out, exist_ok=True)
    # noxla's bytecode, as pip writes it (the anchors' venvs have theirs): under
    # PYTHONDONTWRITEBYTECODE=1 each fresh export process would compile the rules again.
    for package in ("noxla", "lowering_rules", "limitations"):
        compileall.compile_dir(os.path.join(REPO, package), quiet=1)
    all_results = {}
    with tempfile.TemporaryDirectory(prefix="noxla-bench-") as work:
        for name in names:
            print(f"{name} ...", file=sys.stderr, flush=True)
            all_results[name] = measure(name, models[name], args, work, pythons)
            if isinstance(models, LazyModels):
                models.drop(name)
            with open(os.path.join(args.out, "benchmark.md"), "w") as f:  # so far, if the run is cut short
                f.write(report(all_results, args))
    text = report(all_results, args)
    if args.quantized:
        with tempfile.TemporaryDirectory(prefix="noxla-bench-q-") as work:
            rows = [row for name in names for row in quantized_rows(name, models[name], work, args.repeats)]
        text += quantized_report(rows)
    with open(os.path.join(args.out, "benchmark.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "benchmark.json"), "w") as f:
        json.dump(all_results, f, indent=1, default=str)
    print(text)
    try:
        if args.columns:  # the chart is of latencies
            chart(all_results, os.path.join(args.out, "benchmark.png"), args.columns)
            print(f"chart: {os.path.join(args.out, 'benchmark.png')}")
    except ImportError:
        print("no chart: matplotlib is not installed (pip install -e '.[bench]')")
    for runner in (_runner, _browser):
        if runner is not None:
            runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
