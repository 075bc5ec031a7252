"""The targets noxla lowers for (defined in ``lowering_rules.vocabulary``), and the runtimes that execute each of
them in tests."""
from __future__ import annotations

from lowering_rules.vocabulary import ALL_TARGETS, Target

# The runtimes a differential case runs in, and the target whose support they prove.
RUNTIMES = {
    "tf_eager": Target.TF,
    "tf_graph": Target.TF,
    "tflite": Target.TFLITE,
    "tfjs_cpu": Target.TFJS,
    "tfjs_wasm": Target.TFJS,
    # TF.js in headless Chromium (tests/differential.py): every zoo model, a sample of rule cases.
    "chromium_webgl": Target.TFJS_WEBGL,
    "chromium_wasm": Target.TFJS,
    "chromium_cpu": Target.TFJS,
    "chromium_webgpu": Target.TFJS,
}
BROWSER_RUNTIMES = tuple(r for r in RUNTIMES if r.startswith("chromium_"))

__all__ = ["ALL_TARGETS", "BROWSER_RUNTIMES", "RUNTIMES", "Target"]
