"""The zoo on LiteRT.js in headless Chromium: per model, the error against JAX and the median
latency on wasm and WebGPU, and the share of ops WebGPU's delegate placed on the GPU (with the ops
it refused). tests/test_litertjs.py runs the same measure as a test.

    python tools/bench_litertjs.py [--models cnn,lstm_classifier] [--repeats 20]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure(model, runner, directory: str, repeats: int = 0, batch: int = 1, webgpu_lowering: bool = True) -> dict:
    """One zoo model on every accelerator the check accepts: {accelerator: {max_error, ms, placement,
    ops} | {rejected: report}}, and the default .tflite's op count under "ops". WebGPU runs the
    .tflite exported for it (``tflite_target="litertjs-webgpu"``) unless ``webgpu_lowering`` is off."""
    from limitations.engine import check_jaxpr
    from lowering_rules.core.vocabulary import Target
    from noxla.api import export
    from noxla.front.tracing import trace
    from noxla.runtimes import tflite_op_names
    from noxla.runtimes.verify import jax_outputs, relative_error

    args = model.inputs(batch)
    closed_jaxpr = trace(model.fun, tuple(args)).closed_jaxpr
    expected = jax_outputs(model.fun, args)
    result: dict = {}
    for accelerator, target in (("wasm", Target.LITERTJS), ("webgpu", Target.LITERTJS_WEBGPU)):
        report = check_jaxpr(closed_jaxpr, target)
        if not report.ok:
            result[accelerator] = {"rejected": report.format()}
            continue
        exported = export(model.fun, args, tflite=os.path.join(directory, f"{model.name}_{accelerator}.tflite"),
                          overwrite=True, demo_page=False,
                          tflite_target=target if webgpu_lowering else Target.LITERTJS)
        path, program = exported.written["tflite"], exported.program
        ops = len(tflite_op_names(path))
        result.setdefault("ops", ops)
        outs, info = runner.run_timed(path, dict(zip(program.in_names, args)), accelerator, repeats)
        pairs = [(outs[n], e) for n, e in zip(program.out_names, expected)]
        result[accelerator] = {"max_error": max(relative_error(e, a) for a, e in pairs),
                               "shapes_match": all(a.shape == e.shape for a, e in pairs),
                               "ms": info["ms"], "placement": info["placement"], "ops": ops}
    return result


def webgpu_share(result: dict) -> float | None:
    """The share of the model's ops WebGPU ran (None when not run there)."""
    placement = result.get("webgpu", {}).get("placement")
    if placement is None:
        return None
    if placement["gpuOps"] is None:  # the delegate printed no counts: it took every op
        return 1.0 if placement["fullyAccelerated"] else None
    return placement["gpuOps"] / (placement["gpuOps"] + placement["cpuOps"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo model names (default: all)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--default-lowering", action="store_true",
                        help="run the default .tflite on WebGPU too (not the one exported for it)")
    args = parser.parse_args(argv)
    from noxla.runtimes.litertjs import LiteRtJsRunner
    from tests import zoo
    models = zoo.build()
    names = args.models.split(",") if args.models else sorted(models)
    runner = LiteRtJsRunner()
    print("| model | ops (wasm, WebGPU) | wasm error | wasm ms | WebGPU error | WebGPU ms | on WebGPU | left the GPU |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    try:
        with tempfile.TemporaryDirectory() as directory:
            for name in names:
                r = measure(models[name], runner, directory, args.repeats, webgpu_lowering=not args.default_lowering)
                ops = {a: r[a].get("ops", "-") for a in ("wasm", "webgpu")}
                cells = [name, f"{ops['wasm']}, {ops['webgpu']}"]
                for accelerator in ("wasm", "webgpu"):
                    a = r[accelerator]
                    cells += (["rejected", "-"] if "rejected" in a else [f"{a['max_error']:.1e}", f"{a['ms']:.2f}"])
                share = webgpu_share(r)
                refused = sorted({u["op"] for u in r["webgpu"].get("placement", {}).get("unsupported", [])})
                placement = r["webgpu"].get("placement") or {}
                counts = (f" ({placement['gpuOps']}/{placement['gpuOps'] + placement['cpuOps']})"
                          if placement.get("cpuOps") else "")
                cells += ["-" if share is None else f"{share:.0%}{counts}", ", ".join(refused)]
                print("| " + " | ".join(cells) + " |", flush=True)
    finally:
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
