"""Forms TF.js 4.22's WebGPU backend computes right, in the model.json every backend reads.

Infinities as weights. The rules make +inf at run time, ``1 / sum(0 * |x|)`` (``runtime_infinity``
in lowering_rules/core/helpers.py: TF's TFLite converter stores an infinite constant as the largest
finite float). TF.js stores float32 weights as they are, and the run-time one is read back to the
CPU by the ops whose value TF.js's executor reads (a Fill's value, a PadV2's): from WebGPU that
read lost the device (every reduce_window max/min, select_and_scatter_add and empty-axis max/min
case in headless Chromium). So that sum's reciprocal is a weight, +inf, and scalar constant
arithmetic on it (its sign) is folded: fewer ops on every backend.

Pads of rank 5 and 6 at rank 4 or less. TF.js's WebGPU Pad shader compares its coordinates with
``any(coords < start)``, which does not compile for the struct a rank-5 or rank-6 coordinate is: the
output came back zeros (interior padding, which the rules write as a Pad of a rank-5 reshape:
``lax.pad`` with interior amounts, a transposed convolution's input). An axis padded by nothing is
merged into the axis before it (its blocks move whole), by Reshapes around the Pad. Likewise a
rank-5 or rank-6 ReverseV2 (adjacent axes both reversed or both kept merge: TF.js's WebGPU and WebGL
failed on it) and SelectV2 (its operands flattened, a broadcast one tiled first: "Where for rank 5
is not yet supported").

int32 and bool transposes, through float32.

TF.js 4.22's WebGPU Transpose shader (every permutation but a matrix's ``[1, 0]``) stores the
input's element as the output's without a conversion: for an int32 or bool tensor that is an i32
passed where the shader takes an f32, so the shader does not compile and the output is whatever
the buffer held (zeros, or a float's bits: 1077936128 for 3), silently. It runs only for a tensor a
GPU kernel made (TF.js transposes small tensors still on the CPU there), and TF.js transposes
inside other kernels too: a Sum, Prod, Min, Max, Mean, Any or All over axes that are not the
innermost, an ArgMax/ArgMin or a Cumsum/Cumprod along an axis that is not the last. noxla lowers
argmax as a Min of int32 indices, so ``jnp.argmax(x, axis=1)`` of a float32 (2, 3, 4) came back
zeros (measured in headless Chromium, SwiftShader).

So, in the model.json every backend reads:

- such a reduction of int32 or bool values first transposes its axes innermost itself (what TF.js
  would do inside it), a cumulative one transposes back after;
- such an int32 or bool Transpose moves float32 values: a bool as 0.0/1.0, an int32 that
  ``int32_ranges`` keeps within 2^24 as itself, any other as its two 16-bit halves (FloorMod and an
  exact FloorDiv by 2^16, ``noxla.writers.tfjs.exact_int32``), put back together as int32. The
  float32 values come from a Mul by 1 after the Cast: TF.js's WebGPU Cast from int32 or bool to
  float32 only relabels the tensor, and its shaders type a buffer by what it holds (still i32).

Every value is kept exactly on every backend (float32 holds integers to 2^24; WebGL and WebGPU
hold int32 in float32 anyway). 4 ops for 1, 13 for a wide int32.
"""
from __future__ import annotations

import numpy as np

from noxla.graph import ops
from noxla.graph.core import Graph, Node, Tensor
from noxla.writers.tfjs.arithmetic import constant_before, recorded_before
from noxla.writers.tfjs.int32_ranges import int32_ranges

_INTS = ("int32", "bool")
_REDUCTIONS = ("Sum", "Prod", "Min", "Max", "Mean", "Any", "All")
_ALONG_AXIS = ("ArgMax", "ArgMin", "Cumsum", "Cumprod")
_FLOAT32_EXACT = 1 << 24
_HALF = 1 << 16


def _shader_transposes(perm: list[int]) -> bool:
    """Whether TF.js's WebGPU runs ``perm`` with the shader above (a matrix's [1, 0] has its own)."""
    return perm != list(range(len(perm))) and perm != [1, 0]


