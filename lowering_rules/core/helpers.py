"""TF building blocks shared by several rules."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lowering_rules.core.jax_compat import is_constant_dim
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.vocabulary import ALL_TARGETS, Limitation

# The primitives whose rules read ``ctx.lowering_for.tflite_converter``: a program applying one gets a
# lowering of its own for the .tflite (``noxla.front.lowering.needs_tflite_lowering``); any other shares its graph.
TFLITE_OWN_PRIMITIVES = frozenset({"dynamic_update_slice"})


def tf_dtype(dtype, uint32_as_int32: bool = False) -> tf.DType:
    """The TF dtype of a JAX dtype; uint32 as int32 in a lowering that carries it so (TF.js's:
    ``LoweringFor.uint32_as_int32``; a rule asks ``ctx.tf_dtype``, which knows)."""
    dtype = np.dtype(dtype)
    if dtype == np.uint32 and uint32_as_int32:
        return tf.int32
    return tf.as_dtype(dtype)


def constant(array, uint32_as_int32: bool = False) -> tf.Tensor:
    """A constant of the array's dtype, or of its carrier (uint32 as int32 bits, see ``tf_dtype``)."""
    array = np.asarray(array)
    if array.dtype == np.uint32 and uint32_as_int32:
        array = array.view(np.int32)
    return tf.constant(array, dtype=tf_dtype(array.dtype, uint32_as_int32))


# A Const op costs as much graph-building time as the op that reads it (a Python scalar operand
# becomes one per use): int32 constants that long chains reuse (the PRNG's limb arithmetic, 600 ops)
# are made once per graph. The cache lives in the graph, as a collection (a module-level map from
# graphs to their tensors would keep every graph alive: the tensors refer to it).
_CACHE_COLLECTION = "_noxla_int32_constants"


def int32_constant(value) -> tf.Tensor:
    """An int32 constant (a scalar or a small list), shared by every use in the current graph."""
    array = np.asarray(value, np.int32)
    if tf.executing_eagerly():
        return tf.constant(array)
    graph = tf.compat.v1.get_default_graph()
    collection = graph.get_collection_ref(_CACHE_COLLECTION)
    if not collection:
        collection.append({})
    cache = collection[0]
    # A FuncGraph (a loop or branch body) shares its outer graph's collections, this one too: the
    # key names the graph, so a constant made in a body is never handed to the graph around it
    # (a PRNG split in a while body, then one after the loop, crashed). A cached tensor keeps its
    # graph alive, so its id is not reused while the entry exists.
    key = (id(graph), array.shape, array.tobytes())
    if key not in cache:
        with graph.control_dependencies(None):  # shared: free of the first use's control inputs
            cache[key] = tf.constant(array)
    return cache[key]


# --- Sizes, slices and padding that work with static and symbolic dimensions -----------------

def size_vector(dims):
    """A shape/begin/end argument for TF ops: a list when all entries are static, else an int32 vector."""
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return [int(d) for d in dims]
    return tf.stack([tf.constant(int(d), tf.int32) if isinstance(d, (int, np.integer)) else d
                     for d in dims])


def axis_slice(x, rank: int, axis: int, start, stop=None, stride: int = 1):
    """``x[..., start:stop:stride, ...]`` on one axis (``stop=None``: to the end; negative: from the end)."""
    if stride > 1 and x.dtype.is_integer and stop is not None and not _negative(stop):
        # TF.js's wasm StridedSlice returns integer data retyped as float32 when a stride is > 1.
        return tf.gather(x, tf.range(start, stop, stride), axis=axis)
    begin, end, strides = [0] * rank, [0] * rank, [1] * rank
    begin[axis], strides[axis] = start, stride
    others = ((1 << rank) - 1) & ~(1 << axis)
    end_mask = others
    if stop is None:
        end_mask |= 1 << axis
    else:
        end[axis] = stop
    return tf.strided_slice(x, size_vector(begin), size_vector(end), strides,
                            begin_mask=others, end_mask=end_mask)


def _negative(n) -> bool:
    return isinstance(n, (int, np.integer)) and n < 0


def pad_exactly(x, paddings, value):
    """tf.pad filling with ``value``. TF.js's wasm PadV2 kernel takes its fill as a float32, so an
    int32 fill float32 cannot hold (INT32_MAX, min's identity, came out INT32_MIN; 2**24 + 1 came
    out 2**24) is padded as 0 and put in place by a select, as is an int32 fill known only at run time."""
    static = tf.get_static_value(value)
    if x.dtype != tf.int32 or (static is not None and int(np.float32(static)) == int(static)):
        return tf.pad(x, paddings, constant_values=value)
    padded = tf.pad(x, paddings)
    inside = tf.pad(tf.ones_like(x), paddings) > 0
    return tf.where(inside, padded, tf.fill(tf.shape(padded), tf.cast(value, tf.int32)))


