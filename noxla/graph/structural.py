"""Shape-moving and reducing TF functions on the graph (reshape, slices, gathers, reductions, ...),
each as the raw op TF emits for it, with static shapes inferred and a NumPy fold."""
from __future__ import annotations

import collections

import numpy as np

from noxla.graph import ops
from noxla.graph.convert import convert_to_tensor, flat
from noxla.graph.core import Tensor
from noxla.graph.dtypes import DTYPES, Uncovered, as_dtype

I32 = DTYPES["int32"]


def static_ints(value, what: str) -> list[int]:
    """A size or axis argument as Python ints: a list of ints, or a constant tensor."""
    if isinstance(value, Tensor):
        if value.constant is None:
            raise Uncovered(f"{what} computed at run time")
        return [int(v) for v in np.reshape(value.constant, -1)]
    if isinstance(value, (list, tuple)):  # nested lists (paddings) flattened
        return [i for v in value for i in static_ints(v, what)]
    if isinstance(value, (int, np.integer)):   # each size of a shape list: no array made
        return [int(value)]
    return [int(v) for v in np.reshape(value, -1)]


def int_tensor(value, what: str) -> Tensor:
    """An int32 Const of a size/axis argument (kept as given when it is already an int32 tensor)."""
    if isinstance(value, Tensor):
        if value.dtype != I32:
            raise Uncovered(f"{what} of dtype {value.dtype.name}")
        return value
    scalar = np.ndim(value) == 0 and not isinstance(value, (list, tuple))
    ints = static_ints(value, what)
    return ops.constant(np.array(ints[0] if scalar else ints, np.int32), I32)


def packed(values, dtype=I32) -> Tensor:
    """A (nested) list holding tensors (run-time sizes: ``[n, 1]``), as TF's auto-packing converts
    it: each item a tensor of the first tensor's dtype, then a Pack per list."""
    dtype = dtype or next(v for v in flat(values) if isinstance(v, Tensor)).dtype
    items = [packed(v, dtype) if isinstance(v, (list, tuple)) and any(isinstance(u, Tensor) for u in flat(v))
             else convert_to_tensor(v, dtype=dtype) for v in values]  # inner lists packed first, as TF's
    if any(t.shape.dims != items[0].shape.dims for t in items):
        raise Uncovered("a ragged list holding tensors converted to one tensor")
    return stack(items, name="packed")


def shape_arg(value, what: str) -> tuple[Tensor, list]:
    """A shape argument as the int32 tensor the op reads and its sizes as TF's shape inference
    knows them (ints, None where computed at run time)."""
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        value = packed(value)  # TF packs a list of sizes holding tensors
    if isinstance(value, Tensor) and value.constant is None:
        if value.dtype != I32 or value.shape.rank != 1 or value.shape.dims[0] is None:
            raise Uncovered(f"{what} computed at run time as a {value.dtype.name} {value.shape}")
        known = ops.partial(value) or [None] * value.shape.dims[0]
        return value, [None if d is None or d < 0 else d for d in known]
    return int_tensor(value, what), static_ints(value, what)


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def _dims(x: Tensor) -> tuple:
    return tuple(x.shape.dims)


def reshape(x, shape, name=None) -> Tensor:
    x = convert_to_tensor(x)
    shape_tensor, sizes = shape_arg(shape, "tf.reshape's shape")
    sizes = [None if s == -1 else s for s in sizes]
    empty = 0 in _dims(x)  # TF's element count of a shape with a 0 is 0, unknown sizes or not
    if (None not in _dims(x) or empty) and sizes.count(None) == 1:  # TF infers the one size left
        known = int(np.prod([s for s in sizes if s is not None], dtype=np.int64))
        total = 0 if empty else int(np.prod(_dims(x), dtype=np.int64))
        if known:  # else any size fits an empty tensor: TF leaves it unknown (a (b, 0) as (None, 1, 0))
            sizes[sizes.index(None)] = total // known
    if None not in sizes and None not in _dims(x) and np.prod(sizes, dtype=np.int64) != np.prod(_dims(x)):
        raise ValueError(f"cannot reshape {_dims(x)} to {sizes}")
    return ops.emit1("Reshape", [x, shape_tensor], {"T": ops.type_attr(x.dtype), "Tshape": ops.type_attr(I32)},
                     x.dtype, sizes, lambda v, s: v.reshape(sizes), name)


