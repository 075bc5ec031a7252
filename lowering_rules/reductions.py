"""Reductions, arg-reductions, the generic variadic ``reduce`` and cumulative scans.

Conventions shared by the rules here:
- NaN semantics are JAX's: max/min (plain and cumulative) propagate NaN, argmax/argmin
  return the first NaN. TFLite and TF.js max/min kernels do not all propagate NaN, so it
  is restored explicitly. NaN tests use ``x != x`` (TFLite has no IsNan builtin).
- float16 is computed in float32 and rounded back: TFLite lacks half-precision kernels
  for most of these ops. JAX on CPU rounds a half-precision sum or product after every step
  (measured: [2048, 1, 1] sums to 2048 there, 2050 here), which a graph could only copy with one
  op per element; the difference is declared (``_HALF_ACCUMULATION``). Half-precision
  cumsum/cumprod/cumlogsumexp instead round where JAX's CPU scan rounds (``half_scans.py``).
- Scans without a TF op in every target (cumprod, cummax, cummin, cumlogsumexp) are
  Hillis-Steele doubling scans: log2(n) shifted combines, O(n log n) work.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray

from lowering_rules.bitwise import WEBGPU_BITS
from lowering_rules.core.cases import boolean, case, f16, f32, i8, i32, u8
from lowering_rules.core.dtype_support import dtypes, gap
from lowering_rules.core.helpers import (
    compute_dtype,
    convertible_constant,
    filled,
    identity_element,
    is_empty,
    is_nan,
    kernel_dtype,
)
from lowering_rules.core.jax_compat import core, open_jaxpr
from lowering_rules.core.lazy_tensorflow import op, tf
from lowering_rules.core.registry import Limitation, Target, lowering
from lowering_rules.core.vocabulary import ALL_TARGETS, webgpu_computes_wrong
from lowering_rules.patterns import fusion, half_scans

NAN_ROW = np.array([[1.0, np.nan, 3.0, 2.0], [-1.0, 5.0, 5.0, -2.0], [np.nan, np.nan, 0.0, 9.0]],
                   np.float32)
TIES = np.array([[1, 3, 3, 0, 3], [2, 2, 2, 2, 2], [-7, 4, -7, 4, 0]], np.int32)
SIGNED_ZEROS = np.array([[0.0, -0.0, -1.0], [-0.0, 0.0, 2.0]], np.float32)


# --------------------------------------------------------------------------- shared helpers

def _propagate_nan(x, result, nan_seen):
    """JAX's max/min turn NaN on any NaN seen; TFLite/TF.js kernels may drop it."""
    return tf.where(nan_seen, tf.zeros_like(result) + np.nan, result)


def _twos_complement_bits(x):
    """The 32 bits of int32 ``x``, least significant first, on a new trailing axis.

    From the word's two 16-bit halves, with compares, multiplies and adds that stay within 2^16:
    TF has no bitwise reductions, TF.js no shift ops, and TF.js's WebGL holds int32 in float32
    (a small negative word, read as x + 2^31, was rounded there: and/or/xor of -8..8 came out wrong).
    """
    low = tf.math.floormod(x, 1 << 16)
    high = tf.math.floormod(tf.math.floordiv(x - low, 1 << 16), 1 << 16)  # exact: a multiple of 2^16
    bits = []
    for half in (low, high):
        for b in range(15, -1, -1):
            bit = tf.cast(half >= (1 << b), tf.int32)
            half = half - bit * (1 << b)
            bits.append(bit)
    return tf.stack(bits[15::-1] + bits[:15:-1], axis=-1)


def _from_bits(bits):
    weights = tf.constant([1 << b for b in range(16)], tf.int32)
    low = tf.reduce_sum(bits[..., :16] * weights, axis=-1)
    high = tf.reduce_sum(bits[..., 16:] * weights, axis=-1)
    return (high - bits[..., 31] * (1 << 16)) * (1 << 16) + low  # the top half read as signed


def _bitwise_reduce(x, axes, kind):
    """and/or/xor of integers over ``axes``, bit by bit."""
    bits = _twos_complement_bits(tf.cast(x, tf.int32))
    if kind == "and":
        bits = tf.reduce_min(bits, axis=axes)
    elif kind == "or":
        bits = tf.reduce_max(bits, axis=axes)
    else:  # the parity of the number of set bits
        count = tf.reduce_sum(bits, axis=axes)
        bits = count - 2 * tf.math.floordiv(count, 2)
    return _from_bits(bits)


