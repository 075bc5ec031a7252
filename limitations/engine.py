"""The up-front check: walk a whole program, sub-programs included, before any TF op is built.

Support is decided only by what rules declare (their known parameters and
their ``Limitation``s) and by the per-target dtype table; nothing else in
noxla decides it. Every violation is collected, then reported at once.

A caller may add a backstop for one target (``OpBackstop``), run when the
declarations pass: the exporters pass ``noxla.writers.tfjs.ops.TFJS_BACKSTOP``, which
lowers the program once into a scratch graph and compares its op types with the
op list of the installed TF.js converter. A hit there is a rule that should
declare a limitation (``Violation.declared`` is false). The engine itself knows
no exporter.
"""
from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Protocol

import jax
import numpy as np

from limitations.targets import boundary_limits
from lowering_rules.core import registry
from lowering_rules.core.dtype_support import (
    boundary_dtype_reason,
    boundary_dtype_workaround,
    carries_uint32,
    dtype_name,
    sorted_names,
    target_lacks,
    unsupported_dtypes,
)
from lowering_rules.core.jax_compat import core, open_jaxpr
from lowering_rules.core.vocabulary import EqnView, Target, rule_params
from noxla.errors import source_line as user_line


@dataclasses.dataclass(frozen=True)
class Violation:
    primitive: str
    target: Target
    param: str       # the parameter out of range, "dtype", or "primitive" when no rule exists
    value: str
    reason: str
    workaround: str
    source: str      # the user's file:line (function)
    # True when declared data says so (a rule's Limitation, the target's dtype table); false for a
    # missing rule, an unknown parameter or an emitted TF op the target lacks.
    declared: bool = False

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


def sub_jaxprs(eqn) -> list:
    """The sub-programs an equation runs once lowered: the jaxprs in its parameters, and the
    expansion of a hijax primitive that its rule lowers (``lowering_rules.calls.lowered_expansion``;
    JAX 0.12.1's ``jnp.frexp`` is one): unchecked, such an expansion once lowered a bitcast the rules
    do not implement to zeros."""
    from lowering_rules.calls import lowered_expansion
    subs = list(core.jaxprs_in_params(eqn.params))
    expansion = lowered_expansion(eqn)
    return subs if expansion is None else [*subs, expansion]


