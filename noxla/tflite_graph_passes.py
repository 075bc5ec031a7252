"""Rewrites of a lowered, frozen GraphDef for one writer: the TFLite converter (builtins only).

The rules lower once for every target ("a rule does not know which writer reads its ops"); what
only TFLite needs is done here, on the graph the converter gets, in this order.
"""
from __future__ import annotations

from noxla.tflite_bfloat16 import carry_bfloat16_in_float32

# Each takes a GraphDef and returns it rewritten (in place or anew).
BUILTIN_PASSES = (carry_bfloat16_in_float32,)


def for_builtins(graph_def):
    """``graph_def`` after every pass, for a .tflite of builtins only (Flex runs TF's own kernels)."""
    for rewrite in BUILTIN_PASSES:
        graph_def = rewrite(graph_def)
    return graph_def
