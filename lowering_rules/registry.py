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
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from limitations.dtypes import (  # noqa: F401  (re-exported: rule files declare their dtypes with these)
    ALL,
    BOOL,
    COMPLEX,
    FLOATS,
    INTEGERS,
    KEY,
    NUMERIC,
    SIGNED,
    UNSIGNED,
    DtypeSupport,
    dtype_name,
    dtypes,
    gap,
)
from limitations.targets import Target
from lowering_rules.cases import Case
from lowering_rules.fusion import FastVariant
from lowering_rules.key_types import physical_dtype, takes_keys

# Placement annotations: meaningless for one device, so every rule accepts them.
PLACEMENT_PARAMS = frozenset({"sharding", "out_sharding"})


@dataclasses.dataclass(frozen=True)
class EqnView:
    """What a limitation predicate may look at: a primitive application, before lowering."""
    primitive: str
    params: dict
    avals_in: tuple
    avals_out: tuple

    @property
    def dtypes(self) -> set:
        """The numpy dtypes of operands and results; a PRNG key counts as its key data's (uint32).
        ``dtype_names`` tells keys apart."""
        return {physical_dtype(d) for d in self._all_dtypes()}

    @property
    def dtype_names(self) -> set[str]:
        """Every operand and result dtype by name, key dtypes included (``key<fry>``)."""
        return {dtype_name(d) for d in self._all_dtypes()}

    def _all_dtypes(self) -> list:
        return [a.dtype for a in (*self.avals_in, *self.avals_out) if getattr(a, "dtype", None) is not None]

    @property
    def dtype_in(self):
        return physical_dtype(self.avals_in[0].dtype)


@dataclasses.dataclass(frozen=True)
class Limitation:
    """A declared case that a target cannot run: data, not code paths.

    ``when(eqn)`` returns true when the application falls in the unsupported case.
    ``param`` names the parameter (or "dtype") that is out of range.
    """
    targets: tuple[Target, ...]
    condition: str
    reason: str
    when: Callable[[EqnView], bool]
    param: str = "dtype"
    workaround: str = ""

    def applies(self, eqn: EqnView, target: Target) -> bool:
        return target in self.targets and bool(self.when(eqn))


def dtype_limitation(targets: Sequence[Target], dtypes: Iterable, reason: str,
                     workaround: str = "") -> Limitation:
    """The common limitation: some operand or result has one of ``dtypes``."""
    bad = frozenset(np.dtype(d) for d in dtypes)
    names = ", ".join(sorted(d.name for d in bad))
    return Limitation(tuple(targets), f"dtype is {names}", reason,
                      when=lambda eqn: bool(eqn.dtypes & bad), workaround=workaround)


@dataclasses.dataclass(frozen=True)
class Rule:
    primitive: str
    lower: Callable[..., Any]
    params: frozenset[str]
    limitations: tuple[Limitation, ...] = ()
    cases: tuple[Case, ...] = ()
    # How the rule lowers complex values, which noxla carries as (real, imaginary) pairs of float
    # tensors (lowering_rules.complex_values): None (complex operands are rejected up front),
    # COMPONENTWISE, PASS_THROUGH or a lowering taking ComplexPair operands.
    complex: Callable[..., Any] | str | None = None
    fast: FastVariant | None = None   # where the default (non-strict) lowering may differ from JAX
    dtypes: DtypeSupport = ALL  # the dtypes the lowering computes exactly, per target

    def unknown_params(self, params: dict) -> list[str]:
        return sorted(set(params) - self.params - PLACEMENT_PARAMS)


RULES: dict[str, Rule] = {}


def _primitive_name(primitive) -> str:
    return primitive if isinstance(primitive, str) else primitive.name


def _understood_params(lower: Callable) -> frozenset[str]:
    sig = inspect.signature(lower)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        raise TypeError(f"{lower.__qualname__}: a rule names the parameters it understands; "
                        "**kwargs would hide new JAX parameters")
    return frozenset(n for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY)


def register(primitive, lower: Callable, *, limitations: Sequence[Limitation] = (),
             cases: Sequence[Case] = (), fast: FastVariant | None = None,
             dtypes: DtypeSupport = ALL) -> Rule:
    name = _primitive_name(primitive)
    if name in RULES:
        raise ValueError(f"a rule for {name} is already registered")
    if takes_keys(name):  # key_types.KEY_MOVERS: the rules that move PRNG keys as key data
        dtypes = dataclasses.replace(dtypes, computes=dtypes.computes | {KEY})
    rule = Rule(name, lower, _understood_params(lower), tuple(limitations),
                tuple(c.for_primitive(name) for c in cases), fast=fast, dtypes=dtypes)
    RULES[name] = rule
    return rule


def lowering(*primitives, limitations: Sequence[Limitation] = (), cases: Sequence[Case] = (),
             fast: FastVariant | None = None, dtypes: DtypeSupport = ALL):
    """Decorator form of ``register`` for rules with logic of their own."""
    def decorate(lower):
        for primitive in primitives:
            register(primitive, lower, limitations=limitations, cases=cases, fast=fast, dtypes=dtypes)
        return lower
    return decorate


def add_cases(primitive, *cases: Case) -> None:
    """Attach cases to a rule registered from a table."""
    name = _primitive_name(primitive)
    rule = RULES[name]
    RULES[name] = dataclasses.replace(
        rule, cases=rule.cases + tuple(c.for_primitive(name) for c in cases))


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