def monoid_reduce(ctx, x, axes, kind: str, aval, exact_nan: bool = True):
    """Reduce ``x`` (of abstract value ``aval``) over ``axes`` with a commutative monoid.
    ``exact_nan=False``: a float max/min may ignore NaNs (the kernels' own behaviour)."""
    dtype = x.dtype
    axes = tuple(axes)
    if not axes:
        return x
    out_shape = ctx.shape([d for i, d in enumerate(aval.shape) if i not in axes])
    if is_empty(aval):  # TFLite and TF.js mishandle empty reductions (TF.js wasm's prod divides by 0)
        return filled(out_shape, convertible_constant(ctx, identity_element(kind, dtype), dtype), dtype)
    if dtype == tf.bool:
        kind = {"max": "or", "min": "and"}.get(kind, kind)
        if kind == "and":
            return tf.reduce_all(x, axis=axes)
        if kind == "or":
            return tf.reduce_any(x, axis=axes)
        if kind == "xor":  # parity of the number of trues
            count = tf.reduce_sum(tf.cast(x, tf.int32), axis=axes)
            return tf.math.equal(tf.math.floormod(count, 2), 1)
    if kind in ("and", "or", "xor"):
        return tf.cast(_bitwise_reduce(x, axes, kind), dtype)
    work = tf.cast(x, kernel_dtype(dtype, ordered=kind in ("max", "min")))
    reduce_fn = {"sum": tf.reduce_sum, "prod": tf.reduce_prod,
                 "max": tf.reduce_max, "min": tf.reduce_min}[kind]
    out = reduce_fn(work, axis=axes)
    if kind in ("max", "min") and work.dtype.is_floating and exact_nan:
        out = _propagate_nan(work, out, tf.reduce_any(is_nan(work), axis=axes))
    return tf.cast(out, dtype)


def first_extreme_index(x, axis: int, rank: int, n, kind: str):
    """Index of the first max (or min) along ``axis`` (of size ``n``); the first NaN wins.

    Uses an explicit min over candidate positions: TF's ArgMax, TFLite's ARG_MAX and TF.js's
    argMax do not promise the first of tied positions, nor anything about NaN.
    """
    if x.dtype == tf.bool:
        x = tf.cast(x, tf.int32)
    x = tf.cast(x, compute_dtype(x.dtype))
    extreme = (tf.reduce_max if kind == "max" else tf.reduce_min)(x, axis=axis, keepdims=True)
    hit = tf.math.equal(x, extreme)
    # Broadcasting tf.where crashes TF.js's wasm backend: logical and integer ops only here.
    if x.dtype.is_floating:
        nan = is_nan(x)
        row_has_nan = tf.reduce_any(nan, axis=axis, keepdims=True)
        hit = tf.logical_or(tf.logical_and(row_has_nan, nan),
                            tf.logical_and(tf.logical_not(row_has_nan), hit))
    iota = tf.reshape(tf.range(n, dtype=tf.int32), [n] + [1] * (rank - axis - 1))
    candidates = n - tf.cast(hit, tf.int32) * (n - iota)  # the position where hit, else n
    return tf.reduce_min(candidates, axis=axis)


# --------------------------------------------------------------------------- plain reductions

def _monoid_rule(kind):
    def lower(ctx, x, *, axes):
        return monoid_reduce(ctx, x, axes, kind, ctx.avals_in[0], exact_nan=ctx.strict)
    lower.__name__ = f"lower_reduce_{kind}"
    return lower


def _reduction_cases(jnp_fn, lax_fn, dtypes):
    spec = {"f32": f32, "i32": i32, "bool": boolean, "f16": f16}
    cases = [case(f"{name}_axis1", lambda x: jnp_fn(x, axis=1), spec[name](3, 4)) for name in dtypes]
    first = spec[dtypes[0]]
    return cases + [
        case("all_axes", lambda x: jnp_fn(x), first(2, 3, 4)),
        case("axes_0_2", lambda x: jnp_fn(x, axis=(0, 2)), first(2, 3, 4)),
        case("size1_axis", lambda x: jnp_fn(x, axis=0), first(1, 5)),
        # Results over empty axes are constants; adding x keeps them from becoming model weights.
        case("empty_axis", lambda x: lax_fn(x[:, :0], (1,)) + x[:, 0], first(3, 2)),
        case("polymorphic_batch", lambda x: jnp_fn(x, axis=1), first(3, 4),
             polymorphic_shapes=("(b, 4)",)),
    ]


_HALF_ACCUMULATION = [(ALL_TARGETS, (
    "float16 and bfloat16 sums and products are accumulated in float32 and rounded once, as JAX does "
    "on GPU and TPU; JAX on CPU rounds after every element, so where a step rounds (values far apart, "
    "long sums, or a product that overflows before a zero) the results differ by those roundings"))]
