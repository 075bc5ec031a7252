"""Ops of TF's ``gen_xla_ops`` that a rule emits only in the lowering the TFLite converter reads
(``LoweringFor.tflite_converter``), recorded for the graph's TFLite writer, which legalizes them
as the converter does (``noxla.writers.tflite.legalize``). Never in a TF.js or replayed graph: those
are recorded without ``tflite_converter``."""
from __future__ import annotations

from noxla.graph import ops
from noxla.graph.convert import convert_to_tensor
from noxla.graph.core import Tensor
from noxla.graph.dtypes import Uncovered


def xla_dynamic_update_slice(input, update, indices, name=None) -> Tensor:
    """``update`` written into ``input`` at ``indices`` (clamped into it, as XLA's op and TFLite's
    DYNAMIC_UPDATE_SLICE clamp): the rules' KV-cache write at a run-time position."""
    x, update, indices = convert_to_tensor(input), convert_to_tensor(update), convert_to_tensor(indices)
    if update.dtype != x.dtype or indices.dtype.name != "int32":
        raise Uncovered(f"XlaDynamicUpdateSlice of {x.dtype.name} by {update.dtype.name} at {indices.dtype.name}")
    attrs = {"T": ops.type_attr(x.dtype), "Tindices": ops.type_attr(indices.dtype)}
    return ops.emit1("XlaDynamicUpdateSlice", [x, update, indices], attrs, x.dtype, tuple(x.shape.dims), None, name)


NAMESPACE = {"xla_dynamic_update_slice": xla_dynamic_update_slice}
