"""A first export's cost as a user meets it, noxla beside litert-converter, and the CLI's.

    python3 tools/export_cost.py [MODEL ...] [--rounds N] [--out tools/benchmark_results/export_cost.md]

MODEL: tools/real_models.py names (default: MobileNetV3Small, EfficientNetB0, ResNet50, BERT-base and
Whisper-tiny's encoder). Each path exports each model in a fresh process that imports what it needs,
builds the model and exports it once to .tflite: noxla (``noxla.export_tflite``) in this environment,
litert-converter (jax.export -> StableHLO -> litert-converter, tools/bench_anchor.py) in its venv
(``benchmark.py --litert-venv``, default ~/.cache/noxla-bench/litert). Both processes build the very same
model from the same weights file with the same code (``real_models.rebuild``), so the difference is the
converter's: its imports, its work and the memory both take. Per process: CPU seconds (all threads) and
wall seconds from its start through the first export, the part of them that built the model, and the peak
resident memory (VmHWM) at that point. The paths of one model run back to back, ``--rounds`` times
(median reported). Then ``noxla export --tflite`` of the built-in example, the whole command (verification
included), under /usr/bin/time.
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

PROCESS_START = time.perf_counter()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tools"))

DEFAULT_MODELS = ["keras_mobilenet_v3_small", "keras_efficientnet_b0", "keras_resnet50", "bert_base",
                  "whisper_tiny_encoder"]
FIELDS = ("first_cpu_s", "first_s", "build_cpu_s", "first_peak_mb")


def noxla_child(name: str, work: str) -> None:
    """In a fresh process, as tools/bench_anchor.py does for an anchor: import noxla, rebuild the model
    from the weights file, export it once."""
    import numpy as np
    import real_models
    from bench_anchor import peak_mb

    import noxla
    with open(os.path.join(work, name + ".json")) as f:
        spec = json.load(f)
    data = np.load(os.path.join(work, name + ".npz"))
    weights = {k[len("w:"):]: data[k] for k in data.files if k.startswith("w:")}
    example = [data[f"x:{i}"] for i in range(spec["inputs"])]
    import jax  # noqa: F401  (before the build, as bench_anchor imports it: the build then costs the same)
    build = time.process_time()
    fun = real_models.rebuild(spec, weights)
    result = {"build_cpu_s": time.process_time() - build}
    noxla.export_tflite(fun, *example, path=os.path.join(work, "noxla", name + ".tflite"), overwrite=True)
    result.update(first_s=time.perf_counter() - PROCESS_START, first_cpu_s=time.process_time(),
                  first_peak_mb=peak_mb())
    with open(os.path.join(work, "noxla", name + ".json"), "w") as f:
        json.dump(result, f)


def run_noxla(name: str, work: str) -> dict:
    os.makedirs(os.path.join(work, "noxla"), exist_ok=True)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, work], check=False,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    record = os.path.join(work, "noxla", name + ".json")
    if proc.returncode or not os.path.exists(record):
        return {"failure": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    with open(record) as f:
        return json.load(f)


def run_cli(work: str) -> dict:
    """``noxla export --tflite`` of the built-in example in a fresh process: wall, user + sys CPU seconds
    (its child processes included) and peak resident memory, as /usr/bin/time reports them."""
    report = os.path.join(work, "cli_time.txt")
    command = [sys.executable, "-m", "noxla", "export", "--tflite", os.path.join(work, "example.tflite"), "--force"]
    proc = subprocess.run(["/usr/bin/time", "-o", report, "-f", "%e %U %S %M", *command], check=False,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO), cwd=work)
    if proc.returncode:
        return {"failure": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    with open(report) as f:
        wall, user, system, kib = f.read().split()[-4:]
    return {"first_s": float(wall), "first_cpu_s": float(user) + float(system), "first_peak_mb": int(kib) / 1024}


def median_record(records: list[dict]) -> dict:
    good = [r for r in records if "failure" not in r]
    if not good:
        return records[0]
    return {k: statistics.median(r[k] for r in good) for k in FIELDS if all(k in r for r in good)}


def cell(value, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def ratio(ours, theirs) -> str:
    ok = all(isinstance(v, (int, float)) and v > 0 for v in (ours, theirs))
    return f"{ours / theirs:.2f}" if ok else "-"


def compile_checkout() -> None:
    """noxla's modules compiled to bytecode once, as ``pip install`` compiles an installed package's
    (litert-converter's are): a checkout run with PYTHONDONTWRITEBYTECODE set (these machines set it)
    would otherwise compile about 110 modules in every fresh process, 0.3-0.45 CPU s of each export."""
    import compileall
    for package in ("noxla", "lowering_rules", "limitations"):
        compileall.compile_dir(os.path.join(REPO, package), quiet=1)


def report(results: dict, cli: dict, args, load: tuple) -> str:
    from benchmark import checkout_version
    lines = ["# First export: noxla vs litert-converter, fresh processes", "",
             f"noxla at {checkout_version()}; `{' '.join(['python3', 'tools/export_cost.py', *sys.argv[1:]])}`. "
             f"Median of {args.rounds} round(s); load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} "
             f"at the end, on {os.cpu_count()} cores (CPU seconds are what load inflates least). "
             "first = from the process's start through its first .tflite export (imports, building the "
             "model, exporting); build = the part that built the model (the same code and weights in both "
             "processes); export = first - build; peak = VmHWM at the end of the first export. noxla's "
             "modules byte-compiled first, as an installed package's are.", "",
             "| model | path | first CPU s | first wall s | build CPU s | export CPU s | peak MB "
             "| export CPU / litert's | peak / litert's |", "|" + "---|" * 9]
    for name, paths in results.items():
        litert = paths.get("litert", {})
        for path, r in paths.items():
            if "failure" in r:
                lines.append(f"| {name} | {path} | {r['failure']} |" + " |" * 6)
                continue
            export_cpu = r["first_cpu_s"] - r["build_cpu_s"]
            theirs = litert.get("first_cpu_s", 0) - litert.get("build_cpu_s", 0)
            mine = path == "noxla"
            lines.append(f"| {name} | {path} | {cell(r['first_cpu_s'], 2)} | {cell(r['first_s'], 2)} "
                         f"| {cell(r['build_cpu_s'], 2)} | {cell(export_cpu, 2)} | {cell(r['first_peak_mb'], 0)} "
                         f"| {ratio(export_cpu, theirs) if mine else ''} "
                         f"| {ratio(r['first_peak_mb'], litert.get('first_peak_mb')) if mine else ''} |")
    lines += ["", "`noxla export --tflite example.tflite --force` (the built-in example, verified), one fresh "
              "process:", "", "| CPU s | wall s | peak MB |", "|---|---|---|",
              f"| {cell(cli.get('first_cpu_s'), 2)} | {cell(cli.get('first_s'), 2)} "
              f"| {cell(cli.get('first_peak_mb'), 0)} |" if "failure" not in cli else f"| {cli['failure']} | | |"]
    return "\n".join(lines) + "\n"


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        noxla_child(*sys.argv[2:4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--litert-venv", default=os.path.expanduser("~/.cache/noxla-bench/litert"))
    parser.add_argument("--out", default="export_cost.md")
    args = parser.parse_args()
    import bench_exports
    import real_models

    from noxla.runtimes.verify import jax_outputs
    python = os.path.join(args.litert_venv, "bin", "python")
    compile_checkout()
    load = os.getloadavg()[0]
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="noxla-export-cost-") as work:
        for name in args.models:
            print(f"{name} ...", file=sys.stderr, flush=True)
            model = real_models.build([name])[name]
            example = model.inputs(1)
            bench_exports.write_anchor_inputs(name, model, example, jax_outputs(model.fun, example), work)
            del model
            records: dict = {"noxla": [], "litert": []}
            for _ in range(args.rounds):
                records["noxla"].append(run_noxla(name, work))
                records["litert"].append(bench_exports.anchor_export("litert", python, name, work)
                                         if os.path.exists(python) else {"failure": "no litert venv"})
            results[name] = {path: median_record(r) for path, r in records.items()}
            print(json.dumps(results[name]), file=sys.stderr, flush=True)
        cli = median_record([run_cli(work) for _ in range(args.rounds)])
    text = report(results, cli, args, (load, os.getloadavg()[0]))
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
