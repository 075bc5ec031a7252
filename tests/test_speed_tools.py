"""The benchmark's interleaved latency measurement, and the light import of the TF.js converter."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_interleaved_ratio_is_the_median_of_per_round_ratios():
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from benchmark import interleaved
    # A machine whose speed changes every round: path "a" always costs twice "b" in the same round.
    rounds, calls = iter(range(10**6)), []

    def timer(cost):
        def time_batch(k):
            calls.append(k)
            slowdown = 1 + (next(rounds) // 2 % 7)  # both paths of a round see the same slowdown
            return cost * slowdown
        return time_batch
    ms, ratios = interleaved({"a": timer(2.0), "b": timer(1.0)}, rounds=9, batch_ms=10.0, warmup_ms=0)
    assert ratios[("a", "b")] == pytest.approx(2.0) and ratios[("b", "a")] == pytest.approx(0.5)
    assert calls[2:] == [10] * 18  # one run each to estimate, then batches lasting 10 ms of "b"
    assert ms["a"] > ms["b"]


@pytest.mark.slow
def test_tfjs_converter_imports_without_keras_and_tensorflowjs_still_imports_whole():
    code = (
        "import sys\n"
        "from noxla.tfjs_converter_fixes import tfjs_module\n"
        "m = tfjs_module('tensorflowjs.converters.tf_saved_model_conversion_v2')\n"
        "assert not [k for k in sys.modules if k.startswith(('tf_keras', 'tensorflow_hub', 'tensorflow_decision'))]\n"
        "import tensorflowjs\n"
        "assert tensorflowjs.converters.convert_tf_saved_model is m.convert_tf_saved_model\n"
        "assert tensorflowjs.converters.convert is not None\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
