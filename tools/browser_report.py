"""Every zoo model in headless Chromium, per TF.js backend: max error against JAX and latency.

    python tools/browser_report.py [--batch 2] [--repeats 10] [MODEL ...]

Errors are max |browser - JAX| over the outputs, relative to the output's scale (at least 1), on
the zoo model's example inputs. Latency is the page's median over ``--repeats`` runs. Backends are
TF.js's defaults, as a user's page runs them (the tests also run WebGL with CPU forwarding off).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _error(actual, expected) -> float:
    import numpy as np
    expected = np.asarray(expected, np.float64)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    return float(np.max(np.abs(actual.astype(np.float64) - expected))) / scale if expected.size else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    import numpy as np

    from noxla.api import export
    from noxla.runtimes import BrowserRunner, _decode, _encode
    from noxla.runtimes.verify import jax_outputs
    from tests import zoo

    models = zoo.build()
    browser = BrowserRunner()
    backends = [b for b in ("webgl", "wasm", "cpu", "webgpu") if b in browser.backends()]
    print("| model | " + " | ".join(backends) + " |")
    print("|---|" + "---|" * len(backends), flush=True)
    try:
        for name in args.models or sorted(models):
            model = models[name]
            example = model.inputs(args.batch)
            expected = jax_outputs(model.fun, example)
            cells = []
            with tempfile.TemporaryDirectory() as out:
                # what a user's noxla.export_tfjs writes (noxla's graph where it covers the program)
                program = export(model.fun, example, tfjs=out, overwrite=True, demo_page=False).program
                inputs = {n: _encode(np.asarray(a)) for n, a in zip(program.in_names, example)}
                for backend in backends:
                    reply = browser.request({"model": os.path.abspath(out), "backend": backend,
                                             "repeats": args.repeats, "inputs": inputs})
                    if "error" in reply:
                        cells.append("fails: " + " ".join(reply["error"].split())[:80].replace("|", "/"))
                        continue
                    error = max(_error(_decode(reply["outputs"][n]), e) for n, e in zip(program.out_names, expected))
                    cells.append(f"{error:.1e}, {reply['ms']:.1f} ms")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    finally:
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
