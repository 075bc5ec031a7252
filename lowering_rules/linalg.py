"""dot_general as one batched matrix multiplication (never tf.einsum: TF.js wasm has no Einsum)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, i8, i32
from lowering_rules.core.helpers import kernel_dtype, product, transpose
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.patterns import grouped_query, power_spectrum

# TFLite's BATCH_MATMUL takes operands of rank <= 5: more batch dimensions are folded into one.
_MAX_BATCH_DIMS = 3


def _static_size(size) -> int | None:
    return int(size) if isinstance(size, (int, np.integer)) else None


def _in_order(shape, perm) -> bool:
    """Whether transposing by ``perm`` keeps the elements in order: only size-1 axes move, so a
    Reshape does it (a Transpose would copy)."""
    moved = [p for p in perm if _static_size(shape[p]) != 1]
    return moved == sorted(moved)


def _layout(shape, batch, rows, cols, may_transpose):
    """(rows, cols, transposed): an operand's matrix axes as the matmul reads them.

    The transposed layout (batch..., cols, rows) is taken when it moves nothing and the plain one
    would: BATCH_MATMUL's adj_x/adj_y (TF.js's transposeA/B) read it as is, so attention's
    ``q @ k^T`` and ``probs @ v`` need no Transpose. Size-1 axes do not count as moved (one
    decoded token's queries are [1, heads, head_dim]: its token axis may sit anywhere)."""
    if may_transpose and not _in_order(shape, [*batch, *rows, *cols]) and _in_order(shape, [*batch, *cols, *rows]):
        return cols, rows, True
    return rows, cols, False


def _as_batched_matrix(ctx, x, aval, batch, rows, cols, fold_batch):
    """Transposes ``x`` to (batch..., rows..., cols...) and folds rows and cols into one axis each.

    Batch dimensions stay separate axes, as BATCH_MATMUL takes them (up to _MAX_BATCH_DIMS), so no
    Reshape folds them and none unfolds the result. Emits no Transpose/Reshape that would not move
    anything: the TF.js converter keeps a Reshape to the same shape, one more kernel launch per
    matmul (mlp: 5 -> 4 TF.js nodes)."""
    perm = [*batch, *rows, *cols]
    if not _in_order(aval.shape, perm):
        x = transpose(x, perm)
        held = perm
    else:  # only size-1 axes move: the Reshape below puts them in place
        held = range(len(perm))
    dims = [ctx.dim(aval.shape[d]) for d in perm]
    nb, nr = len(batch), len(rows)
    folded = [product(dims[nb:nb + nr]), product(dims[nb + nr:])]
    folded[:0] = [product(dims[:nb])] if fold_batch and batch else dims[:nb]
    # Compared with the shape x has now: a transpose can give the operand's own shape back permuted.
    same = _same_static_shape(folded, [ctx.dim(aval.shape[d]) for d in held])
    return x if same else tf.reshape(x, folded)


def _same_static_shape(a, b) -> bool:
    """Whether two shapes (lists of sizes, or an int32 vector when symbolic) are the same static one."""
    return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
            and all(isinstance(d, (int, np.integer)) for d in (*a, *b)) and list(a) == list(b))


def _int_matmul(lhs, rhs):
    # TFLite's BATCH_MATMUL has no int32 kernel: multiply with broadcasting and sum over K.
    return tf.reduce_sum(tf.expand_dims(lhs, -1) * tf.expand_dims(rhs, -3), axis=-2)


def _converted_first(dtype, lhs_dtype, rhs_dtype, out_dtype) -> bool:
    """Whether an operand goes through the output's dtype before the product: XLA's CPU dot
    converts operands of different dtypes to the output's first (JAX's dot_general lowering), so a
    value the output cannot hold (float16 in a bfloat16 product, a large int32 in a float16 one)
    is rounded or wrapped there. Operands the output holds exactly need no conversion."""
    return (lhs_dtype != rhs_dtype and out_dtype != np.bool_ and dtype != out_dtype
            and not np.can_cast(dtype, out_dtype, "safe"))


