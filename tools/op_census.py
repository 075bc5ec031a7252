"""Which ops each zoo model's exports are made of: TFLite builtins and TF.js graph nodes, counted.

    python tools/op_census.py [--batch 1] [--tfjs] [--latency] [MODEL ...]

Prints, per model, the TFLite op histogram (main graph and every subgraph) and, with --tfjs, the
TF.js model.json op histogram. --latency adds the LiteRT latency (1 thread, as tools/benchmark.py measures it)
and TF.js wasm latency (Node round trip included). Used to find where ops come from; the
side-by-side judge against the anchors is tools/benchmark.py.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def tfjs_ops(model_dir: str) -> collections.Counter:
    with open(os.path.join(model_dir, "model.json")) as f:
        topology = json.load(f)["modelTopology"]
    nodes = list(topology.get("node", []))
    for function in topology.get("library", {}).get("function", []):
        nodes += function.get("nodeDef", [])
    return collections.Counter(n["op"] for n in nodes if n["op"] not in ("Const", "Placeholder", "Identity"))


def histogram(counter: collections.Counter) -> str:
    return ", ".join(f"{op} {n}" for op, n in counter.most_common())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tfjs", action="store_true")
    parser.add_argument("--latency", action="store_true")
    parser.add_argument("--strict", action="store_true", help="export with strict=True (IEEE-exact lowerings)")
    args = parser.parse_args()

    import noxla
    from noxla.runtimes import tflite_op_names
    from tests import zoo

    models = zoo.build()
    runner = None
    kwargs = {"strict": True} if args.strict else {}
    for name in args.models or sorted(models):
        model = models[name]
        example = model.inputs(args.batch)
        with tempfile.TemporaryDirectory() as out:
            path = noxla.export_tflite(model.fun, *example, path=os.path.join(out, "m.tflite"), **kwargs)
            ops = collections.Counter(tflite_op_names(path))
            line = f"{name}: tflite {sum(ops.values())} ops"
            if args.latency:
                from noxla.front.tracing import trace
                from tools.benchmark import alone_ms
                named = dict(zip(trace(model.fun, example).in_names, example))
                line += f", {alone_ms('LiteRT', {'tflite': path}, named, 50):.3f} ms"
            print(line + "\n  " + histogram(ops))
            if args.tfjs or args.latency:
                js = noxla.export_tfjs(model.fun, *example, path=os.path.join(out, "js"), **kwargs)
                js_ops = tfjs_ops(js)
                line = f"  tfjs {sum(js_ops.values())} nodes"
                if args.latency:
                    from noxla.front.tracing import trace
                    from noxla.runtimes import TfjsRunner
                    runner = runner or TfjsRunner()
                    named = dict(zip(trace(model.fun, example).in_names, example))
                    runner.run(js, named, "wasm")
                    start = time.perf_counter()
                    for _ in range(20):
                        runner.run(js, named, "wasm")
                    line += f", wasm {(time.perf_counter() - start) / 20 * 1e3:.2f} ms"
                print(line + "\n  " + histogram(js_ops), flush=True)
    if runner is not None:
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
