"""The outputs as TF's path finishes them (``noxla.pipeline.tf_tflite_finish.finish_tflite``): an output that is a
program input is copied by a RESHAPE to its own shape with ``newShape`` set (LiteRT.js returned
garbage for an output that is an input: ``noxla.writers.tflite.flatbuffer.webgpu.copy_passthrough_outputs``); a
constant output (the converter's fold of ``x * 0``, of an empty product) stays a constant tensor,
with its exact value (``_write_constant_outputs``)."""
from __future__ import annotations

from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite.model import Graph, shape_of, unknown


def copy_passthrough_outputs(graph: Graph) -> None:
    if len({t.id for t in graph.outputs}) < len(graph.outputs):
        raise Uncovered("two outputs that are one tensor once simplified in the TFLite writer")
    inputs = {t.id for t in graph.inputs}
    for i, t in enumerate(graph.outputs):
        if t.id in inputs:
            static = {} if unknown(t.shape) else {"newShape": [int(d) for d in t.shape]}   # else a SHAPE's
            graph.outputs[i] = graph.add("RESHAPE", [t, shape_of(graph, t)], t.shape, t.dtype, **static)
