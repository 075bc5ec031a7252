"""Per-primitive lowering rules. Importing this package registers every rule family."""
from lowering_rules import (  # noqa: F401
    annotations,
    approx_top_k,
    bitcast,
    bitwise,
    call_tf,
    calls,
    control_flow,
    convolution,
    decompositions,
    elementwise,
    frexp_ldexp,
    ieee754_elementwise,
    indexing,
    limb_arithmetic,
    linalg,
    linalg_eigen,
    linalg_factor,
    mulhi,
    newer_elementwise,
    nextafter,
    prng,
    quotients,
    ragged_dot,
    reductions,
    rng_bit_generator,
    select_and_scatter,
    selection,
    slicing,
    sorting,
    special,
    special_math,
    structural,
    total_order,
    uninitialized,
    windows,
)

# isort: split
# Complex support is declared on the rules above, so these come last.
from lowering_rules import complex, fft  # noqa: F401
from lowering_rules.core.registry import RULES, rule_for

__all__ = ["RULES", "rule_for"]
