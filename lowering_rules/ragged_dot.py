"""``ragged_dot_general`` (``lax.ragged_dot``, ``lax.ragged_dot_general``): mixture-of-experts layers.

JAX's CPU backend lowers it through ``_ragged_dot_general_impl``, a decomposition into dense JAX
operations: each group's slice of the ragged dimension is masked out of a copy of the operand
(rows outside every group become zeros), and one ``dot_general`` contracts the group copies with
the group dimension. The rule lowers that same decomposition, traced on the operands' avals, so
every mode (ragged non-contracting, contracting and batch dimensions), precision and
``preferred_element_type`` match JAX's own results.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32, i32
from lowering_rules.core.dtype_support import NUMERIC, dtypes, gap
from lowering_rules.core.jax_compat import lax_internal
from lowering_rules.core.registry import lowering
from lowering_rules.core.vocabulary import Target
from lowering_rules.prng import _lower_through_impl


def _ragged_contracting(lhs, rhs, sizes):
    """[m, k] x [k, n] with k split into groups: one [m, n] product per group."""
    numbers = lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((1,), (0,)), ((), ())),
                                            lhs_ragged_dimensions=(1,), rhs_group_dimensions=())
    return lax.ragged_dot_general(lhs, rhs, sizes, numbers)


def _ragged_batch(lhs, rhs, sizes):
    numbers = lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((2,), (1,)), ((0,), (0,))),
                                            lhs_ragged_dimensions=(0,), rhs_group_dimensions=())
    return lax.ragged_dot_general(lhs, rhs, sizes, numbers)


def _moe_layer(tokens, router, experts):
    """A top-1 mixture-of-experts layer: tokens sorted by expert, one ragged_dot over the experts."""
    choice = jnp.argmax(tokens @ router, axis=-1)
    order = jnp.argsort(choice, stable=True)
    sizes = jnp.bincount(choice, length=experts.shape[0]).astype(jnp.int32)
    out = lax.ragged_dot(tokens[order], experts, sizes)
    return jnp.zeros_like(out).at[order].set(out)


@lowering(lax_internal.ragged_dot_general_p, dtypes=dtypes(NUMERIC, gaps=[gap(
    (Target.TFLITE,), {"int8", "int16", "uint8", "uint16"},
    "the decomposition's masked copies and dot_general need Mul, Sum and Transpose kernels TFLite's "
    "builtins lack for 8/16-bit integers (measured with TF 2.19's converter)")]), cases=[
    case("ragged_rows", lax.ragged_dot, f32(6, 4), f32(3, 4, 5), np.array([2, 0, 3], np.int32)),
    case("groups_overflow_rows", lax.ragged_dot, f32(5, 3), f32(2, 3, 4), np.array([4, 3], np.int32)),
    case("int32", lax.ragged_dot, i32(4, 3), i32(2, 3, 2), np.array([1, 3], np.int32)),
    case("preferred_f32_from_f16", functools.partial(lax.ragged_dot, preferred_element_type=jnp.float32),
         f16(4, 3), f16(2, 3, 2), np.array([3, 1], np.int32)),
    case("ragged_contracting", _ragged_contracting, f32(3, 6), f32(6, 4), np.array([2, 4], np.int32)),
    case("ragged_batch", _ragged_batch, f32(2, 3, 4), f32(2, 4, 5), np.array([1, 1], np.int32)),
    case("moe_layer", _moe_layer, f32(8, 4), f32(4, 3), f32(3, 4, 6)),
])
def lower_ragged_dot_general(ctx, lhs, rhs, group_sizes, *, ragged_dot_dimension_numbers, precision,
                             preferred_element_type, group_offset):
    # group_offset is always None in a jaxpr: JAX 0.10.2 refuses an array as a primitive parameter
    # (unhashable), and its CPU decomposition raises NotImplementedError for any other value.
    impl = functools.partial(lax_internal._ragged_dot_general_impl,
                             ragged_dot_dimension_numbers=ragged_dot_dimension_numbers, precision=precision,
                             preferred_element_type=preferred_element_type)
    return _lower_through_impl(ctx, impl, lhs, rhs, group_sizes)[0]
