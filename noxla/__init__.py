"""noxla: lower JAX programs to plain TensorFlow ops (no XLA) for TFLite, TF.js and SavedModel."""
from noxla.api import check, convert
from noxla.errors import ExportError, LoweringError, NoxlaError, TracingError, UnsupportedError
from noxla.export import export_saved_model, export_tflite, export_tfjs

__all__ = ["check", "convert", "export_saved_model", "export_tflite", "export_tfjs",
           "NoxlaError", "TracingError", "UnsupportedError", "LoweringError", "ExportError"]
__version__ = "0.1.0"
