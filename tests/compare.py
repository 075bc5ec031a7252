"""JAX's outputs against a runtime's, without TensorFlow (``tests.differential`` imports it, and
so do the harnesses' checks, ``tests.gauge``, which also run where TensorFlow is not installed)."""
from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from lowering_rules.core.cases import default_tolerance
from noxla.runtimes.verify import as_real, relative_error


def assert_matches(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], names: Sequence[str],
                   atol: float | None = None, rtol: float | None = None, where: str = "",
                   floor: float = 0.0) -> float:
    """Each output equals JAX's: exactly for integers and bools, within tolerance scaled to the output
    for floats (NaNs where JAX has NaNs). Returns the largest error seen, relative to output scale.
    ``floor`` is the runtime's own float tolerance (runtime_tolerance), used where it is looser."""
    assert len(expected) == len(actual), f"{where}: {len(actual)} outputs, JAX has {len(expected)}"
    worst = 0.0
    for name, e, a in zip(names, expected, actual):
        a = np.asarray(a)
        assert a.shape == e.shape, f"{where}: output {name} has shape {a.shape}, JAX gives {e.shape}"
        default_atol, default_rtol = default_tolerance(e.dtype)
        tol_a = max(floor, default_atol if atol is None else atol)
        tol_r = max(floor, default_rtol if rtol is None else rtol)
        if not jnp.issubdtype(e.dtype, jnp.inexact):  # jnp: numpy does not count bfloat16 as inexact
            np.testing.assert_array_equal(a.astype(e.dtype), e, err_msg=f"{where}: output {name}")
            continue
        e64, a64 = as_real(e), as_real(a)
        finite = np.isfinite(e64)
        scale = max(1.0, float(np.max(np.abs(e64[finite]), initial=0.0)))
        np.testing.assert_allclose(a64, e64, atol=tol_a * scale, rtol=tol_r, equal_nan=True,
                                   err_msg=f"{where}: output {name}")
        worst = max(worst, relative_error(e, a))
    return worst
