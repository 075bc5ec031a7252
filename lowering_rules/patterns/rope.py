"""Rotary position embeddings (RoPE) in fewer TFLite ops, with the same values bit for bit.

Llama code rotates the halves x1, x2 of each head's last axis. Spelt as JAX code writes it,
``concatenate([x1*c - x2*s, x2*c + x1*s], -1)`` is 9 ops (two SLICEs, four MULs, SUB, ADD,
CONCATENATION), twice per decoder layer. The same elements come out of

    x * concat(c, c) + concat(x2, x1) * concat(-s, s)

in 6 (MUL; the two SLICEs and a CONCATENATION; MUL; ADD): the tables concat(c, c) and
concat(-s, s) depend on c and s only, which every layer shares: made once per graph from the same
c and s (``ctx.shared``), and TFLite's converter merges the copies that each layer's own c and s
(the same ops on the same inputs) give. Per element the operations are JAX's: x2 * (-s) is
-(x2 * s) exactly (rounding to nearest is symmetric), a + (-b) is a - b, and addition and
multiplication commute. So this holds for NaN, inf and signed zeros too, in both modes.

The "rotate_half" spelling of HF and keras-hub, ``x * cos + concat(-x2, x1) * sin`` (keras-hub
joins the halves with a stack and a reshape), negates x2 before the product: the negation moves
onto the table, ``sin * [-1, ..., 1, ...]``, made once per graph (7 ops per call become 6; keras-hub's
7, a SPLIT_V, NEG, PACK, RESHAPE, two MULs and ADD, become 6 too).

The interleaved spelling (GPT-J's, tests/zoo.py's Llama), (even, odd) pairs rotated and stacked back,
is the same sum over x viewed as [..., half, 2]: x * c[..., None] + swap_pairs(x) * stack([-s, s], -1),
8 ops where the strided slices, four MULs, SUB, ADD, PACK and RESHAPE are 10.

Each matcher needs static float32 shapes, the halves (two slices or a split) or pairs of one array and the
products it replaces read nowhere else; anything else keeps the equations' own lowering.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f32
from lowering_rules.core.helpers import is_static_shape
from lowering_rules.core.jax_compat import core
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.patterns.fusion import producer


def _float32(atom) -> bool:
    # The jaxpr's own avals: a complex equation lowered part by part keeps its complex dtype here;
    # a PRNG key array's dtype (key<threefry2x32>) is no NumPy dtype.
    dtype = atom.aval.dtype
    return isinstance(dtype, np.dtype) and dtype == np.float32


def _only_use(ctx, atom) -> bool:
    """Whether ``atom`` is read by one equation only: its ops then go unused once replaced."""
    return ctx.uses(atom) == 1


def _parts_source(ctx, first, second):
    """(the equations that made ``first`` and ``second``, x) when both read the same x, float32 of
    static shape with an even last axis; x None otherwise."""
    a, b = producer(ctx, first), producer(ctx, second)
    if a is None or b is None or not a.invars or not b.invars or a.invars[0] is not b.invars[0]:
        return a, b, None  # (an iota reads nothing)
    x = a.invars[0]
    shape = tuple(x.aval.shape)
    if not shape or not is_static_shape(shape) or not _float32(x) or shape[-1] % 2:
        return a, b, None
    return a, b, x


def _halves_of(ctx, first, second):
    """x when ``first`` and ``second`` are x's halves along its last axis (two unit-stride slices
    or one two-way split), x float32 of static shape; else None."""
    a, b, x = _parts_source(ctx, first, second)
    if x is None:
        return None
    shape = tuple(x.aval.shape)
    rank, half = len(shape), shape[-1] // 2
    if a is b and a.primitive.name == "split":
        if (a.params["axis"] == rank - 1 and len(a.outvars) == 2 and a.outvars[0] is first
                and a.outvars[1] is second and tuple(first.aval.shape) == tuple(second.aval.shape)):
            return x
        return None
    if a.primitive.name != "slice" or b.primitive.name != "slice":
        return None
    unit = [None, (1,) * rank]
    if a.params["strides"] not in unit or b.params["strides"] not in unit:
        return None
    head = (0,) * (rank - 1)
    if (tuple(a.params["start_indices"]) == head + (0,) and tuple(a.params["limit_indices"]) == shape[:-1] + (half,)
            and tuple(b.params["start_indices"]) == head + (half,) and tuple(b.params["limit_indices"]) == shape):
        return x
    return None


def _swapped(ctx, x, x1, x2):
    """concat(x2, x1) along the last axis, from two SLICEs: halves that a split made are sliced
    again. LiteRT.js's WebGPU delegate (ML Drift, @litertjs/core 2.5.3) fails to build a model where
    a SPLIT's outputs meet again in one CONCATENATION in swapped order ("Output id not found"),
    though one SPLIT would be one op fewer per call on the CPU."""
    if producer(ctx, x1).primitive.name == "slice":
        return tf.concat([ctx.value(x2), ctx.value(x1)], axis=-1)
    value, rank, half = ctx.value(x), len(x.aval.shape), x.aval.shape[-1] // 2
    first = tf.slice(value, [0] * rank, [-1] * (rank - 1) + [half])
    second = tf.slice(value, [0] * (rank - 1) + [half], [-1] * rank)
    return tf.concat([second, first], axis=-1)


def _factors(ctx, atom):
    """The operands of the float32 ``mul`` that made ``atom``, when nothing else reads it; else None."""
    eqn = producer(ctx, atom, "mul")
    if eqn is None or not _float32(atom) or not _only_use(ctx, atom):
        return None
    return tuple(eqn.invars)


def _orders(pair):
    return (pair, pair[::-1])


def _table_fits(table, shape, width: int) -> bool:
    """Whether ``table`` (cos or sin) broadcasts against an array of ``shape`` as the same rank
    with ``width`` entries along the last axis, so that joining two tables along that axis
    broadcasts against the joined halves as each table against its half."""
    if isinstance(table, core.Literal):
        return False
    t = tuple(table.aval.shape)
    return (_float32(table) and len(t) == len(shape) and t[-1] == width
            and all(d in (1, n) for d, n in zip(t[:-1], shape[:-1])))


def _same_value(ctx, a, b) -> bool:
    """``a is b``, or both the same broadcast or reshape of one array (code that writes
    ``cos[:, None]`` at each use binds one view per product)."""
    if a is b:
        return True
    views = ("broadcast_in_dim", "reshape")
    u, v = producer(ctx, a, *views), producer(ctx, b, *views)
    return (u is not None and v is not None and u.primitive is v.primitive and u.invars[0] is v.invars[0]
            and u.params == v.params and a.aval.shape == b.aval.shape)


def _same(ctx, a, b) -> bool:
    return _same_value(ctx, a[0], b[0]) and _same_value(ctx, a[1], b[1])


def _joined_tables(cos, sin):
    """concat(cos, cos) and concat(-sin, sin) along the last axis."""
    return tf.concat([cos, cos], axis=-1), tf.concat([tf.math.negative(sin), sin], axis=-1)


def _signed_table(sin, width: int):
    """sin * [-1, ..., 1, ...] along the last axis of ``width`` (exactly -sin, then sin)."""
    half = width // 2
    return sin * np.concatenate([-np.ones(half, np.float32), np.ones(half, np.float32)])


def _pairs_of(ctx, first, second):
    """x when ``first`` and ``second`` are x[..., 0::2] and x[..., 1::2] (x's (even, odd) pairs along
    its last axis), x float32 of static shape; else None."""
    a, b, x = _parts_source(ctx, first, second)
    if x is None or a.primitive.name != "slice" or b.primitive.name != "slice":
        return None
    shape = tuple(x.aval.shape)
    head = (0,) * (len(shape) - 1)
    pairs = (1,) * (len(shape) - 1) + (2,)
    if (a.params["strides"] == pairs == b.params["strides"] and tuple(a.params["start_indices"]) == head + (0,)
            and tuple(b.params["start_indices"]) == head + (1,)
            and tuple(a.params["limit_indices"]) == shape == tuple(b.params["limit_indices"])):
        return x
    return None


def _rotation(ctx, difference, total, parts_of):
    """(x, x1, x2, c, s) when ``difference`` is x1*c - x2*s and ``total`` x2*c + x1*s, x1 and x2
    the parts of x that ``parts_of`` finds (each product's operands in either order, the sum's terms
    too; the tables broadcast against the parts), nothing else reading the products; else None."""
    sub, add = producer(ctx, difference, "sub"), producer(ctx, total, "add")
    if sub is None or add is None or not _only_use(ctx, difference) or not _only_use(ctx, total):
        return None
    first, second = (_factors(ctx, a) for a in sub.invars)
    terms = [_factors(ctx, a) for a in add.invars]
    if first is None or second is None or None in terms:
        return None
    part_shape = tuple(difference.aval.shape)
    for x1, c in _orders(first):
        for x2, s in _orders(second):
            x = parts_of(ctx, x1, x2)
            if x is None or tuple(x1.aval.shape) != part_shape:
                continue
            width = part_shape[-1]
            if not (_table_fits(c, part_shape, width) and _table_fits(s, part_shape, width)):
                continue
            wanted = ((x2, c), (x1, s))
            if any(all(any(_same(ctx, t, w) for t in _orders(term)) for term, w in zip(order, wanted))
                   for order in _orders(terms)):
                return x, x1, x2, c, s
    return None


def halves_rotation(ctx):
    """For ``concatenate`` on the last axis of [x1*c - x2*s, x2*c + x1*s] (x1, x2: x's halves; each
    product's operands in either order, the sum's terms too): the same values as
    x * concat(c, c) + concat(x2, x1) * concat(-s, s). None when the equations are not that."""
    eqn = ctx.eqn
    out = eqn.outvars[0]
    if len(eqn.invars) != 2 or not _float32(out) or eqn.params["dimension"] != len(out.aval.shape) - 1:
        return None
    hit = _rotation(ctx, *eqn.invars, _halves_of)
    if hit is None:
        return None
    x, x1, x2, c, s = hit
    cc, sn = ctx.shared(("rope_halves",), (ctx.value(c), ctx.value(s)), _joined_tables)
    return ctx.value(x) * cc + _swapped(ctx, x, x1, x2) * sn


def _paired_tables(cos, sin):
    """cos with a unit pair axis, and [-sin, sin] along a new last axis."""
    return tf.expand_dims(cos, -1), tf.stack([tf.math.negative(sin), sin], axis=-1)


def pairs_rotation(ctx):
    """For ``reshape`` of stack([e*c - o*s, o*c + e*s], -1) back to x's shape (e, o: x's even and odd
    elements along its last axis; GPT-J's and Meta's interleaved RoPE): with x viewed as [..., half, 2],
    the same values as x * c[..., None] + swap_pairs(x) * stack([-s, s], -1). Else None."""
    eqn = ctx.eqn
    out = eqn.outvars[0]
    stacked = producer(ctx, eqn.invars[0], "stack")
    if (eqn.params["dimensions"] is not None or stacked is None or not _float32(out) or len(stacked.invars) != 2
            or stacked.params["axis"] != len(out.aval.shape) or not _only_use(ctx, eqn.invars[0])):
        return None
    if ctx.lowering_for.webgpu and len(out.aval.shape) >= 4:
        # The pairs view adds an axis: LiteRT.js's WebGPU delegate slices and multiplies by a
        # constant only up to rank 4, and would leave those ops on wasm (the zoo's Llama).
        return None
    hit = _rotation(ctx, *stacked.invars, _pairs_of)
    if hit is None or tuple(hit[0].aval.shape) != tuple(out.aval.shape):
        return None
    x, _, _, c, s = hit
    shape = list(x.aval.shape)
    rank = len(shape)
    pairs = tf.reshape(ctx.value(x), shape[:-1] + [shape[-1] // 2, 2])
    even = tf.slice(pairs, [0] * (rank + 1), [-1] * rank + [1])
    odd = tf.slice(pairs, [0] * rank + [1], [-1] * rank + [1])
    cc, sn = ctx.shared(("rope_pairs",), (ctx.value(c), ctx.value(s)), _paired_tables)
    return tf.reshape(pairs * cc + tf.concat([odd, even], axis=-1) * sn, shape)


def _rotated_halves(ctx, atom):
    """(x1, x2) when ``atom`` is concat(-x2, x1) along the last axis, spelt as a concatenate or
    (keras-hub) as a stack on the second-last axis reshaped back, and nothing else reads the
    negation or the join; else None."""
    join = producer(ctx, atom, "concatenate", "reshape")
    if join is None or not _only_use(ctx, atom):
        return None
    rank = len(atom.aval.shape)
    if join.primitive.name == "reshape":
        if join.params.get("dimensions") is not None:
            return None
        stacked = join.invars[0]
        join = producer(ctx, stacked, "stack")
        if join is None or join.params["axis"] != rank - 1 or not _only_use(ctx, stacked):
            return None
    elif join.params["dimension"] != rank - 1:
        return None
    if len(join.invars) != 2:
        return None
    negated, x1 = join.invars
    neg = producer(ctx, negated, "neg")
    if neg is None or not _only_use(ctx, negated):
        return None
    return x1, neg.invars[0]


def rotate_half(ctx):
    """For ``add`` of x * cos and concat(-x2, x1) * sin (either order, each product's operands in
    either order; x1, x2: x's halves; cos, sin as wide as x): the same values as
    x * cos + concat(x2, x1) * (sin * [-1, ..., 1, ...]), the first product kept. Else None."""
    out = ctx.eqn.outvars[0]
    shape = tuple(out.aval.shape)
    if not _float32(out) or not shape or not is_static_shape(shape):
        return None
    for kept, rotated in _orders(ctx.eqn.invars):
        plain, turned = producer(ctx, kept, "mul"), _factors(ctx, rotated)
        if plain is None or turned is None:
            continue
        for r, sin in _orders(turned):
            # As wide as x: a stack of the halves reshaped otherwise is no concat(-x2, x1).
            halves = _rotated_halves(ctx, r) if tuple(r.aval.shape) == shape else None
            if halves is None or not _table_fits(sin, shape, shape[-1]):
                continue
            x = _halves_of(ctx, *halves)
            if x is None or tuple(x.aval.shape) != shape or not any(a is x for a in plain.invars):
                continue
            signed_sin = ctx.shared(("rope_rotate_half",), (ctx.value(sin),),
                                    lambda t: _signed_table(t, shape[-1]))
            return ctx.value(kept) + _swapped(ctx, x, *halves) * signed_sin
    return None


# --------------------------------------------------------------------------- cases

def _llama(x, cos, sin):
    """tests/tiny_llama.py's spelling: x [T, heads, head_dim], halves sliced, tables [T, 1, half]
    (given here: TFLite's SIN and COS round otherwise than XLA's, which would hide the rotation's
    own bits; tests/test_rope.py runs the decode step that computes them)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _llama_split_reordered(x, cos, sin):
    """The halves from a split, each product's operands and the sum's terms the other way round."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([cos * x1 - sin * x2, sin * x1 + cos * x2], axis=-1)


def _llama_two_heads(q, k, cos, sin):
    """Queries and keys rotated by the same tables, as in every decoder layer."""
    return _llama(q, cos, sin), _llama(k, cos, sin)


def _not_a_rotation(x, cos, sin):
    """The second half's sign flipped (x2*c - x1*s is no term of the sum): kept as written."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + (-x1) * sin], axis=-1)


def _product_read_twice(x, cos, sin):
    """A product also returned: replacing the rotation would not drop its ops, so not matched."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    shared = x1 * cos
    return jnp.concatenate([shared - x2 * sin, x2 * cos + x1 * sin], axis=-1), shared


def _tables_viewed_per_use(x, cos, sin):
    """Tables [T, half] given a unit axis at each use: each product reads a view of its own."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]], axis=-1)


def _iota_tables(x):
    """Tables made by iotas (equations that read nothing), first in each product: each product's
    operands are tried as x's halves in both orders."""
    cos, sin = (lax.broadcasted_iota(jnp.float32, (3, 2, 4), d) * 0.25 for d in (1, 2))
    return _llama_split_reordered(x, lax.broadcasted_iota(jnp.float32, (3, 2, 4), 2), sin), \
        _llama_split_reordered(x, cos, sin)


def _halves_of_two_arrays(x, y, cos, sin):
    """x's first half rotated against y's second: no rotation of one array, kept as written."""
    x1, x2 = x[..., :4], y[..., 4:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _hf(x, cos, sin):
    """HF transformers' rotate_half, tables as wide as x."""
    half = x.shape[-1] // 2
    return x * cos + jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def _hf_reordered(x, cos, sin):
    half = x.shape[-1] // 2
    return sin * jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1) + cos * x


def _hf_halves_swapped(x, cos, sin):
    """concat(-x1, x2): the halves the other way round are no rotation, kept as written."""
    half = x.shape[-1] // 2
    return x * cos + jnp.concatenate([-x[..., :half], x[..., half:]], axis=-1) * sin


def _keras_hub(x, cos, sin):
    """keras-hub's RotaryEmbedding: a split, the halves stacked on a new axis and reshaped."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.stack([-x2, x1], axis=-2).reshape(x.shape) * sin


def _pairs(x, cos, sin):
    """The interleaved spelling (tests/zoo.py's Llama): (even, odd) pairs rotated, stacked back."""
    even, odd = x[..., ::2], x[..., 1::2]
    return jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1).reshape(x.shape)


def _pairs_swapped(x, cos, sin):
    """The odd elements taken first: (odd, even) pairs are no rotation of x's pairs, kept as written."""
    even, odd = x[..., 1::2], x[..., ::2]
    return jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1).reshape(x.shape)