def transpose(x, perm=None, conjugate=False, name=None) -> Tensor:
    x = convert_to_tensor(x)
    rank = len(_dims(x))
    perm = list(range(rank - 1, -1, -1)) if perm is None else static_ints(perm, "tf.transpose's perm")
    perm_tensor = ops.constant(np.array(perm, np.int32), I32)
    return ops.emit1("Transpose", [x, perm_tensor], {"T": ops.type_attr(x.dtype), "Tperm": ops.type_attr(I32)},
                     x.dtype, [_dims(x)[p] for p in perm], lambda v, p: np.transpose(v, perm), name)


def expand_dims(x, axis, name=None) -> Tensor:
    x = convert_to_tensor(x)
    (a,) = static_ints(axis, "tf.expand_dims' axis")
    dims = list(_dims(x))
    dims.insert(_axis(a, len(dims) + 1), 1)
    attrs = {"T": ops.type_attr(x.dtype), "Tdim": ops.type_attr(I32)}
    return ops.emit1("ExpandDims", [x, int_tensor(a, "axis")], attrs, x.dtype, dims, lambda v, _: v.reshape(dims), name)


def squeeze(x, axis=None, name=None) -> Tensor:
    x = convert_to_tensor(x)
    dims = _dims(x)
    axes = [] if axis is None else static_ints(axis, "tf.squeeze's axis")
    drop = {_axis(a, len(dims)) for a in axes} if axes else {i for i, d in enumerate(dims) if d == 1}
    if not axes and None in dims:
        raise Uncovered("tf.squeeze without axes of a tensor of unknown sizes")
    if any(dims[a] not in (1, None) for a in drop):
        raise ValueError(f"cannot squeeze axes {axes} of {dims}")
    out = [d for i, d in enumerate(dims) if i not in drop]
    return ops.emit1("Squeeze", [x], {"T": ops.type_attr(x.dtype), "squeeze_dims": ops.ints_attr(axes)},
                     x.dtype, out, lambda v: v.reshape(out), name)


def identity(x, name=None) -> Tensor:
    x = convert_to_tensor(x)
    return ops.emit1("Identity", [x], {"T": ops.type_attr(x.dtype)}, x.dtype, _dims(x), None, name)


def snapshot(input, name=None) -> Tensor:  # tf.raw_ops.Snapshot: an identity TF.js's converter keeps
    x = convert_to_tensor(input)
    return ops.emit1("Snapshot", [x], {"T": ops.type_attr(x.dtype)}, x.dtype, _dims(x), None, name)


def _same_dtype(values) -> list[Tensor]:
    first = next((v for v in values if isinstance(v, Tensor)), None)
    return [convert_to_tensor(v, dtype=None if first is None else first.dtype) for v in values]


def concat(values, axis, name="concat") -> Tensor:
    values = _same_dtype(list(values))
    if len(values) == 1:
        return identity(values[0])
    (a,) = static_ints(axis, "tf.concat's axis")
    rank = len(_dims(values[0]))
    a = _axis(a, rank)
    dims = list(_dims(values[0]))
    sizes = [_dims(v)[a] for v in values]
    dims[a] = None if None in sizes else sum(sizes)
    for i in range(rank):  # the other sizes, unknown in one operand, are known from another's
        dims[i] = dims[i] if i == a else ops.broadcast_shapes(*[(_dims(v)[i],) for v in values])[0]
    known = None
    if rank == 1 and values[0].dtype.is_integer and all(isinstance(ops.partial(v), list) for v in values):
        known = [d for v in values for d in ops.partial(v)]
    attrs = {"N": ops.int_attr(len(values)), "T": ops.type_attr(values[0].dtype), "Tidx": ops.type_attr(I32)}
    return ops.emit1("ConcatV2", [*values, int_tensor(axis, "axis")], attrs, values[0].dtype, dims,
                     lambda *v: np.concatenate(v[:-1], axis=a), "concat", partial=known)


def stack(values, axis=0, name="stack") -> Tensor:
    values = _same_dtype(list(values))
    dims = list(_dims(values[0]))
    a = _axis(axis, len(dims) + 1)
    if any(_dims(v) != tuple(dims) for v in values):
        raise ValueError("tf.stack of tensors of different shapes")
    out = dims[:a] + [len(values)] + dims[a:]
    known = [ops.partial(v) for v in values] if not dims and values[0].dtype.is_integer else None
    attrs = {"N": ops.int_attr(len(values)), "T": ops.type_attr(values[0].dtype), "axis": ops.int_attr(axis)}
    return ops.emit1("Pack", values, attrs, values[0].dtype, out, lambda *v: np.stack(v, axis=a), name or "stack",
                     partial=known)


