"""Which lowering of a program a target needs, decided from the jaxpr alone (no TensorFlow: the
graph recorder, ``noxla.graph``, asks too)."""
from __future__ import annotations

import numpy as np

from limitations.engine import eqn_view, iter_eqns
from lowering_rules import RULES
from lowering_rules.core.helpers import TFLITE_OWN_PRIMITIVES
from lowering_rules.core.key_types import physical_dtype
from lowering_rules.core.vocabulary import Target
from noxla.front.tracing import Program


def uses_uint32(program: Program, dtype=np.uint32) -> bool:
    """Whether any input, output or intermediate value of the program is uint32 (or a PRNG key), or
    of ``dtype``."""
    return np.dtype(dtype) in {d for e in iter_eqns(program.closed_jaxpr) for d in eqn_view(e).dtypes} \
        or any(physical_dtype(a.dtype) == np.dtype(dtype) for a in (*program.in_avals, *program.out_avals))


def needs_tfjs_lowering(program: Program) -> bool:
    """Whether TF.js gets its own lowering of the program (``uint32_as_int32``): it carries uint32
    values, or float16 ones (moved in float32, not as their bits: ``structural.carried``), or
    applies a rule that lowers otherwise for TF.js (``Rule.differs``, ``Rule.tfjs_form``)."""
    def own_form(eqn) -> bool:
        rule = RULES.get(eqn.primitive.name)
        return rule is not None and (bool(rule.tfjs_form) or any(Target.TFJS in t for t, _ in rule.differs))
    return uses_uint32(program) or uses_uint32(program, np.float16) or any(
        own_form(e) for e in iter_eqns(program.closed_jaxpr))


def needs_tflite_lowering(program: Program) -> bool:
    """Whether the .tflite gets its own lowering of the program (``serving_function``'s ``tflite``):
    it applies a rule that emits a TFLite builtin's converter-only input form there
    (``helpers.TFLITE_OWN_PRIMITIVES``), which no other artifact may carry."""
    return any(e.primitive.name in TFLITE_OWN_PRIMITIVES for e in iter_eqns(program.closed_jaxpr))
