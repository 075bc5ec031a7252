"""sort and top_k, built on TopKV2 (TF.js has no Sort op, TFLite no general sort builtin).

TopKV2 does not promise an order among equal values, so every sort here is made stable
in two top_k passes: the first orders the rows by value, which gives each element the
rank of its run of equal values; the second orders by the exact integer key
``rank * n + position``, which breaks ties by position. Several keys sort
lexicographically by repeating the stable pass from the last key to the first
(least significant digit first). Work is O(n log n) per row.

JAX's orders: ``sort`` puts -inf < ... < inf < NaN with -0.0 == 0.0 (stable);
``top_k`` picks the largest first with NaN above inf, 0.0 above -0.0 and ties taken in
index order.

JAX's top_k orders NaNs by their sign bit (XLA's total order): +NaN above +inf, -NaN below -inf.
It matters: NaNs computed on x86 (0/0, inf - inf, log(-1)) are -NaN, so JAX on such a CPU puts them
last; NaNs from np.nan are +NaN. Only a Bitcast reads a NaN's sign (no arithmetic or comparison
sees it): TF and TFLite order them as JAX does; TF.js has no Bitcast, so its own lowering takes
every NaN as +NaN (``Rule.differs``, listed in the limitations table).
"""
from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, i32, u8
from lowering_rules.core.helpers import is_nan
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Limitation, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS, Target, webgpu_computes_wrong

# The stable order's int32 keys rank * n + position must stay below 2^31. sort's ranks reach
# 2n - 1 (a NaN ranks n past its run), top_k's 2n (two per run, so that 0.0 comes before -0.0):
# exact up to n = 32767 (measured: a top_k row of 32768, or a sort row of 32769, comes out misordered).
MAX_SORTED_LENGTH = 32767

# Rows just too long, forced through any runtime, come out misordered: distinct positives with
# -0.0 last (top_k ranks it 2n), and a NaN before distinct negatives (sort ranks it 2n - 2).
TOP_K_TOO_LONG_ROW = np.concatenate([np.arange(1, MAX_SORTED_LENGTH + 1), [-0.0]]).astype(np.float32)
SORT_TOO_LONG_ROW = np.concatenate([[np.nan], -np.arange(1, MAX_SORTED_LENGTH + 2)]).astype(np.float32)

# uint32 keys that float32 cannot tell apart (2^31 and 2^31 + 1, ...).
WIDE_U32 = np.array([4000000001, 4000000000, 3, 2**31 + 1, 2**31, 0], np.uint32)

NAN_ZEROS = np.array([[1.0, np.nan, -0.0, 0.0, -np.inf, np.inf, 0.0, np.nan, -0.0, -1.0],
                      [3.0, 3.0, np.nan, 3.0, -2.0, -2.0, 0.0, -0.0, np.inf, np.inf]], np.float32)
INT_EXTREMES = np.array([[5, -2**31, 2**31 - 1, 0, -1, -2**31, 2**31 - 1, 7],
                         [0, 0, 0, 0, 0, 0, 0, 0]], np.int32)


# --------------------------------------------------------------------------- rows

class Rows:
    """An operand seen as [rows, n] with the sorted axis last, and the way back."""

    def __init__(self, ctx, aval, axis: int):
        self.rank = aval.ndim
        self.axis = axis
        self.to_last = [d for d in range(self.rank) if d != axis] + [axis]
        self.from_last = list(np.argsort(self.to_last))
        dims = [ctx.dim(aval.shape[d]) for d in self.to_last]
        self.last_shape = dims
        self.n = dims[-1]
        self.count = 1
        for d in dims[:-1]:
            self.count = self.count * d

    def rows(self, x):
        return tf.reshape(tf.transpose(x, self.to_last), [self.count, self.n])

    def back(self, x):
        return tf.transpose(tf.reshape(x, self.last_shape), self.from_last)

    def take(self, x, index):
        """Per row, x[row, index[row, j]]: one flat gather (TF.js wasm mishandles batch_dims)."""
        if self.rank == 1:
            # The one row of a 1-D operand, gathered along its axis: flattening it would undo
            # ``rows``'s Reshape, and the TFLite converter moves a Cast that then feeds GATHER behind
            # it (a float16, uint16 or uint32 GATHER, which has no kernel).
            return tf.gather(x, index[0], axis=1)
        offsets = tf.range(self.count, dtype=tf.int32)[:, None] * self.n
        return tf.gather(tf.reshape(x, [-1]), index + offsets)


def _run_ranks(sorted_values):
    """For values sorted along each row, the index of each one's run of equal values."""
    changed = tf.cast(tf.math.not_equal(sorted_values[:, 1:], sorted_values[:, :-1]), tf.int32)
    first = tf.zeros_like(sorted_values[:, :1], dtype=tf.int32)
    return tf.math.cumsum(tf.concat([first, changed], axis=1), axis=1)


