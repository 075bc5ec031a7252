"""Grouped-query attention without its repeated keys and values.

keras-hub's Llama, Mistral and Qwen, and Flax code written after HF's, repeat each KV head for
the query heads that share it, ``jnp.repeat(k, groups, axis=heads)``: in the jaxpr a
broadcast_in_dim that adds an axis of ``groups`` after the heads axis and a reshape that merges
the two, then a dot_general batched over the heads. Lowered as written that is a BROADCAST_TO of
the whole KV cache per layer and per token, which LiteRT runs on its reference kernel: half of a
SmolLM-135M-shaped keras-hub decode step's time (perf, 1 thread), the step 4.9x the hand-written
decoder's.

The product reads the same elements when the queries' heads axis is split into (kv_heads, groups)
instead: the KV heads a batch axis of the unrepeated x, the groups a free axis of the queries
(``plan``); the product's groups axis is then moved back beside the KV heads and merged (a reshape
when only size-1 axes lie between, as in a decode step; a transpose of the product, not of the
cache, otherwise). Every output element is the same sum of the same products, so this holds in
strict mode too. The broadcast and reshape are left unread, and the converters drop them.
"""
from __future__ import annotations

import dataclasses

from lowering_rules.core.helpers import is_static_shape
from lowering_rules.core.jax_compat import core
from lowering_rules.patterns.fusion import producer


@dataclasses.dataclass(frozen=True)
class Plan:
    """The product on the unrepeated operand: ``repeated`` (0: lhs, 1: rhs) is read as the jaxpr
    variable ``source``; the other operand, reshaped to ``other_shape`` (its heads axis split), is
    the product's lhs and ``source`` its rhs; ``dimension_numbers`` and ``free`` (each operand's
    free axes in the order the product writes them) for that order; ``shape`` the product's and
    ``permutation`` the transpose to dot_general's order with the groups beside the KV heads,
    before the reshape to dot_general's output."""
    repeated: int
    source: core.Var
    other_shape: tuple
    dimension_numbers: tuple
    free: tuple
    shape: tuple
    permutation: tuple


def repeated(ctx, atom):
    """(x, axis, groups) when ``atom`` is ``jnp.repeat(x, groups, axis)`` as JAX spells it for a
    scalar count (a new axis after ``axis`` broadcast to ``groups``, merged into ``axis``) and
    nothing else reads it, x of static shape; else None."""
    merge = producer(ctx, atom, "reshape")
    if merge is None or merge.params.get("dimensions") is not None or ctx.uses(atom) != 1:
        return None
    spread = producer(ctx, merge.invars[0], "broadcast_in_dim")
    if spread is None or isinstance(spread.invars[0], core.Literal):
        return None
    x = spread.invars[0]
    xs, bs, rs = (tuple(v.aval.shape) for v in (x, spread.outvars[0], atom))
    if not all(map(is_static_shape, (xs, bs, rs))) or len(bs) != len(xs) + 1 or len(rs) != len(xs):
        return None
    dims = tuple(spread.params["broadcast_dimensions"])
    new = [d for d in range(len(bs)) if d not in dims]
    if len(new) != 1 or new[0] == 0 or dims != tuple(d for d in range(len(bs)) if d != new[0]):
        return None
    axis, groups = new[0] - 1, bs[new[0]]
    if any(xs[i] != bs[d] for i, d in enumerate(dims)) or groups < 2:
        return None
    if rs != xs[:axis] + (xs[axis] * groups,) + xs[axis + 1:]:
        return None
    return x, axis, groups


def plan(ctx, eqn=None) -> Plan | None:
    """How the dot_general equation ``eqn`` (default: ``ctx``'s) reads one operand unrepeated (see
    the module), or None."""
    eqn = eqn or ctx.eqn
    (contract_l, contract_r), (batch_l, batch_r) = eqn.params["dimension_numbers"]
    contracts, batches = (tuple(contract_l), tuple(contract_r)), (tuple(batch_l), tuple(batch_r))
    for side in (1, 0):
        found = repeated(ctx, eqn.invars[side])
        other_shape = tuple(eqn.invars[1 - side].aval.shape)
        if found is None or found[1] not in batches[side] or not is_static_shape(other_shape):
            continue
        x, axis, groups = found
        if all(x.aval.shape[d] == 1 for d in batches[side]):
            # One KV head and a batch of one: a product batched over size-1 axes only is one the
            # TFLite converter mis-fuses (linalg._dot lowers it as a plain matmul, in its own order).
            continue
        return _split_plan(side, x, axis, groups, other_shape, contracts, batches)
    return None


def _split_plan(side, x, axis, groups, other_shape, contracts, batches) -> Plan:
    """The product computed as (split other operand) . x: the queries' or probabilities' rows
    against the cache (XNNPACK's matmul fills its 32 lanes with the cache's columns; the cache as
    the rows left a decode step's values product 3 columns wide, 1.15x the step's time)."""
    other = 1 - side
    heads = batches[other][batches[side].index(axis)]
    split = other_shape[:heads] + (x.aval.shape[axis], groups) + other_shape[heads + 1:]

    def moved(axes):  # the other operand's axes after the split
        return tuple(d if d <= heads else d + 1 for d in axes)
    contract = (moved(contracts[other]), contracts[side])
    batch = (moved(batches[other]), batches[side])
    rest = tuple(d for d in range(len(split)) if d not in (*contract[0], *batch[0], heads + 1))
    free = ((heads + 1, *rest), tuple(d for d in range(len(x.aval.shape)) if d not in (*contract[1], *batch[1])))
    shape = (*(split[d] for d in batch[0]), *(split[d] for d in free[0]), *(x.aval.shape[d] for d in free[1]))
    n = len(batch[0])
    mine = list(range(n + 1, n + 1 + len(rest)))  # the other operand's free axes in the product
    theirs = list(range(n + 1 + len(rest), len(shape)))  # x's
    position = batch[1].index(axis) + 1  # just after the KV heads
    order = [*range(position), n, *range(position, n), *(theirs + mine if side == 0 else mine + theirs)]
    return Plan(side, x, split, (contract, batch), free, shape, tuple(order))