def pad_or_crop(x, pads, value=0):
    """Pads each axis by ``(low, high)``; a negative amount removes elements from that side instead,
    of the padded array as in XLA: (-2, 2) on one element leaves one fill value. Cropping first is
    cheaper and the same unless an axis is padded on one side and cropped on the other."""
    rank = len(pads)
    crop = any(lo < 0 or hi < 0 for lo, hi in pads)
    pad = any(lo > 0 or hi > 0 for lo, hi in pads)
    pad_first = any(lo * hi < 0 for lo, hi in pads)
    if pad and pad_first:
        x = pad_exactly(x, [[max(lo, 0), max(hi, 0)] for lo, hi in pads], value)
    if crop:
        begin = [max(-lo, 0) for lo, _ in pads]
        end = [min(hi, 0) for _, hi in pads]
        end_mask = sum(1 << a for a, (_, hi) in enumerate(pads) if hi >= 0)
        x = tf.strided_slice(x, begin, end, [1] * rank, end_mask=end_mask)
    if pad and not pad_first:
        x = pad_exactly(x, [[max(lo, 0), max(hi, 0)] for lo, hi in pads], value)
    return x


def interior_pad(x, dims, axis: int, factor: int, value=0):
    """Puts ``factor - 1`` copies of ``value`` between neighbours along ``axis`` (lax.pad's interior
    padding, a convolution's lhs dilation): view x as [before, n, 1, after], pad the unit axis, merge
    it, drop the trailing fill. ``dims`` are x's sizes (ints or int32 scalars); the new size is
    ``(n - 1) * factor + 1``. The padded view has rank 4 whatever x's rank: TF.js's WebGL Pad
    kernel makes a fragment shader that does not compile at rank 5 and above."""
    if factor == 1 or (isinstance(dims[axis], (int, np.integer)) and dims[axis] == 0):
        return x
    before, after = product(dims[:axis]), product(dims[axis + 1:])
    widened = tf.reshape(x, size_vector([before, dims[axis], 1, after]))
    widened = pad_exactly(widened, [[0, 0], [0, 0], [0, factor - 1], [0, 0]], value)
    merged = tf.reshape(widened, size_vector([before, dims[axis] * factor, after]))
    trimmed = axis_slice(merged, 3, 1, 0, -(factor - 1))
    new_dims = list(dims)
    new_dims[axis] = (dims[axis] - 1) * factor + 1
    return tf.reshape(trimmed, size_vector(new_dims))


def product(dims):
    """The product of sizes that are ints or int32 scalars (an int when all are static)."""
    total = 1
    for d in dims:
        total = total * d
    return total


# TFLite's TRANSPOSE takes at most 6 axes (TF.js's WebGL transpose as many).
MAX_TRANSPOSE_RANK = 6


def transpose(x, perm):
    """``tf.transpose(x, perm)`` that TFLite runs at any rank: above ``MAX_TRANSPOSE_RANK`` axes
    (vmap adds one to a product's six), axes that stay adjacent and in order are merged by reshapes
    around a smaller transpose; if that is still too many, one axis is moved at a time (each move a
    transpose of at most 4 merged axes). At 6 axes or fewer it is one Transpose, as before."""
    perm = [int(p) for p in perm]
    n = len(perm)
    empty = 0 in [x.shape[d] for d in range(n)]  # static sizes only (None where symbolic)
    if n <= MAX_TRANSPOSE_RANK and not empty:
        return tf.transpose(x, perm)
    dims = [x.shape[d] if x.shape[d] is not None else tf.shape(x)[d] for d in range(n)]
    if empty:  # no values to move: TF.js's wasm Transpose divides by zero on some empty tensors
        return tf.reshape(x, size_vector([dims[p] for p in perm]))
    groups = []  # runs of input axes that stay adjacent and in order, in output order
    for p in perm:
        if groups and groups[-1][-1] == p - 1:
            groups[-1].append(p)
        else:
            groups.append([p])
    if len(groups) > MAX_TRANSPOSE_RANK:
        current = list(range(n))
        for k in range(n):
            i = current.index(perm[k])
            if i != k:  # axis i to position k; axes k..i-1 shift right, every other stays
                step = [*range(k), i, *range(k, i), *range(i + 1, n)]
                x = transpose(x, step)
                current = [current[j] for j in step]
        return x
    by_input = sorted(groups)
    merged = tf.reshape(x, size_vector([product([dims[d] for d in g]) for g in by_input]))
    moved = tf.transpose(merged, [by_input.index(g) for g in groups])
    return tf.reshape(moved, size_vector([dims[p] for p in perm]))