def stable_order(t, rows: Rows, rank_of):
    """The permutation putting each row's larger ``t`` first, stably.

    ``rank_of(run, perm)`` refines the run index of the element at each sorted slot (whose
    original position is ``perm``) into a rank: smaller ranks come first, equal ranks keep
    their positions' order.
    """
    sorted_t, perm = tf.math.top_k(t, k=rows.n)
    rank = rank_of(_run_ranks(sorted_t), perm)
    _, by_key = tf.math.top_k(-(rank * rows.n + perm), k=rows.n)
    return rows.take(perm, by_key)


def _numeric(x):
    """Keys as the dtypes top_k and gather have everywhere: float32 or int32."""
    if x.dtype.is_floating:
        return tf.cast(x, tf.float32)
    return tf.cast(x, tf.int32)


# --------------------------------------------------------------------------- sort

def _ascending_pass(key, rows: Rows):
    """Stable ascending order by ``key`` (rows layout), NaNs last, -0.0 equal to 0.0."""
    key = _numeric(key)
    if not key.dtype.is_floating:
        # -1 - k reverses the order without overflowing at INT32_MIN (unlike -k).
        return stable_order(-1 - key, rows, lambda run, perm: run)
    nan = is_nan(key)
    descending = -tf.where(nan, tf.zeros_like(key), key)
    nan_flags = tf.cast(nan, tf.int32)

    def rank_of(run, perm):  # NaNs (ranked among the zeros) move behind every number
        return run + rows.n * rows.take(nan_flags, perm)
    return stable_order(descending, rows, rank_of)


def _sorted_length_too_long(eqn, bound: int) -> bool:
    params = eqn.params  # sort's dimension, top_k's axis, approx_top_k's reduction_dimension
    dimension = params.get("dimension", params.get("axis", params.get("reduction_dimension")))
    size = eqn.avals_in[0].shape[dimension]
    return not isinstance(size, (int, np.integer)) or size > bound


def too_long(bound: int) -> Limitation:
    """Rows longer than ``bound`` (or of symbolic length): the stable order's keys would overflow."""
    return Limitation(
        ALL_TARGETS, f"the sorted dimension is longer than {bound} or symbolic",
        "the stable order uses int32 keys rank * n + position, which would overflow (a symbolic length "
        "could exceed the bound at run time, where TFLite and TF.js cannot check it)",
        param="dimension", when=lambda eqn: _sorted_length_too_long(eqn, bound),
        workaround=f"sort rows of a known length of at most {bound} (batch dimensions may stay symbolic)")


TOO_LONG = too_long(MAX_SORTED_LENGTH)
# Measured: rows came back unsorted on LiteRT.js WebGPU (sort:f32_last, top_k:f32_k3); wasm is right.
WEBGPU_ORDER = webgpu_computes_wrong("any sort or top-k", "rows unsorted, values and indices off", "dimension")

_WIDE = frozenset(np.dtype(d) for d in (np.uint32, np.int64, np.uint64, np.float64))
# Keys only: values are carried by the permutation whatever their dtype (JAX's sort gradient carries
# a uint32 iota). TF.js has none of these dtypes at all (lowering_rules/core/dtype_support.py).
_WIDE_KEYS = Limitation(
    (Target.TF, Target.TFLITE, Target.TFLITE_FLEX), "a key's dtype is float64, int64, uint32 or uint64",
    reason="keys are ordered through int32/float32 top_k, which cannot hold these exactly",
    workaround="cast keys to int32 or float32 when their values fit",
    when=lambda eqn: any(np.dtype(a.dtype) in _WIDE for a in eqn.avals_in[:eqn.params.get("num_keys", 1)]))