def unstack(value, num=None, axis=0, name="unstack") -> list[Tensor]:
    value = convert_to_tensor(value)
    dims = _dims(value)
    a = _axis(axis, len(dims))
    out = dims[:a] + dims[a + 1:]
    attrs = {"num": ops.int_attr(dims[a]), "T": ops.type_attr(value.dtype), "axis": ops.int_attr(axis)}
    return ops.emit("Unpack", [value], attrs, [(value.dtype, out)] * dims[a],
                    lambda v: [np.take(v, i, axis=a) for i in range(dims[a])], "unstack")


def split(value, num_or_size_splits, axis=0, num=None, name="split") -> list[Tensor]:
    value = convert_to_tensor(value)
    dims = _dims(value)
    (a,) = static_ints(axis, "tf.split's axis")
    a = _axis(a, len(dims))
    if isinstance(num_or_size_splits, int):
        n = num_or_size_splits
        if dims[a] % n:
            raise ValueError(f"cannot split {dims[a]} into {n}")
        out = [(value.dtype, dims[:a] + (dims[a] // n,) + dims[a + 1:])] * n
        return ops.emit("Split", [int_tensor(a, "axis"), value],
                        {"num_split": ops.int_attr(n), "T": ops.type_attr(value.dtype)}, out,
                        lambda _, v: np.split(v, n, axis=a), "split")
    sizes_tensor, sizes = shape_arg(num_or_size_splits, "tf.split's sizes")
    if sizes_tensor.constant is None:   # TF's shape inference: every piece's size unknown on the axis
        out = [(value.dtype, dims[:a] + (None,) + dims[a + 1:])] * len(sizes)
        attrs = {"num_split": ops.int_attr(len(sizes)), "T": ops.type_attr(value.dtype), "Tlen": ops.type_attr(I32)}
        return ops.emit("SplitV", [value, sizes_tensor, int_tensor(a, "axis")], attrs, out, None, "split")
    if -1 in sizes:
        sizes[sizes.index(-1)] = dims[a] - (sum(sizes) + 1)
    bounds = np.cumsum(sizes)[:-1]
    out = [(value.dtype, dims[:a] + (s,) + dims[a + 1:]) for s in sizes]
    attrs = {"num_split": ops.int_attr(len(sizes)), "T": ops.type_attr(value.dtype), "Tlen": ops.type_attr(I32)}
    return ops.emit("SplitV", [value, sizes_tensor, int_tensor(a, "axis")], attrs, out,
                    lambda v, _, __: np.split(v, bounds, axis=a), "split")


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None) -> Tensor:
    params, indices = convert_to_tensor(params), convert_to_tensor(indices)
    if indices.dtype.name not in ("int32", "int64"):
        raise Uncovered(f"tf.gather with {indices.dtype.name} indices")
    (a,) = static_ints(0 if axis is None else axis, "tf.gather's axis")
    p, i = _dims(params), _dims(indices)
    a = _axis(a, len(p))
    b = batch_dims % len(i) if batch_dims < 0 else batch_dims
    out = p[:a] + i[b:] + p[a + 1:]

    def fold(pv, iv, _):
        if b or (iv.size and (iv.min() < 0 or iv.max() >= p[a])):
            return None  # TF's CPU kernel refuses out-of-range indices; TF.js clamps
        return np.take(pv, iv, axis=a)
    attrs = {"batch_dims": ops.int_attr(batch_dims), "Tparams": ops.type_attr(params.dtype),
             "Tindices": ops.type_attr(indices.dtype), "Taxis": ops.type_attr(I32)}
    return ops.emit1("GatherV2", [params, indices, int_tensor(a if axis is None else axis, "axis")], attrs,
                     params.dtype, out, fold, name)


def broadcast_to(x, shape, name=None) -> Tensor:
    x = convert_to_tensor(x)
    shape_tensor, sizes = shape_arg(shape, "tf.broadcast_to's shape")
    out = ops.broadcast_shapes(_dims(x), sizes)
    if any(s is not None and s != o for s, o in zip(sizes, out)):
        raise ValueError(f"cannot broadcast {_dims(x)} to {sizes}")
    return ops.emit1("BroadcastTo", [x, shape_tensor], {"T": ops.type_attr(x.dtype),
                     "Tidx": ops.type_attr(I32)}, x.dtype, sizes, lambda v, _: np.broadcast_to(v, sizes), name)


def fill(dims, value, name=None) -> Tensor:
    value = convert_to_tensor(value)
    dims_tensor, sizes = shape_arg(dims, "tf.fill's dims")
    return ops.emit1("Fill", [dims_tensor, value], {"T": ops.type_attr(value.dtype),
                     "index_type": ops.type_attr(I32)}, value.dtype, sizes, lambda _, v: np.full(sizes, v), name)


def filled_like(x, fill_value, dtype=None, name=None) -> Tensor:
    """zeros_like/ones_like: TF makes a Const of the static shape; of a shape known only at run
    time, ZerosLike (zeros of the same dtype) or a Fill of its Shape."""
    x = convert_to_tensor(x)
    dtype = x.dtype if dtype is None else as_dtype(dtype)
    if None in _dims(x):
        if fill_value == 0 and dtype == x.dtype:
            return ops.emit1("ZerosLike", [x], {"T": ops.type_attr(dtype)}, dtype, _dims(x), None, name)
        return fill(shape(x), convert_to_tensor(np.array(fill_value, dtype.as_numpy_dtype)))
    return ops.constant(np.full(_dims(x), fill_value, dtype.as_numpy_dtype), dtype)


def filled_shape(shape, fill_value, dtype=DTYPES["float32"], name=None) -> Tensor:
    """zeros/ones: a Const (TF makes one for a static shape), else a Fill."""
    dtype = as_dtype(dtype)
    if isinstance(shape, Tensor) and shape.constant is None:
        return fill(shape, convert_to_tensor(np.array(fill_value, dtype.as_numpy_dtype)), name)
    return ops.constant(np.full(static_ints(shape, "shape"), fill_value, dtype.as_numpy_dtype), dtype)


def shape(x, out_type=I32, name=None) -> Tensor:
    """A Const where every size is known (as TF's graph-mode tf.shape makes it), else a Shape op."""
    x = convert_to_tensor(x)
    out_type = as_dtype(out_type)
    if None in _dims(x):
        return ops.emit1("Shape", [x], {"T": ops.type_attr(x.dtype), "out_type": ops.type_attr(out_type)},
                         out_type, [len(_dims(x))], None, name, partial=list(_dims(x)))
    return ops.constant(np.array(_dims(x), out_type.as_numpy_dtype), out_type)


def size(x, out_type=I32, name=None) -> Tensor:
    x = convert_to_tensor(x)
    out_type = as_dtype(out_type)
    if None in _dims(x):
        return ops.emit1("Size", [x], {"T": ops.type_attr(x.dtype), "out_type": ops.type_attr(out_type)},
                         out_type, [], None, name)
    return ops.constant(np.array(int(np.prod(_dims(x), dtype=np.int64)), out_type.as_numpy_dtype), out_type)


def range_(start, limit=None, delta=1, dtype=None, name="range") -> Tensor:
    if limit is None:
        start, limit = 0, start
    values = [v.constant if isinstance(v, Tensor) else v for v in (start, limit, delta)]
    if any(v is None for v in values):  # a Range op (a size known at run time)
        bounds = [v for v in (start, limit, delta) if isinstance(v, Tensor)]
        dtype = as_dtype(dtype or bounds[0].dtype)
        if dtype != I32 or any(b.dtype != I32 or b.shape.rank != 0 for b in bounds):
            raise Uncovered("tf.range with run-time bounds not int32 scalars")
        inputs = [convert_to_tensor(v, dtype=I32) for v in (start, limit, delta)]
        return ops.emit1("Range", inputs, {"Tidx": ops.type_attr(I32)}, I32, [None], None, name)
    if dtype is None:
        kinds = [np.asarray(v).dtype.kind for v in values]
        dtype = DTYPES["float32"] if "f" in kinds else DTYPES["int32"]
    dtype = as_dtype(dtype)
    return ops.constant(np.arange(*[np.asarray(v).item() for v in values], dtype=dtype.as_numpy_dtype), dtype)


def slice_(x, begin, size, name=None) -> Tensor:
    x = convert_to_tensor(x)
    dims = _dims(x)
    attrs = {"T": ops.type_attr(x.dtype), "Index": ops.type_attr(I32)}
    size_tensor, s = shape_arg(size, "tf.slice's size")
    if size_tensor.constant is None:  # TF's shape: the sizes known (not -1), the rest unknown
        begin_tensor, _ = shape_arg(begin, "tf.slice's begin")
        return ops.emit1("Slice", [x, begin_tensor, size_tensor], attrs, x.dtype, s, None, name)
    if isinstance(begin, Tensor) and begin.constant is None:
        # A start computed at run time (a dynamic slice): TF's shape is the size, when it is all given.
        if -1 in s or begin.dtype != I32:
            raise Uncovered("tf.slice with a run-time start and a size of -1")
        return ops.emit1("Slice", [x, begin, int_tensor(s, "size")], attrs, x.dtype, s, None, name)
    b = static_ints(begin, "tf.slice's begin")
    s = [None if d is None and ss == -1 else d - bb if ss == -1 else ss for d, bb, ss in zip(dims, b, s)]
    sizes = size_tensor if None in s else int_tensor(s, "size")  # -1 kept where the size is unknown

    def fold(v, _, __):
        return v[tuple(slice(bb, bb + ss) for bb, ss in zip(b, s))]
    return ops.emit1("Slice", [x, int_tensor(b, "begin"), sizes], attrs, x.dtype, s, fold, name)


def argmax(input, axis=None, output_type=DTYPES["int64"], name=None) -> Tensor:
    x = convert_to_tensor(input)
    output_type = as_dtype(output_type)
    (a,) = static_ints(0 if axis is None else axis, "tf.argmax's axis")
    dims = _dims(x)
    a = _axis(a, len(dims))
    if not (x.dtype.is_floating or x.dtype.is_integer):
        raise Uncovered(f"ArgMax on {x.dtype.name}")

    def fold(v, _):  # first of equal maxima, as TF's kernel; NaN is left to TF
        return None if v.dtype.kind == "f" and np.isnan(v).any() or v.shape[a] == 0 else np.argmax(v, axis=a)
    attrs = {"T": ops.type_attr(x.dtype), "Tidx": ops.type_attr(I32), "output_type": ops.type_attr(output_type)}
    return ops.emit1("ArgMax", [x, int_tensor(a, "axis")], attrs, output_type, dims[:a] + dims[a + 1:], fold, name)


def gather_nd(params, indices, batch_dims=0, name=None) -> Tensor:
    params, indices = convert_to_tensor(params), convert_to_tensor(indices)
    if batch_dims != 0 or indices.dtype.name not in ("int32", "int64"):
        raise Uncovered("tf.gather_nd with batch_dims or indices not int32/int64")
    p, i = _dims(params), _dims(indices)
    if not i or i[-1] > len(p):
        raise ValueError(f"gather_nd: indices {i} for params {p}")
    attrs = {"Tparams": ops.type_attr(params.dtype), "Tindices": ops.type_attr(indices.dtype)}
    return ops.emit1("GatherNd", [params, indices], attrs, params.dtype, i[:-1] + p[i[-1]:], None, name)


def scatter_nd(indices, updates, shape, name=None) -> Tensor:
    """ScatterNd: updates summed into zeros of ``shape`` at ``indices`` (no fold: the kernels'
    handling of out-of-range indices differs, TF's refuses them)."""
    indices, updates = convert_to_tensor(indices), convert_to_tensor(updates)
    if indices.dtype.name not in ("int32", "int64"):
        raise Uncovered(f"tf.scatter_nd with {indices.dtype.name} indices")
    shape_tensor, out = shape_arg(shape, "tf.scatter_nd's shape")
    if shape_tensor.constant is None and indices.dtype != I32:
        raise Uncovered("tf.scatter_nd to a run-time shape with int64 indices")
    attrs = {"T": ops.type_attr(updates.dtype), "Tindices": ops.type_attr(indices.dtype),
             "bad_indices_policy": ops.str_attr("")}
    if shape_tensor.constant is not None:
        shape_tensor = ops.constant(np.array(out, indices.dtype.as_numpy_dtype), indices.dtype)
    return ops.emit1("ScatterNd", [indices, updates, shape_tensor], attrs, updates.dtype, out, None, name)


def top_k(input, k=1, sorted=True, index_type=I32, name=None) -> list[Tensor]:
    x = convert_to_tensor(input)
    index_type = as_dtype(index_type)
    (k_value,) = static_ints(k, "tf.math.top_k's k")
    dims = _dims(x)
    if not dims or k_value > dims[-1] or not (x.dtype.is_floating or x.dtype.is_integer):
        raise Uncovered("tf.math.top_k of a scalar, k past the size, or a non-numeric dtype")
    out = dims[:-1] + (k_value,)
    attrs = {"sorted": ops.bool_attr(sorted), "T": ops.type_attr(x.dtype), "Tk": ops.type_attr(I32),
             "index_type": ops.type_attr(index_type)}
    values, indices = ops.emit("TopKV2", [x, int_tensor(k_value, "k")], attrs, [(x.dtype, out), (index_type, out)])
    return TopK(values, indices)


TopK = collections.namedtuple("TopK", ["values", "indices"])  # as tf.math.top_k's result


def strided_slice(x, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                  shrink_axis_mask=0, var=None, name=None) -> Tensor:
    x = convert_to_tensor(x)
    (begin, b), (end, e) = _bounds(begin, "begin"), _bounds(end, "end")
    s = [1] * len(b) if strides is None else static_ints(strides, "strides")
    index, unknown_items = [], set()
    for i in range(len(b)):
        bit = 1 << i
        if ellipsis_mask & bit:
            index.append(Ellipsis)
        elif new_axis_mask & bit:
            index.append(None)
        elif shrink_axis_mask & bit:
            index.append(0 if b[i] is None else b[i])  # the axis goes, wherever it is indexed
        else:
            start, stop = None if begin_mask & bit else b[i], None if end_mask & bit else e[i]
            if (start is None and not begin_mask & bit) or (stop is None and not end_mask & bit):
                unknown_items.add(i)  # bounds known at run time only: TF's shape leaves the size unknown
            index.append(slice(start, stop, s[i]))
    index = tuple(index)
    out = _sliced_shape(_dims(x), index, frozenset(unknown_items))
    known = ops.partial(x) if x.shape.rank == 1 and x.dtype.is_integer else None
    if isinstance(known, list):
        known = _sliced_shape_value(known, index)
    attrs = {"T": ops.type_attr(x.dtype), "Index": ops.type_attr(I32), "begin_mask": ops.int_attr(begin_mask),
             "end_mask": ops.int_attr(end_mask), "ellipsis_mask": ops.int_attr(ellipsis_mask),
             "new_axis_mask": ops.int_attr(new_axis_mask), "shrink_axis_mask": ops.int_attr(shrink_axis_mask)}
    inputs = [x, begin, end, int_tensor(s, "strides")]
    return ops.emit1("StridedSlice", inputs, attrs, x.dtype, out, lambda v, *_: v[index], name, partial=known)


def _bounds(value, what: str) -> tuple[Tensor, list]:
    """A slice's begin or end: the int32 tensor the op reads, and its values where constant (TF's
    StridedSlice shape reads constant bounds only: run-time ones are all None)."""
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in flat(value)):
        value = packed(value)
    if isinstance(value, Tensor) and value.constant is None:
        if value.dtype != I32 or value.shape.rank != 1 or value.shape.dims[0] is None:
            raise Uncovered(f"tf.strided_slice's {what} computed at run time as {value.dtype.name} {value.shape}")
        return value, [None] * value.shape.dims[0]
    return int_tensor(static_ints(value, what), what), static_ints(value, what)


def _sliced_shape(dims: tuple, index: tuple, unknown_items: frozenset = frozenset()) -> tuple:
    """The shape of ``x[index]`` (NumPy's basic indexing, clamping included, as StridedSlice with
    constant bounds); a slice of an axis of unknown size, or by the items ``unknown_items`` (their
    bounds known at run time only), is of unknown size. Axis by axis through ``range``: NumPy's own
    indexing of a broadcast array overflows its iterator where two unknown sizes multiply past 2^63."""
    explicit = sum(1 for item in index if item is not None and item is not Ellipsis)
    if explicit > len(dims) or sum(1 for item in index if item is Ellipsis) > 1:
        raise ValueError(f"strided slice {index} of {dims}: too many indices or ellipses")
    axes = iter(range(len(dims)))
    out = []
    for position, item in enumerate(index):
        if item is Ellipsis:
            out += [dims[next(axes)] for _ in range(len(dims) - explicit)]
        elif item is None:
            out.append(1)
        else:
            d = dims[next(axes)]
            if isinstance(item, slice):
                out.append(None if d is None or position in unknown_items else len(range(d)[item]))
            elif d is not None and not -d <= item < d:
                raise ValueError(f"strided slice {index} of {dims}: index {item} out of range")
    return tuple(out) + tuple(dims[a] for a in axes)


def _sliced_shape_value(known: list, index: tuple):
    """A slice of a partly known int vector (a Shape's): what it is known to hold, or None."""
    if len(index) != 1 or index[0] is Ellipsis or index[0] is None:
        return None
    item = index[0]
    if isinstance(item, slice):
        return list(np.array(known, dtype=object)[item])
    return known[item] if -len(known) <= item < len(known) else None


def getitem(x: Tensor, index) -> Tensor:
    """``x[index]`` as TF's ``_slice_helper`` records it: one StridedSlice, masks for the
    omitted bounds, shrunk axes (ints), new axes (None) and an ellipsis."""
    items = index if isinstance(index, tuple) else (index,)
    begin, end, strides = [], [], []
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}
    for i, item in enumerate(items):
        bit = 1 << i
        if isinstance(item, Tensor):
            if item.constant is None or item.shape.rank != 0:
                raise Uncovered("indexing a tensor by a run-time or non-scalar tensor")
            item = int(item.constant)
        if isinstance(item, slice):
            # a start or stop may be a scalar int32 tensor (a run-time size): packed with the others, as TF's
            for value in (item.start, item.stop, item.step):
                if value is not None and not isinstance(value, (int, np.integer)) and not (
                        value is not item.step and isinstance(value, Tensor) and value.dtype == I32
                        and value.shape.rank == 0):
                    raise Uncovered("a slice bound that is not a Python int or an int32 scalar")
            begin.append(0 if item.start is None else item.start)
            end.append(0 if item.stop is None else item.stop)
            strides.append(1 if item.step is None else item.step)
            masks["begin_mask"] |= bit if item.start is None else 0
            masks["end_mask"] |= bit if item.stop is None else 0
        elif item is Ellipsis:
            begin.append(0), end.append(0), strides.append(1)
            masks["ellipsis_mask"] |= bit
        elif item is None:
            begin.append(0), end.append(0), strides.append(1)
            masks["new_axis_mask"] |= bit
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            begin.append(int(item)), end.append(int(item) + 1), strides.append(1)
            masks["shrink_axis_mask"] |= bit
        else:
            raise Uncovered(f"indexing a tensor by {type(item).__name__}")
    return strided_slice(x, begin, end, strides, **masks)