# --- Dtypes ------------------------------------------------------------------------------------

class DtypeNames(frozenset):
    """Dtypes named, not made: ``tf.float16 in DtypeNames({"float16"})`` holds, as does numpy's
    float16, and a module's tables of dtypes need no TensorFlow when it is imported."""

    def __contains__(self, dtype) -> bool:
        return super().__contains__(getattr(dtype, "name", dtype))


HALF_FLOATS = DtypeNames({"float16", "bfloat16"})


def wide(x):
    """Half-precision values computed in float32 (TFLite builtins have no float16 arithmetic)."""
    return tf.cast(x, tf.float32) if x.dtype in HALF_FLOATS else x


def as_out(ctx, y):
    """``y`` in the rule's output dtype."""
    return y if y.dtype == ctx.out_dtype else tf.cast(y, ctx.out_dtype)


def compute_dtype(dtype, *, bools: bool = False) -> tf.DType:
    """The dtype values are computed in: half floats in float32, integers narrower than 32 bits in
    int32 (and booleans as 0/1 in int32 when ``bools``). Exact: TFLite's kernels lack most float16
    and 8/16-bit arithmetic, and integer results wrap back to the narrow type on the final cast as
    JAX's narrow arithmetic wraps."""
    dtype = tf_dtype(dtype) if not isinstance(dtype, tf.DType) else dtype
    if dtype in HALF_FLOATS:
        return tf.float32
    if (dtype.is_integer and dtype.size < 4) or (bools and dtype == tf.bool):
        return tf.int32
    return dtype


def kernel_dtype(dtype, *, ordered: bool, bools: bool = False) -> tf.DType:
    """``compute_dtype``, and uint32 (which TFLite's SUM, PROD, MAXIMUM, CUMSUM... lack) as the int32
    with the same bits where only wrapping sums and products read it, as int64 where order does."""
    dtype = tf_dtype(dtype) if not isinstance(dtype, tf.DType) else dtype
    if dtype == tf.uint32:
        return tf.int64 if ordered else tf.int32
    return compute_dtype(dtype, bools=bools)


def filled(shape, value, dtype) -> tf.Tensor:
    """tf.fill with ``value`` (a scalar tensor of ``dtype``). 8/16-bit integers are filled as int32 and
    cast: TFLite's FILL, which a shape known only at run time keeps, has no kernel for them."""
    if dtype in (tf.int8, tf.int16, tf.uint8, tf.uint16):
        return tf.cast(tf.fill(shape, tf.cast(value, tf.int32)), dtype)
    return tf.fill(shape, value)


# --- NaN and infinity ---------------------------------------------------------------------------

def is_empty(aval) -> bool:
    """Whether a value of abstract value ``aval`` is known to hold no elements (a symbolic size is
    not known to be 0). Rules answer such values at once: several kernels fail on them."""
    return any(isinstance(d, int) and d == 0 for d in aval.shape)


def is_nan(x):
    # x != x: the same answer in every runtime, without an IsNan kernel.
    return tf.math.not_equal(x, x)


def is_inf(x):
    # Not x == inf: the TFLite converter stores an infinite constant as the largest float.
    return tf.logical_and(tf.logical_not(tf.math.is_finite(x)), tf.equal(x, x))


def where_nan_either(x, y, result):
    """``result``, or the NaN where either operand is NaN: JAX's max/min (and scatter-min/max)
    propagate NaN; TFLite's and TF.js's Maximum/Minimum may not."""
    return tf.where(tf.math.logical_or(is_nan(x), is_nan(y)), x + y, result)


def _runtime_zeros(x):
    """Zeros computed from x at run time (0 * |x| where x is finite): a value no converter folds."""
    return tf.abs(tf.where(tf.math.is_finite(x), x, tf.zeros_like(x))) * 0.0


# Infinity is made ONE way: 1 / (a zero computed at run time). The TFLite converter stores an
# infinite constant as the largest finite float, so a plain tf.constant(np.inf) is wrong there.
# Rules with a context use ``ctx.runtime_infinity()``, made once from the program's inputs so it
# stays a run-time value even where the tensor needing it is a constant.

def runtime_infinity(x) -> tf.Tensor:
    """+inf as a scalar of x's (floating) dtype, computed from x at run time."""
    return 1.0 / tf.reduce_sum(_runtime_zeros(x))