@lowering(lax.sort_p, limitations=[TOO_LONG, _WIDE_KEYS, WEBGPU_ORDER], cases=[
    case("f32_last", lambda x: jnp.sort(x, axis=-1), f32(3, 7)),
    # Found by tests/fuzz_grad.py: JAX's sort gradient sorts a uint32 iota beside the keys, which the
    # wide-keys limitation refused as if it were a key.
    case("grad_ties", jax.grad(lambda x: jnp.sum(jnp.sort(x, axis=1) * jnp.arange(4.0))),
         np.array([[3.0, 1.0, 2.0, 1.0], [0.0, -1.0, 5.0, 2.0]], np.float32)),
    case("f32_axis0", lambda x: jnp.sort(x, axis=0), f32(6, 2, 3)),
    case("f32_middle_axis", lambda x: jnp.sort(x, axis=1), f32(2, 5, 3)),
    case("nan_and_signed_zeros", lambda x: jnp.sort(x, axis=1), NAN_ZEROS),
    case("argsort_nan_zeros_stable", lambda x: jnp.argsort(x, axis=1), NAN_ZEROS),
    case("argsort_ties_stable", lambda x: jnp.argsort(x, axis=1), i32(4, 12, low=0, high=3)),
    case("argsort_descending", lambda x: jnp.argsort(x, axis=1, descending=True),
         i32(3, 9, low=0, high=3)),
    case("i32_extremes", lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=1)), INT_EXTREMES),
    case("bool", lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=1)), boolean(3, 8)),
    case("u8", lambda x: jnp.sort(x, axis=0), u8(6, 3, low=0, high=255)),
    case("f16", lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=1)), f16(3, 8)),
    case("f16_axis0", lambda x: jnp.sort(x, axis=0), f16(5, 7)),
    case("i16_u16_axis0", lambda x, y: (jnp.sort(x, axis=0), jnp.sort(y, axis=0)),
         np.arange(35, dtype=np.int16).reshape(5, 7) * 1013 % 97 - 40,
         np.arange(35, dtype=np.uint16).reshape(5, 7) * 4099 % 65521),
    case("lexsort", lambda a, b: jnp.lexsort((a, b)), i32(10, low=0, high=3), i32(10, low=0, high=2)),
    case("lax_two_keys_with_payload", lambda a, b, c: lax.sort((a, b, c), dimension=1, num_keys=2),
         i32(3, 8, low=0, high=2), f32(3, 8), f32(3, 8)),
    case("lax_unstable_one_operand", lambda x: lax.sort(x, is_stable=False), f32(4, 6)),
    case("size1", lambda x: (jnp.sort(x, axis=1), jnp.argsort(x, axis=1)), f32(3, 1)),
    case("empty_rows", lambda x: jnp.concatenate([jnp.sort(x[:0], axis=1), x]), f32(2, 4)),
    case("long_row", lambda x: jnp.argsort(x), f32(1000)),
    case("too_long_rejected", lambda x: jnp.sort(x), SORT_TOO_LONG_ROW),
    case("u32_keys_rejected", lambda x: jnp.sort(x), WIDE_U32),
    # Found by tests/fuzz.py: TFLite has no float16 (nor bool, int16) Transpose, which a sort along
    # a leading axis needs; the operands move as float32/int32.
    case("leading_axis_f16_bool_values", lambda k, v, b: lax.sort((k, v, b), dimension=0, num_keys=1),
         f32(3, 2), f16(3, 2), boolean(3, 2)),
    # Found by tests/fuzz.py: 1-D sorts carrying float16 or uint16 values (no such GATHER in TFLite).
    case("one_row_f16_u16_values", lambda k, v, w: lax.sort((k, v, w), num_keys=1),
         f32(7), f16(7), np.array([3, 40000, 65535, 0, 32768, 9, 1], np.uint16)),
    # Found by tests/fuzz_grad.py (the gradient of such a sort): integer keys along the leading axis
    # are ordered by -1 - key after a transpose, which TF's TFLite converter turned into key + 1 (the
    # reverse order) when the sorted keys were no output (noxla/writers/tflite/converter/transposes.py).
    case("int_keys_leading_axis_values_only", lambda k, v: lax.sort((k, v), dimension=0, num_keys=1)[1],
         np.array([[3, -5], [-5, 7], [1, 0]], np.int8), f32(3, 2)),
    case("single_row_f16_values", lambda k, v: lax.sort((k, v), dimension=1, num_keys=1), f32(1, 6), f16(1, 6)),
    case("polymorphic_batch", lambda x: jnp.argsort(x, axis=1), f32(3, 5),
         polymorphic_shapes=("(b, 5)",)),
    case("symbolic_sorted_axis_rejected", lambda x: jnp.sort(x, axis=0), f32(5, 2),
         polymorphic_shapes=("(n, 2)",)),
])
def lower_sort(ctx, *operands, dimension, is_stable, num_keys):
    # A stable order is one of the orders an unstable sort may return, so is_stable is moot.
    aval = ctx.avals_in[0]
    if any(d == 0 for d in aval.shape):
        return list(operands)
    rows = Rows(ctx, aval, dimension)
    order = None
    for key in reversed(operands[:num_keys]):
        key_rows = rows.rows(_numeric(key))  # moved as float32/int32: TFLite has no float16 Transpose
        if order is not None:
            key_rows = rows.take(key_rows, order)
        step = _ascending_pass(key_rows, rows)
        order = step if order is None else rows.take(order, step)
    return [tf.cast(rows.back(rows.take(rows.rows(_numeric(x)), order)), x.dtype) for x in operands]


# --------------------------------------------------------------------------- top_k

