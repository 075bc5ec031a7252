"""What importing the check costs: the modules ``import noxla.pipeline.preflight`` may not load.

An export's first step is the preflight (trace, then every rule's declarations), so its imports are
every export's fixed cost before any work. TensorFlow is the lowering's (2 s); the others cost tens
of milliseconds each and only some rules' cases or lowerings use them, which import them on first
use: anything under ``jax.extend`` (its package imports Pallas; ``lowering_rules.core.jax_compat`` has
the same names) and ``jax.scipy``'s linalg and special (importing them jits dozens of functions).
Asserted on ``sys.modules``, not on timings, which vary from machine to machine.
"""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NOT_IMPORTED = ("tensorflow", "jax.extend", "jax._src.pallas", "jax.scipy.linalg", "jax._src.scipy.linalg",
                "jax.scipy.special", "jax._src.scipy.special", "flax")


def test_importing_the_preflight_loads_no_heavy_module_the_check_does_not_use():
    code = ("import sys, noxla.pipeline.preflight, lowering_rules\n"
            f"print(sorted(m for m in sys.modules if m.startswith({NOT_IMPORTED!r})))")
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", result.stdout
