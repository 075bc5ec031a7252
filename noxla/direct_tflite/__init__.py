"""A .tflite written straight from the jaxpr, without TensorFlow (the TF path's first export pays
TensorFlow's import, about 2 s and 450 MB, before anything else).

``tflite_chunks(program)`` emits each primitive as the TFLite builtins the TF path's converter
would write for it (``emit``, ``emit_nn``), makes the converter's fusions (``fuse``), and returns
the file as chunks for ``noxla.large_tflite``'s writer. A program using anything not covered
raises ``Uncovered`` and is exported through TensorFlow as before; so is every export with options
this writer does not take (``covers``)."""
from __future__ import annotations

from noxla.direct_tflite import emit_gather, emit_nn  # noqa: F401  (register their emitters)
from noxla.direct_tflite.emit import ONLY_FUSED, Uncovered, lower_program
from noxla.graph import lone_default_tflite, write_covered
from noxla.graph.tflite.decline import decline_patterns_its_rules_shorten, decline_what_the_tf_path_does_better
from noxla.graph.tflite.fuse import fuse
from noxla.graph.tflite.model import serialize
from noxla.preflight import Cleared, ExportOptions, OnStep

__all__ = ["Uncovered", "covers", "export_direct", "tflite_chunks"]


def covers(options: ExportOptions) -> bool:
    """Whether an export with these options may take the direct writer (``graph.lone_default_tflite``)."""
    return lone_default_tflite(options)


def tflite_chunks(program) -> list:
    graph = lower_program(program.closed_jaxpr, program.in_names, program.out_names)
    fuse(graph, ONLY_FUSED, _declined)
    return serialize(graph)


def _declined(graph) -> None:
    decline_what_the_tf_path_does_better(graph)
    decline_patterns_its_rules_shorten(graph)


def export_direct(cleared: Cleared, path: str, overwrite: bool, on_step: OnStep | None = None) -> str | None:
    """The .tflite written at ``path`` by the direct writer; None (nothing written) when the program
    uses something it does not cover, which the TF path then exports."""
    return write_covered(cleared, path, overwrite, on_step, "lower+convert (direct)", tflite_chunks,
                         "direct writer: {}; lowering through TensorFlow")