def _descending_total_order(ctx, x, rows: Rows):
    """Stable descending order with NaN first and 0.0 before -0.0, as JAX's top_k."""
    x = _numeric(x)
    if not x.dtype.is_floating:
        return stable_order(x, rows, lambda run, perm: run)
    nan = is_nan(x)
    zero = tf.math.equal(x, 0.0)
    negative_zero = tf.cast(tf.logical_and(zero, tf.math.less(1.0 / x, 0.0)), tf.int32)
    not_nan = 1 - tf.cast(nan, tf.int32)
    negative_nan = tf.zeros_like(not_nan)
    if not ctx.lowering_for.tfjs:  # the sign bit (float32 keeps a half float's NaN sign)
        negative_nan = tf.cast(tf.logical_and(nan, tf.math.less(tf.bitcast(x, tf.int32), 0)), tf.int32)

    def rank_of(run, perm):  # +NaN first (rank 0), -0.0 after 0.0 in the zeros' run, -NaN last (2n + 1)
        ranked = rows.take(not_nan, perm) * (2 * run + rows.take(negative_zero, perm) + 1)
        return ranked + rows.take(negative_nan, perm) * (2 * rows.n + 1)
    return stable_order(tf.where(nan, tf.zeros_like(x), x), rows, rank_of)


# x86 computes -NaN (0/0, inf - inf): JAX's top_k puts those last, np.nan's +NaN first.
SIGNED_NANS = np.array([[1.0, -np.nan, np.inf, np.nan, -np.inf, -np.nan, 0.0, -0.0, -2.0]], np.float32)


_NO_IS_STABLE = ("" if "is_stable" in inspect.signature(lax.top_k).parameters
                 else "JAX before 0.11's top_k has no is_stable")


@lowering(lax.top_k_p, limitations=[TOO_LONG, _WIDE_KEYS, WEBGPU_ORDER], differs=[(
    (Target.TFJS,), "every NaN is ordered as +NaN (first): JAX puts a NaN with its sign bit set (-NaN, which "
    "x86 computes for 0/0 and inf - inf) last, and reading the sign needs a Bitcast, which TF.js lacks")], cases=[
    case("f32_k3", lambda x: lax.top_k(x, 3), f32(4, 9)),
    case("k_equals_n", lambda x: lax.top_k(x, 6), f32(2, 6)),
    case("k0", lambda x: lax.top_k(x, 0)[0].sum() + x, f32(2, 3)),
    case("nan_and_signed_zeros", lambda x: lax.top_k(x, 10), NAN_ZEROS),
    case("signed_nans", lambda x: lax.top_k(x, 9), SIGNED_NANS),
    case("ties_lowest_index_first", lambda x: lax.top_k(x, 5), i32(3, 10, low=0, high=2)),
    case("i32_extremes", lambda x: lax.top_k(x, 4), INT_EXTREMES),
    case("axis0", lambda x: lax.top_k(x, 2, axis=0), f32(5, 3)),
    case("middle_axis", lambda x: lax.top_k(x, 2, axis=1), f32(2, 4, 3)),
    case("f16", lambda x: lax.top_k(x, 3), f16(3, 7)),
    case("u8", lambda x: lax.top_k(x, 2), u8(3, 5, low=0, high=255)),
    case("size1", lambda x: lax.top_k(x, 1), f32(4, 1)),
    case("polymorphic_batch", lambda x: lax.top_k(x, 2), f32(3, 5), polymorphic_shapes=("(b, 5)",)),
    case("too_long_rejected", lambda x: lax.top_k(x, 3), TOP_K_TOO_LONG_ROW),
    case("u32_rejected", lambda x: lax.top_k(x, 2), WIDE_U32),
    # Distinct values: with ties, an unstable top_k's indices may differ from the stable ones.
    case("unstable", lambda x: lax.top_k(x, 4, is_stable=False), f32(3, 8), skip=_NO_IS_STABLE),
])
def lower_top_k(ctx, x, *, k, axis, is_stable=True):
    # JAX 0.11's is_stable=False lets ties come in any order; the stable order (lowest index first)
    # is one of them, so both are honoured.
    aval = ctx.avals_in[0]
    out_aval = ctx.avals_out[0]
    rows = Rows(ctx, aval, axis)
    if k == 0 or any(d == 0 for d in aval.shape):
        empty = tf.zeros(ctx.shape(out_aval.shape), x.dtype)
        return [empty, tf.zeros(ctx.shape(out_aval.shape), tf.int32)]
    x_rows = rows.rows(x)
    order = _descending_total_order(ctx, x_rows, rows)[:, :k]
    values = tf.cast(rows.take(_numeric(x_rows), order), x.dtype)
    out_rows = Rows(ctx, out_aval, axis)
    return [out_rows.back(values), out_rows.back(tf.cast(order, ctx.avals_out[1].dtype))]