def pad(x, paddings, mode="CONSTANT", constant_values=0, name=None) -> Tensor:
    x = convert_to_tensor(x)
    if str(mode).upper() != "CONSTANT":
        raise Uncovered(f"tf.pad mode {mode}")
    if isinstance(paddings, (list, tuple)) and any(isinstance(v, Tensor) for v in flat(paddings)):
        paddings = packed(paddings)  # as TF converts it
    if isinstance(paddings, Tensor) and paddings.constant is None:
        return _run_time_pad(x, paddings, constant_values, name)
    pads = np.array(static_ints(paddings, "tf.pad's paddings"), np.int64).reshape(-1, 2)
    if (pads < 0).any():
        raise ValueError("negative paddings")
    out = [None if d is None else d + int(p.sum()) for d, p in zip(_dims(x), pads)]
    pads_tensor = ops.constant(pads.astype(np.int32), I32)
    zero = not isinstance(constant_values, Tensor) and np.ndim(constant_values) == 0 and constant_values == 0
    attrs = {"T": ops.type_attr(x.dtype), "Tpaddings": ops.type_attr(I32)}
    if zero:
        return ops.emit1("Pad", [x, pads_tensor], attrs, x.dtype, out, lambda v, _: np.pad(v, pads), name)
    value = convert_to_tensor(constant_values, dtype=x.dtype)
    return ops.emit1("PadV2", [x, pads_tensor, value], attrs, x.dtype, out,
                     lambda v, _, c: np.pad(v, pads, constant_values=c), name)


