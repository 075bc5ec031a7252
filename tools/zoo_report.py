"""Per zoo model: TFLite op count, file sizes, and max error against JAX in every runtime.

    python tools/zoo_report.py [--batch 2] [MODEL ...]

Errors are max |runtime - JAX| over the outputs, relative to the output's scale (at least 1),
on random inputs (seed 0).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()

    import noxla
    from noxla.front.tracing import trace
    from noxla.runtimes import tflite_op_names
    from noxla.runtimes.verify import verify_artifacts
    from tests import zoo

    models = zoo.build()
    names = args.models or sorted(models)
    header = ["model", "tflite ops", "tflite KiB", "tfjs KiB", "tf (SavedModel)", "tflite", "tfjs (cpu)",
              "tfjs (wasm)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in names:
        model = models[name]
        example = model.inputs(args.batch)
        with tempfile.TemporaryDirectory() as out:
            written = {
                "tflite": noxla.export_tflite(model.fun, *example, path=os.path.join(out, "m.tflite")),
                "tfjs": noxla.export_tfjs(model.fun, *example, path=os.path.join(out, "js")),
                "saved_model": noxla.export_saved_model(model.fun, *example, path=os.path.join(out, "sm")),
            }
            errors = verify_artifacts(model.fun, trace(model.fun, example), example, written)
            ops = tflite_op_names(written["tflite"])
            tfjs_size = sum(os.path.getsize(os.path.join(written["tfjs"], f)) for f in os.listdir(written["tfjs"]))
            row = [name, str(len(ops)), f"{os.path.getsize(written['tflite']) / 1024:.1f}", f"{tfjs_size / 1024:.1f}"]
            row += [f"{errors[k]:.1e}" if not isinstance(errors[k], str) else errors[k]
                    for k in ("tf (SavedModel)", "tflite", "tfjs (cpu)", "tfjs (wasm)")]
        print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
