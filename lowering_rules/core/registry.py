"""The single registry of lowering rules, keyed by JAX primitive name.

A rule is a function ``lower(ctx, *operands, **params)``. Its keyword-only
parameters are the primitive parameters it understands: anything else JAX
passes is refused before lowering (JAX adds parameters between versions, and
silently ignoring one could change results). Beside the function, a rule keeps
its declared limitations (data, read by the limitations engine) and its
differential test cases.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Sequence

from lowering_rules.core.cases import Case
from lowering_rules.core.dtype_support import ALL, KEY, DtypeSupport
from lowering_rules.core.key_types import takes_keys
from lowering_rules.core.vocabulary import (  # noqa: F401  (re-exported: rule files import the vocabulary from here)
    ALL_TARGETS,
    PLACEMENT_PARAMS,
    EqnView,
    Limitation,
    Target,
    dtype_limitation,
)


@dataclasses.dataclass(frozen=True)
class FastVariant:
    """A rule's default (non-strict) lowering that may differ from JAX for NaN or inf inputs.

    ``differs`` says where (shown in the limitations table); ``applies(eqn)`` tells from an
    ``EqnView`` whether this application may take the fast lowering (the differential tests run
    such programs in both modes)."""
    differs: str
    applies: Callable = lambda eqn: True


@dataclasses.dataclass(frozen=True)
class Rule:
    primitive: str
    lower: Callable[..., Any]
    params: frozenset[str]
    limitations: tuple[Limitation, ...] = ()
    cases: tuple[Case, ...] = ()
    # How the rule lowers complex values, which noxla carries as (real, imaginary) pairs of float
    # tensors (lowering_rules.values.complex_values): None (complex operands are rejected up front),
    # COMPONENTWISE, PASS_THROUGH or a lowering taking ComplexPair operands.
    complex: Callable[..., Any] | str | None = None
    fast: FastVariant | None = None   # where the default (non-strict) lowering may differ from JAX
    dtypes: DtypeSupport = ALL  # the dtypes the lowering computes exactly, per target
    # Where some targets differ from JAX in every mode, for lack of an op (not rejected: the result
    # differs only for the inputs named): ((targets, what differs), ...). Such a rule reads
    # ``ctx.lowering_for.tfjs`` and computes JAX's result exactly for the other targets.
    differs: tuple[tuple[tuple[Target, ...], str], ...] = ()
    # Why TF.js gets another exact form (a TF.js kernel computes the shared one otherwise than
    # JAX): such a rule reads ``ctx.lowering_for.tfjs``, and the other targets keep the shorter form.
    tfjs_form: str = ""

    def unknown_params(self, params: dict) -> list[str]:
        """Parameters (placement ones already removed by ``vocabulary.rule_params``) the rule does not name."""
        return sorted(set(params) - self.params)


RULES: dict[str, Rule] = {}


def _primitive_name(primitive) -> str:
    return primitive if isinstance(primitive, str) else primitive.name


def _understood_params(lower: Callable) -> frozenset[str]:
    sig = inspect.signature(lower)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        raise TypeError(f"{lower.__qualname__}: a rule names the parameters it understands; "
                        "**kwargs would hide new JAX parameters")
    named = frozenset(n for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY)
    if named & PLACEMENT_PARAMS:
        raise TypeError(f"{lower.__qualname__}: {', '.join(sorted(named & PLACEMENT_PARAMS))} never reach a "
                        "rule (vocabulary.rule_params removes placement parameters before the check and the call)")
    return named


def register(primitive, lower: Callable, *, limitations: Sequence[Limitation] = (),
             cases: Sequence[Case] = (), fast: FastVariant | None = None,
             dtypes: DtypeSupport = ALL, differs: Sequence[tuple[tuple[Target, ...], str]] = (),
             tfjs_form: str = "") -> Rule:
    name = _primitive_name(primitive)
    if name in RULES:
        raise ValueError(f"a rule for {name} is already registered")
    if takes_keys(name):  # key_types.KEY_MOVERS: the rules that move PRNG keys as key data
        dtypes = dataclasses.replace(dtypes, computes=dtypes.computes | {KEY})
    rule = Rule(name, lower, _understood_params(lower), tuple(limitations),
                tuple(c.for_primitive(name) for c in cases), fast=fast, dtypes=dtypes, differs=tuple(differs),
                tfjs_form=tfjs_form)
    RULES[name] = rule
    return rule


def lowering(*primitives, limitations: Sequence[Limitation] = (), cases: Sequence[Case] = (),
             fast: FastVariant | None = None, dtypes: DtypeSupport = ALL,
             differs: Sequence[tuple[tuple[Target, ...], str]] = (), tfjs_form: str = ""):
    """How rule files register: ``@lowering(prim, cases=[...])`` above a rule, or
    ``lowering(prim, cases=...)(make_rule(...))`` for a rule made from a table entry."""
    def decorate(lower):
        for primitive in primitives:
            register(primitive, lower, limitations=limitations, cases=cases, fast=fast, dtypes=dtypes,
                     differs=differs, tfjs_form=tfjs_form)
        return lower
    return decorate


# The rule, applied to the real parts and to the imaginary parts separately, is the complex result
# (reshape, slice, add, reduce_sum, ...).
COMPONENTWISE = "componentwise"
# The rule hands its operands to a sub-program untouched (jit, custom_jvp_call, ...).
PASS_THROUGH = "pass_through"


def add_complex(primitive, how, *cases: Case) -> None:
    """Declare how an already registered rule lowers complex values (and the cases proving it)."""
    name = _primitive_name(primitive)
    rule = RULES[name]
    if rule.complex is not None:
        raise ValueError(f"complex support for {name} is already declared")
    RULES[name] = dataclasses.replace(
        rule, complex=how, cases=rule.cases + tuple(c.for_primitive(name) for c in cases))


def rule_for(name: str) -> Rule | None:
    return RULES.get(name)
