"""Scans, selections and scatters legalized as TF's converter legalizes them: each TF op into the
one builtin of the same semantics (``CUMSUM``, ``TOPK_V2``, ``SCATTER_ND``, ``ROUND``)."""
from __future__ import annotations

import numpy as np

from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite.legalize import _attr, _dtype, _int32, _many, _out, _shape, _static, legalizer
from noxla.writers.tflite.model import Tensor


@legalizer("Cumsum")
def _cumsum(graph, node, x, axis):
    axis = int(_static(axis, "a cumulative sum's axis")) % len(x.shape)
    return _out(graph, "CUMSUM", node, [x, _int32(graph, axis)], exclusive=_attr(node, "exclusive", False),
                reverse=_attr(node, "reverse", False))


@legalizer("TopKV2")
def _top_k(graph, node, x, k):
    """LiteRT's TOPK_V2 orders equal values by index, as TF's kernel (the rules order NaNs and
    signed zeros themselves before it: ``lowering_rules.sorting``)."""
    if _dtype(node, 1) != np.int32:
        raise Uncovered(f"TopKV2 with {_dtype(node, 1)} indices in the TFLite writer")
    k = int(_static(k, "top_k's k"))
    outs = [Tensor(_shape(node, i), _dtype(node, i)) for i in range(2)]
    return _many(graph, "TOPK_V2", [x, _int32(graph, k)], outs)


@legalizer("ScatterNd")
def _scatter_nd(graph, node, indices, updates, shape):
    """LiteRT's SCATTER_ND sums repeated indices, as TF's; the rules send only indices in range
    (``lowering_rules.indexing``: an out-of-range update goes to a slot sliced off after)."""
    return _out(graph, "SCATTER_ND", node, [indices, updates, _int32(graph, _shape(node))])


@legalizer("Round")
def _round(graph, node, x):
    """LiteRT's ROUND rounds half to even, as TF's Round and JAX's round_to_nearest_even."""
    return _out(graph, "ROUND", node, [x])