# 2048 + 1 rounds back to 2048 in float16, on JAX's CPU each time (2048); summed in float32: 2058.
_HALF_ROUNDING = np.array([2048.0] + [1.0] * 10, np.float16)

lowering(lax.reduce_sum_p, differs=_HALF_ACCUMULATION, cases=[
    *_reduction_cases(jnp.sum, lax.reduce_sum, ["f32", "i32", "f16"]),
    case("lax_no_axes", lambda x: lax.reduce_sum(x, ()) * 2, f32(3)),
    case("int8_wraps", lambda x: lax.reduce_sum(x, (1,)), i8(2, 6, low=100, high=127)),
    case("f16_rounds_each_step", lambda x: lax.reduce_sum(x, (0,)), _HALF_ROUNDING, atol=0.0, rtol=0.0),
])(_monoid_rule("sum"))

lowering(lax.reduce_prod_p, differs=_HALF_ACCUMULATION, cases=[
    *_reduction_cases(jnp.prod, lax.reduce_prod, ["f32", "i32", "f16"]),
    case("empty_across", lambda x: jnp.concatenate([lax.reduce_prod(x[:0, :, :0], (1,)).ravel(), x.ravel()]),
         i32(3, 4, 2)),
    # Products of words that wrap: TF.js's cpu Prod multiplies in float64 (noxla/writers/tfjs/exact_int32.py).
    case("i32_wide", lambda x: (jnp.prod(x, axis=1), jnp.prod(x[:, :3], axis=(0, 1), keepdims=True)),
         np.array([[2 ** 31 - 1, 123456789, -987654321, 46341, 7], [-(2 ** 31), 3, 1000003, -65537, 2 ** 24 + 1]],
                  np.int32)),
])(_monoid_rule("prod"))

lowering(lax.reduce_max_p, fast=fusion.REDUCE_MAX, cases=[
    *_reduction_cases(jnp.max, lax.reduce_max, ["f32", "i32", "bool", "f16"]),
    case("nan_propagates", lambda x: jnp.max(x, axis=1), NAN_ROW),
    case("int8", lambda x: jnp.max(x, axis=0), i8(4, 3)),
    case("empty_int_axis", lambda x: lax.reduce_max(x[:0], (0,)) + x[0], i32(2, 3)),
    # With no input elements every output is a constant, which TFLite's converter folds (and writes
    # with the largest finite float for -inf, unless the export writes it back).
    case("only_input_empty", lambda x: lax.reduce_max(x, (0, 1)), np.zeros((2, 0), np.float16)),
    # Found by tests/fuzz_poly.py: the same with a polymorphic size (no element at any size), and an
    # int16 fill of a shape known at run time only, which TFLite's FILL has no kernel for.
    case("only_input_empty_symbolic", lambda x: lax.reduce_max(x, (0, 1)), np.zeros((0, 3), np.float32),
         polymorphic_shapes=("(0, b)",)),
    case("empty_symbolic_int16", lambda x: lax.reduce_max(x, (1,)), np.zeros((4, 0), np.int16),
         polymorphic_shapes=("(b, 0)",)),
])(_monoid_rule("max"))

lowering(lax.reduce_min_p, fast=fusion.REDUCE_MAX, cases=[
    *_reduction_cases(jnp.min, lax.reduce_min, ["f32", "i32", "bool", "f16"]),
    case("nan_propagates", lambda x: jnp.min(x, axis=1), NAN_ROW),
])(_monoid_rule("min"))

for _prim, _fn, _kind in ((lax.reduce_and_p, jnp.bitwise_and.reduce, "and"),
                          (lax.reduce_or_p, jnp.bitwise_or.reduce, "or"),
                          (lax.reduce_xor_p, jnp.bitwise_xor.reduce, "xor")):
    lowering(_prim, limitations=[WEBGPU_BITS], cases=[
        case("bool_axis1", lambda x, f=_fn: f(x, axis=1), boolean(3, 5)),
        case("bool_all_axes", lambda x, f=_fn: f(x, axis=(0, 1)), boolean(2, 3)),
        case("i32_axis0", lambda x, f=_fn: f(x, axis=0), i32(4, 3, low=-2**31, high=2**31 - 1)),
        case("i32_small", lambda x, f=_fn: f(x, axis=1), i32(3, 3, low=-8, high=8)),
        case("u8", lambda x, f=_fn: f(x, axis=1), u8(2, 4, low=0, high=255)),
        case("empty_axis", lambda x, f=_fn: f(x[:, :0], axis=1) + x[:, 0], i32(2, 3)),
    ])(_monoid_rule(_kind))