def _axes(node: Node) -> list[int] | None:
    x, axes = node.inputs[:2]
    rank = x.shape.rank
    if rank is None or axes.constant is None:
        return None
    return sorted({int(a) % rank for a in np.asarray(axes.constant).ravel()})


def _innermost(graph: Graph, node: Node) -> None:
    """``node`` (a reduction, or an op along one axis) over its axes moved innermost by a Transpose."""
    x, rank, axes = node.inputs[0], node.inputs[0].shape.rank, _axes(node)
    kept = [a for a in range(rank) if a not in axes]
    perm = kept + axes
    if not _shader_transposes(perm) or node.op in _ALONG_AXIS and len(axes) != 1:
        return
    dtype, shape = node.outputs[0]
    cumulative = node.op in ("Cumsum", "Cumprod")
    keep_dims = node.op in _REDUCTIONS and node.attrs.get("keep_dims", {}).get("b", False)
    moved = recorded_before(graph, node, lambda tf: tf.transpose(x, perm))
    inner_axes = list(range(len(kept), rank)) if node.op in _REDUCTIONS else rank - 1
    axis = constant_before(graph, node, f"{node.name}/axes", np.array(inner_axes, np.int32))
    attrs = dict(node.attrs, **({"Tidx": ops.type_attr(axis.dtype)} if "Tidx" in node.attrs else {}))
    if keep_dims:
        attrs["keep_dims"] = ops.bool_attr(False)
    inner_shape = (tuple(moved.shape.dims) if cumulative
                   else tuple(s for i, s in enumerate(shape) if not (keep_dims and i in axes)))
    inner = Node(graph.unique_name(f"{node.name}/innermost"), node.op, [moved, axis], attrs, [(dtype, inner_shape)])
    graph.nodes.insert(graph.nodes.index(node), inner)

    def restored(tf):
        out = inner.output(0)
        if cumulative:
            return tf.transpose(out, [int(p) for p in np.argsort(perm)])
        for a in axes if keep_dims else ():
            out = tf.expand_dims(out, a)
        return out
    result = recorded_before(graph, node, restored)
    node.op, node.inputs, node.attrs = "Identity", [result], {"T": ops.type_attr(dtype)}


def _through_floats(graph: Graph, node: Node, of) -> None:
    """``node`` (an int32 or bool Transpose) moving float32 values, exact (above)."""
    x, perm = node.inputs
    name = x.dtype.name

    def floats(tf, t):  # a Mul makes the float32 buffer: TF.js's WebGPU Cast from int32 or bool relabels
        return tf.cast(t, tf.float32) * tf.constant(np.float32(1))

    def moved(tf):
        if name == "bool":
            return tf.cast(tf.transpose(floats(tf, x), perm), tf.bool)
        if of(x).magnitude < _FLOAT32_EXACT:
            return tf.cast(tf.transpose(floats(tf, x), perm), tf.int32)
        half = tf.constant(np.array(_HALF, np.int32))
        lo = tf.math.floormod(x, half)
        hi = tf.math.floordiv(x - lo, half)
        lo, hi = (tf.cast(tf.transpose(floats(tf, h), perm), tf.int32) for h in (lo, hi))
        return hi * half + lo
    out = recorded_before(graph, node, moved)
    node.op, node.inputs, node.attrs = "Identity", [out], {"T": ops.type_attr(x.dtype)}


def int_transposes_through_floats(graph: Graph, kept) -> None:
    """The rewrites above, in place (the nodes ``kept`` stay, rewritten as Identity where needed)."""
    for node in list(graph.nodes):
        if (node.op in _REDUCTIONS + _ALONG_AXIS and node.inputs and node.inputs[0].dtype.name in _INTS
                and _axes(node) is not None):
            _innermost(graph, node)
    of = int32_ranges(graph)
    for node in list(graph.nodes):
        if node.op == "Transpose" and node.inputs[0].dtype.name in _INTS:
            perm = node.inputs[1].constant
            if perm is None or _shader_transposes([int(p) for p in np.asarray(perm).ravel()]):
                _through_floats(graph, node, of)


