"""TF ops and types ``legalize`` leaves out, legalized as TF's converter legalizes them (its
operators, checked on the same TF ops), each computed by LiteRT bit for bit as JAX
(tests/test_graph_tflite_ops.py):

- ``Bitcast`` (the rules read a float32's sign bit, or carry float16 values as int16 bits) as
  ``BITCAST``, a copy of the bytes;
- ``IsInf`` as ``|x| == inf`` (``ABS``, ``EQUAL``): the converter's operators, with the infinity
  stored as it is (the converter stores the largest float);
- a boolean ``Pack`` as a ``RESHAPE`` of each item into one ``CONCATENATION`` (LiteRT's ``PACK``
  has no bool kernel; its ``CONCATENATION`` has one);
- a ``Pack``, ``Transpose`` (and in ``legalize_math`` a ``GatherNd``) past rank 6 (``MAX_RANK``:
  LiteRT's TRANSPOSE stops there; a gather of 3 batch and 4 offset axes), over fewer axes between
  ``RESHAPE``s, which take any rank;
- a uint32 ``AddV2`` through int32 (LiteRT's ``ADD`` has no uint32 kernel; its ``MUL`` has one,
  written by ``legalize`` as it is);
- ``Conv3D`` as ``CONV_3D``;
- a ``Pad``/``PadV2`` of an empty tensor (a ``lax.pad`` cropping a whole axis and padding it
  again): the padding value everywhere, folded as grappler folds it, or a ``PADV2`` of the empty
  constant by a value computed at run time;
- a ``SplitV`` with empty pieces, an ``XlaDynamicUpdateSlice`` of an empty update: folded
  (``fold_empty_pieces``)."""
from __future__ import annotations

import numpy as np

from noxla.graph.dtypes import Uncovered
from noxla.writers.tflite.legalize import (
    FOLDS,
    LEGALIZERS,
    _attr,
    _dtype,
    _int32,
    _many,
    _out,
    _padding,
    _shape,
    _static,
    legalizer,
    reshape,
)
from noxla.writers.tflite.model import MAX_RANK, Graph, Tensor


@legalizer("Bitcast")
def _bitcast(graph, node, x):
    """Between types of one size only (the recorder records no other): the shape is kept."""
    return x if x.dtype == _dtype(node) else _out(graph, "BITCAST", node, [x])


@legalizer("IsInf")
def _is_inf(graph, node, x):
    """LiteRT has no IS_INF; the stored infinity is exact here (this writer, unlike the converter,
    keeps an infinite constant as it is)."""
    magnitude = graph.add("ABS", [x], x.shape, x.dtype)
    return _out(graph, "EQUAL", node, [magnitude, graph.constant(np.array(np.inf, x.dtype))])


@legalizer("Pack")
def _pack(graph, node, *xs):
    """Past rank 6 (LiteRT's PACK and CONCATENATION are held to JAX up to it here), the items as
    (before the axis, after it), packed between, and a RESHAPE (of any rank) to the output: the
    same elements in the same order."""
    shape, dtype = _shape(node), _dtype(node)
    axis = _attr(node, "axis", 0) % len(shape)
    if len(shape) <= MAX_RANK:
        return _packed(graph, list(xs), axis, shape, dtype)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    items = [reshape(graph, x, (outer, inner)) for x in xs]
    return reshape(graph, _packed(graph, items, 1, (outer, len(xs), inner), dtype), shape)


def _packed(graph: Graph, xs: list, axis: int, shape: tuple, dtype) -> Tensor:
    """A PACK; a boolean one as each item given its new axis, then one CONCATENATION: the same
    elements in the same order, through builtins with a bool kernel."""
    if dtype != np.bool_:
        return graph.add("PACK", xs, shape, dtype, valuesCount=len(xs), axis=axis)
    one = shape[:axis] + (1,) + shape[axis + 1:]
    return graph.add("CONCATENATION", [reshape(graph, x, one) for x in xs], shape, dtype, axis=axis,
                     fusedActivationFunction=0)


_TRANSPOSE = LEGALIZERS["Transpose"]


@legalizer("Transpose")
def _transpose(graph, node, x, perm):
    """Past rank 6 (LiteRT's TRANSPOSE stops there) the same move over fewer axes, between RESHAPEs:
    unit axes dropped, and axes next to each other in both orders merged into one."""
    if len(x.shape) <= MAX_RANK:
        return _TRANSPOSE(graph, node, x, perm)
    perm = [int(a) for a in _static(perm, "a permutation")]
    kept = [a for a in perm if int(x.shape[a]) != 1]
    rank_in = {a: i for i, a in enumerate(sorted(kept))}
    groups: list = []   # runs of output axes that follow each other in the input too
    for a in kept:
        if groups and rank_in[a] == rank_in[groups[-1][-1]] + 1:
            groups[-1].append(a)
        else:
            groups.append([a])
    by_input = sorted(groups)
    sizes = {g[0]: int(np.prod([x.shape[a] for a in g])) for g in groups}
    merged = reshape(graph, x, [sizes[g[0]] for g in by_input])
    if len(groups) > 1:
        merged = graph.add("TRANSPOSE", [merged, _int32(graph, [by_input.index(g) for g in groups])],
                           tuple(sizes[g[0]] for g in groups), x.dtype)
    return reshape(graph, merged, _shape(node))


