"""The up-front check: walk a whole program, sub-programs included, before any TF op is built.

Support is decided only by what rules declare (their known parameters and
their ``Limitation``s) and by the per-target dtype table; nothing else in
noxla decides it. Every violation is collected, then reported at once.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Iterator

import numpy as np
from jax.extend import core

from limitations.dtypes import unsupported_dtypes
from limitations.targets import Target
from lowering_rules import registry
from noxla.errors import source_line


@dataclasses.dataclass(frozen=True)
class Violation:
    primitive: str
    target: Target
    param: str       # the parameter out of range, "dtype", or "primitive" when no rule exists
    value: str
    reason: str
    workaround: str
    source: str      # the user's file:line (function)

    def format(self) -> str:
        text = f"  - {self.primitive}: {self.param}={self.value}: {self.reason}"
        return text + (f"\n      workaround: {self.workaround}" if self.workaround else "")


@dataclasses.dataclass(frozen=True)
class Report:
    target: Target
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def format(self) -> str:
        if self.ok:
            return f"noxla check: everything converts for {self.target.label}."
        by_line: dict[str, list[Violation]] = defaultdict(list)
        for v in self.violations:
            by_line[v.source].append(v)
        lines = [f"noxla cannot convert this program for {self.target.label}: "
                 f"{len(self.violations)} unsupported use(s).", ""]
        for source, vs in by_line.items():
            lines.append(f"{source}")
            lines.extend(v.format() for v in vs)
        return "\n".join(lines)

    __str__ = format


def iter_eqns(jaxpr) -> Iterator:
    """Every equation of a jaxpr, then those of its sub-jaxprs, depth first."""
    if isinstance(jaxpr, core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in core.jaxprs_in_params(eqn.params):
            yield from iter_eqns(sub)


def eqn_view(eqn) -> registry.EqnView:
    return registry.EqnView(eqn.primitive.name, dict(eqn.params),
                            tuple(v.aval for v in eqn.invars), tuple(v.aval for v in eqn.outvars))


def violations_of(view: registry.EqnView, target: Target, source: str = "") -> list[Violation]:
    """What stops one primitive application from running on ``target``."""
    rule = registry.rule_for(view.primitive)
    if rule is None:
        return [Violation(view.primitive, target, "primitive", view.primitive,
                          "noxla has no lowering rule for this primitive",
                          "rewrite this computation with other JAX operations, or open an issue", source)]
    found = [Violation(view.primitive, target, p, _short(view.params[p]),
                       "noxla's rule does not know this parameter (a newer JAX may have added it); "
                       "ignoring it could change results",
                       "use the JAX version noxla was tested with, or update noxla", source)
             for p in rule.unknown_params(view.params)]
    for dtype in sorted(unsupported_dtypes(target, view.dtypes), key=str):
        found.append(Violation(view.primitive, target, "dtype", dtype.name,
                               f"{target.label} has no {dtype.name} tensors",
                               "cast to a supported dtype (e.g. float32 or int32) before this operation",
                               source))
    if found:
        return found
    for lim in rule.limitations:
        if lim.applies(view, target):
            value = view.params.get(lim.param, _dtypes_text(view.dtypes) if lim.param == "dtype" else "")
            found.append(Violation(view.primitive, target, lim.param, _short(value),
                                   f"{lim.condition}: {lim.reason}", lim.workaround, source))
    return found


def check_jaxpr(closed_jaxpr, target: Target | str) -> Report:
    target = Target.parse(target)
    seen, found = set(), []
    for eqn in iter_eqns(closed_jaxpr):
        for v in violations_of(eqn_view(eqn), target, source_line(eqn.source_info)):
            key = (v.primitive, v.param, v.value, v.source)
            if key not in seen:
                seen.add(key)
                found.append(v)
    return Report(target, tuple(found))


def _dtypes_text(dtypes) -> str:
    return ",".join(sorted(np.dtype(d).name for d in dtypes))


def _short(value, limit: int = 80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