def _run_time_pad(x: Tensor, paddings: Tensor, constant_values, name) -> Tensor:
    """Paddings known at run time: every size unknown, as TF's shape function leaves them."""
    if paddings.dtype != I32 or paddings.shape.dims != (x.shape.rank, 2):
        raise Uncovered(f"tf.pad's paddings computed at run time as {paddings.dtype.name} {paddings.shape}")
    attrs = {"T": ops.type_attr(x.dtype), "Tpaddings": ops.type_attr(I32)}
    out = [None] * x.shape.rank
    if not isinstance(constant_values, Tensor) and np.ndim(constant_values) == 0 and constant_values == 0:
        return ops.emit1("Pad", [x, paddings], attrs, x.dtype, out, None, name)
    value = convert_to_tensor(constant_values, dtype=x.dtype)
    return ops.emit1("PadV2", [x, paddings, value], attrs, x.dtype, out, None, name)


def reverse(x, axis, name=None) -> Tensor:
    x = convert_to_tensor(x)
    axes = [_axis(a, len(_dims(x))) for a in static_ints(axis, "tf.reverse's axis")]
    return ops.emit1("ReverseV2", [x, int_tensor(axis, "axis")], {"T": ops.type_attr(x.dtype),
                     "Tidx": ops.type_attr(I32)}, x.dtype, _dims(x), lambda v, _: np.flip(v, axes), name)


