"""The judge: noxla against the official JAX -> TFLite path and the old no-XLA path, in one run.

    python tools/benchmark.py [--repeats 50] [--out bench_out] [MODEL ...]

For every zoo model (batch 1) and every path, it measures op count (main graph + loop bodies),
size, export time (cold: first export in a fresh process, after imports; warm: the next one),
LiteRT latency (1 thread, XNNPACK, median of --repeats) and TF.js latency in Node (wasm and cpu,
median, timed inside Node), and checks each artifact against JAX. The paths:

- noxla (this checkout), in this Python environment;
- native: jax2tf's native serialization + TFLiteConverter on the newest TF that installs
  (a venv without tensorflowjs: TF 2.21), builtins only;
- old: jax2tf.convert(enable_xla=False) with JAX 0.4.30 / TF 2.17 / Flax 0.8.5; its TF.js model is
  its SavedModel converted by this environment's tensorflowjs.

The anchors run the same Flax modules with the same weights (passed as .npz), rebuilt by
tools/bench_anchor.py inside their venvs. The venvs are created under --venv-dir on first use
(a few minutes each), or given with --native-venv / --old-venv. Every latency is measured here, in
one LiteRT and one Node, so the runtimes are the same for every path.

Writes OUT/benchmark.md (the tables, with ratios noxla / best anchor) and OUT/benchmark.png.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

PATHS = ("noxla", "native", "old")
VENV_PACKAGES = {
    # No tensorflowjs here, so pip takes the newest TF (tensorflowjs holds TF back at 2.19).
    "native": ["jax", "flax", "tensorflow-cpu", "ai-edge-litert"],
    # The last releases with enable_xla=False.
    "old": ["jax==0.4.30", "jaxlib==0.4.30", "tensorflow-cpu==2.17.0", "numpy<2", "flax==0.8.5",
            "ai-edge-litert"],
}


# ---------------------------------------------------------------------------------------------
# Latency columns: one function per runtime, (artifacts, named inputs, repeats) -> ms or None when
# the path has no artifact for that runtime. Add a runtime by adding an entry (e.g. TF.js WebGL).

def litert_ms(artifacts: dict, inputs: dict, repeats: int) -> float | None:
    from ai_edge_litert.interpreter import Interpreter
    if "tflite" not in artifacts:
        return None
    interpreter = Interpreter(model_path=artifacts["tflite"], num_threads=1)  # XNNPACK is the default
    interpreter.allocate_tensors()
    details = sorted(interpreter.get_input_details(), key=lambda d: d["index"])
    for detail, value in zip(details, inputs.values()):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        interpreter.invoke()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def tfjs_ms(backend: str) -> Callable:
    def measure(artifacts: dict, inputs: dict, repeats: int) -> float | None:
        if "tfjs" not in artifacts:
            return None
        return statistics.median(tfjs_runner().time(artifacts["tfjs"], inputs, backend, repeats))
    return measure


LATENCY_COLUMNS: dict[str, Callable] = {
    "LiteRT": litert_ms,
    "TF.js wasm": tfjs_ms("wasm"),
    "TF.js cpu": tfjs_ms("cpu"),
}

_runner = None


def tfjs_runner():
    global _runner
    if _runner is None:
        from noxla.runtimes import TfjsRunner
        _runner = TfjsRunner()
    return _runner


# ---------------------------------------------------------------------------------------------
# Artifacts: what each path writes, and how big and how many ops.

def tflite_op_counts(path: str) -> tuple[int, int]:
    """Operators in the main subgraph, and in all other subgraphs (loop bodies, conditions)."""
    from tensorflow.lite.tools import flatbuffer_utils
    model = flatbuffer_utils.read_model(path)
    counts = [len(g.operators or []) for g in model.subgraphs]
    return counts[0], sum(counts[1:])


def tfjs_op_counts(path: str) -> tuple[int, int]:
    """Graph nodes that compute (not Const/Placeholder), in the main graph and in function bodies."""
    with open(os.path.join(path, "model.json")) as f:
        topology = json.load(f)["modelTopology"]
    skip = {"Const", "Placeholder"}
    main = sum(n["op"] not in skip for n in topology.get("node", []))
    functions = topology.get("library", {}).get("function", [])
    return main, sum(n["op"] not in skip for fn in functions for n in fn.get("nodeDef", []))


def size_bytes(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def run_artifact(kind: str, path: str, inputs: dict) -> list:
    """Outputs in the order JAX returns them (output names sort like the pytree's leaves)."""
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
        outs = tfjs_runner().run(path, inputs, "wasm")
    return [np.asarray(outs[k]) for k in sorted(outs)]


def has_signature(path: str) -> bool:
    from ai_edge_litert.interpreter import Interpreter
    return bool(Interpreter(model_path=path).get_signature_list())


def max_error(got: list, expected: list) -> float | str:
    import numpy as np
    if len(got) != len(expected):
        return f"{len(got)} outputs, JAX has {len(expected)}"
    for g, e in zip(got, expected):
        if g.shape != e.shape:
            return f"wrong shape {list(g.shape)}, JAX {list(e.shape)}"
    return max(float(np.max(np.abs(g.astype(np.float64) - e))) for g, e in zip(got, expected))


# ---------------------------------------------------------------------------------------------
# noxla exports, each in a fresh process so the first one is cold.

def noxla_export_child(kind: str, name: str, out: str) -> None:
    """Run in a fresh process: import, build the zoo, then time two exports of one model."""
    start = time.perf_counter()
    import noxla
    export = noxla.export_tflite if kind == "tflite" else noxla.export_tfjs  # imports TF and the rules
    import_s = time.perf_counter() - start
    from tests import zoo
    model = zoo.build()[name]
    example = model.inputs(1)
    suffix = ".tflite" if kind == "tflite" else "_tfjs"
    timings = {"import_s": import_s}
    for label in ("cold_s", "warm_s"):
        path = os.path.join(out, f"{name}_{label}{suffix}")
        start = time.perf_counter()
        export(model.fun, *example, path=path, overwrite=True)
        timings[label] = time.perf_counter() - start
        timings["path"] = path
    with open(os.path.join(out, f"{name}_{kind}.json"), "w") as f:
        json.dump(timings, f)


def noxla_exports(name: str, out: str) -> dict:
    result: dict = {}
    for kind in ("tflite", "tfjs"):
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--export-child", kind, name, out],
                              check=False, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
        record = os.path.join(out, f"{name}_{kind}.json")
        if proc.returncode or not os.path.exists(record):
            result.setdefault("failure", (proc.stderr.strip().splitlines() or ["?"])[-1][:200])
            continue
        with open(record) as f:
            timings = json.load(f)
        result[kind] = timings["path"]
        result[f"{kind}_cold_s"], result[f"{kind}_warm_s"] = timings["cold_s"], timings["warm_s"]
        result["import_s"] = timings["import_s"]
    return result


# ---------------------------------------------------------------------------------------------
# Anchors: the same model and weights, exported inside their venvs.

def ensure_venv(mode: str, given: str | None, venv_dir: str) -> str | None:
    """The venv's python, creating the venv when it is missing (None if that fails)."""
    root = given or os.path.join(venv_dir, mode)
    python = os.path.join(root, "bin", "python")
    if os.path.exists(python):
        return python
    if given:
        print(f"{mode}: no python in {given}", file=sys.stderr)
        return None
    print(f"creating the {mode} venv in {root} (a few minutes) ...", file=sys.stderr, flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", root], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *VENV_PACKAGES[mode]], check=True)
    except subprocess.CalledProcessError as e:
        print(f"{mode}: venv creation failed: {e}", file=sys.stderr)
        return None
    return python


def write_anchor_inputs(name: str, model, example: list, expected: list, work: str) -> None:
    """The model's class, weights, inputs and JAX outputs, for tools/bench_anchor.py."""
    import jax
    import numpy as np
    from bench_anchor import nnx_path_key
    kind, module = model.fun.flax[0], model.fun.flax[1]
    if kind == "linen":
        from flax.traverse_util import flatten_dict
        weights = flatten_dict(jax.tree_util.tree_map(np.asarray, dict(model.fun.flax[2])), sep="/")
    else:
        from flax import nnx
        leaves = jax.tree_util.tree_flatten_with_path(nnx.state(module))[0]
        weights = {nnx_path_key(path): np.asarray(leaf) for path, leaf in leaves}
    arrays = {f"w:{k}": v for k, v in weights.items()}
    arrays.update({f"x:{i}": x for i, x in enumerate(example)})
    arrays.update({f"y:{i}": y for i, y in enumerate(expected)})
    np.savez(os.path.join(work, name + ".npz"), **arrays)
    with open(os.path.join(work, name + ".json"), "w") as f:
        json.dump({"class": type(module).__name__, "kind": kind, "inputs": len(example),
                   "outputs": len(expected)}, f)


def anchor_export(mode: str, python: str, name: str, work: str) -> dict:
    script = os.path.join(REPO, "tools", "bench_anchor.py")
    proc = subprocess.run([python, script, mode, name, work], check=False, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO))
    record = os.path.join(work, mode, name + ".json")
    if not os.path.exists(record):
        return {"failure": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    with open(record) as f:
        result = json.load(f)
    if isinstance(result.get("jax_error"), float) and result["jax_error"] > 1e-4:
        result["failure"] = f"rebuilt model differs from the zoo's (max error {result['jax_error']:.2e})"
    if "failure" in result:
        return result
    result["tflite"] = os.path.join(work, mode, name + ".tflite")
    result["tflite_cold_s"], result["tflite_warm_s"] = result["cold_s"], result["warm_s"]
    if mode == "old" and result.get("saved_model"):
        result.update(old_tfjs(result["saved_model"], os.path.join(work, mode, name + "_tfjs")))
    return result


def old_tfjs(saved_model: str, out: str) -> dict:
    """The old path's TF.js model: its SavedModel through this environment's tensorflowjs converter."""
    os.environ.setdefault("TFDF_DISABLE_WELCOME_MESSAGE", "1")
    from tensorflowjs.converters import tf_saved_model_conversion_v2 as conversion

    from noxla.export import _bias_add_only_for_vectors
    try:
        # With noxla's guard against the converter fusing non-vector addends, which TF.js's wasm
        # backend then rejects (the old path's Conv + broadcast Add hits it too).
        with _bias_add_only_for_vectors():
            conversion.convert_tf_saved_model(saved_model, out, control_flow_v2=True)
    except Exception as e:  # e.g. UnsortedSegmentSum, which the converter refuses
        return {"tfjs_failure": f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"}
    return {"tfjs": out}


# ---------------------------------------------------------------------------------------------
# Quantized exports: size and error against float JAX, per mode.

def quantized_rows(name: str, model, work: str, repeats: int) -> list[list[str]]:
    import noxla
    from noxla.quantize import TFJS_MODES, TFLITE_MODES
    from noxla.tracing import trace
    from noxla.verify import jax_outputs
    example = model.inputs(1)
    expected = jax_outputs(model.fun, example)
    inputs = dict(zip(trace(model.fun, example).in_names, example))
    rows = []
    for kind, modes, export in (("tflite", TFLITE_MODES, noxla.export_tflite),
                                ("tfjs", TFJS_MODES, noxla.export_tfjs)):
        base = export(model.fun, *example, path=os.path.join(work, f"{name}_float.{kind}"), overwrite=True)
        for mode in (None, *modes):
            try:
                path = base if mode is None else export(
                    model.fun, *example, path=os.path.join(work, f"{name}_{mode}.{kind}"), overwrite=True,
                    quantize=mode)
            except Exception as e:  # reported in the table
                rows.append([name, kind, mode or "float", f"fails: {type(e).__name__}", "-", "-", "-"])
                continue
            error = max_error(run_artifact(kind, path, inputs), expected)
            ms = (litert_ms if kind == "tflite" else tfjs_ms("wasm"))({kind: path}, inputs, repeats)
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

def measure(name: str, model, args, work: str, pythons: dict) -> dict:
    import numpy as np

    from noxla.tracing import trace
    from noxla.verify import jax_outputs
    example = model.inputs(1)
    expected = jax_outputs(model.fun, example)
    in_names = trace(model.fun, example).in_names
    inputs = dict(zip(in_names, example))
    results = {"noxla": noxla_exports(name, work)}
    # The anchor venvs rebuild Flax modules from their weights; the sampling models are plain functions.
    rebuildable = hasattr(model.fun, "flax")
    if any(pythons.values()) and rebuildable:
        write_anchor_inputs(name, model, example, expected, work)
    for mode, python in pythons.items():
        if not python:
            results[mode] = {"failure": "no venv"}
        elif not rebuildable:
            results[mode] = {"failure": "not a Flax module (the anchors rebuild Flax models)"}
        else:
            results[mode] = anchor_export(mode, python, name, work)
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
                r[f"{kind}_error"] = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        usable = {k: r[k] for k in ("tflite", "tfjs") if k in r and isinstance(r.get(f"{k}_error"), float)
                  and r[f"{k}_error"] <= 1e-3 * max(1.0, max(float(np.max(np.abs(e))) for e in expected))}
        feed = inputs if path == "noxla" else positional_feeds(usable, example)
        for column, fn in LATENCY_COLUMNS.items():
            try:
                r[column] = fn(usable, feed, args.repeats)
            except Exception as e:
                r[column] = f"fails: {type(e).__name__}"
    return results


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
             (f"Batch 1. LiteRT: 1 thread, XNNPACK, median of {args.repeats} invokes. TF.js: Node "
             f"{tfjs_version()}, median of {args.repeats} runs timed in Node (outputs read back). "
             "Ops: main graph + loop bodies/conditions. Export: cold = first export in a fresh process "
             "(after imports), warm = the next one. Error: max |artifact - JAX| on a random input "
             "(TF.js on wasm)."), ""]
    latency = list(LATENCY_COLUMNS)
    header = ["model", "path", "TFLite ops", "TFLite KiB", "TFLite export s (cold/warm)", "TFLite error",
              *[f"{c} ms" for c in latency], "TF.js ops", "TF.js KiB", "TF.js export s (cold/warm)",
              "TF.js error"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, results in all_results.items():
        for path in PATHS:
            r = results.get(path, {})
            if "failure" in r and "tflite" not in r and "tfjs" not in r:
                lines.append(f"| {name} | {path} | {r['failure']} |" + " |" * (len(header) - 3))
                continue
            row = [name, path, fmt(r.get("tflite_ops")), fmt(r.get("tflite_size", 0) / 1024, 1) if "tflite" in r
                   else "-", export_cell(r, "tflite"), fmt(r.get("tflite_error"), 6) if "tflite" in r else "-",
                   *[fmt(r.get(c)) for c in latency], fmt(r.get("tfjs_ops")),
                   fmt(r.get("tfjs_size", 0) / 1024, 1) if "tfjs" in r else "-", export_cell(r, "tfjs"),
                   fmt(r.get("tfjs_error"), 6) if "tfjs" in r else r.get("tfjs_failure", "-")]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Ratios: noxla / best anchor (at most 1: noxla is as good or better)", ""]
    header = ["model", "TFLite ops / native's", *[f"{c} latency" for c in latency],
              "noxla cold TFLite export s (<= 1)", "noxla cold TF.js export s (<= 3)"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    geo: dict[str, list] = {}
    total_ops = lambda r: sum(r["tflite_ops"]) if isinstance(r.get("tflite_error"), float) else None
    for name, results in all_results.items():
        ours = results.get("noxla", {})
        anchors = [results.get(p, {}) for p in PATHS[1:]]
        row = [name, ratio(total_ops(ours), [total_ops(results.get("native", {}))])]
        for c in latency:
            cell = ratio(ours.get(c), [a.get(c) for a in anchors])
            row.append(cell)
            if cell != "-":
                geo.setdefault(c, []).append(float(cell))
        row += [fmt(ours.get("tflite_cold_s"), 2), fmt(ours.get("tfjs_cold_s"), 2)]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for c, values in geo.items():
        lines.append(f"- geometric mean of the {c} latency ratio: {statistics.geometric_mean(values):.2f} "
                     f"over {len(values)} models")
    imports = [r["noxla"]["import_s"] for r in all_results.values() if "import_s" in r.get("noxla", {})]
    if imports:
        lines.append(f"- `import noxla` in a fresh process: {statistics.median(imports):.2f} s (median)")
    return "\n".join(lines) + "\n"


def export_cell(r: dict, kind: str) -> str:
    if f"{kind}_cold_s" not in r:
        return "-"
    return f"{r[f'{kind}_cold_s']:.2f} / {r[f'{kind}_warm_s']:.2f}"


def tfjs_version() -> str:
    try:
        return subprocess.run(["node", "--version"], check=False, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def chart(all_results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    columns = list(LATENCY_COLUMNS)
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
    parser.add_argument("--no-anchors", action="store_true", help="measure noxla only")
    parser.add_argument("--quantized", action="store_true",
                        help="also every quantized export: size and max error against float JAX")
    parser.add_argument("--export-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export_child:
        noxla_export_child(*args.export_child)
        return 0

    sys.path.insert(0, os.path.join(REPO, "tools"))
    from tests import zoo
    models = zoo.build()
    names = args.models or list(models)
    pythons = {} if args.no_anchors else {
        "native": ensure_venv("native", args.native_venv, args.venv_dir),
        "old": ensure_venv("old", args.old_venv, args.venv_dir)}
    os.makedirs(args.out, exist_ok=True)
    all_results = {}
    with tempfile.TemporaryDirectory(prefix="noxla-bench-") as work:
        for name in names:
            print(f"{name} ...", file=sys.stderr, flush=True)
            all_results[name] = measure(name, models[name], args, work, pythons)
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
        chart(all_results, os.path.join(args.out, "benchmark.png"))
        print(f"chart: {os.path.join(args.out, 'benchmark.png')}")
    except ImportError:
        print("no chart: matplotlib is not installed (pip install -e '.[bench]')")
    if _runner is not None:
        _runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
