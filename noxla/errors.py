"""noxla's errors, and how they point at the user's own source line."""
from __future__ import annotations

import importlib.util
import os

from lowering_rules.core.jax_compat import user_frames


class NoxlaError(Exception):
    """Base class of every error noxla raises on purpose."""


class TracingError(NoxlaError):
    """The function could not be traced to a jaxpr."""


class UnsupportedError(NoxlaError):
    """The up-front check found uses that the target cannot run (see ``.report``)."""

    def __init__(self, report):
        self.report = report
        super().__init__(report.format())


class ShapeMismatchError(NoxlaError):
    """An input at run time does not match its polymorphic shape specification."""


class LoweringError(NoxlaError):
    """A rule failed while emitting TF ops: a noxla bug, reported with the user's line."""


class ExportError(NoxlaError):
    """Writing or converting an exported model failed."""


class TensorFlowMissing(ExportError, ImportError):
    """What was asked needs TensorFlow, an optional dependency (``pip install "noxla[tf]"``) that is
    not installed: ``convert``, SavedModel, or an export noxla's own writers do not cover."""


def tensorflow_installed() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def require_tensorflow(what: str) -> None:
    """Raises ``TensorFlowMissing`` naming ``what`` (and why it needs TensorFlow) when it is not installed."""
    if not tensorflow_installed():
        raise TensorFlowMissing(f"{what} needs TensorFlow, which is not installed: pip install \"noxla[tf]\"")


class QuantizationError(NoxlaError, ValueError):
    """A quantization option or its representative data is wrong (raised before any work, or by int8
    calibration when a value turns infinite or NaN on the data)."""


def _package_dirs(*names: str) -> tuple[str, ...]:
    dirs = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(os.path.join(p, "") for p in spec.submodule_search_locations)
    return tuple(dirs)


# Frames in these packages are library internals, never the line a user wrote.
_LIBRARY_DIRS = _package_dirs("jax", "jaxlib", "flax", "equinox", "haiku", "optax", "numpy",
                              "noxla", "limitations")


def user_frame(source_info):
    """The innermost frame of user code that produced an equation, or None."""
    traceback = getattr(source_info, "traceback", None)
    if traceback is None:
        return None
    fallback = None
    for frame in user_frames(traceback):
        fallback = fallback or frame
        if not frame.file_name.startswith(_LIBRARY_DIRS):
            return frame
    return fallback


def source_line(source_info) -> str:
    frame = user_frame(source_info)
    if frame is None:
        return "<unknown source>"
    return f"{frame.file_name}:{frame.start_line} ({frame.function_name})"