def scalar_argmaxes(graph: Graph, kept) -> None:
    """An ArgMax or ArgMin of a vector, reshaped to the scalar it is: TF.js's WebGPU returns shape
    (1,) for it (``jnp.linalg.lu``'s pivots came back (1, 5) for (5,) from the broadcasts after)."""
    for node in list(graph.nodes):
        if node.op in ("ArgMax", "ArgMin") and node.inputs[0].shape.rank == 1:
            dtype, shape = node.outputs[0]
            inner = Node(graph.unique_name(f"{node.name}/vector"), node.op, node.inputs, node.attrs, [(dtype, shape)])
            graph.nodes.insert(graph.nodes.index(node), inner)
            scalar = constant_before(graph, node, f"{node.name}/scalar", np.zeros(0, np.int32))
            node.op, node.inputs = "Reshape", [inner.output(0), scalar]
            node.attrs = {"T": ops.type_attr(dtype), "Tshape": ops.type_attr(scalar.dtype)}


def _is_run_time_zero_sum(t: Tensor) -> bool:
    """Whether ``t`` is ``Sum(Mul(Abs(SelectV2(IsFinite(a), a, 0)), 0))`` over all axes: 0, as
    ``lowering_rules.core.helpers.runtime_infinity`` makes it."""
    def producer(t: Tensor, op: str) -> Node | None:
        return t.node if t.node.op == op else None
    total = producer(t, "Sum")
    product = total and producer(total.inputs[0], "Mul")
    if not product or t.shape.dims != () or not any(_constant_is(i, 0) for i in product.inputs):
        return False
    magnitude = next((i for i in product.inputs if i.node.op == "Abs"), None)
    select = magnitude is not None and producer(magnitude.node.inputs[0], "SelectV2")
    return bool(select) and select.inputs[0].node.op == "IsFinite" and _constant_is(select.inputs[2], 0)


def _constant_is(t: Tensor, value) -> bool:
    c = t.constant
    return c is not None and c.dtype.kind == "f" and c.size > 0 and bool(np.all(c == value))


_FOLDED = {"Mul": np.multiply, "Neg": np.negative, "AddV2": np.add, "Sub": np.subtract}


def infinities_in_weights(graph: Graph, kept) -> None:
    """The run-time +inf above as a scalar weight, and scalar constant arithmetic on it folded, in place."""
    folded: set[int] = set()
    for node in graph.nodes:
        if id(node) in kept or node.outputs[0][1] != ():
            continue
        one_over = (node.op == "Reciprocal" and _is_run_time_zero_sum(node.inputs[0]) or node.op == "RealDiv"
                    and _constant_is(node.inputs[0], 1) and _is_run_time_zero_sum(node.inputs[1]))
        all_constant = node.op in _FOLDED and any(id(t.node) in folded for t in node.inputs) and all(
            t.constant is not None and t.constant.shape == () for t in node.inputs)
        if not (one_over or all_constant):
            continue
        dtype = node.outputs[0][0]
        with np.errstate(all="ignore"):  # inf - inf is NaN, as TF.js computes it
            value = np.array(np.inf) if one_over else _FOLDED[node.op](*(t.constant for t in node.inputs))
        node.op, node.inputs, node.attrs = "Const", [], {"dtype": ops.type_attr(dtype)}
        node.value = np.asarray(value, dtype.as_numpy_dtype)
        folded.add(id(node))


def _merged_padding(dims, paddings) -> tuple[list[int], list[list[int]]]:
    """``dims`` and ``paddings`` with every axis padded by nothing merged into the axis before it."""
    shape, pads = [dims[0]], [list(paddings[0])]
    for d, (lo, hi) in zip(dims[1:], paddings[1:]):
        if lo == hi == 0:
            shape[-1] *= d
            pads[-1] = [p * d for p in pads[-1]]
        else:
            shape.append(d)
            pads.append([lo, hi])
    return shape, pads


