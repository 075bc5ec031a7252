"""The fuzzer's shape-polymorphic family (tests/fuzz.py draws from it): a program of another family,
traced with one or two of its input sizes symbolic, as jax2tf's ``polymorphic_shapes`` converts it.

Every axis of every input that has a drawn size becomes that size's symbol (``b``, ``c``), so that the
axes the program combines (an add's broadcast, a contraction, a concatenation) stay equal to JAX. A program
whose Python code fixes that size (a reshape to literal sizes, a closed-over constant of that
shape) is refused by JAX's tracing and counted as invalid, as any program JAX refuses.
"""
from __future__ import annotations

import dataclasses

import numpy as np

# Families whose programs mostly compute their shapes in Python from the concrete sizes (JAX refuses
# nearly all of them with a symbolic size: measured 9 in 10 and more), and the ones that wrap others.
NOT_DRAWN = ("shape_op", "polymorphic")


def _spec(shape, symbols: dict) -> str | None:
    if not symbols.keys() & set(shape):
        return None
    return ", ".join(symbols.get(d, str(d)) for d in shape) + ("," if len(shape) == 1 else "")


def strategies(inner: dict):
    """``polymorphic``: a program of one of ``inner``'s families (name -> strategy), with one input size
    symbolic."""
    from hypothesis import assume
    from hypothesis import strategies as st

    names = sorted(n for n in inner if n not in NOT_DRAWN)

    @st.composite
    def polymorphic(draw):
        name = draw(st.sampled_from(names))
        program = draw(inner[name])
        sizes = sorted({d for a in program.args for d in np.shape(a) if d >= 1})
        assume(sizes)
        chosen = draw(st.lists(st.sampled_from(sizes), min_size=1, max_size=2, unique=True))
        specs = tuple(_spec(np.shape(a), dict(zip(chosen, "bc"))) for a in program.args)
        return dataclasses.replace(program, primitive=f"poly {program.primitive}", polymorphic_shapes=specs)

    return {"polymorphic": polymorphic()}
