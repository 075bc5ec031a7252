"""Rewrites of a lowered, frozen GraphDef for one writer: the TFLite converter (builtins only).

The rules lower once for every target ("a rule does not know which writer reads its ops"); what
only TFLite needs is done here, on the graph the converter gets, in this order. int8 quantization
(calibrated) gets every pass but the bfloat16 carry: TF 2.21's converter then writes bfloat16 as
BFLOAT16 tensors and CASTs, which LiteRT 2.3 runs (the quantizer aborted on the rewritten graph).
"""
from __future__ import annotations

from noxla.writers.tflite.converter.bfloat16 import carry_bfloat16_in_float32
from noxla.writers.tflite.converter.products import keep_activations_after_products
from noxla.writers.tflite.converter.transposes import keep_operand_order

# Each rewrites a GraphDef in place and says whether it changed anything.
BUILTIN_PASSES = (carry_bfloat16_in_float32, keep_operand_order, keep_activations_after_products)


def for_builtins(graph_def, calibrated: bool = False) -> bool:
    """Every pass on ``graph_def``, for a .tflite of builtins only (Flex runs TF's own kernels):
    whether any changed it. ``calibrated``: for int8 quantization, without the bfloat16 carry."""
    changed = False
    for rewrite in BUILTIN_PASSES:
        if calibrated and rewrite is carry_bfloat16_in_float32:
            continue
        changed = rewrite(graph_def) or changed
    return changed

