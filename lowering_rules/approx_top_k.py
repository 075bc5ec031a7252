"""``approx_top_k`` (``lax.approx_max_k`` / ``lax.approx_min_k``) as JAX computes it on CPU.

On CPU, JAX lowers the primitive with XLA's fallback: an exact sort of the reduction dimension by
the comparator ``>`` (``<`` for min-k), then the first k entries (with ``aggregate_to_topk=False``,
the first ``output size`` entries, which JAX's abstract evaluation fixes from the recall target).
So ``recall_target`` and ``reduction_input_size_override`` change nothing on CPU: the result is
exact, and the rule is a stable top_k in which -0.0 and 0.0 are equal (the comparator's order).

Measured (JAX 0.10.2, CPU): XLA's sort there is not stable, so when a row holds equal values
(0.0 and -0.0 count as equal) JAX returns the tied indices in an order of its sort's making, and
with NaNs (which the comparator leaves unordered) the order is undefined. The values are the same
either way; noxla returns tied indices lowest first. Neither depends on anything the up-front check
can see, so the cases here hold distinct values.
"""
from __future__ import annotations

import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32
from lowering_rules.core.dtype_support import FLOATS, dtypes
from lowering_rules.core.jax_compat import ann
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering
from lowering_rules.sorting import WEBGPU_ORDER, Rows, stable_order, too_long

# Ranks here are runs (below n): keys rank * n + position stay below n^2 <= 2^31 up to n = 46340
# (a row of 46341 distinct values comes out misordered).
MAX_LENGTH = 46340

# A bfloat16 row of distinct values (bfloat16 has 8 significant bits: few random draws are distinct).
_BF16_ROW = (np.arange(12, dtype=np.float32).reshape(2, 6) * 0.25 - 1.0)[:, ::-1]


# int32: the indices (JAX takes floating operands only).
@lowering(ann.approx_top_k_p, limitations=[too_long(MAX_LENGTH), WEBGPU_ORDER], dtypes=dtypes(
    FLOATS - {"float64"}, {"int32"},
    missing="keys are ordered through float32 top_k, which cannot hold float64 exactly"),
    cases=[
    case("max_k3", lambda x: lax.approx_max_k(x, 3), f32(4, 9)),
    case("min_k2_recall", lambda x: lax.approx_min_k(x, 2, recall_target=0.5), f32(3, 7)),
    case("infinities", lambda x: lax.approx_max_k(x, 4), np.array(
        [[1.5, -np.inf, 0.25, np.inf, -2.0, 7.0], [-np.inf, 3.0, -1.0, 2.0, np.inf, 0.5]], np.float32)),
    case("reduction_dimension0", lambda x: lax.approx_max_k(x, 2, reduction_dimension=0), f32(6, 3)),
    case("not_aggregated", lambda x: lax.approx_min_k(x, 2, aggregate_to_topk=False), f32(3, 8)),
    case("size_override", lambda x: lax.approx_max_k(x, 3, reduction_input_size_override=4096), f32(2, 10)),
    case("f16", lambda x: lax.approx_max_k(x, 2), f16(3, 5)),
    case("bf16", lambda x: lax.approx_min_k(x.astype("bfloat16"), 3)[0].astype(np.float32) + x[:, :3],
         _BF16_ROW),
    case("polymorphic_batch", lambda x: lax.approx_max_k(x, 2), f32(3, 5), polymorphic_shapes=("(b, 5)",)),
    case("too_long_rejected", lambda x: lax.approx_max_k(x, 2),
         np.linspace(-1, 1, MAX_LENGTH + 1, dtype=np.float32)[::-1].copy()),
])
def lower_approx_top_k(ctx, x, *, k, reduction_dimension, recall_target, is_max_k,
                       reduction_input_size_override, aggregate_to_topk):
    # recall_target and reduction_input_size_override tune TPU's approximation; on CPU the result
    # is exact, and its size (k, or more without aggregate_to_topk) is the output aval's.
    aval, out_aval = ctx.avals_in[0], ctx.avals_out[0]
    axis = reduction_dimension % aval.ndim
    count = out_aval.shape[axis]
    if count == 0 or any(d == 0 for d in aval.shape):
        return [tf.zeros(ctx.shape(out_aval.shape), x.dtype), tf.zeros(ctx.shape(out_aval.shape), tf.int32)]
    rows = Rows(ctx, aval, axis)
    keys = tf.cast(rows.rows(x), tf.float32)
    # top_k's equality puts -0.0 in 0.0's run of ties, as the comparator does.
    order = stable_order(keys if is_max_k else -keys, rows, lambda run, perm: run)[:, :count]
    values = tf.cast(rows.take(keys, order), x.dtype)
    out_rows = Rows(ctx, out_aval, axis)
    return [out_rows.back(values), out_rows.back(order)]
