"""bfloat16 inside a .tflite written from noxla's graph: carried in float32, each computed value
rounded to bfloat16, as TF's path carries it in the GraphDef its converter reads.

LiteRT's builtins compute no bfloat16. Before legalizing, every bfloat16 dtype of the graph and of
its loop and conditional bodies becomes float32 (constants exactly), and each node computing a new
bfloat16 value (a Cast to it, any op but ``half_float_carry.EXACT``'s moves, picks and comparisons)
is followed by TF's path's rounding on the float's bits (``converter.bfloat16.rounded_on_bits``:
BITCAST, integer FLOOR_DIV, FLOOR_MOD, ADD, MUL and SELECT_V2, which LiteRT computes exactly, float32
subnormals included), through the pass TF.js's writer carries half floats with
(``noxla.writers.tfjs.graph_half_floats``). float16 is not carried: LiteRT's CAST converts it.
"""
from __future__ import annotations

import dataclasses

from noxla.graph.lower import Recorded
from noxla.writers.tfjs.graph_half_floats import carried_in_float32
from noxla.writers.tflite.converter.bfloat16 import rounded_on_bits

ROUNDINGS = {"bfloat16": rounded_on_bits}


def carried_bfloat16(recorded: Recorded) -> Recorded:
    """``recorded`` with its bfloat16 carried in float32 (in place: its graph and bodies)."""
    outputs = carried_in_float32(recorded.graph, recorded.outputs, ROUNDINGS)
    seen: set[int] = set()
    stack = [f for n in recorded.graph.nodes for f in n.functions.values()]
    while stack:
        function = stack.pop()
        if id(function) not in seen:
            seen.add(id(function))
            stack += [f for n in function.graph.nodes for f in n.functions.values()]
            function.rets = carried_in_float32(function.graph, function.rets, ROUNDINGS)
    return dataclasses.replace(recorded, outputs=outputs)