def tile(x, multiples, name=None) -> Tensor:
    x = convert_to_tensor(x)
    m = static_ints(multiples, "tf.tile's multiples")
    out = [None if d is None else d * k for d, k in zip(_dims(x), m)]
    return ops.emit1("Tile", [x, int_tensor(multiples, "multiples")], {"T": ops.type_attr(x.dtype),
                     "Tmultiples": ops.type_attr(I32)}, x.dtype, out,
                     lambda v, _: np.tile(v, m), name)


_REDUCTIONS = {"Sum": np.sum, "Prod": np.prod, "Max": np.max, "Min": np.min, "Mean": np.mean, "Any": np.any,
               "All": np.all}
# Each reduction's value over no elements, as TF's kernels give it (max, min and mean left to run).
_EMPTY_REDUCTIONS = {"Sum": 0, "Prod": 1, "Any": False, "All": True}


def reduce(op: str, x, axis=None, keepdims=False, name=None) -> Tensor:
    x = convert_to_tensor(x)
    if (op in ("Any", "All")) != x.dtype.is_bool:
        raise Uncovered(f"{op} on {x.dtype.name}")
    # A bfloat16 sum, product or mean is not folded: how TF's kernel accumulates is not the fold's
    # (the writers carry it as TF's path does: accumulated in float32, rounded once).
    unfolded = x.dtype.name == "bfloat16" and op in ("Sum", "Prod", "Mean")
    rank = len(_dims(x))
    axes = list(range(rank)) if axis is None else static_ints(axis, "axis")
    norm = tuple(sorted({_axis(a, rank) for a in axes}))
    out = [1 if i in norm else d for i, d in enumerate(_dims(x)) if keepdims or i not in norm]
    scalar_axis = axis is not None and not isinstance(axis, (list, tuple, Tensor)) and np.ndim(axis) == 0

    def fold(v, _):
        if op in ("Max", "Min") and v.dtype.kind == "f" and np.isnan(v).any():
            return None
        if op == "Mean" and v.dtype.kind != "f":
            return None  # TF's integer mean divides with truncation
        if op in ("Max", "Min") and v.size == 0:
            return None
        kwargs = {"dtype": v.dtype} if op in ("Sum", "Prod", "Mean") else {}
        return _REDUCTIONS[op](v, axis=norm, keepdims=keepdims, **kwargs)
    if op in _EMPTY_REDUCTIONS and None not in out and (0 in out or any(_dims(x)[i] == 0 for i in norm)):
        # Over an axis of size 0 the result is the identity whatever the other (run-time) sizes: a
        # constant. Computed, TF.js's WebGL and WebGPU reduce it as rows of 0 / 0 (NaN) elements.
        return ops.constant(np.full(out, _EMPTY_REDUCTIONS[op], x.dtype.as_numpy_dtype), x.dtype, name=name or op)
    axes_tensor = ops.constant(np.array(axes[0] if scalar_axis else axes, np.int32), I32)
    attrs = {"T": ops.type_attr(x.dtype), "Tidx": ops.type_attr(I32), "keep_dims": ops.bool_attr(keepdims)}
    if op in ("Any", "All"):
        del attrs["T"]
    return ops.emit1(op, [x, axes_tensor], attrs, x.dtype, out, None if unfolded else fold, name)


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    x = convert_to_tensor(x)
    (a,) = static_ints(axis, "axis")
    a = _axis(a, len(_dims(x)))

    def fold(v, _):
        w = np.flip(v, a) if reverse else v
        out = np.cumsum(w, axis=a, dtype=v.dtype)
        if exclusive:
            out = np.concatenate([np.zeros_like(np.take(out, [0], axis=a)), np.take(out, range(out.shape[a] - 1),
                                  axis=a)], axis=a)
        return np.flip(out, a) if reverse else out
    attrs = {"exclusive": ops.bool_attr(exclusive), "reverse": ops.bool_attr(reverse),
             "T": ops.type_attr(x.dtype), "Tidx": ops.type_attr(I32)}
    return ops.emit1("Cumsum", [x, int_tensor(axis, "axis")], attrs, x.dtype, _dims(x), fold, name)
