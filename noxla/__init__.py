"""noxla: lower JAX programs to plain TensorFlow ops (no XLA) for TFLite, TF.js and SavedModel."""
import importlib

from noxla import lean_tensorflow

__version__ = "0.1.0"

lean_tensorflow.install()  # before anything imports TensorFlow (see noxla/lean_tensorflow.py)

# Resolved on first use: importing noxla stays cheap (the CLI's --help does not load TF), and
# the limitations engine can import noxla.errors without a cycle through the public API.
_EXPORTS = {
    "convert": "noxla.api", "check": "noxla.api",
    "export_saved_model": "noxla.api", "export_tflite": "noxla.api", "export_tfjs": "noxla.api",
    "NoxlaError": "noxla.errors", "TracingError": "noxla.errors", "UnsupportedError": "noxla.errors",
    "LoweringError": "noxla.errors", "ExportError": "noxla.errors", "ShapeMismatchError": "noxla.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'noxla' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