# keras-hub's attention products over repeated KV heads: (scores: queries . keys, values: values . probabilities).
# [n, h, d] = [3, 4, 5]: an output projection's weight, per head and head feature.
WEIGHT_HND = np.random.default_rng(7).standard_normal((3, 4, 5)).astype(np.float32)
GQA_SCORES, GQA_VALUES = (((4,), (3,)), ((0, 2), (0, 2))), (((1,), (4,)), ((0, 2), (1, 2)))


@lowering(lax.dot_general_p, fast=power_spectrum.POWER_SPECTRUM, cases=[
    case("matmul", lambda a, b: a @ b, f32(3, 4), f32(4, 5)),
    case("vector_dot", jnp.dot, f32(6), f32(6)),
    case("matvec", jnp.dot, f32(3, 6), f32(6)),
    # A vector times a matrix: the TFLite converter refused the plain (1, K) x (K, N) lowering.
    case("vecmat", jnp.dot, f32(4), f32(4, 4)),
    case("vecmat_free_dims_folded", lambda a, b: jnp.einsum("k,kij->ij", a, b), f32(4), f32(4, 2, 3)),
    case("vecmat_rhs_transposed", lambda a, b: jnp.einsum("k,nk->n", a, b), f32(4), f32(6, 4)),
    case("outer_no_contraction", lambda a, b: lax.dot_general(a, b, (((), ()), ((), ()))),
         f32(3), f32(4)),
    case("batched_matmul", jnp.matmul, f32(2, 3, 4), f32(2, 4, 5)),
    case("batch_dims_not_leading", lambda a, b: lax.dot_general(a, b, (((0,), (2,)), ((2,), (0,)))),
         f32(4, 3, 2), f32(2, 5, 4)),
    # A batch of one reshaped: the converter's fused BATCH_MATMUL of it failed (found by tests/fuzz.py).
    case("unit_batch_reshaped", lambda a, b: lax.dot_general(a, b, (((3,), (0,)), ((2,), (2,)))).reshape(2, 2, 1, 1),
         f32(1, 2, 1, 3), f32(3, 2, 1)),
    # Grouped-query attention's repeated keys and values, read unrepeated (grouped_query): keras-hub's
    # decode-step scores, a prefill's values (the groups moved by a transpose of the product), one KV head.
    case("repeated_keys", lambda q, k: lax.dot_general(q, jnp.repeat(k, 2, axis=2), GQA_SCORES),
         f32(1, 1, 4, 1, 8), f32(1, 6, 2, 8)),
    case("repeated_values", lambda v, p: lax.dot_general(jnp.repeat(v, 3, axis=2), p, GQA_VALUES),
         f32(2, 6, 2, 8), f32(3, 2, 6, 2, 6)),
    case("repeated_values_transposed", lambda v, p: jnp.transpose(
        lax.dot_general(jnp.repeat(v, 2, axis=2), p, GQA_VALUES), (3, 0, 4, 1, 2)),
         f32(1, 6, 2, 8), f32(1, 1, 4, 1, 6)),
    case("repeated_one_kv_head", lambda q, k: lax.dot_general(
        q, jnp.repeat(k, 4, axis=2), (((3,), (3,)), ((0, 2), (0, 2)))), f32(1, 3, 4, 8), f32(1, 6, 1, 8)),
    # Found by tests/fuzz.py: a batch axis moved in front of a unit contracting one (see `outer`).
    case("unit_contraction_batch_moved", lambda a, b: lax.dot_general(a, b, (((1,), (3,)), ((0,), (2,)))),
         f32(3, 1, 2), f32(1, 2, 3, 1)),
    # Found by tests/fuzz_grad.py: the same beside a contracting axis longer than 1 (wrong numbers), and
    # with the batch size not that axis's (the converter refused the BATCH_MATMUL).
    case("unit_and_long_contraction_batch_moved", lambda a, b: lax.dot_general(a, b, (((1, 2), (3, 0)), ((0,), (2,)))),
         f32(2, 1, 2), f32(2, 1, 2, 1)),
    case("unit_and_long_contraction_other_batch", lambda a, b: lax.dot_general(
        a, b, (((1, 2), (3, 0)), ((0,), (2,)))), f32(2, 1, 3), f32(3, 1, 2, 1)),
    case("two_contracting_dims", lambda a, b: lax.dot_general(a, b, (((0, 2), (1, 0)), ((), ()))),
         f32(3, 2, 4), f32(4, 3, 5)),
    # The pairs listed out of the computed operand's order, the other a weight: the weight is
    # transposed (folded), not the operand (keras-hub's attention output projection).
    case("contracting_pairs_reordered_for_weight", lambda a: lax.dot_general(
        a, WEIGHT_HND, (((3, 2), (1, 0)), ((), ()))), f32(1, 2, 3, 4)),
    case("contracting_pairs_reordered_for_weight_lhs", lambda a: lax.dot_general(
        WEIGHT_HND, a, (((1, 0), (3, 2)), ((), ()))), f32(1, 2, 3, 4)),
    case("attention_einsum", lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k),
         f32(2, 3, 4, 5), f32(2, 6, 4, 5)),
    # probs @ v: v is read transposed (adj_y) instead of through a Transpose.
    case("attention_values", lambda p, v: jnp.einsum("bhqk,bkhd->bqhd", p, v),
         f32(2, 3, 4, 6), f32(2, 6, 3, 5)),
    # Both operands read transposed (adj_x, adj_y).
    case("both_transposed", lambda a, b: lax.dot_general(a, b, (((1,), (2,)), ((0,), (0,)))),
         f32(2, 4, 3), f32(2, 5, 4)),
    # More batch dimensions than BATCH_MATMUL takes: folded into one.
    case("four_batch_dims", lambda a, b: jnp.einsum("abcdij,abcdjk->abcdik", a, b),
         f32(2, 1, 2, 2, 3, 2), f32(2, 1, 2, 2, 2, 3)),
    # Found by tests/fuzz.py: the transposed lhs (2, 1, 1, 4) folds to (2, 1, 4, 1), the operand's own
    # shape, and its Reshape was left out.
    case("transposed_to_own_shape", lambda a, b: lax.dot_general(a, b, (((), ()), ((0, 3), (1, 0)))),
         f32(2, 1, 4, 1), f32(1, 2)),
    case("transposed_to_own_shape_i32", lambda a, b: lax.dot_general(a, b, (((), ()), ((0, 3), (0, 1)))),
         i32(2, 1, 4, 1), i32(2, 1)),
    case("int32", lambda a, b: a @ b, i32(3, 4), i32(4, 2)),
    case("bool", lambda a, b: a @ b, boolean(3, 4), boolean(4, 2)),
    case("int8_to_int32", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32),
         i8(3, 4), i8(4, 2)),
    case("f16", lambda a, b: a @ b, f16(3, 4, low=-1, high=1), f16(4, 2, low=-1, high=1)),
    case("f16_to_f32", lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32),
         f16(3, 4), f16(4, 2)),
    # The float16 operand is rounded to bfloat16 first, as XLA does: 1 + 2^-9 is 1 in bfloat16,
    # so 256 (1 + 2^-9) - 256 is 0, not 0.5.
    case("bf16_times_f16", lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
         np.array([[256.0, -256.0], [1.0, 1.0]], jnp.bfloat16),
         np.array([[1.001953125, 0.25], [1.0, 0.25]], np.float16)),
    case("precision_highest", lambda a, b: jnp.dot(a, b, precision=lax.Precision.HIGHEST),
         f32(3, 4), f32(4, 2)),
    case("size1_dims", lambda a, b: a @ b, f32(1, 4), f32(4, 1)),
    # Empty results inside the program (TFLite cannot hand back an empty output).
    case("empty_free_dim", lambda a, b: jnp.concatenate([a[:0] @ b, b[:1]]), f32(2, 4), f32(4, 3)),
    case("empty_contraction", lambda a, b: a[:, :0] @ b[:0], f32(2, 4), f32(4, 3)),
    case("polymorphic_batch", lambda a, b: jnp.einsum("bij,jk->bik", a, b), f32(3, 2, 4), f32(4, 5),
         polymorphic_shapes=("(b, 2, 4)", None)),
    *power_spectrum.POWER_SPECTRUM_CASES,
])
def lower_dot_general(ctx, lhs, rhs, *, dimension_numbers, precision=None,
                      preferred_element_type=None):
    fused = power_spectrum.power_spectrum_product(ctx)
    if fused is not None:
        return fused
    grouped = grouped_query.plan(ctx)
    if grouped is not None:
        return _grouped_product(ctx, lhs, rhs, grouped)
    return _dot(ctx, lhs, rhs, *ctx.avals_in, _computed_operand_in_order(ctx, dimension_numbers), ctx.out_shape())


