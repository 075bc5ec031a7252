"""Rewrites the graph writer makes after ``fuse`` where TF's converter (or noxla's flatbuffer passes
on TF's path) would make the graph smaller than the legalized rules' ops:

- a FULLY_CONNECTED reads its input unflattened: the rules' Reshape to [rows, k] before a MatMul
  (the TF op is 2-D) is left out, the FULLY_CONNECTED keeping the leading axes (``keepNumDims``),
  and a Reshape of its output to that shape is dropped (the converter's form for a Dense layer on a
  sequence);
- a reshape and its inverse around operators that run alike in either layout are dropped
  (``noxla.writers.tflite.flatbuffer.reshapes.remove_reshape_pairs`` on TF's path);
- a select on a constant condition is the operand it selects everywhere (a constant one folded),
  and a BROADCAST_TO read
  only by operators that broadcast their operands themselves is left out, and a PACK of all an
  UNPACK's outputs in order along its axis is the UNPACK's input (the converter's folds);
- the slice rule's every-n-th element of a non-float tensor (a PAD, a fold into (kept, stride), the
  first column: for TF.js's wasm StridedSlice, which misreads it) is one STRIDED_SLICE, which
  LiteRT computes right; a slice of a slice is one;
- a sum reading a negation (a MUL by -1, LiteRT's exact NEG) is a difference, and a difference
  reading one a sum;
- a scale by a power of two after a projection (the attention rule's on its queries), through the
  reshapes and transposes between, is folded into the projection's weights and bias (exact: the
  converter folds it too).

Each moves no value (the same elements are computed in the same order) but those in
``CHANGES_VALUES``: the scale folded into weights under- or overflows where a weight is tiny or
huge, and the zero state's fold turns ``-0`` into ``+0`` (``zero_state``)."""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.folds import fold
from noxla.writers.tflite.fuse import common_operators, reshapes_of_reshapes
from noxla.writers.tflite.model import Graph, broadcast_shape, shape_constant, unknown
from noxla.writers.tflite.zero_state import zero_state_products

# Operators that run alike in another layout of their operands (each read whole, no axis named).
_ELEMENTWISE = {"ABS", "CEIL", "COS", "EXP", "FLOOR", "GELU", "HARD_SWISH", "LOG", "LOGISTIC", "NEG", "RELU",
                "RELU6", "RSQRT", "SIN", "SQRT", "TANH", "SQUARE", "LOGICAL_NOT", "CAST"}
_ROWS = {"SOFTMAX", "LOG_SOFTMAX"}
_BINARY = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE", "FLOOR_DIV", "FLOOR_MOD"}


def simplify(graph: Graph, rewrites: tuple) -> None:
    """``rewrites`` (of ``SIMPLIFY``) until none applies."""
    changed = True
    while changed:
        changed = False
        for rewrite in rewrites:
            while rewrite(graph):
                graph.prune()
                changed = True


def _unit_axis_transposes(graph: Graph) -> bool:
    """A TRANSPOSE that moves only axes of size 1 moves no element: a RESHAPE."""
    for op in graph.ops:
        if op.kind != "TRANSPOSE" or not op.inputs[1].is_constant:
            continue
        perm = [int(a) for a in op.inputs[1].data]
        moved = [a for a in perm if op.inputs[0].shape[a] != 1]
        if moved == sorted(moved):
            op.kind, op.inputs, op.options = "RESHAPE", [op.inputs[0], shape_constant(graph, op.out.shape)], {}
            return True
    return False


def _unflattened_fully_connected(graph: Graph) -> bool:
    """FULLY_CONNECTED(RESHAPE(x -> [rows, k])) read only by RESHAPEs: the FULLY_CONNECTED reads x
    (where x is [*lead, k]) or x reshaped to [*lead, k] (where a reader reshapes to [*lead, units]),
    and keeps the leading axes; readers of that shape are dropped, the others reshape it."""
    view = graph.view()
    for op in graph.ops:
        if op.kind != "FULLY_CONNECTED" or not op.options.get("keepNumDims") or len(op.out.shape) != 2:
            continue
        flatten = view.producer(op.inputs[0], "RESHAPE")
        readers = view.read_by.get(op.out.id, [])
        if flatten is None or not readers or any(r is None or r.kind != "RESHAPE" for r in readers):
            continue   # a reshape back would be needed: no operator saved
        rows, units = op.out.shape
        x, k = flatten.inputs[0], op.inputs[0].shape[1]
        leads = [x.shape[:-1]] if x.shape[-1] == k else []   # the flatten dropped (once nothing reads it)
        if view.only_reader(op.inputs[0]):   # a reader dropped, the flatten reshaping to [*lead, k]
            leads += [r.out.shape[:-1] for r in readers if r.out.shape[-1:] == (units,)]
        # (the element counts of the reshapes make an unknown lead's product ``rows``)
        lead = next((lead for lead in leads if lead and (unknown(lead) or int(np.prod(lead)) == rows)), None)
        if lead is None:
            continue
        op.inputs[0] = x if x.shape == (*lead, k) else graph.add("RESHAPE", [x, shape_constant(graph, (*lead, k))],
                                                                  (*lead, k), x.dtype)
        if op.inputs[0] is not x:   # made after ``op``: moved before it
            graph.ops.insert(graph.ops.index(op), graph.ops.pop())
        op.outputs[0].shape = (*lead, units)
        for r in readers:
            if r.out.shape == op.out.shape:
                graph.replace_uses(r.out, op.out)
        return True
    return False