def iter_eqns(jaxpr) -> Iterator:
    """Every equation of a jaxpr, then those of its sub-jaxprs, depth first."""
    jaxpr = open_jaxpr(jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in sub_jaxprs(eqn):
            yield from iter_eqns(sub)


UNKNOWN_SOURCE = "<unknown source>"


def iter_eqns_with_sources(jaxpr, enclosing: str = UNKNOWN_SOURCE) -> Iterator[tuple[object, str]]:
    """``iter_eqns`` with each equation's user line.

    JAX keeps no user frame for the equations inside a library function's jit (e.g. the ``eig``
    inside ``jnp.linalg.eigvals``); those take the line of the equation that encloses them.
    """
    jaxpr = open_jaxpr(jaxpr)
    for eqn in jaxpr.eqns:
        source = source_line(eqn.source_info)
        if source == UNKNOWN_SOURCE:
            source = enclosing
        yield eqn, source
        for sub in sub_jaxprs(eqn):
            yield from iter_eqns_with_sources(sub, source)


def eqn_view(eqn) -> EqnView:
    """The application as its rule and limitations see it (placement parameters removed)."""
    return EqnView(eqn.primitive.name, rule_params(eqn.params),
                   tuple(v.aval for v in eqn.invars), tuple(v.aval for v in eqn.outvars),
                   tuple(v.val if isinstance(v, core.Literal) else None for v in eqn.invars))


class EmittedOp(Protocol):
    op_type: str
    primitive: str     # the primitive whose lowering emitted it, or "" when none did


class OpBackstop(Protocol):
    """Lowers a program and names the emitted TF ops one target lacks (provided by the exporters)."""
    target: Target

    def unsupported_ops(self, closed_jaxpr) -> Iterable[EmittedOp]: ...

    def eqn_emits(self, eqn, op_types: Iterable[str]) -> bool: ...


def violations_of(view: EqnView, target: Target, source: str = "") -> list[Violation]:
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
    dtypes = view.dtypes   # a property, computed anew on each read
    unsupported = unsupported_dtypes(target, dtypes)  # a key counts as its key data (uint32) here
    if carries_uint32(target, view.primitive, dtypes):
        unsupported = [name for name in unsupported if name != "uint32"]
    for name in unsupported:
        found.append(Violation(view.primitive, target, "dtype", name, target_lacks(target, name),
                               "cast to a supported dtype (e.g. float32 or int32) before this operation",
                               source, declared=True))
    if rule.complex is None:
        complex_dtypes = sorted(d.name for d in dtypes if np.issubdtype(d, np.complexfloating))
        found.extend(Violation(view.primitive, target, "dtype", name,
                               "noxla computes complex values as (real, imaginary) float pairs and "
                               "this rule has no complex lowering",
                               "compute on jnp.real(z) and jnp.imag(z) with real operations", source,
                               declared=True) for name in complex_dtypes)
    if found:
        return found
    for name in sorted_names(view.dtype_names):
        rejected = rule.dtypes.rejection(target, name)
        if rejected:
            reason, workaround = rejected
            found.append(Violation(view.primitive, target, "dtype", name,
                                   f"{view.primitive} on {name} for {target.label}: {reason}", workaround,
                                   source, declared=True))
    if found:
        return found
    for lim in rule.limitations:
        if lim.applies(view, target):
            value = view.params.get(lim.param, _dtypes_text(view.dtype_names) if lim.param == "dtype" else "")
            found.append(Violation(view.primitive, target, lim.param, _short(value),
                                   f"{lim.condition}: {lim.reason}", lim.workaround, source,
                                   declared=True))
    return found


def check_jaxpr(closed_jaxpr, target: Target | str, *, tf_ops: OpBackstop | None = None) -> Report:
    """Every violation in the program for ``target``.

    Declarations and dtypes only, unless ``tf_ops`` is a backstop for ``target`` (or for the target
    it narrows: TF.js's serves TF.js on WebGL), which then runs when they pass.
    """
    target = Target.parse(target)
    seen, found = set(), []
    for eqn, source in iter_eqns_with_sources(closed_jaxpr):
        for v in violations_of(eqn_view(eqn), target, source):
            key = (v.primitive, v.param, v.value, v.source)
            if key not in seen:
                seen.add(key)
                found.append(v)
    # A dtype the target lacks is named once: at the primitives computing on it, else (a value passed
    # through untouched) at the program's boundary.
    named = {v.value for v in found if v.param == "dtype"}
    found[:0] = [v for v in _boundary_violations(closed_jaxpr, target)
                 if v.value not in named or np.issubdtype(np.dtype(v.value), np.complexfloating)]
    if not found and tf_ops is not None and tf_ops.target in target.lineage:  # TF.js's, for WebGL too
        found.extend(op_violations(closed_jaxpr, tf_ops))
    return Report(target, tuple(found))


def _boundary_violations(closed_jaxpr, target: Target) -> Iterator[Violation]:
    """Program inputs and outputs of a dtype the target cannot pass in or out (complex values, and
    dtypes the target has no tensors of)."""
    jaxpr = closed_jaxpr.jaxpr
    for kind, atoms in (("input", jaxpr.invars), ("output", jaxpr.outvars)):
        for i, atom in enumerate(atoms):
            dtype = getattr(atom.aval, "dtype", None)
            reason = dtype is not None and boundary_dtype_reason(target, dtype, kind == "output")
            if reason:
                float0 = dtype == jax.dtypes.float0
                yield Violation(f"(program {kind})", target, "dtype", "float0" if float0 else np.dtype(dtype).name,
                                reason, _FLOAT0_WORKAROUND if float0 else boundary_dtype_workaround(target, dtype),
                                f"program {kind} #{i}",
                                declared=True)
            for param, value, why, workaround in boundary_limits(target, atom.aval):
                yield Violation(f"(program {kind})", target, param, value, why, workaround, f"program {kind} #{i}",
                                declared=True)


_FLOAT0_WORKAROUND = ("differentiate with respect to the float arguments only (jax.grad's argnums), or "
                      "leave out the integer arguments' gradients")


@functools.lru_cache(maxsize=8)  # programs hold their weights; the harness asks twice per case
def op_violations(closed_jaxpr, backstop: OpBackstop) -> tuple[Violation, ...]:
    """TF ops the lowering emits that the backstop's target lacks, each at the user's lines that emit it.

    Only meaningful once the declared check passed (every primitive has a rule). A lowering
    that fails here is left to fail again, with its own message, when the program is exported.
    """
    try:
        unsupported = list(backstop.unsupported_ops(closed_jaxpr))
    except Exception:  # noqa: BLE001 - a rule bug; the export reports it with the user's line
        return ()
    by_primitive: dict[str, set[str]] = defaultdict(set)
    for op in unsupported:
        by_primitive[op.primitive].add(op.op_type)
    found = []
    for primitive, op_types in sorted(by_primitive.items()):
        for source in _sources_emitting(closed_jaxpr, primitive, op_types, backstop):
            found.append(Violation(
                primitive or "(program)", backstop.target, "tf_op", ",".join(sorted(op_types)),
                f"noxla's lowering emits TF op(s) {', '.join(sorted(op_types))}, which {backstop.target.label} "
                "does not implement, and the rule declares no limitation for this case (a noxla bug)",
                "export for TF or TFLite instead, or rewrite this computation with other JAX operations",
                source))
    return tuple(found)


def _sources_emitting(closed_jaxpr, primitive: str, op_types: set[str], backstop: OpBackstop) -> list[str]:
    """The user's lines of the applications of ``primitive`` whose own lowering emits ``op_types``."""
    eqns = [(e, source) for e, source in iter_eqns_with_sources(closed_jaxpr) if e.primitive.name == primitive]
    if len(eqns) > 1:
        try:
            eqns = [(e, source) for e, source in eqns if backstop.eqn_emits(e, op_types)] or eqns
        except Exception:  # noqa: BLE001 - e.g. a size only solvable from the whole program
            pass
    return sorted({source for _, source in eqns}) or [UNKNOWN_SOURCE]


def source_line(source_info) -> str:
    return user_line(source_info)


def _dtypes_text(dtypes) -> str:
    return ",".join(sorted(dtype_name(d) for d in dtypes))


def _short(value, limit: int = 80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