def _computed_operand_in_order(ctx, dimension_numbers):
    """The contracting axis pairs in the order the computed operand holds its axes, when the other
    operand is a constant: the product is the same sum over the same pairs, and the constant's
    Transpose is folded where the computed one's would run (keras-hub's attention output,
    einsum("btnh,nhd->btd") written with the pairs as (h, n): a TRANSPOSE per layer)."""
    (lhs_contract, rhs_contract), batch = dimension_numbers
    if len(lhs_contract) < 2:
        return dimension_numbers
    constant = [ctx.is_constant(atom) for atom in ctx.eqn.invars[:2]]
    if constant == [False, True]:
        held = lhs_contract
    elif constant == [True, False]:
        held = rhs_contract
    else:
        return dimension_numbers
    order = sorted(range(len(held)), key=lambda i: held[i])
    return ((tuple(lhs_contract[i] for i in order), tuple(rhs_contract[i] for i in order)), batch)


def _grouped_product(ctx, lhs, rhs, plan: grouped_query.Plan):
    """The product with the repeated keys or values read unrepeated (lowering_rules.patterns.grouped_query)."""
    other = 1 - plan.repeated
    split = tf.reshape((lhs, rhs)[other], plan.other_shape)
    out = _dot(ctx, split, ctx.value(plan.source), ctx.avals_in[other].update(shape=plan.other_shape),
               plan.source.aval, plan.dimension_numbers, list(plan.shape), free=plan.free)
    if not _in_order(plan.shape, plan.permutation):
        out = transpose(out, plan.permutation)
    return tf.reshape(out, ctx.out_shape())


