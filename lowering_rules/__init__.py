"""Per-primitive lowering rules. Importing this package registers every rule family."""
from lowering_rules import (  # noqa: F401
    annotations,
    bitcast,
    control_flow,
    convolution,
    elementwise,
    indexing,
    linalg,
    prng,
    reductions,
    sorting,
    structural,
    windows,
)
from lowering_rules.registry import RULES, rule_for

__all__ = ["RULES", "rule_for"]
