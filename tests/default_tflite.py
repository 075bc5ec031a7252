"""The .tflite a user's default export writes (``noxla.export_tflite``), run in LiteRT, and which
writer wrote it: noxla's graph's TFLite writer where it covers the program, else TF's path
(NOXLA_TFLITE_GRAPH=0: TF's path always). JAX's harnesses (tests/jax_harnesses.py) and the fuzzer
run their "tflite" through it. It imports no TensorFlow, so it also runs where TensorFlow is not
installed; an export that needs TF's path then raises ``TensorFlowMissing`` before writing."""
from __future__ import annotations

import itertools
import os
from typing import Callable, Sequence

# The export's step while the graph's TFLite writer writes; a note starting with DECLINED follows
# where it does not cover the program (or is turned off) and TF's path writes the file.
GRAPH_STEP, DECLINED = "lower+write (graph tflite)", "graph tflite writer:"


class DefaultTflite:
    """Exports into ``scratch`` and runs; ``writer``: "graph" or "tf", the last export's writer
    (a crash inside the graph's writer is the graph's), "" before any."""

    def __init__(self, scratch: str):
        self.scratch = scratch
        self.writer = ""
        self._serial = itertools.count()

    def run(self, fun: Callable, args: Sequence, program, strict: bool = False, polymorphic_shapes=None) -> list:
        """``program`` (``fun`` traced on ``args``) exported as users export it, and its outputs."""
        import noxla
        from noxla.runtimes import run_tflite
        path = os.path.join(self.scratch, f"default_{next(self._serial)}.tflite")
        steps: list[str] = []
        self.writer = ""
        try:
            noxla.export_tflite(fun, *args, path=path, strict=strict, overwrite=True,
                                polymorphic_shapes=polymorphic_shapes, on_step=lambda step, seconds: steps.append(step))
        finally:
            declined = any(s.startswith(DECLINED) for s in steps)
            self.writer = "graph" if GRAPH_STEP in steps and not declined else "tf"
        try:
            outs = run_tflite(path, dict(zip(program.in_names, args)))
        finally:
            os.remove(path)
        return [outs[n] for n in program.out_names]
