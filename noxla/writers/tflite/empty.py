"""Empty tensors folded away, as grappler folds them on TF's path before the converter: an op whose
outputs hold no elements is a constant (LiteRT copies no empty tensor), a concatenation drops its
empty parts, and a reduction over an empty axis is its identity element. A run-time input with
no elements (the program's) is not folded: its outputs are constants only after TF's path runs it
(``noxla.pipeline.tf_tflite._outputs_of_a_constant_program``)."""
from __future__ import annotations

import numpy as np

from noxla.graph.core import Node
from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite.legalize import FOLDS, LEGALIZERS, _dtype, _shape, _static
from noxla.writers.tflite.model import Graph, unknown

# The ops written for an empty tensor of a run-time size (``model.EMPTY_AT_RUN_TIME``'s builtins).
RUN_TIME_EMPTY = {"Fill", "Cast", "Identity"}


def _identity(op: str, dtype: np.dtype):
    """A reduction's value over no elements (JAX's and TF's: the monoid's identity)."""
    floating = np.issubdtype(dtype, np.floating)
    info = np.finfo(dtype) if floating else (np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None)
    return {"Sum": 0, "Prod": 1, "Any": False, "All": True,
            "Max": -np.inf if floating else (info.min if info else False),
            "Min": np.inf if floating else (info.max if info else True)}.get(op)


def fold_empty(graph: Graph, node: Node, inputs: list, empties: set) -> list | None:   # one of legalize's FOLDS
    """The node's outputs where an empty tensor folds them (their ids added to ``empties``), else
    None: the node's legalizer writes it. ``Uncovered`` for another op reading a folded empty."""
    shapes = [_shape(node, i) for i in range(len(node.outputs))]
    if all(0 in s for s in shapes) and any(unknown(s) for s in shapes):
        # No constant holds a size known only at run time: TF's path writes the empty output's
        # FILL of its run-time shape (a CAST of it to a narrow type), which LiteRT runs.
        if node.op not in RUN_TIME_EMPTY:
            raise Uncovered(f"{node.op} of an empty tensor of a size known only at run time")
        return None
    if all(0 in s for s in shapes):
        outs = [graph.constant(np.zeros(s, _dtype(node, i))) for i, s in enumerate(shapes)]
        empties.update(t.id for t in outs)
        return outs
    read = [t.id in empties for t in inputs]
    if not any(read):
        return None
    if node.op == "ConcatV2":
        kept = [t for t, empty in zip(inputs[:-1], read) if not empty]
        if len(kept) == 1:
            return [kept[0]]
        return [LEGALIZERS["ConcatV2"](graph, node, *kept, inputs[-1])]
    value = _identity(node.op, _dtype(node))
    if value is not None and read == [True, False]:
        _static(inputs[1], "reduction axes")
        return [graph.constant(np.full(_shape(node), value, _dtype(node)))]
    raise Uncovered(f"{node.op} of an empty tensor in the TFLite writer")


FOLDS.append(fold_empty)
