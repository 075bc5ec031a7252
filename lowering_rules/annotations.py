"""Annotations that change no value: placement (sharding, resharding, layout) and names.

Model code written for several devices marks where arrays live (``with_sharding_constraint``,
``reshard``, ``with_layout_constraint``) and names values for rematerialization policies
(``checkpoint_name``). An exported model runs on one device, where each of these is the identity.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.experimental.layout import Layout, with_layout_constraint
from jax.sharding import AxisType, NamedSharding, PartitionSpec, make_single_device_sharding

from lowering_rules.core.cases import boolean, case, f32, i32
from lowering_rules.core.jax_compat import ad_checkpoint, lax_internal, pjit
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import lowering


def _mesh(axis_type):
    return jax.make_mesh((1,), ("model",), axis_types=(axis_type,))


def _constrained(x):
    sharded = NamedSharding(_mesh(AxisType.Auto), PartitionSpec(None, "model"))
    return lax.with_sharding_constraint(x * 2.0, sharded) + 1.0


def _resharded(x):
    return jax.sharding.reshard(x + 1, NamedSharding(_mesh(AxisType.Explicit), PartitionSpec()))


@lowering(pjit.sharding_constraint_p, cases=[
    case("named_sharding", _constrained, f32(3, 4)),
    case("single_device_i32", lambda x: lax.with_sharding_constraint(
        x, make_single_device_sharding(jax.devices()[0])) * 3, i32(5)),
    case("polymorphic_batch", _constrained, f32(3, 4), polymorphic_shapes=("(b, 4)",)),
])
def lower_sharding_constraint(ctx, x, *, layout, context_mesh, unconstrained_dims=None):
    # ``sharding`` is a placement parameter, removed before the call (vocabulary.PLACEMENT_PARAMS).
    # JAX 0.12.1 dropped ``unconstrained_dims``.
    return tf.identity(x)


@lowering(pjit.reshard_p, cases=[
    case("named_sharding", _resharded, i32(2, 3)),
])
def lower_reshard(ctx, x, *, dst_sharding, concrete_mesh, reduction_order=None):
    # JAX 0.12.1's ``reduction_order``: the order in which the shards of an unreduced value are summed;
    # on one device there is one shard, so any order gives the value itself.
    return tf.identity(x)


def _explicit_layout(fun, major_to_minor):
    def run(x):
        from jax.experimental.layout import explicit_layout  # JAX 0.11
        return explicit_layout(fun, in_layouts=Layout(major_to_minor=major_to_minor))(x)
    return run


_NO_RELAYOUT = ("" if hasattr(jax.experimental.layout, "explicit_layout")
                else "JAX before 0.11 has no explicit_layout (nor relayout)")


# JAX 0.11's explicit_layout moves its arguments to the given layout and its results back
# (AutoLayout): the values are unchanged.
@lowering("relayout", cases=[
    case("row_major", _explicit_layout(lambda x: lax.mul(x, x), (0, 1)), f32(2, 3), skip=_NO_RELAYOUT),
    case("column_major_i32", _explicit_layout(lambda x: lax.add(x, x), (1, 0)), i32(3, 4), skip=_NO_RELAYOUT),
])
def lower_relayout(ctx, x, *, dst_layout=None):
    return tf.identity(x)


@lowering(pjit.layout_constraint_p, cases=[
    case("column_major", lambda x: with_layout_constraint(x - 1.0, Layout(major_to_minor=(0, 1))), f32(3, 4)),
])
def lower_layout_constraint(ctx, x, *, layout=None):
    return tf.identity(x)


@lowering(ad_checkpoint.name_p, cases=[
    case("checkpoint_name", lambda x: jnp.tanh(checkpoint_name(x @ x.T, "scores")), f32(3, 4)),
    case("bool", lambda x: checkpoint_name(x, "mask") | x[::-1], boolean(6)),
])
def lower_name(ctx, x, *, name):
    return tf.identity(x)


# ``tie(x, y)`` is ``y``, ordered after ``x`` for JAX's own scheduling; one device has nothing to order.
@lowering(lax_internal.tie_p, cases=[
    case("second_operand", lambda x, y: lax_internal.tie_p.bind(x * 2.0, y + 1), f32(3), i32(2, 2)),
])
def lower_tie(ctx, x, y):
    return tf.identity(y)
