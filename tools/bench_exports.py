"""Each path's exports for tools/benchmark.py, every one in a fresh process so that the first is cold:
noxla's in a child process (this Python, or --noxla-venv: the checkout installed as a user installs
it), the anchors' in their venvs (tools/bench_anchor.py).

    python tools/bench_exports.py --child KIND NAME OUT SOURCE     (noxla's child; benchmark.py runs it)
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

PROCESS_START = time.perf_counter()  # a noxla export child's first export counts from here (stdlib imports aside)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ("noxla", "native", "old", "litert")

VENV_PACKAGES = {
    # No tensorflowjs here, so pip takes the newest TF (tensorflowjs holds TF back at 2.19).
    "native": ["jax", "flax", "tensorflow-cpu", "ai-edge-litert"],
    # The last releases with enable_xla=False.
    "old": ["jax==0.4.30", "jaxlib==0.4.30", "tensorflow-cpu==2.17.0", "numpy<2", "flax==0.8.5",
            "ai-edge-litert"],
    # No TensorFlow: the converter takes jax.export's StableHLO. Keras for keras.applications (JAX backend).
    "litert": ["litert-converter", "jax", "flax", "keras"],
    # noxla as a user installs it: its wheel and dependencies, nothing of this machine's environment
    # (whose IPython, pandas and matplotlib Keras imports when it finds them: 0.7 s of a first export).
    "noxla": [REPO],
}

# ---------------------------------------------------------------------------------------------
# noxla exports, each in a fresh process so the first one is cold.

def noxla_export_child(kind: str, name: str, out: str, source: str = "zoo") -> None:
    """Run in a fresh process: import, build the model (``source``: the zoo, or tools/real_models.py's
    "real" or "tiny" models), then time two exports of it."""
    from bench_anchor import peak_mb
    start = PROCESS_START
    import noxla
    # The writer the export will take, so that the cold column times an export after its imports:
    # the graph's .tflite or TF.js writer (no TF; a program it does not cover then imports TF within
    # the cold export, as a user's would).
    if kind == "tflite":
        import noxla.writers.tflite  # noqa: F401
    else:
        import noxla.writers.tfjs.from_graph  # noqa: F401
    export = noxla.export_tflite if kind == "tflite" else noxla.export_tfjs
    import_s = time.perf_counter() - start
    build_start = time.perf_counter()
    if source == "zoo":
        sys.path.append(REPO)  # tests.zoo, after site-packages: a venv's installed noxla comes first
        from tests import zoo
        model = zoo.build([name])[name]   # this model only, as the anchors load theirs
    else:
        import real_models
        model = real_models.build([name], tiny=source == "tiny")[name]
    example = model.inputs(1)
    build_s = time.perf_counter() - build_start
    suffix = ".tflite" if kind == "tflite" else "_tfjs"
    timings = {"import_s": import_s, "noxla": os.path.dirname(noxla.__file__)}
    for label in ("cold_s", "warm_s"):
        path = os.path.join(out, f"{name}_{label}{suffix}")
        start, cpu = time.perf_counter(), time.process_time()
        export(model.fun, *example, path=path, overwrite=True)
        timings[label] = time.perf_counter() - start
        # CPU seconds of the process (all its threads): what the export costs, whatever else runs.
        timings[label.replace("_s", "_cpu_s")] = time.process_time() - cpu
        timings["path"] = path
        if label == "cold_s":  # as a user's first export costs: the whole process so far
            timings["first_s"] = time.perf_counter() - PROCESS_START
            timings["exporter_s"] = timings["first_s"] - build_s  # less building the model
    timings["peak_mb"] = peak_mb()
    with open(os.path.join(out, f"{name}_{kind}.json"), "w") as f:
        json.dump(timings, f)


def noxla_exports(name: str, out: str, source: str = "zoo", kinds=("tflite", "tfjs"), python=None) -> dict:
    """noxla's exports of one model, each kind in its own process: this checkout under this Python,
    or under ``python`` (a venv) the noxla installed there."""
    result: dict = {}
    for kind in kinds:
        proc = subprocess.run([python or sys.executable, os.path.abspath(__file__), "--child", kind, name, out, source],
                              check=False, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH="" if python else REPO))
        record = os.path.join(out, f"{name}_{kind}.json")
        if proc.returncode or not os.path.exists(record):
            result.setdefault("failure", process_failure(proc))
            continue
        with open(record) as f:
            timings = json.load(f)
        result[kind] = timings["path"]
        result[f"{kind}_cold_s"], result[f"{kind}_warm_s"] = timings["cold_s"], timings["warm_s"]
        result[f"{kind}_cold_cpu_s"] = timings["cold_cpu_s"]
        result[f"{kind}_first_s"], result[f"{kind}_peak_mb"] = timings["first_s"], timings["peak_mb"]
        result[f"{kind}_exporter_s"] = timings["exporter_s"]
        result[f"{kind}_import_s"] = timings["import_s"]
        if python and os.path.commonpath([timings["noxla"], REPO]) == REPO:
            result["failure"] = f"{python} imported noxla from the checkout, not from its install"
    return result


def process_failure(proc) -> str:
    """Why an export process left no record: the signal that killed it (its last stderr line is
    then an earlier log line), else that last line."""
    if proc.returncode < 0:
        signal = -proc.returncode
        return f"export process killed by signal {signal}" + (" (SIGKILL: out of memory?)" if signal == 9 else "")
    return (proc.stderr.strip().splitlines() or ["?"])[-1][:200]


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
    if hasattr(model, "spec"):  # tools/real_models.py: its spec and weights say how to rebuild it
        weights, spec = model.weights, model.spec
    else:
        kind, module = model.fun.flax[0], model.fun.flax[1]
        if kind == "linen":
            from flax.traverse_util import flatten_dict
            weights = flatten_dict(jax.tree_util.tree_map(np.asarray, dict(model.fun.flax[2])), sep="/")
        else:
            from flax import nnx
            leaves = jax.tree_util.tree_flatten_with_path(nnx.state(module))[0]
            weights = {nnx_path_key(path): np.asarray(leaf) for path, leaf in leaves}
        spec = {"class": type(module).__name__, "kind": kind}
    arrays = {f"w:{k}": v for k, v in weights.items()}
    arrays.update({f"x:{i}": x for i, x in enumerate(example)})
    arrays.update({f"y:{i}": y for i, y in enumerate(expected)})
    np.savez(os.path.join(work, name + ".npz"), **arrays)
    with open(os.path.join(work, name + ".json"), "w") as f:
        json.dump({**spec, "inputs": len(example), "outputs": len(expected)}, f)


def first_exports(exports: dict[str, Callable[[], dict]], runs: int) -> dict:
    """Each path's ``export()`` result, its first-export time and peak memory the medians over ``runs``
    fresh processes. Building a Keras model varies by a second or more between processes, more than the
    exporters' difference on a CNN: the paths take turns, once each per round (the order reversed
    every other round), so that a slow spell of a shared machine falls on every path alike."""
    records: dict = {path: [] for path in exports}
    for round_ in range(runs):
        for path in (list(exports) if round_ % 2 == 0 else list(reversed(exports))):
            records[path].append(exports[path]())
    results = {}
    for path, (result, *again) in records.items():
        for key in ("tflite_first_s", "tflite_exporter_s", "tflite_peak_mb"):
            values = [r.get(key) for r in (result, *again)]
            if None not in values:
                result[key] = statistics.median(values)
        results[path] = result
    return results


def refresh_noxla_venv(python: str) -> None:
    """The checkout's current noxla into its venv (made with its dependencies by ``ensure_venv``)."""
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", REPO], check=True,
                   capture_output=True)
    # The first process after a reinstall imported noxla in 2.4 s, the next ones in 0.6-0.9 s.
    subprocess.run([python, "-c", "import noxla.writers.tflite, noxla.pipeline.tf_path"], check=True,
                   capture_output=True)