# --------------------------------------------------------------------------- argmax / argmin

def _arg_rule(kind):
    def lower(ctx, x, *, axes, index_dtype):
        axis, = axes
        aval = ctx.avals_in[0]
        if is_empty(aval):  # only another axis can be empty; TF.js's wasm divides by zero on it
            return filled(ctx.shape(ctx.avals_out[0].shape), tf.zeros([], ctx.out_dtype), ctx.out_dtype)
        index = first_extreme_index(x, axis, aval.ndim, ctx.dim(aval.shape[axis]), kind)
        return tf.cast(index, ctx.out_dtype)
    lower.__name__ = f"lower_arg{kind}"
    return lower


def _arg_cases(jnp_fn):
    return [
        case("f32_axis1", lambda x: jnp_fn(x, axis=1), f32(3, 5)),
        case("f32_axis0", lambda x: jnp_fn(x, axis=0), f32(4, 3, 2)),
        case("ties_first", lambda x: jnp_fn(x, axis=1), TIES),
        case("nan_first", lambda x: jnp_fn(x, axis=1), NAN_ROW),
        case("signed_zeros", lambda x: jnp_fn(x, axis=1), SIGNED_ZEROS),
        case("bool", lambda x: jnp_fn(x, axis=1), boolean(4, 5)),
        case("f16", lambda x: jnp_fn(x, axis=1), f16(3, 5)),
        case("flattened", lambda x: jnp_fn(x), i32(3, 4)),
        case("size1_axis", lambda x: jnp_fn(x, axis=1), f32(3, 1)),
        case("empty_across", lambda x: jnp.concatenate([jnp_fn(x[:0, :, :0], axis=1).ravel(), x.ravel()]),
             i32(2, 3, 2)),
        # Found by tests/fuzz_poly.py: int16 indices filled in a shape known at run time only.
        case("empty_symbolic_int16_index", lambda x: {jnp.argmax: lax.argmax, jnp.argmin: lax.argmin}[jnp_fn](
            x, 0, np.int16), np.zeros((3, 4, 0), np.int8), polymorphic_shapes=("(3, b, 0)",)),
        case("keepdims", lambda x: jnp_fn(x, axis=0, keepdims=True), i32(3, 4)),
        case("polymorphic_axis", lambda x: jnp_fn(x, axis=0), f32(5, 2),
             polymorphic_shapes=("(n, 2)",)),
    ]


_ARG_DTYPES = dtypes(gaps=[gap((Target.TFLITE,), {"uint32"}, "TFLite's REDUCE_MAX/MIN have no uint32 kernel")])
# Measured in headless Chromium (tests/test_litertjs.py): with every op of this lowering placed on
# WebGPU (int32 operands too), LiteRT.js 2.5.3 returns index 0 for every row; each op alone is right.
_ARG_LIMITATIONS = [Limitation(
    (Target.LITERTJS_WEBGPU,), "any argmax/argmin",
    "LiteRT.js 2.5.3's WebGPU delegate returns 0 for every index of noxla's lowering (REDUCE_MAX/MIN, "
    "EQUAL, CAST, MUL, SUB, REDUCE_MIN), silently",
    when=lambda eqn: True, param="axes",
    workaround="run the model on LiteRT.js wasm, or return the values and take the argmax in JavaScript")]
lowering(lax.argmax_p, cases=_arg_cases(jnp.argmax), dtypes=_ARG_DTYPES,
         limitations=_ARG_LIMITATIONS)(_arg_rule("max"))
lowering(lax.argmin_p, cases=_arg_cases(jnp.argmin), dtypes=_ARG_DTYPES,
         limitations=_ARG_LIMITATIONS)(_arg_rule("min"))


# --------------------------------------------------------------------------- generic reduce

_MONOID_PRIMITIVES = {"add": "sum", "mul": "prod", "max": "max", "min": "min",
                      "and": "and", "or": "or", "xor": "xor"}
_COMPARISONS = {"gt": "max", "ge": "max", "lt": "min", "le": "min"}
_SUB_PROGRAM_CALLS = ("jit", "pjit", "closed_call", "core_call")


