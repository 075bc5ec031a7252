"""A .tflite written from noxla's graph, without TensorFlow (issue 41, stage 2): the program recorded
as TF ops by the rules (``noxla.graph.lower``), legalized into LiteRT builtins (``legalize``), fused
as TF's converter fuses them (``fuse``), and serialized (``model``). An op or form not covered
raises ``Uncovered``: the export takes another path. See docs/graph.md ("TFLite writer")."""
from __future__ import annotations

import functools

from noxla.graph.dtypes import Uncovered
from noxla.graph.lower import Recorded, record_program
from noxla.graph.tflite import control_flow, empty, legalize_math, legalize_nn, legalize_scans  # noqa: F401  (register their legalizers)
from noxla.graph.tflite.decline import decline_what_the_tf_path_does_better
from noxla.graph.tflite.fuse import fuse
from noxla.graph.tflite.legalize import legalize
from noxla.graph.tflite.model import serialize
from noxla.graph.tflite.outputs import copy_passthrough_outputs
from noxla.graph.tflite.passes import simplify
from noxla.lowering_variants import needs_tflite_lowering
from noxla.shapes import dim_vars
from noxla.tracing import Program

__all__ = ["Uncovered", "graph_tflite_chunks", "tflite_chunks_of"]


def tflite_chunks_of(recorded: Recorded, passes_follow: bool = False) -> list:
    """The .tflite of a recorded program, as chunks for ``noxla.large_tflite``'s writer.
    ``passes_follow``: TF's path's flatbuffer passes run on the result (see ``decline``)."""
    graph = legalize(recorded)
    passes = functools.partial(_passes, passes_follow=passes_follow)
    passes(graph)
    control_flow.optimize(graph, passes)   # the same passes in each While/If body
    copy_passthrough_outputs(graph)
    return serialize(graph)


def _passes(graph, passes_follow: bool) -> None:
    fuse(graph)
    simplify(graph)
    decline_what_the_tf_path_does_better(graph, passes_follow)


def graph_tflite_chunks(program: Program, passes_follow: bool = False, converter_lowering: bool | None = None) -> list:
    """``program`` recorded in the lowering TF's path hands its TFLite converter and written:
    ``converter_lowering`` (``LoweringFor.tflite_converter``; TF's path lowers every signature of
    several so), by default where the program needs it (``needs_tflite_lowering``), as a lone one."""
    if dim_vars(program.in_avals):  # recorded (the TF.js writer takes them), not legalized yet
        raise Uncovered("polymorphic shapes")
    if converter_lowering is None:
        converter_lowering = needs_tflite_lowering(program)
    return tflite_chunks_of(record_program(program, tflite_converter=converter_lowering), passes_follow)
