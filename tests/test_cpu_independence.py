"""The suite must pass on any x86 CPU, not only the one it runs on.

TF picks its CPU kernels by CPU: it turns oneDNN on by default only on some x86 CPUs (Intel
ones with AVX-512 among them), and the oneDNN kernels accept more than TF's own (Eigen) ones:
dilated Conv3D, dilated or unequally strided DepthwiseConv2dNative. A lowering that relied
on them failed with "This is a noxla bug" on an AMD EPYC without AVX-512. The test suite runs
with this machine's default; the test below runs the rules that call TF's native kernels again
in TF eager, with oneDNN switched the other way, so every run covers both kernel families.

TFLite's XNNPACK also picks kernels by instruction set (its AVX2 log returned log(inf) = 88.38
where AVX-512 returns inf); the rules guard those edges themselves (``special.py``'s ``log``),
and the :edges cases check them on whichever CPU runs the suite.

Which CPUs the suite has passed on: AMD EPYC (family 25, AVX2 without AVX-512, oneDNN off by
default), 2026-11-22. No Intel machine was at hand; there, oneDNN is on by default, and this test
runs the oneDNN kernels here (as it runs Eigen's on a machine where oneDNN is the default).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tensorflow.python.util import _pywrap_util_port

# Rules whose lowering reaches TF kernels that differ between oneDNN and Eigen.
NATIVE_KERNEL_RULES = ("conv_general_dilated", "dot_general", "reduce_window_sum", "reduce_window_max",
                       "reduce_window_min")

_CHILD = """
import json, sys
from lowering_rules import RULES
from tests.differential import Runtimes, run_case
failures = []
for name in sys.argv[1:]:
    for case in RULES[name].cases:
        try:
            run_case(case, "tf_eager", Runtimes("", None))
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures.append(f"{case.id}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
print("RESULT " + json.dumps(failures))
"""


@pytest.mark.slow
def test_rules_pass_with_the_other_tf_cpu_kernels():
    onednn_here = _pywrap_util_port.IsMklEnabled()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0" if onednn_here else "1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _CHILD, *NATIVE_KERNEL_RULES], check=False, cwd=root,
                          env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"the child run failed:\n{proc.stderr[-3000:]}"
    failures = json.loads(lines[-1][len("RESULT "):])
    kernels = "Eigen (oneDNN off)" if onednn_here else "oneDNN"
    assert not failures, f"with TF's {kernels} CPU kernels:\n" + "\n".join(failures)