def infinity_like(x) -> tf.Tensor:
    """+inf in x's shape and (floating) dtype, computed from x at run time."""
    return 1.0 / _runtime_zeros(x)


def convertible_constant(ctx, value, dtype: tf.DType):
    """A scalar constant of ``dtype`` that survives every converter: infinities are run-time values."""
    value = np.asarray(value)
    if np.issubdtype(value.dtype, np.floating) and np.isinf(value):
        return tf.cast(float(np.sign(value)) * ctx.runtime_infinity(), dtype)
    return tf.constant(value, dtype)


# --- Integers up to 32 bits, as int32 -------------------------------------------------------------

def int_info(dtype: tf.DType):
    info = np.iinfo(dtype.as_numpy_dtype)
    return info.bits, info.min < 0


def bit_pattern_info(dtype: tf.DType):
    """Like _int_info, but a uint32 is handled as the int32 with the same bits (its values do
    not fit an int32, its bit pattern does; bitwise ops and shifts only see the pattern)."""
    bits, signed = int_info(dtype)
    return bits, signed or bits == 32


def powers_of_two(n: int):
    return tf.constant([2 ** k for k in range(n)], tf.int32)


def as_int32(x):
    """Integers up to 32 bits are handled as int32 (values fit), then cast back."""
    return tf.cast(x, tf.int32) if x.dtype != tf.int32 else x


def wrapped(value, bits: int, signed: bool):
    """int32 value reduced modulo 2^bits, as XLA wraps narrow integers (still int32)."""
    if bits == 32:
        return value
    unsigned = tf.math.floormod(value, 2 ** bits)
    if signed:
        unsigned = tf.where(unsigned >= 2 ** (bits - 1), unsigned - 2 ** bits, unsigned)
    return unsigned


def wrap_to(ctx, value, bits: int, signed: bool):
    """int32 value reduced modulo 2^bits into the output type."""
    return as_out(ctx, wrapped(value, bits, signed))


# --- Monoids -----------------------------------------------------------------------------------

def identity_element(kind: str, dtype) -> np.ndarray:
    """The neutral element of a commutative monoid (add/sum, mul/prod, max, min, and, or, xor) on
    ``dtype``, as a NumPy scalar; infinite for float max/min (see ``convertible_constant``)."""
    np_dtype = np.dtype(dtype.as_numpy_dtype if isinstance(dtype, tf.DType) else dtype)
    boolean = np_dtype == np.bool_
    if kind in ("add", "sum", "or", "xor"):
        return np.zeros((), np_dtype)
    if kind in ("mul", "prod"):
        return np.ones((), np_dtype)
    if kind == "and":
        return np.array(True if boolean else -1).astype(np_dtype)
    if kind in ("max", "min"):
        if boolean:
            return np.array(kind == "min")
        if jnp.issubdtype(np_dtype, jnp.floating):  # numpy's issubdtype misses bfloat16
            return np.array(-np.inf if kind == "max" else np.inf, np_dtype)
        info = np.iinfo(np_dtype)
        return np.array(info.min if kind == "max" else info.max, np_dtype)
    raise ValueError(f"no identity for {kind}")


# --- Window arithmetic -------------------------------------------------------------------------

def dilated_size(n, factor: int):
    """The size of ``n`` elements with ``factor - 1`` holes between neighbours (static or symbolic)."""
    return n if factor == 1 or (isinstance(n, int) and n == 0) else (n - 1) * factor + 1


def is_static_shape(shape) -> bool:
    """Whether every dimension of ``shape`` (or every entry of a bound list) is a Python int: the
    pattern matchers (rope, grouped_query, joins) reason about static shapes only."""
    return all(isinstance(d, int) for d in shape)


_EXPLICIT_PADDING = ("pass explicit integer padding (e.g. [(1, 1)] rather than 'SAME') on that axis, or give it a "
                     "static size")


def symbolic_padding(param: str = "padding", workaround: str = _EXPLICIT_PADDING,
                     amounts=lambda entry: entry) -> Limitation:
    """The limitation of a rule whose ``param``'s ``amounts`` (of each of its pairs or triples) must be
    integers: JAX makes them symbolic where they depend on a polymorphic size (SAME padding at a
    stride > 1)."""
    return Limitation(
        ALL_TARGETS, "an amount that depends on a polymorphic dimension",
        "noxla plans the pads, crops and windows when it lowers, from integer amounts; this one is known "
        "only at run time", param=param, workaround=workaround,
        when=lambda eqn: any(not is_constant_dim(v) for entry in eqn.params[param] for v in amounts(entry)))
