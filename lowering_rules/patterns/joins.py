"""Slices that read one part of a stack or a concatenate, lowered as a slice of that part.

``jnp.stack([k, v], 1)[:, 0]`` is k. keras-hub keeps one cache tensor per model, [batch, layers,
2, C, kv_heads, head_dim]: each step stacks the layers' keys and values into it and reads them
back, and noxla.llm.keras stacks the contract's per-layer caches for it and slices its result
apart again. Lowered as written, each stack and each slice copies the cache. Read through the
join instead (and through reshapes that only add or drop size-1 axes, as a squeeze between two
stacks does), the slice reads the part itself: the same elements in the same order, so this is
exact in every mode, and the join, if nothing else reads it, is left for the converters to drop.
"""
from __future__ import annotations

from lowering_rules.core.helpers import is_static_shape
from lowering_rules.core.jax_compat import core
from lowering_rules.patterns.fusion import producer


def _non_unit_axes(shape) -> list[int]:
    return [i for i, d in enumerate(shape) if d != 1]


def part(ctx, atom, starts, limits):
    """(p, starts', limits'): the window [starts, limits) of ``atom`` holds the elements of the
    window [starts', limits') of ``p`` in the same order, p a part of the stacks, concatenates,
    unit-stride slices and unit-axis reshapes and squeezes that made ``atom`` (``atom`` itself when
    the window spans several parts)."""
    eqn = producer(ctx, atom, "stack", "concatenate", "reshape", "squeeze", "slice")
    shape = tuple(atom.aval.shape)
    if eqn is None or not is_static_shape(shape) or any(a >= b for a, b in zip(starts, limits)):
        return atom, starts, limits
    operands = eqn.invars
    if any(isinstance(v, core.Literal) or not is_static_shape(v.aval.shape) for v in operands):
        return atom, starts, limits
    if eqn.primitive.name == "slice":  # a window of a window
        offsets, strides = eqn.params["start_indices"], eqn.params["strides"]
        if strides is not None and any(s != 1 for s in strides) or not is_static_shape(offsets):
            return atom, starts, limits
        return part(ctx, operands[0], [a + o for a, o in zip(starts, offsets)],
                    [b + o for b, o in zip(limits, offsets)])
    if eqn.primitive.name in ("reshape", "squeeze"):
        source = tuple(operands[0].aval.shape)
        ours, theirs = _non_unit_axes(shape), _non_unit_axes(source)
        if eqn.primitive.name == "reshape" and eqn.params.get("dimensions") is not None \
                or [shape[i] for i in ours] != [source[i] for i in theirs]:
            return atom, starts, limits
        inner_starts, inner_limits = [0] * len(source), list(source)
        for mine, its in zip(ours, theirs):
            inner_starts[its], inner_limits[its] = starts[mine], limits[mine]
        return part(ctx, operands[0], inner_starts, inner_limits)
    if eqn.primitive.name == "stack":
        axis = eqn.params["axis"]
        if limits[axis] - starts[axis] != 1:
            return atom, starts, limits
        drop = lambda xs: [*xs[:axis], *xs[axis + 1:]]  # noqa: E731
        return part(ctx, operands[starts[axis]], drop(starts), drop(limits))
    axis, offset = eqn.params["dimension"], 0
    for operand in operands:
        length = operand.aval.shape[axis]
        if offset <= starts[axis] and limits[axis] <= offset + length:
            inner_starts, inner_limits = list(starts), list(limits)
            inner_starts[axis], inner_limits[axis] = starts[axis] - offset, limits[axis] - offset
            return part(ctx, operand, inner_starts, inner_limits)
        offset += length
    return atom, starts, limits


def sliced_part(ctx, start_indices, limit_indices, strides):
    """(p, starts, sizes) when the slice equation of ``ctx`` reads a part p of a join (see
    ``part``), unit strides and static bounds; else None."""
    operand = ctx.eqn.invars[0]
    if isinstance(operand, core.Literal) or (strides is not None and any(s != 1 for s in strides)) \
            or not is_static_shape(start_indices) or not is_static_shape(limit_indices):
        return None
    found, starts, limits = part(ctx, operand, list(start_indices), list(limit_indices))
    if found is operand:
        return None
    return found, starts, [b - a for a, b in zip(starts, limits)]


def transposed(ctx, atom):
    """(source, permutation) when ``atom`` holds ``transpose(source, permutation)`` whole and in
    that shape, seen through ``part``'s joins and views (noxla.llm.keras's contract cache, moved to
    keras-hub's layout, stacked for it and read back); else None."""
    shape = tuple(atom.aval.shape)
    if not is_static_shape(shape):
        return None
    found, starts, limits = part(ctx, atom, [0] * len(shape), list(shape))
    eqn = producer(ctx, found, "transpose")
    if eqn is None or tuple(found.aval.shape) != shape or starts != [0] * len(shape) or limits != list(shape):
        return None
    if isinstance(eqn.invars[0], core.Literal):
        return None
    return eqn.invars[0], tuple(eqn.params["permutation"])