def _expressions(jaxpr: core.Jaxpr, args):
    """The body's outputs as expression trees over its inputs: ("in", i), ("lit", v) or
    (primitive, *operands). Calls to sub-jaxprs are inlined."""
    env = dict(zip(jaxpr.invars, args))

    def read(atom):
        if isinstance(atom, core.Literal):
            return ("lit", np.asarray(atom.val).item())
        return env[atom]

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive.name in _SUB_PROGRAM_CALLS:
            sub = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
            sub = open_jaxpr(sub)
            outs = _expressions(sub, ins)
        else:
            outs = [(eqn.primitive.name, *ins)]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _monoids(outs, n):
    """Per operand, the monoid of a body where output i is op(input i, input n+i)."""
    kinds = []
    for i, out in enumerate(outs):
        if (len(out) != 3 or out[0] not in _MONOID_PRIMITIVES
                or {out[1], out[2]} != {("in", i), ("in", n + i)}):
            return None
        kinds.append(_MONOID_PRIMITIVES[out[0]])
    return kinds


def _arg_pair(outs):
    """"max" or "min" when the body keeps the (value, index) pair with the larger (smaller)
    value: value = select(cmp(a, b), a, b) and index = select(same cmp, a_idx, b_idx)."""
    if len(outs) != 2:
        return None
    value, index = outs
    if value[0] != "select_n" or len(value) != 4 or index[:2] != ("select_n", value[1]):
        return None
    pred, if_false, if_true = value[1:]
    if pred[0] not in _COMPARISONS or len(pred) != 3:
        return None
    values = {("in", 0), ("in", 2)}
    if {pred[1], pred[2]} != values or {if_false, if_true} != values:
        return None
    partner = {("in", 0): ("in", 1), ("in", 2): ("in", 3)}
    if index[2:] != (partner[if_false], partner[if_true]):
        return None
    true_wins_when_greater = (_COMPARISONS[pred[0]] == "max") == (if_true == pred[1])
    return "max" if true_wins_when_greater else "min"


def _body_pattern(eqn):
    body = eqn.params["jaxpr"]
    n = len(body.jaxpr.invars) // 2
    outs = _expressions(body.jaxpr, [("in", i) for i in range(2 * n)])
    monoids = _monoids(outs, n)
    if monoids is not None:
        return "monoid", monoids
    kind = _arg_pair(outs)
    if kind is not None:
        return "arg", kind
    return None, None


def _unrecognised_body(eqn) -> bool:
    return _body_pattern(eqn)[0] is None


def _arg_pair_reduce(ctx, values, indices, init_value, init_index, dimensions, kind):
    aval = ctx.avals_in[0]
    out_shape = ctx.out_shape()
    if any(aval.shape[d] == 0 for d in dimensions):
        return [tf.fill(out_shape, init_value), tf.fill(out_shape, init_index)]
    # Fold the reduced dimensions into one trailing axis, then pick its first extreme.
    kept = [d for d in range(aval.ndim) if d not in dimensions]
    count = 1
    for d in dimensions:
        count = count * ctx.dim(aval.shape[d])
    folded_shape = [ctx.dim(aval.shape[d]) for d in kept] + [count]
    fold = lambda t: tf.reshape(tf.transpose(t, kept + list(dimensions)), folded_shape)
    values, indices = fold(values), fold(indices)
    boolean = values.dtype == tf.bool
    if boolean:  # TF's ArgMax and the masked sum below have no bool kernels: False < True as 0 < 1
        values, init_value = tf.cast(values, tf.int32), tf.cast(init_value, tf.int32)
    axis = len(kept)
    position = first_extreme_index(values, axis, axis + 1, count, kind)
    # A masked sum rather than tf.gather(batch_dims=...), which TF.js's wasm backend gets wrong.
    chosen = tf.math.equal(tf.range(count, dtype=tf.int32), position[..., None])
    pick = lambda t: tf.reduce_sum(tf.where(chosen, t, tf.zeros_like(t)), axis=axis)
    best_value, best_index = pick(values), pick(indices)
    # The initial pair is one more candidate; on a tie the elements' first extreme is kept.
    init_wins = (tf.math.greater if kind == "max" else tf.math.less)(init_value, best_value)
    # Same-shape branches: broadcasting tf.where crashes TF.js's wasm backend.
    best_value = tf.where(init_wins, tf.zeros_like(best_value) + init_value, best_value)
    return [tf.cast(best_value, tf.bool) if boolean else best_value,
            tf.where(init_wins, tf.zeros_like(best_index) + init_index, best_index)]


def _argmax_by_reduce(x, kind="max"):
    iota = lax.broadcasted_iota(jnp.int32, x.shape, 1)
    init = -jnp.inf if kind == "max" else jnp.inf
    better = (lambda a, b: a > b) if kind == "max" else (lambda a, b: a < b)

    def comparator(a, b):
        take_a = better(a[0], b[0])
        return jnp.where(take_a, a[0], b[0]), jnp.where(take_a, a[1], b[1])
    return lax.reduce((x, iota), (jnp.array(init, x.dtype), 0), comparator, (1,))