def fold_padded_empty(graph: Graph, node, inputs: list, empties: set) -> list | None:   # one of legalize's FOLDS
    """A Pad of an empty tensor to a non-empty one holds only its padding value: a constant, as
    grappler folds it, or where the value is computed at run time a PADV2 of the empty constant,
    as the converter writes it. Before ``empty.fold_empty``, which refuses such a Pad."""
    if node.op not in ("Pad", "PadV2") or not inputs or inputs[0].id not in empties or 0 in _shape(node):
        return None
    value = inputs[2] if node.op == "PadV2" else graph.constant(np.zeros((), _dtype(node)))
    if value.is_constant:
        return [graph.constant(np.full(_shape(node), value.data, _dtype(node)))]
    pads = _int32(graph, _static(inputs[1], "paddings"))
    return [_out(graph, "PADV2", node, [inputs[0], pads, reshape(graph, value, ())])]


FOLDS.insert(0, fold_padded_empty)


def fold_empty_pieces(graph: Graph, node, inputs: list, empties: set) -> list | None:   # one of legalize's FOLDS
    """Empty parts folded as grappler folds them (LiteRT copies no empty tensor): a SplitV's empty
    pieces are empty constants and the others a SPLIT_V of their sizes (the input itself where one
    piece holds it all); an XlaDynamicUpdateSlice of an update with no elements is its operand, as
    XLA computes it (the start, clamped, moves nothing). Before ``empty.fold_empty``, which refuses both."""
    shapes = [_shape(node, i) for i in range(len(node.outputs))]
    if node.op == "XlaDynamicUpdateSlice" and 0 in inputs[1].shape and 0 not in shapes[0]:
        return [inputs[0]]
    empty = [0 in s for s in shapes]
    if node.op != "SplitV" or all(empty) or not any(empty) or 0 in inputs[0].shape:
        return None
    outs = [graph.constant(np.zeros(s, _dtype(node, i))) if e else None for i, (s, e) in enumerate(zip(shapes, empty))]
    empties.update(t.id for t in outs if t is not None)
    kept = [i for i, e in enumerate(empty) if not e]
    if len(kept) == 1:
        outs[kept[0]] = inputs[0]
        return outs
    axis = int(_static(inputs[2], "a split's axis")) % len(inputs[0].shape)
    pieces = _many(graph, "SPLIT_V", [inputs[0], _int32(graph, [shapes[i][axis] for i in kept]), _int32(graph, axis)],
                   [Tensor(shapes[i], _dtype(node, i)) for i in kept], numSplits=len(kept))
    for i, piece in zip(kept, pieces):
        outs[i] = piece
    return outs


FOLDS.insert(0, fold_empty_pieces)


@legalizer("Conv3D")
def _conv3d(graph, node, x, w):
    """CONV_3D reads TF's filter layout (DHWIO) as it is, with no bias, as the converter writes it."""
    if _attr(node, "data_format", "NDHWC") != "NDHWC" or _dtype(node) != np.float32:
        raise Uncovered(f"a Conv3D of {_dtype(node)} in {_attr(node, 'data_format')}")
    strides, dilations = _attr(node, "strides"), _attr(node, "dilations", [1] * 5)
    return _out(graph, "CONV_3D", node, [x, w, None],
                padding=_padding(node), strideD=strides[1], strideH=strides[2], strideW=strides[3],
                dilationDFactor=dilations[1], dilationHFactor=dilations[2], dilationWFactor=dilations[3],
                fusedActivationFunction=0)


# ----------------------------------------------------------------------------- uint32 sums

_ADD = LEGALIZERS["AddV2"]


def _bits_as(graph: Graph, t: Tensor, dtype) -> Tensor:
    if t.is_constant:
        return graph.constant(t.data.astype(dtype))   # numpy's integer astype wraps, as CAST does
    return graph.add("CAST", [t], t.shape, dtype)


@legalizer("AddV2", "Add")
def _add(graph, node, a, b):
    """A uint32 sum as the converter writes it: LiteRT's ADD has no uint32 kernel (its MUL has one,
    which ``legalize`` writes), so the words are cast to int32 (the same bits), added, and cast
    back. The int32 ADD wraps modulo 2^32 as JAX's uint32 sum does (two's complement: the same
    bits; the rule cases hold it to JAX at 2^32 - 1 + 2^32 - 1 and 2^31 + 2^31 + 1)."""
    if _dtype(node) != np.uint32:
        return _ADD(graph, node, a, b)
    total = graph.add("ADD", [_bits_as(graph, a, np.int32), _bits_as(graph, b, np.int32)], _shape(node), np.int32,
                      fusedActivationFunction=0)
    return _out(graph, "CAST", node, [total])