def anchor_export(mode: str, python: str, name: str, work: str) -> dict:
    script = os.path.join(REPO, "tools", "bench_anchor.py")
    proc = subprocess.run([python, script, mode, name, work], check=False, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO))
    record = os.path.join(work, mode, name + ".json")
    if not os.path.exists(record):
        return {"failure": process_failure(proc)}
    with open(record) as f:
        result = json.load(f)
    if isinstance(result.get("jax_error"), float) and result["jax_error"] > 1e-4:
        result["failure"] = f"rebuilt model differs from the zoo's (max error {result['jax_error']:.2e})"
    if "failure" in result:
        return result
    result["tflite"] = os.path.join(work, mode, name + ".tflite")
    result["tflite_cold_s"], result["tflite_warm_s"] = result["cold_s"], result["warm_s"]
    result["tflite_first_s"], result["tflite_peak_mb"] = result.get("first_s"), result.get("peak_mb")
    if "first_s" in result and "build_s" in result:
        result["tflite_exporter_s"] = result["first_s"] - result["build_s"]
    if mode == "old" and result.get("saved_model"):
        result.update(old_tfjs(result["saved_model"], os.path.join(work, mode, name + "_tfjs")))
    return result


def old_tfjs(saved_model: str, out: str) -> dict:
    """The old path's TF.js model: its SavedModel through this environment's tensorflowjs converter."""
    from tests.tfjs_oracle import converter_module, vector_bias_adds_only
    conversion = converter_module("tensorflowjs.converters.tf_saved_model_conversion_v2")
    try:
        # With noxla's guard against the converter fusing non-vector addends, which TF.js's wasm
        # backend then rejects (the old path's Conv + broadcast Add hits it too).
        with vector_bias_adds_only():
            conversion.convert_tf_saved_model(saved_model, out, control_flow_v2=True)
    except Exception as e:  # e.g. UnsortedSegmentSum, which the converter refuses
        return {"tfjs_failure": f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"}
    return {"tfjs": out}


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    noxla_export_child(*sys.argv[2:])
