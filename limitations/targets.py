"""The targets noxla lowers for, and the runtimes that execute each of them in tests."""
from __future__ import annotations

import enum


class Target(str, enum.Enum):
    TF = "tf"                    # TensorFlow itself: eager, tf.function, SavedModel
    TFLITE = "tflite"            # .tflite with TFLITE_BUILTINS only
    TFLITE_FLEX = "tflite_flex"  # .tflite that may also use SELECT_TF_OPS (Flex)
    TFJS = "tfjs"                # TF.js graph model

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def parse(cls, name: "str | Target") -> "Target":
        if isinstance(name, Target):
            return name
        try:
            return cls(name.lower().replace("-", "_"))
        except ValueError:
            choices = ", ".join(t.value for t in cls)
            raise ValueError(f"unknown target {name!r}; choose one of: {choices}") from None


_LABELS = {
    Target.TF: "TF",
    Target.TFLITE: "TFLite (builtins)",
    Target.TFLITE_FLEX: "TFLite (Flex)",
    Target.TFJS: "TF.js",
}

ALL_TARGETS = tuple(Target)

# The runtimes a differential case runs in, and the target whose support they prove.
RUNTIMES = {
    "tf_eager": Target.TF,
    "tf_graph": Target.TF,
    "tflite": Target.TFLITE,
    "tfjs_cpu": Target.TFJS,
    "tfjs_wasm": Target.TFJS,
    # TF.js in headless Chromium (tests/differential.py): every zoo model, a sample of rule cases.
    "chromium_webgl": Target.TFJS,
    "chromium_wasm": Target.TFJS,
    "chromium_cpu": Target.TFJS,
    "chromium_webgpu": Target.TFJS,
}
BROWSER_RUNTIMES = tuple(r for r in RUNTIMES if r.startswith("chromium_"))