def _pad_at(graph: Graph, node: Node, shape: list[int], pads: list[list[int]]) -> None:
    """``node`` (a Pad or PadV2) made at ``shape`` by Reshapes around it."""
    x, (dtype, out_shape) = node.inputs[0], node.outputs[0]
    value = {"constant_values": node.inputs[2]} if node.op == "PadV2" else {}
    out = recorded_before(graph, node, lambda tf: tf.reshape(tf.pad(tf.reshape(x, shape), pads, **value),
                                                             list(out_shape)))
    node.op, node.inputs, node.attrs = "Identity", [out], {"T": ops.type_attr(dtype)}


def pads_within_rank_four(graph: Graph, kept) -> None:
    """Each rank-5 or rank-6 Pad/PadV2 of a static shape at the rank above, where that is 4 or less."""
    for node in list(graph.nodes):
        x = node.inputs[0] if node.op in ("Pad", "PadV2") else None
        if x is None or x.shape.rank is None or x.shape.rank < 5 or None in x.shape.dims:
            continue
        paddings = node.inputs[1].constant
        if paddings is None:
            continue
        shape, pads = _merged_padding(list(x.shape.dims), np.asarray(paddings).tolist())
        if len(shape) <= 4:
            _pad_at(graph, node, shape, pads)


def _static_dims(t: Tensor) -> list[int] | None:
    dims = t.shape.dims
    return None if dims is None or None in dims else list(dims)


def _reversed_runs(dims: list[int], axes) -> tuple[list[int], list[int]]:
    """``dims`` with adjacent axes both reversed or both kept merged, and the merged reversed axes."""
    flags = [False] * len(dims)
    for a in np.asarray(axes).ravel():
        flags[int(a) % len(dims)] = True
    shape, merged = [], []
    for i, (d, flag) in enumerate(zip(dims, flags)):
        if i and flag == flags[i - 1]:
            shape[-1] *= d
        else:
            shape.append(d)
            merged += [len(shape) - 1] if flag else []
    return shape, merged


def _low_rank(graph: Graph, node: Node, out_shape: list[int]) -> Tensor | None:
    """``node`` (a rank-5/6 ReverseV2 or SelectV2) computed at rank 4 or less, or None where it cannot be."""
    if node.op == "ReverseV2" and node.inputs[1].constant is not None:
        shape, axes = _reversed_runs(_static_dims(node.inputs[0]), node.inputs[1].constant)
        if len(shape) > 4:
            return None
        x = node.inputs[0]
        return recorded_before(graph, node, lambda tf: tf.reshape(tf.reverse(tf.reshape(x, shape), axes), out_shape))
    if node.op == "SelectV2" and all(_static_dims(t) is not None for t in node.inputs):
        def flat(tf, t):  # a broadcast operand is made whole first (a Tile)
            if t.shape.rank == 0:
                return t
            return tf.reshape(t if _static_dims(t) == out_shape else tf.broadcast_to(t, out_shape), [-1])
        operands = node.inputs
        return recorded_before(graph, node, lambda tf: tf.reshape(tf.where(*(flat(tf, t) for t in operands)),
                                                                  out_shape))
    return None


def reverses_and_selects_within_rank_four(graph: Graph, kept) -> None:
    """Each rank-5 or rank-6 ReverseV2 and SelectV2 of static shapes made at rank 4 or less (above)."""
    for node in list(graph.nodes):
        if node.op not in ("ReverseV2", "SelectV2") or _static_dims(node.inputs[0]) is None:
            continue
        dtype, out_shape = node.outputs[0]
        if len(out_shape) < 5 or None in out_shape:
            continue
        out = _low_rank(graph, node, list(out_shape))
        if out is not None:
            node.op, node.inputs, node.attrs = "Identity", [out], {"T": ops.type_attr(dtype)}