def _reshapes_through_chains(graph: Graph) -> bool:
    """RESHAPE (x -> s); operators that run alike in either layout, each the only reader of the one
    before, their other operands constants of one element; RESHAPE (-> t): the chain runs on x and
    the last reshape reads it (x -> t; nothing where t is x's shape). A softmax counts where the
    last axis is the same in both layouts (its rows are then the same elements)."""
    view = graph.view()
    for op in graph.ops:
        if op.kind != "RESHAPE":
            continue
        source, chain, t = op.inputs[0], [], op.out
        while view.only_reader(t) and view.read_by[t.id][0] is not None:
            reader = view.read_by[t.id][0]
            if reader.kind == "RESHAPE":
                if not chain:
                    break
                for link in chain:
                    link.inputs = [source if i is op.out else i for i in link.inputs]
                    link.outputs[0].shape = source.shape
                if reader.out.shape == source.shape:
                    graph.replace_uses(reader.out, chain[-1].out)
                return True
            rows_kept = source.shape[-1:] == op.out.shape[-1:]
            alike = reader.kind in _ELEMENTWISE | _BINARY or reader.kind in _ROWS and rows_kept
            if not alike or len(reader.outputs) != 1 or reader.out.shape != t.shape \
                    or any(i is not t and not (i.is_constant and i.data.size == 1) for i in reader.inputs):
                break
            chain.append(reader)
            t = reader.out
    return False


_BROADCASTING = _BINARY | {"SELECT_V2", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL",
                           "LOGICAL_AND", "LOGICAL_OR"}


def _constant_selects(graph: Graph) -> bool:
    for op in graph.ops:
        if op.kind not in ("SELECT", "SELECT_V2") or not op.inputs[0].is_constant:
            continue
        which = np.asarray(op.inputs[0].data, bool)
        if which.all() or not which.any():
            chosen = op.inputs[1] if which.all() else op.inputs[2]
            if chosen.shape == op.out.shape and chosen.dtype == op.out.dtype and not chosen.is_constant:
                graph.replace_uses(op.out, chosen)
                return True
            if chosen.is_constant and chosen.data.size == int(np.prod(op.out.shape)) \
                    and op.out not in graph.outputs:   # a constant (threefry's high word of an int32 seed)
                graph.replace_uses(op.out, graph.constant(chosen.data.reshape(op.out.shape).astype(op.out.dtype)))
                return True
    return False