def _sum_and_max(x):
    return lax.reduce((x, x), (jnp.float32(1.5), jnp.float32(-jnp.inf)),
                      lambda a, b: (a[0] + b[0], jnp.maximum(b[1], a[1])), (0,))


@lowering(lax.reduce_p, dtypes=dtypes(gaps=[gap((Target.TFLITE,), {"float16"}, (
    "a body applied elementwise selects float16 values (SELECT_V2), which TFLite's builtins lack"))]),
    cases=[
    case("add_body_with_init", lambda x: lax.reduce(x, 2.0, lambda a, b: a + b, (0,)), f32(3, 4)),
    case("mul_body", lambda x: lax.reduce(x, 1.0, lambda a, b: a * b, (1,)), f32(3, 4)),
    case("min_body_i32", lambda x: lax.reduce(x, 5, lambda a, b: jnp.minimum(a, b), (0, 1)),
         i32(3, 4)),
    case("or_body_bool", lambda x: lax.reduce(x, False, lambda a, b: a | b, (1,)), boolean(3, 4)),
    case("variadic_sum_and_max", _sum_and_max, f32(4, 3)),
    case("argmax_pair", lambda x: _argmax_by_reduce(x, "max"), f32(3, 5)),
    case("argmin_pair", lambda x: _argmax_by_reduce(x, "min"), f32(3, 5)),
    case("argmax_pair_two_dims", lambda x: lax.reduce(
        (x, lax.broadcasted_iota(jnp.int32, x.shape, 2) * 10 + lax.broadcasted_iota(jnp.int32, x.shape, 0)),
        (-jnp.inf, 0), lambda a, b: (jnp.where(b[0] < a[0], a[0], b[0]), jnp.where(b[0] < a[0], a[1], b[1])),
        (0, 2)), f32(2, 3, 4)),
    case("argmax_pair_init_wins", lambda x: _argmax_by_reduce(x - 100.0, "max")[0], f32(2, 3)),
    case("unrecognised_body", lambda x: lax.reduce(x, 0.0, lambda a, b: a * 0.5 + b, (1,)), f32(3, 4)),
    case("add_body_u16_wraps", lambda x: lax.reduce(x, np.uint16(3), lambda a, b: a + b, (0,)),
         np.array([[65535, 7, 1], [2, 65000, 0]], np.uint16)),
    case("max_min_bodies_u16", lambda x, y: lax.reduce((x, y), (np.uint16(3), np.int32(3)),
                                                      lambda a, b: (jnp.maximum(a[0], b[0]), jnp.minimum(a[1], b[1])),
                                                      (0,)), np.array([[1, 7, 2], [2, 65000, 0]], np.uint16),
         i32(2, 3)),
    case("argmax_pair_bool_rejected", lambda x: _argmax_by_reduce(x, "max"), boolean(3, 8)),
], limitations=[
    # Measured (reduce:argmax_pair, argmin_pair): every index 0 on LiteRT.js WebGPU, as for argmax.
    webgpu_computes_wrong("a (value, index) argmax/argmin pair reduction", "the indices all 0, as for argmax",
                          "jaxpr", when=lambda eqn: _body_pattern(eqn)[0] == "arg"),
    Limitation(ALL_TARGETS, "a (value, index) argmax/argmin pair reduction over bool values",
               "bool values tie almost everywhere, and the pair body keeps the later operand on a tie, "
               "so the index depends on XLA's reduction order",
               param="jaxpr", when=lambda eqn: _body_pattern(eqn)[0] == "arg" and eqn.dtype_in == np.bool_,
               workaround="use jnp.argmax/argmin (first index on ties), or reduce int32 values"),
    Limitation(ALL_TARGETS, "the reduction body is neither a monoid (add, mul, max, min, and, or, "
               "xor per operand) nor a (value, index) argmax/argmin pair",
               "noxla lowers a general reduce only for bodies it recognises; an arbitrary body "
               "needs a sequential loop whose result depends on XLA's reduction order",
               param="jaxpr", when=_unrecognised_body,
               workaround="express the reduction with jnp.sum/max/min/prod/argmax/argmin, "
               "or with lax.scan/fori_loop if the order matters"),
])
def lower_reduce(ctx, *operands_and_inits, computation, jaxpr, dimensions):
    n = len(operands_and_inits) // 2
    operands, inits = operands_and_inits[:n], operands_and_inits[n:]
    pattern, detail = _body_pattern(ctx.eqn)
    if pattern == "monoid":
        outs = []
        for x, init, kind, aval, out_aval in zip(operands, inits, detail, ctx.avals_in, ctx.avals_out):
            reduced = monoid_reduce(ctx, x, dimensions, kind, aval)
            # init joins as one more element (the monoid is commutative and associative), stacked
            # in the kernel dtype: TFLite's PACK has no float16 or uint16 kernel.
            work = kernel_dtype(reduced.dtype, ordered=kind in ("max", "min"))
            pair = tf.stack([tf.cast(tf.fill(ctx.shape(out_aval.shape), init), work), tf.cast(reduced, work)])
            pair_aval = ShapedArray((2, *out_aval.shape), out_aval.dtype)
            outs.append(tf.cast(monoid_reduce(ctx, pair, (0,), kind, pair_aval), reduced.dtype))
        return outs
    return _arg_pair_reduce(ctx, *operands, *inits, tuple(dimensions), detail)


