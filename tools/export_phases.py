"""Where a first .tflite export's time and memory go, in this fresh process, phase by phase.

    python3 tools/export_phases.py MODEL      (a tools/real_models.py name)

Phases: ``import noxla``, the imports its export brings (JAX, TensorFlow, then noxla's rules), building the
model, then each export step ``on_step`` reports (trace, lower, convert, write; the support check
sits between trace and lower). Per phase: wall and CPU seconds (all threads), resident memory at its
end and the process's peak so far (VmRSS / VmHWM). ``python3 -X importtime`` gives the imports' own
breakdown.
"""
from __future__ import annotations

import time

START = time.perf_counter()

import os  # noqa: E402  (after the clock starts)
import sys  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROWS: list = []
_LAST = [time.perf_counter(), time.process_time()]


def _memory() -> tuple[float, float]:
    with open("/proc/self/status") as f:
        values = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in f if line.startswith(("VmRSS", "VmHWM"))}
    return values["VmRSS"], values["VmHWM"]


def mark(name: str) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    ROWS.append((name, wall - _LAST[0], cpu - _LAST[1], *_memory()))
    _LAST[:] = [wall, cpu]


def main() -> int:
    import tempfile
    name = sys.argv[1]
    import noxla
    mark("import noxla")
    import jax  # noqa: F401  (each import on its own row: TensorFlow's is the accepted floor)
    mark("import jax")
    import tensorflow  # noqa: F401
    mark("import tensorflow (without Keras)")
    import noxla.pipeline.tf_path  # noqa: F401  (the exporters: noxla.export_tflite alone imports only the check's modules)
    export = noxla.export_tflite
    mark("noxla's export modules (rules, limitations, exporters)")
    import real_models
    model = real_models.build([name])[name]
    mark("build the model")

    def on_step(step: str, seconds) -> None:
        mark(f"  {step.split(' /')[0]}" if seconds is not None else f"  (before {step.split(' /')[0]})")
    with tempfile.TemporaryDirectory() as out:
        export(model.fun, *model.inputs(1), path=os.path.join(out, name + ".tflite"), on_step=on_step)
    print("| phase | wall s | CPU s | RSS MB | peak MB |\n|---|---|---|---|---|")
    for row in ROWS:
        print(f"| {row[0].strip()} | {row[1]:.2f} | {row[2]:.2f} | {row[3]:.0f} | {row[4]:.0f} |")
    print(f"| total | {time.perf_counter() - START:.2f} | {time.process_time():.2f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
