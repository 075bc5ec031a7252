"""What the graph shows of its int32 values before they run: an interval and the low bits known zero.

TF.js computes some int32 ops through floats (``noxla.writers.tfjs.exact_int32``): a product is
exact where it stays below 2^53, a float32 quotient where its dividend stays below 2^24 or is a
multiple of a power of two it is divided by. Rewriting every such op into its exact integer form
would multiply the limb arithmetic of the 64-bit and unsigned values (carries below 2^16, halves
split off by a power of two) several times over; this analysis keeps those one op.

``int32_ranges(graph)`` walks the nodes once, in order, and gives each int32 (and bool) output a
``Range``: ``lo <= value <= hi`` for every element, and ``zeros`` low bits that are 0 in every
element. Anything it cannot bound is the whole int32 range. Wrapping arithmetic keeps the low bits
(2^32 is a multiple of every 2^k), so ``zeros`` holds even where the interval does not.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from noxla.graph.core import Graph, Node, Tensor

_MIN, _MAX = -(1 << 31), (1 << 31) - 1
_INTS = {"DT_INT32": (_MIN, _MAX), "DT_INT16": (-(1 << 15), (1 << 15) - 1), "DT_INT8": (-128, 127),
         "DT_UINT8": (0, 255), "DT_UINT16": (0, (1 << 16) - 1), "DT_BOOL": (0, 1)}
# Ops whose output values are some of their input values (or zeros): which inputs they are.
_MOVES = {"Reshape": (0,), "ExpandDims": (0,), "Squeeze": (0,), "Transpose": (0,), "BroadcastTo": (0,),
          "Tile": (0,), "Identity": (0,), "GatherV2": (0,), "GatherNd": (0,), "StridedSlice": (0,),
          "Slice": (0,), "ReverseV2": (0,), "Unpack": (0,), "SplitV": (0,), "Split": (1,), "Fill": (1,),
          "SelectV2": (1, 2), "Select": (1, 2), "Maximum": (0, 1), "Minimum": (0, 1), "PadV2": (0, 2),
          "TensorScatterUpdate": (0, 2), "MirrorPad": (0,)}


@dataclasses.dataclass(frozen=True)
class Range:
    lo: int = _MIN
    hi: int = _MAX
    zeros: int = 0  # low bits 0 in every value

    @property
    def magnitude(self) -> int:
        return max(abs(self.lo), abs(self.hi))


FULL = Range()


def _interval(lo: int, hi: int, zeros: int = 0) -> Range:
    """``[lo, hi]``, or the whole int32 range where int32 arithmetic would have wrapped."""
    return Range(lo, hi, zeros) if _MIN <= lo <= hi <= _MAX else Range(zeros=zeros)


def _trailing_zeros(values: np.ndarray) -> int:
    nonzero = values[values != 0]
    if nonzero.size == 0:
        return 32
    return int(min((int(v) & -int(v)).bit_length() - 1 for v in np.unique(nonzero)))


def _constant(value: np.ndarray) -> Range:
    if value.dtype.kind not in "iub":
        return FULL
    values = value.astype(np.int64).ravel()
    if values.size == 0:
        return FULL
    return Range(int(values.min()), int(values.max()), _trailing_zeros(values))


def _union(ranges) -> Range:
    ranges = list(ranges)
    return Range(min(r.lo for r in ranges), max(r.hi for r in ranges), min(r.zeros for r in ranges))


def power_of_two(r: Range) -> int | None:
    """k where every value is 2^k (one value, positive)."""
    if r.lo == r.hi and r.lo > 0 and r.lo & (r.lo - 1) == 0:
        return r.lo.bit_length() - 1
    return None


def _product(a: Range, b: Range) -> Range:
    corners = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return _interval(min(corners), max(corners), min(32, a.zeros + b.zeros))


def _quotient(a: Range, b: Range) -> Range:
    if b.lo <= 0 <= b.hi:
        return FULL
    corners = [a.lo // b.lo, a.lo // b.hi, a.hi // b.lo, a.hi // b.hi]
    k = power_of_two(b)
    return _interval(min(corners), max(corners), a.zeros - k if k is not None and a.zeros >= k else 0)


def _remainder(a: Range, b: Range) -> Range:
    if b.lo > 0:
        return Range(0, b.hi - 1 if a.lo < 0 or a.hi >= b.hi else a.hi)
    if b.hi < 0:
        return Range(b.lo + 1, 0)
    return FULL


def _is_remainder_of(t: Tensor, x: Tensor, of) -> int | None:
    """k where ``t`` is FloorMod(x, 2^k): x - t is then a multiple of 2^k."""
    node = t.node
    if node.op != "FloorMod" or node.inputs[0].node is not x.node or node.inputs[0].index != x.index:
        return None
    return power_of_two(of(node.inputs[1]))


def _range(node: Node, index: int, of) -> Range:
    op, inputs = node.op, node.inputs
    dtype = node.outputs[index][0].json_name
    if op == "Const":
        return _constant(node.value) if node.value is not None and node.value.dtype != object else FULL
    if op in ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr",
              "LogicalNot", "IsNan", "IsInf", "IsFinite"):
        return Range(0, 1)
    if op == "Cast":
        source = node.attrs.get("SrcT", {}).get("type")
        if source in _INTS and source != "DT_INT32":
            return Range(*_INTS[source])
        return of(inputs[0]) if source == "DT_INT32" else FULL
    if op in _MOVES:
        return _union(of(inputs[i]) for i in _MOVES[op]) if _MOVES[op] else FULL
    if op == "Pad":
        return _union([of(inputs[0]), Range(0, 0, 32)])
    if op == "ConcatV2":
        return _union(of(t) for t in inputs[:-1])
    if op == "Pack":
        return _union(of(t) for t in inputs)
    if op == "ZerosLike":
        return Range(0, 0, 32)
    if op == "OnesLike":
        return Range(1, 1)
    if op == "Shape":
        # A run-time size, taken to be below 2^24 (16M elements along one axis): TF.js's own size
        # arithmetic (WebGL's, WebGPU's) is float32 there, and so it stays the ops that backend
        # computes where the sizes are (noxla.writers.tfjs.run_time_sizes).
        return Range(0, (1 << 24) - 1)
    if op in ("Min", "Max", "ArgMax", "ArgMin"):
        # A reduction's values are its input's, an arg-reduction's its axis's positions; where an
        # axis may be empty the identity (INT_MAX for Min) or a size is not: the whole range.
        dims, axes = inputs[0].shape.dims, inputs[1].constant
        if dims is not None and None not in dims and 0 not in dims and axes is not None:
            if op in ("Min", "Max"):
                return of(inputs[0])
            return Range(0, max(dims[int(a)] for a in np.asarray(axes).ravel()) - 1)
        return FULL
    if op in ("Size", "Rank"):
        return Range(0, _MAX)
    if op == "Sign":
        return Range(-1, 1)
    if op == "Neg":
        a = of(inputs[0])
        return _interval(-a.hi, -a.lo, a.zeros)
    if op == "Abs":
        a = of(inputs[0])
        return _interval(0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi)), a.magnitude, a.zeros)
    if op in ("AddV2", "Add", "Sub"):
        a, b = of(inputs[0]), of(inputs[1])
        if op == "Sub":
            k = _is_remainder_of(inputs[1], inputs[0], of)
            b = Range(-b.hi, -b.lo, b.zeros)
            if k is not None:
                return _interval(a.lo + b.lo, a.hi + b.hi, max(k, min(a.zeros, b.zeros)))
        return _interval(a.lo + b.lo, a.hi + b.hi, min(a.zeros, b.zeros))
    if op == "Mul":
        return _product(of(inputs[0]), of(inputs[1]))
    if op == "Sum":  # n terms, n the input's elements per output element where the shapes say
        a, before, after = of(inputs[0]), inputs[0].shape.dims, node.outputs[0][1]
        if before is None or None in before or None in after or not np.prod(after):
            return Range(zeros=a.zeros)
        n = int(np.prod(before) // np.prod(after))
        return _interval(min(a.lo, n * a.lo), max(a.hi, n * a.hi), a.zeros)
    if op == "FloorDiv":
        return _quotient(of(inputs[0]), of(inputs[1]))
    if op == "FloorMod":
        return _remainder(of(inputs[0]), of(inputs[1]))
    if op == "BitwiseAnd":
        a, b = of(inputs[0]), of(inputs[1])
        nonnegative = [r.hi for r in (a, b) if r.lo >= 0]
        return Range(0, min(nonnegative), max(a.zeros, b.zeros)) if nonnegative else Range(zeros=max(a.zeros, b.zeros))
    if op == "RightShift":
        a, s = of(inputs[0]), of(inputs[1])
        if s.lo == s.hi and 0 <= s.lo < 32:
            return Range(a.lo >> s.lo, a.hi >> s.lo, max(0, a.zeros - s.lo))
        return FULL
    return Range(*_INTS[dtype]) if dtype in _INTS else FULL


def int32_ranges(graph: Graph):
    """``of(tensor) -> Range`` for the graph's tensors as they are now (computed once, in order)."""
    known: dict[tuple[int, int], Range] = {}

    def of(t: Tensor) -> Range:
        return known.get((id(t.node), t.index), FULL)

    for node in graph.nodes:
        for index in range(len(node.outputs)):
            known[(id(node), index)] = _range(node, index, of)
    return of