# --------------------------------------------------------------------------- cumulative

def _along(axis, rank, index):
    return tuple(index if d == axis else slice(None) for d in range(rank))


def doubling_scan(x, axis, rank, n, combine):
    """Inclusive scan by Hillis-Steele doubling: after the step with shift s every element
    combines the 2s elements ending at it. ``n`` is the length of ``axis``: with a static length
    the log2(n) steps are unrolled, with a symbolic one (an int32 scalar) they run in a loop.

    The first s elements are already final and are kept as they are, so no identity constant
    is needed (TFLite stores infinite constants as +-FLT_MAX; TF.js wasm pads int32 through
    float32, turning INT32_MAX into INT32_MIN).
    """
    def step(shift, x):
        done = x[_along(axis, rank, slice(0, shift))]
        combined = combine(x[_along(axis, rank, slice(0, n - shift))],
                           x[_along(axis, rank, slice(shift, None))])
        return shift * 2, tf.concat([done, combined], axis=axis)

    if isinstance(n, int):
        shift = 1
        while shift < n:
            shift, x = step(shift, x)
        return x

    def gathered_step(shift, x):
        # Gathers, not slices: the TF.js converter loses the constants grappler folds out of
        # strided-slice bounds inside a loop body.
        take = lambda start, stop: tf.gather(x, tf.range(start, stop), axis=axis)
        return shift * 2, tf.concat([take(0, shift), combine(take(0, n - shift), take(shift, n))], axis=axis)

    invariant = tf.TensorShape([None if d == axis else x.shape[d] for d in range(rank)])
    _, x = tf.while_loop(lambda shift, _: shift < n, gathered_step, [tf.constant(1), x],
                         shape_invariants=[tf.TensorShape([]), invariant])
    return x


def _logaddexp(a, b):
    high, low = tf.maximum(a, b), tf.minimum(a, b)
    # Infinite maxima (both -inf, or any +inf) would give inf - inf = NaN below. The test
    # avoids an inf constant, which TFLite would store as FLT_MAX.
    infinite = tf.math.not_equal(high - high, 0.0)
    return tf.where(infinite, high, high + tf.math.log(1.0 + tf.math.exp(low - high)))


_SCANS = {
    "cumprod": op("math.multiply"),
    "cummax": op("math.maximum"),
    "cummin": op("math.minimum"),
    "cumlogsumexp": _logaddexp,
}


def _scan_rule(name):
    combine = _SCANS[name]

    def lower(ctx, x, *, axis, reverse):
        aval = ctx.avals_in[0]
        n = ctx.dim(aval.shape[axis])
        if is_empty(aval):  # TF.js's cpu Slice fails on an empty tensor
            return x
        if half_scans.applies(name, x, n):  # rounded where JAX rounds (half_scans.py)
            return half_scans.half_scan(ctx, name, x, axis, reverse)
        dtype = x.dtype
        work = tf.cast(x, kernel_dtype(dtype, ordered=name != "cumprod"))
        if reverse:
            work = tf.reverse(work, [axis])
        out = doubling_scan(work, axis, aval.ndim, n, combine)
        if work.dtype.is_floating and name != "cumprod":
            nan_seen = tf.math.cumsum(tf.cast(is_nan(work), tf.int32), axis=axis) > 0
            out = _propagate_nan(work, out, nan_seen)
        if reverse:
            out = tf.reverse(out, [axis])
        return tf.cast(out, dtype)
    lower.__name__ = f"lower_{name}"
    return lower


def _half_case(jax_fn, n, reverse=(False, True), low=0.9, high=1.1, rtol=0.0):
    """float16 rounded where JAX rounds (half_scans.py), to the bit unless ``rtol``: n > 16 spans
    blocks and padding. Rounding once (float32 throughout) fails each of these cases."""
    return case("f16", lambda x: [jax_fn(x, axis=1, reverse=r) for r in reverse],
                f16(2, n, low=low, high=high), atol=0.0, rtol=rtol)