def _broadcasts_into_readers(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        readers = view.read_by.get(op.out.id, []) if op.kind == "BROADCAST_TO" else []
        if not readers or any(r is None or r.kind not in _BROADCASTING | {"SELECT"} for r in readers):
            continue
        x = op.inputs[0]
        if any(broadcast_shape(*(x.shape if i is op.out else i.shape for i in r.inputs)) != r.out.shape
               for r in readers):
            continue
        for r in readers:
            r.inputs = [x if i is op.out else i for i in r.inputs]
            if r.kind == "SELECT" and len({i.shape for i in r.inputs}) > 1:
                r.kind = "SELECT_V2"
        return True
    return False


def _packs_of_unpacks(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        unpack = view.producer(op.inputs[0], "UNPACK") if op.kind == "PACK" else None
        if unpack is not None and op.inputs == unpack.outputs and op.options["axis"] == unpack.options["axis"] \
                and op.out.shape == unpack.inputs[0].shape:
            graph.replace_uses(op.out, unpack.inputs[0])
            return True
    return False


def _every_nth(graph: Graph) -> bool:
    """RESHAPE(SLICE(RESHAPE(PAD(x, [0, p] on axis a) -> (.., kept, n, ..)), first of n) -> (.., kept, ..))
    is x[.., ::n, ..] (``lowering_rules.slicing._every_nth``)."""
    view = graph.view()
    for op in graph.ops:
        first = view.producer(op.inputs[0], "SLICE") if op.kind == "RESHAPE" else None
        folded = first and view.producer(first.inputs[0], "RESHAPE")
        pad = folded and view.producer(folded.inputs[0], "PAD")
        if pad is None or not all(view.only_reader(t) for t in (first.out, folded.out, pad.out)) \
                or not (first.inputs[1].is_constant and first.inputs[2].is_constant and pad.inputs[1].is_constant):
            continue
        x, pads = pad.inputs[0], pad.inputs[1].data.tolist()
        padded = [a for a, (lo, hi) in enumerate(pads) if (lo, hi) != (0, 0)]
        if len(padded) != 1 or pads[padded[0]][0] != 0 or len(folded.out.shape) != len(x.shape) + 1:
            continue  # not a split of the padded axis into (kept, n)
        a = padded[0]
        kept, stride = folded.out.shape[a], folded.out.shape[a + 1]
        wanted = (*x.shape[:a], kept, stride, *x.shape[a + 1:])
        sizes = [x.shape[i] if i < a else kept if i == a else 1 if i == a + 1 else x.shape[i - 1]
                 for i in range(len(wanted))]
        if folded.out.shape != wanted or any(first.inputs[1].data) \
                or [n if n != -1 else w for n, w in zip(first.inputs[2].data.tolist(), wanted)] != sizes \
                or op.out.shape != (*x.shape[:a], kept, *x.shape[a + 1:]):
            continue
        strides = [1] * len(x.shape)
        strides[a] = stride
        op.kind, op.options = "STRIDED_SLICE", dict(beginMask=0, endMask=0, ellipsisMask=0, newAxisMask=0,
                                                    shrinkAxisMask=0, offset=False)
        op.inputs = [x, graph.int32([0] * len(x.shape)), graph.int32(x.shape), graph.int32(strides)]
        return True
    return False


def _slices_of_slices(graph: Graph) -> bool:
    """A STRIDED_SLICE (no masks, bounds in range) of a SLICE or such a STRIDED_SLICE read by nothing
    else: one STRIDED_SLICE of the inner one's input (element j is x[b1 + (b2 + j * s2) * s1])."""
    view = graph.view()
    for op in graph.ops:
        inner = view.producer(op.inputs[0], {"SLICE", "STRIDED_SLICE"}) if op.kind == "STRIDED_SLICE" else None
        if inner is None or not view.only_reader(op.inputs[0]) or any(op.options.values()) \
                or any(inner.options.values()) or not all(t.is_constant for t in (*op.inputs[1:], *inner.inputs[1:])):
            continue
        b1 = inner.inputs[1].data.tolist()
        s1 = inner.inputs[3].data.tolist() if inner.kind == "STRIDED_SLICE" else [1] * len(b1)
        b2, e2, s2 = (t.data.tolist() for t in op.inputs[1:])
        if any(b < 0 or s < 1 or e > n or b >= e for b, e, s, n in zip(b2, e2, s2, inner.out.shape)) \
                or any(b < 0 or s < 1 for b, s in zip(b1, s1)):
            continue
        begin = [x + b * s for x, b, s in zip(b1, b2, s1)]
        strides = [u * v for u, v in zip(s1, s2)]
        end = [b + (len(range(lo, hi, step)) - 1) * s + 1 for b, s, lo, hi, step in zip(begin, strides, b2, e2, s2)]
        op.inputs = [inner.inputs[0], graph.int32(begin), graph.int32(end), graph.int32(strides)]
        return True
    return False


def _scale_into_projection(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        if op.kind != "MUL" or op.options.get("fusedActivationFunction"):
            continue
        t, c = (op.inputs if op.inputs[1].is_constant else op.inputs[::-1])
        if t.is_constant or not c.is_constant or c.data.size != 1 or op.out.shape != t.shape:
            continue
        scale = float(c.data.reshape(-1)[0])
        if scale == 0 or not np.isfinite(scale) or np.frexp(scale)[0] != 0.5:
            continue
        source = t
        while view.only_reader(source) and view.producer(source, {"RESHAPE", "TRANSPOSE"}) is not None:
            source = view.made_by[source.id].inputs[0]
        linear = view.producer(source, "FULLY_CONNECTED")
        if linear is None or not view.only_reader(source) or linear.options["fusedActivationFunction"] \
                or not linear.inputs[1].is_constant:
            continue
        weights = [None if w is None else graph.constant((w.data * np.float32(scale)).astype(np.float32, copy=False))
                   for w in linear.inputs[1:3]]
        linear.inputs[1:3] = weights
        graph.replace_uses(op.out, t)
        return True
    return False


def _negations_into_sums(graph: Graph) -> bool:
    """a + (-b) is a - b, (-b) + a is a - b, a - (-b) is a + b (IEEE subtraction adds the negation:
    exact), -b being a negation (a MUL by the constant -1: ``legalize._neg``) only the sum reads, as
    TF's converter folds its NEG."""
    view = graph.view()
    for op in graph.ops:
        if op.kind not in ("ADD", "SUB"):
            continue
        for i, t in enumerate(op.inputs):
            negation = view.producer(t, "MUL")
            if negation is None or not view.only_reader(t) or t in graph.outputs or (op.kind == "SUB" and i == 0):
                continue
            x, minus_one = negation.inputs
            if not minus_one.is_constant or minus_one.data.size != 1 or minus_one.data.item() != -1 \
                    or x.shape != t.shape or negation.options.get("fusedActivationFunction"):
                continue
            op.kind, op.inputs = ("SUB" if op.kind == "ADD" else "ADD"), [op.inputs[1 - i], x]
            return True
    return False


SIMPLIFY = (_unit_axis_transposes, _unflattened_fully_connected, _reshapes_through_chains, _constant_selects,
            _broadcasts_into_readers, _packs_of_unpacks, _every_nth, _slices_of_slices, _scale_into_projection,
            reshapes_of_reshapes, common_operators, fold, zero_state_products, _negations_into_sums)
CHANGES_VALUES = frozenset({_scale_into_projection, zero_state_products})