def _free_axes(aval, contract, batch):
    return [d for d in range(aval.ndim) if d not in (*contract, *batch)]


def _dot(ctx, lhs, rhs, lhs_aval, rhs_aval, dimension_numbers, out_shape, free=None, permutation=None):
    """dot_general's product as ``out_shape`` (its own shape, or one holding its elements in the
    same order); ``ctx`` gives the output's dtype. ``free``: each operand's free axes in the order
    the product writes them (default: ascending, dot_general's own). ``permutation``: a Transpose
    of the product, in the computation's dtype (TFLite has no float16 TRANSPOSE)."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_free, rhs_free = free or (_free_axes(lhs_aval, lhs_contract, lhs_batch),
                                  _free_axes(rhs_aval, rhs_contract, rhs_batch))
    if free is None and lhs_batch and all(lhs_aval.shape[d] == 1 for d in lhs_batch):
        # Batch axes of size 1 only: a plain matmul, those axes free ones (they move no element).
        # As a batch of one, the TFLite converter fused the Reshapes around it into a BATCH_MATMUL
        # whose batch axes it then found mismatched (f32[1,2,1,3] . f32[3,2,1], batch axes 2 and 2).
        lhs_free, rhs_free = (tuple(sorted((*axes, *batch))) for axes, batch in
                              ((lhs_free, lhs_batch), (rhs_free, rhs_batch)))
        lhs_batch, rhs_batch = (), ()
    unit = [i for i, d in enumerate(lhs_contract) if _static_size(lhs_aval.shape[d]) == 1]
    if free is None and lhs_batch and 0 < len(unit) < len(lhs_contract):
        # A contracting axis of size 1 adds nothing, and beside a batch axis the TFLite converter
        # folded the Transpose moving that axis into BATCH_MATMUL as if it were contracted: wrong
        # numbers (f32[2,1,2] . f32[2,1,2,1], found by tests/fuzz_grad.py). It is squeezed away.
        drops = [[contract[i] for i in unit] for contract in (lhs_contract, rhs_contract)]
        lhs, rhs = tf.squeeze(lhs, drops[0]), tf.squeeze(rhs, drops[1])
        kept = [[a for a in range(aval.ndim) if a not in drop] for aval, drop in zip((lhs_aval, rhs_aval), drops)]
        avals = [aval.update(shape=tuple(aval.shape[a] for a in axes))
                 for aval, axes in zip((lhs_aval, rhs_aval), kept)]
        at = [{a: i for i, a in enumerate(axes)} for axes in kept]
        numbers = (tuple(tuple(at[side][d] for d in dims if d in at[side]) for side, dims in enumerate(pair))
                   for pair in dimension_numbers)
        return _dot(ctx, lhs, rhs, *avals, tuple(numbers), out_shape, permutation=permutation)
    if any(isinstance(lhs_aval.shape[d], int) and lhs_aval.shape[d] == 0 for d in lhs_contract):
        # A sum over nothing: TF.js's wasm MatMul leaves its output uninitialised when the inner
        # dimension is 0 (it returned whatever the buffer held before).
        return tf.zeros(out_shape, ctx.out_dtype)
    # preferred_element_type asks for products and sums in the (wider) output type. Half
    # precision is computed in float32 (as XLA's CPU dot accumulates): TFLite has no float16
    # transpose or matmul kernels.
    # 8/16-bit integers and uint32 in int32 (TFLite has no MUL/SUM for them): products and sums
    # wrap modulo 2^32 alike, and the final cast wraps to the output's width as XLA's dot does.
    compute = tf.float32 if ctx.out_dtype in (tf.float16, tf.bfloat16) else kernel_dtype(ctx.out_dtype, ordered=False)
    if ctx.out_dtype == tf.bool:  # a bool dot is an OR of ANDs: count the true products
        compute = tf.int32
    fold_batch = len(lhs_batch) > _MAX_BATCH_DIMS
    # An outer product (nothing contracted, or over batch axes only axes of size 1: K = 1) is a
    # broadcast multiply, one product per element as the matmul's. As a matmul over K = 1 the TFLite
    # converter folded a one-row lhs into a FULLY_CONNECTED of a scalar that fails to prepare
    # (keras-hub's RoPE, einsum("i,j->ij", positions, freqs), in a one-token decode step), and folded
    # a batch axis moved in front of a unit contracting one into BATCH_MATMUL's adj_y as if it were
    # contracted (f32[3,1,2] . f32[1,2,3,1]: "accum_dim_lhs != accum_dim_rhs (1 != 3)", found by
    # tests/fuzz.py). Without batch axes K = 1 stays a matmul: a Dense layer of one input feature
    # keeps its FULLY_CONNECTED, with the bias and activation fused.
    outer = not lhs_contract or (bool(lhs_batch) and all(_static_size(lhs_aval.shape[d]) == 1 for d in lhs_contract))
    # The integer matmul and the outer product read plain layouts only.
    may_transpose = not compute.is_integer and not outer
    lhs_rows, lhs_cols, adj_lhs = _layout(lhs_aval.shape, lhs_batch, lhs_free, lhs_contract, may_transpose)
    rhs_rows, rhs_cols, adj_rhs = _layout(rhs_aval.shape, rhs_batch, rhs_contract, rhs_free, may_transpose)
    def prepared(x, name, aval, batch, rows, cols):
        through_out = _converted_first(aval.dtype, lhs_aval.dtype, rhs_aval.dtype, ctx.aval_out.dtype)
        key = (name, compute, through_out, tuple(batch), tuple(rows), tuple(cols), fold_batch)
        return ctx.prepare_operand(x, key, lambda x: _as_batched_matrix(
            ctx, tf.cast(tf.cast(x, ctx.out_dtype) if through_out else x, compute), aval, batch, rows, cols,
            fold_batch))
    lhs = prepared(lhs, "dot_lhs", lhs_aval, lhs_batch, lhs_rows, lhs_cols)
    rhs = prepared(rhs, "dot_rhs", rhs_aval, rhs_batch, rhs_rows, rhs_cols)
    # A vector times a matrix is computed as (rhs^T lhs^T)^T: the TFLite converter fuses the
    # Reshape of a 1-D lhs to (1, K), the MatMul and the output's Reshape into a BATCH_MATMUL of a
    # 1-D operand, then refuses it ("operand 0 is 2-D"). The (N, 1) result is reshaped below.
    swapped = (not compute.is_integer and not lhs_batch and not lhs_free and lhs_contract
               and rhs_free)
    if outer:
        out = lhs * rhs
    elif compute.is_integer:
        out = _int_matmul(lhs, rhs)
    elif swapped:
        out = tf.linalg.matmul(rhs, lhs, transpose_a=not adj_rhs, transpose_b=not adj_lhs)
    else:
        out = tf.linalg.matmul(lhs, rhs, transpose_a=adj_lhs, transpose_b=adj_rhs)
    sizes = lambda aval, dims: product([ctx.dim(aval.shape[d]) for d in dims])  # noqa: E731
    if fold_batch:
        folded_out = [sizes(lhs_aval, lhs_batch)]
    else:
        folded_out = [ctx.dim(lhs_aval.shape[d]) for d in lhs_batch]
    folded_out += [sizes(lhs_aval, lhs_free), sizes(rhs_aval, rhs_free)]
    if swapped or not _same_static_shape(folded_out, out_shape):
        out = tf.reshape(out, out_shape)
    if permutation is not None:
        out = transpose(out, permutation)
    return out > 0 if ctx.out_dtype == tf.bool else tf.cast(out, ctx.out_dtype)


def _transpose_cost(shape, perm) -> tuple[int, int]:
    """(elements moved, elements moved one by one) by a Transpose of ``shape`` by ``perm``: none
    when only size-1 axes move (a Reshape does it); copied one by one when the innermost axis
    moves, else in runs of the innermost axis (LiteRT's Transpose merges the axes that stay last
    and copies blocks)."""
    if _in_order(shape, perm):
        return 0, 0
    size = product(shape)
    inner = [d for d in range(len(shape)) if shape[d] != 1][-1:]
    return size, (0 if [p for p in perm if shape[p] != 1][-1:] == inner else size)


def _operand_cost(shape, batch, rows, cols, may_transpose) -> tuple[int, int]:
    """_transpose_cost of the Transpose _as_batched_matrix gives an operand, none when _layout
    reads it as is."""
    rows, cols, _ = _layout(shape, batch, rows, cols, may_transpose)
    return _transpose_cost(shape, [*batch, *rows, *cols])


def transposed_product(ctx, permutation):
    """``transpose(dot_general(a, b), permutation)`` with the Transpose moved where it moves
    least: the product computed in another order of its axes (batch, one operand's free axes,
    the other's, each group in dot_general's order or in the wanted one), its operands transposed
    into that order (not at all when BATCH_MATMUL's adj_x/adj_y read them as they are), and what
    is left of the permutation applied to the product. Costs are elements moved, then elements
    moved one by one; dot_general's own order wins ties (None: lower_transpose transposes it).

    jnp.einsum spells attention's ``q k^T`` and ``p v`` with the keys' or values' free axis first,
    then a Transpose. One decoded token's (batch, b's free, a's free) is the swapped product b a:
    no Transpose at all (a decode step had three per layer). A 16-token prefill's scores (kv,
    group, T, cache) come from q transposed to (kv, group, T, D), 9,216 elements, instead of the
    scores, 36,864; its values' (T, kv, group, D) is p v (kv, group, T, D) transposed in runs of
    D, not (kv, D, group, T) transposed one by one. Each output element is the same sum of the
    same products. The product must have no other reader, else it would be computed twice."""
    operand = ctx.eqn.invars[0]
    dot = ctx.producer(operand)
    if dot is None or dot.primitive.name != "dot_general" or ctx.uses(operand) != 1:
        return None
    if ctx.producer(dot.invars[0]) is not None and ctx.producer(dot.invars[0]).primitive.name == "add":
        return None  # maybe a power spectrum, which dot_general's rule computes in fewer ops
    if grouped_query.plan(ctx, dot) is not None:
        return None  # its rule reads the repeated keys or values unrepeated: more than a Transpose saved
    shape = operand.aval.shape
    avals = [v.aval for v in dot.invars]
    if not np.issubdtype(operand.aval.dtype, np.floating) or any(
            _static_size(d) is None for aval in (operand.aval, *avals) for d in aval.shape):
        return None
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dot.params["dimension_numbers"]
    contract, batch = (lhs_contract, rhs_contract), (lhs_batch, rhs_batch)
    free = [_free_axes(avals[i], contract[i], batch[i]) for i in (0, 1)]
    n_batch = len(lhs_batch)
    # The product's axes in the dot's numbering: batch, lhs free, rhs free.
    out_axes = [list(range(n_batch)), list(range(n_batch, n_batch + len(free[0]))),
                list(range(n_batch + len(free[0]), len(shape)))]
    wanted = lambda axes: sorted(range(len(axes)), key=lambda i: permutation.index(axes[i]))  # noqa: E731
    may_transpose = bool(lhs_contract)
    best, best_cost = None, None
    for first in (0, 1):
        for batch_order in (list(range(n_batch)), wanted(out_axes[0])):
            for orders in ((None, None), ("wanted", None), (None, "wanted"), ("wanted", "wanted")):
                # Indices into each operand's free axes, in the order the product writes them.
                picks = [wanted(out_axes[1 + i]) if orders[i] else list(range(len(free[i]))) for i in (0, 1)]
                second = 1 - first
                order = ([out_axes[0][i] for i in batch_order] + [out_axes[1 + first][i] for i in picks[first]]
                         + [out_axes[1 + second][i] for i in picks[second]])
                sides = [(avals[i].shape, [batch[i][j] for j in batch_order], [free[i][j] for j in picks[i]])
                         for i in (0, 1)]
                cost = [a + b + c for a, b, c in zip(
                    _operand_cost(sides[first][0], sides[first][1], sides[first][2], contract[first], may_transpose),
                    _operand_cost(sides[second][0], sides[second][1], contract[second], sides[second][2],
                                  may_transpose),
                    _transpose_cost([shape[o] for o in order], [order.index(p) for p in permutation]))]
                if best_cost is None or cost < best_cost:
                    best, best_cost = (first, batch_order, picks, order), cost
    first, batch_order, picks, order = best
    if order == list(range(len(shape))):
        return None  # dot_general's own order: lower_transpose transposes the product
    second = 1 - first
    x, y = (ctx.value(v) for v in (dot.invars[first], dot.invars[second]))
    dims = (((contract[first], contract[second]),
             ([batch[first][j] for j in batch_order], [batch[second][j] for j in batch_order])))
    product_shape = [ctx.dim(shape[o]) for o in order]
    residual = [order.index(p) for p in permutation]
    in_order = _in_order(product_shape, residual)
    # When only size-1 axes move, _dot's Reshape puts them in place.
    return _dot(ctx, x, y, avals[first], avals[second], dims, ctx.out_shape() if in_order else product_shape,
                free=([free[first][j] for j in picks[first]], [free[second][j] for j in picks[second]]),
                permutation=None if in_order else residual)
