"""The fuzzer's batched family (tests/fuzz.py draws from it): a program of another family under
``jax.vmap``, as Equinox and Flax users write models (an unbatched layer vmapped over examples).

JAX's batching rules write what unbatched programs rarely hold: products with a transposed operand
(``vmap(lambda x: W @ x)`` contracts W's last axis against the batch's), batched predicates (a
``while`` whose stop differs per example runs while any example runs and keeps the carries of those
that stopped; a ``cond`` on a batched predicate becomes a select of both branches), gathers and
scatters with batch dimensions, and windows and convolutions over a moved batch axis.

Each input is mapped over a new axis of 1-3 examples at a drawn position (first, last, or a middle
one), or left unmapped (shared by every example), at least one mapped; the output's batch axis is
drawn too. A program JAX refuses to batch counts as invalid, as any program JAX refuses.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tests.fuzz import values

# Wrappers of other families: their inner programs are drawn here directly.
NOT_DRAWN = ("batched", "polymorphic", "vjp", "jvp")


def strategies(inner: dict):
    """``batched``: ``jax.vmap`` of a program of one of ``inner``'s families (name -> strategy)."""
    from hypothesis import assume
    from hypothesis import strategies as st

    names = sorted(n for n in inner if n not in NOT_DRAWN)

    @st.composite
    def batched(draw):
        import jax
        name = draw(st.sampled_from(names))
        program = draw(inner[name])
        assume(program.args)
        size = draw(st.integers(1, 3))
        rng = np.random.RandomState(draw(st.integers(0, 2**31 - 1)))
        axes, args = [], []
        for a in program.args:
            a = np.asarray(a)
            axis = draw(st.sampled_from([None, 0, a.ndim] + ([a.ndim // 2] if a.ndim > 1 else [])))
            axes.append(axis)
            if axis is None:
                args.append(a)
                continue
            # The drawn example first (it keeps the family's chosen values: indices in range, ties),
            # then fresh ones of its kind. Integer operands (indices, shift amounts) are repeated:
            # the family chose them for the other operands' shapes.
            others = [a if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_
                      else values(rng, a.shape, str(a.dtype), program.strict) for _ in range(size - 1)]
            args.append(np.stack([a, *others], axis=axis))
        assume(any(axis is not None for axis in axes))
        out_axis = draw(st.sampled_from([0, -1]))
        fun = jax.vmap(program.fun, in_axes=tuple(axes), out_axes=out_axis)
        description = f"vmap(in_axes={tuple(axes)}, out_axes={out_axis}) of {program.description}"
        return dataclasses.replace(program, primitive=f"batched {program.primitive}", description=description,
                                   fun=fun, args=tuple(args))

    return {"batched": batched()}
