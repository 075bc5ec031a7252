"""A .tflite written from noxla's graph, without TensorFlow (issue 41, stage 2): the program recorded
as TF ops by the rules (``noxla.graph.lower``), legalized into LiteRT builtins (``legalize``), fused
as TF's converter fuses them (``fuse``), and serialized (``model``). An op or form not covered
raises ``Uncovered``: the export takes another path. See docs/graph.md ("TFLite writer")."""
from __future__ import annotations

from noxla.graph.dtypes import Uncovered
from noxla.graph.lower import Recorded, record_program
from noxla.graph.tflite import control_flow, legalize_nn  # noqa: F401  (register their legalizers)
from noxla.graph.tflite.decline import decline_what_the_tf_path_does_better
from noxla.graph.tflite.fuse import fuse
from noxla.graph.tflite.legalize import legalize
from noxla.graph.tflite.model import serialize
from noxla.graph.tflite.passes import simplify
from noxla.tracing import Program

__all__ = ["Uncovered", "graph_tflite_chunks", "tflite_chunks_of"]


def tflite_chunks_of(recorded: Recorded) -> list:
    """The .tflite of a recorded program, as chunks for ``noxla.large_tflite``'s writer."""
    graph = legalize(recorded)
    _passes(graph)
    control_flow.optimize(graph, _passes)
    return serialize(graph)


def _passes(graph, body: bool = False) -> None:
    fuse(graph, body=body)
    simplify(graph)
    decline_what_the_tf_path_does_better(graph)


def graph_tflite_chunks(program: Program) -> list:
    """``program`` recorded (the lowering TF's path converts for a shared .tflite) and written."""
    return tflite_chunks_of(record_program(program))