_EDGE_HEADS = np.array([[[np.nan, 1.0, -0.0, 2.0, np.inf, -1.0, 0.0, -np.inf]],
                        [[0.0, -0.0, 3.0, np.inf, -0.0, 0.0, -np.inf, 1e38]]], np.float32)
# Tables holding NaN, inf and signed zeros (a model may pass any tables).
_EDGE_TABLE = np.array([[[np.nan, -0.0, np.inf, 1.0]], [[0.0, -np.inf, -0.0, 2.0]]], np.float32)

# Compared within the usual tolerance: XLA's jit contracts a*b + c into one FMA, which no lowering
# does; tests/test_rope.py compares the values bit for bit with JAX's op by op.
HALVES_CASES = [
    case("rope_halves", _llama, f32(3, 4, 8), f32(3, 1, 4), f32(3, 1, 4)),
    case("rope_halves_split_reordered", _llama_split_reordered, f32(3, 2, 8), f32(3, 2, 4), f32(1, 2, 4)),
    case("rope_halves_two_calls", _llama_two_heads, f32(3, 4, 16), f32(3, 2, 16), f32(3, 1, 8), f32(3, 1, 8)),
    case("rope_halves_edges", _llama, _EDGE_HEADS, _EDGE_TABLE, np.flip(_EDGE_TABLE, 0).copy()),
    case("rope_halves_not_a_rotation", _not_a_rotation, f32(3, 2, 8), f32(3, 1, 4), f32(3, 1, 4)),
    case("rope_halves_product_read_twice", _product_read_twice, f32(3, 2, 8), f32(3, 1, 4), f32(3, 1, 4)),
    case("rope_halves_tables_viewed_per_use", _tables_viewed_per_use, f32(3, 2, 8), f32(3, 4), f32(3, 4)),
    case("rope_halves_iota_tables", _iota_tables, f32(3, 2, 8)),
    case("rope_halves_of_two_arrays", _halves_of_two_arrays, f32(3, 2, 8), f32(3, 2, 8), f32(3, 1, 4),
         f32(3, 1, 4)),
    case("rope_halves_polymorphic", _llama, f32(3, 2, 8), f32(3, 1, 4), f32(3, 1, 4),
         polymorphic_shapes=("(t, 2, 8)", "(t, 1, 4)", "(t, 1, 4)")),
]