def _scan_cases(jax_fn, ints=True, half=None):
    int_cases = [case("i32", lambda x: jax_fn(x, axis=1), i32(3, 6, low=-3, high=3))] if ints else []
    return [*int_cases,
        case("axis1", lambda x: jax_fn(x, axis=1), f32(3, 7)),
        case("axis0_reverse", lambda x: jax_fn(x, axis=0, reverse=True), f32(5, 3)),
        case("axis2_long", lambda x: jax_fn(x, axis=2), f32(2, 3, 37, low=0.5, high=1.5)),
        half or case("f16", lambda x: jax_fn(x, axis=1), f16(2, 5, low=0.5, high=1.5)),
        case("size1", lambda x: jax_fn(x, axis=0), f32(1, 4)),
        # An empty scan inside the program (TFLite cannot hand back an empty output).
        case("empty", lambda x: jnp.concatenate([jax_fn(x[:, :0], axis=1), x], axis=1), f32(2, 3)),
        case("empty_across", lambda x: jnp.concatenate([jax_fn(x[:0], axis=1), x]), f32(2, 3)),
        case("polymorphic_batch", lambda x: jax_fn(x, axis=1), f32(3, 5),
             polymorphic_shapes=("(b, 5)",)),
    ]


_SYMBOLIC_AXIS_CASE = lambda fn: case("symbolic_axis", lambda x: fn(x, axis=0), f32(6, 2),
                                      polymorphic_shapes=("(n, 2)",))
_NAN_SCAN_CASES = lambda fn: [case("nan_propagates", lambda x: fn(x, axis=1), NAN_ROW),
                              case("nan_reverse", lambda x: fn(x, axis=1, reverse=True), NAN_ROW)]


@lowering(lax.cumsum_p, cases=[
    *_scan_cases(lax.cumsum, half=_half_case(lax.cumsum, 20)),
    case("bool_jnp", lambda x: jnp.cumsum(x, axis=1), boolean(3, 6)),
    case("polymorphic_axis", lambda x: lax.cumsum(x, axis=0), f32(6, 2),
         polymorphic_shapes=("(n, 2)",)),
])
def lower_cumsum(ctx, x, *, axis, reverse):
    if is_empty(ctx.avals_in[0]):
        return x
    if half_scans.applies("cumsum", x, ctx.dim(ctx.avals_in[0].shape[axis])):
        return half_scans.half_scan(ctx, "cumsum", x, axis, reverse)
    dtype = x.dtype
    out = tf.math.cumsum(tf.cast(x, kernel_dtype(dtype, ordered=False)), axis=axis, reverse=reverse)
    return tf.cast(out, dtype)


lowering(lax.cumprod_p, cases=[*_scan_cases(lax.cumprod, half=_half_case(lax.cumprod, 9)),
                               _SYMBOLIC_AXIS_CASE(lax.cumprod)])(
    _scan_rule("cumprod"))
lowering(lax.cummax_p, cases=[
    *_scan_cases(lax.cummax), *_NAN_SCAN_CASES(lax.cummax),
    case("int_extremes", lambda x: lax.cummax(x, axis=1), i32(3, 6, low=-2**31, high=2**31 - 1)),
    _SYMBOLIC_AXIS_CASE(lax.cummax),
])(_scan_rule("cummax"))
lowering(lax.cummin_p, cases=[
    *_scan_cases(lax.cummin), *_NAN_SCAN_CASES(lax.cummin), _SYMBOLIC_AXIS_CASE(lax.cummin),
])(_scan_rule("cummin"))
lowering(lax.cumlogsumexp_p, cases=[
    *_scan_cases(lax.cumlogsumexp, ints=False, half=_half_case(
        lax.cumlogsumexp, 12, reverse=(True,), low=-8.0, high=0.0, rtol=half_scans.HALF_TRANSCENDENTAL_RTOL)),
    *_NAN_SCAN_CASES(lax.cumlogsumexp), _SYMBOLIC_AXIS_CASE(lax.cumlogsumexp),
    case("wide_range", lambda x: lax.cumlogsumexp(x * 50.0, axis=1), f32(3, 9)),
    case("with_neg_inf", lambda x: lax.cumlogsumexp(x, axis=1),
         np.array([[-np.inf, -np.inf, 0.0, -np.inf], [np.inf, 1.0, -np.inf, 2.0]], np.float32)),
])(_scan_rule("cumlogsumexp"))
