"""select_n: one of several cases by an integer or boolean predicate (``jnp.where``, ``lax.select_n``,
a ``cond`` on a batched predicate under vmap)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from lowering_rules.core.cases import boolean, case, f16, f32, i32
from lowering_rules.core.helpers import as_out, wide
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering


def _is_narrow_int(x) -> bool:
    return x.dtype.is_integer and x.dtype.size < 4


@lowering(lax.select_n_p, cases=[
    case("bool", lambda p, x, y: lax.select_n(p, x, y), boolean(3, 4), f32(3, 4), f32(3, 4)),
    case("where", lambda x: jnp.where(x > 0, x, 0.0), f32(3, 4)),
    case("int32_three", lambda p, x, y, z: lax.select_n(p, x, y, z),
         i32(3, 4, low=0, high=2), f32(3, 4), f32(3, 4), f32(3, 4)),
    case("int32_two", lambda p, x, y: lax.select_n(p, x, y), i32(6, low=0, high=1), i32(6), i32(6)),
    case("scalar_predicate", lambda x, y: lax.select_n(x[0] > 0, x, y), f32(3), f32(3)),
    case("bool_values", lambda p, x, y: lax.select_n(p, x, y), boolean(5), boolean(5), boolean(5)),
    case("f16", lambda p, x, y: lax.select_n(p, x, y), boolean(5), f16(5), f16(5)),
    case("one_case", lambda p, x: lax.select_n(p, x), i32(4, low=0, high=0), f32(4)),
    case("one_case_bool", lambda p, x: lax.select_n(p, x), boolean(4), f32(4)),
    # Found by the batched fuzz family: the case broadcast over the predicate's batch axis, float16.
    case("one_case_f16_batched", jax.vmap(lambda p, x: lax.select_n(p, x), in_axes=(4, None)),
         boolean(3, 1, 3, 3, 2), f16(3, 1, 3, 3)),
    case("empty", lambda p, x, y: jnp.concatenate([lax.select_n(p[:0], x[:0], y[:0]), x]),
         boolean(2, 3), f32(2, 3), f32(2, 3)),
])
def lower_select_n(ctx, which, *cases):
    if len(cases) == 1:  # the case itself: cast to float32 and back, a float16 one lost its carrier
        return cases[0]  # of a broadcast before it to TFLite's converter (no float16 BROADCAST_TO)
    # Booleans are selected as int32: TF.js's wasm Select mixes up boolean values; 8/16-bit
    # integers too: TFLite's SELECT_V2 has no kernels for them.
    cases = [tf.cast(c, tf.int32) if c.dtype == tf.bool or _is_narrow_int(c) else wide(c) for c in cases]
    if which.dtype == tf.bool and len(cases) == 2:  # one case is selected whatever the predicate
        return as_out(ctx, tf.where(which, cases[1], cases[0]))
    result = cases[0]
    for i, c in enumerate(cases[1:], start=1):
        result = tf.where(tf.equal(which, i), c, result)
    return as_out(ctx, result)
