"""Where a small model's call goes on LiteRT.js wasm against onnxruntime-web wasm (issue 40's mlp).

    nice -n 5 python tools/litertjs_call_cost.py [--rounds 300] [--batch-ms 10] [--json FILE]

One headless Chromium page (tools/ort_web/call_cost.html) holds both libraries in both of their
builds: LiteRT.js 2.5.3's default wasm build and its JSPI build (`loadLiteRt(dir, {jspi: true})`,
which noxla's page loads for WebGPU's per-op fallback), onnxruntime-web 1.30.0's default bundle and
its WebGPU bundle (tools/ort_web/index.html's). It runs the zoo's mlp and a one-op model (x * 2 on
[1, 64]: what a call costs with next to no compute) as a user would call them, the input tensor
made once or per call, every output read back into JS; and the parts of LiteRT.js's `run` on their
own. All variants are timed in interleaved rounds (a batch of calls each, ~batch-ms long, order
rotated per round); per variant the median ms per call, and each LiteRT.js variant's median per-round
ratio to onnxruntime-web's call of the same shape. Needs tools/browser_benchmark.py's jax2onnx venv
and onnxruntime-web (it installs them on first use).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
SHAPE = (1, 64)


def scale(x):
    return x * 2.0


def onnx_child(out: str) -> None:
    """Runs in the jax2onnx venv: mlp.onnx and scale.onnx in ``out``."""
    import jax
    from jax2onnx import to_onnx

    from tests import zoo
    mlp = zoo.build()["mlp"]
    for name, fun in (("mlp", mlp.fun), ("scale", scale)):
        to_onnx(fun, [jax.ShapeDtypeStruct(SHAPE, "float32")], return_mode="file",
                output_path=os.path.join(out, f"{name}.onnx"))


def ratio_rows(per_call: dict[str, list[float]]) -> list[str]:
    """Per LiteRT.js variant, its median ms and median per-round ratio to onnxruntime-web's variant of
    the same model and input shape, in each bundle."""
    rows = []
    for name, times in per_call.items():
        line = f"{statistics.median(times) * 1e3:9.2f} us  {name}"
        if " LiteRT.js " in name and ":" not in name:
            model, rest = name.split(" LiteRT.js ", 1)
            how = rest.split(", ", 1)[1].split(", ")[0]
            for bundle in ("plain", "webgpu"):
                other = per_call.get(f"{model} ORT-web {bundle}, {how}")
                if other:
                    line += f"  / ORT {bundle} {statistics.median(a / b for a, b in zip(times, other)):.3f}"
        rows.append(line)
    return rows


def main(argv=None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--onnx-child":
        onnx_child(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batch-ms", type=float, default=10.0)
    parser.add_argument("--json", help="also write the per-round times here")
    parser.add_argument("--out", help="also write the table as Markdown here")
    args = parser.parse_args(argv)

    import shutil
    import subprocess
    import time

    import numpy as np

    from noxla.api import export
    from noxla.runtimes import _LineRunner, chromium_path, node_modules_dir
    from tests import zoo
    from tools import browser_benchmark as bb

    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    modules = bb.ort_modules(None)
    python = bb.jax2onnx_python(bb.DEFAULT_VENV_PYTHON)
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([python, os.path.abspath(__file__), "--onnx-child", work], check=True, cwd=REPO)
        mlp = zoo.build()["mlp"]
        models = []
        for name, fun, example in (("mlp", mlp.fun, mlp.inputs(1)), ("scale", scale, [np.zeros(SHAPE, np.float32)])):
            path = export(fun, example, tflite=os.path.join(work, f"{name}.tflite"), overwrite=True,
                          demo_page=False).written["tflite"]
            models.append({"name": name, "tflite": path, "onnx": os.path.join(work, f"{name}.onnx"),
                           "shape": list(SHAPE), "parts": True})

        class CallCostRunner(_LineRunner):
            label = "call-cost page in Chromium"
            restart_after_error = False
        env = dict(os.environ, NODE_PATH=node_modules_dir(), NOXLA_CHROMIUM=chromium_path() or "/usr/bin/chromium",
                   ORT_DIST=os.path.join(modules, "onnxruntime-web", "dist"),
                   NOXLA_CHROMIUM_JS=os.path.join(REPO, "noxla", "runtimes", "tfjs_runner", "chromium.js"))
        runner = CallCostRunner([shutil.which("node"), os.path.join(REPO, "tools", "ort_web", "call_cost.js")], env)
        try:
            reply = runner.request({"models": models, "rounds": args.rounds, "batchMs": args.batch_ms})
        finally:
            runner.close()
    if "error" in reply:
        raise SystemExit(reply["error"])
    print("first output value per variant (they must agree per model):")
    for name, value in reply["checks"].items():
        print(f"  {value:+.6f}  {name}")
    head = f"median per call over {args.rounds} interleaved rounds; ratio = median per-round ratio:"
    print(head)
    print("\n".join(ratio_rows(reply["perCall"])))
    if args.out:
        given = " ".join(sys.argv[1:] if argv is None else argv)
        what = __doc__.split("\n\n")[2].replace("\n", " ")
        with open(args.out, "w") as f:
            f.write("\n".join([
                "# LiteRT.js wasm against onnxruntime-web wasm, per call, in one page", "",
                f"Command: `nice -n {os.nice(0)} python tools/litertjs_call_cost.py {given}`", "",
                f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, headless Chromium, 2-core machine "
                f"shared with other jobs (load average {load} over 1/5/15 min at the start). {what}", "",
                head, "", "```", *ratio_rows(reply["perCall"]), "```", ""]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reply, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