PAIRS_CASES = [
    case("rope_pairs", _pairs, f32(1, 3, 2, 8), f32(3, 1, 4), f32(3, 1, 4)),
    case("rope_pairs_edges", _pairs, _EDGE_HEADS, _EDGE_TABLE, np.flip(_EDGE_TABLE, 0).copy()),
    case("rope_pairs_swapped", _pairs_swapped, f32(3, 2, 8), f32(3, 1, 4), f32(3, 1, 4)),
]

ROTATE_HALF_CASES = [
    case("rope_rotate_half", _hf, f32(3, 2, 8), f32(3, 1, 8), f32(3, 1, 8)),
    case("rope_rotate_half_reordered", _hf_reordered, f32(2, 3, 8), f32(2, 3, 8), f32(1, 3, 8)),
    case("rope_rotate_half_keras_hub", _keras_hub, f32(1, 3, 2, 8), f32(1, 3, 1, 8), f32(1, 3, 1, 8)),
    case("rope_rotate_half_edges", _hf, _EDGE_HEADS, np.concatenate([_EDGE_TABLE] * 2, -1),
         np.concatenate([np.flip(_EDGE_TABLE, 0).copy()] * 2, -1)),
    case("rope_rotate_half_halves_swapped", _hf_halves_swapped, f32(3, 2, 8), f32(3, 1, 8), f32(3, 1, 8)),
    # Tables one wide broadcast along the last axis: no sign row fits them, kept as written.
    case("rope_rotate_half_scalar_tables", _hf, f32(3, 2, 8), f32(3, 1, 1), f32(3, 1, 1)),
]
