"""No rule may require a parameter JAX can omit.

JAX binds some primitives without their optional parameters (``mul`` without ``out_dtype``,
``cbrt`` without ``accuracy``): a rule naming such a parameter without a default raised
TypeError after the check had passed. For each rule, every parameter of its first case's
application that JAX's abstract evaluation accepts missing is dropped, and the primitive is
bound without it: the rule must lower that application and match JAX.
"""
from __future__ import annotations

import jax
import numpy as np

import noxla
from limitations.engine import iter_eqns
from lowering_rules import RULES
from noxla.errors import UnsupportedError
from tests.differential import assert_matches, traced


def _application(name):
    """The first top-level application of the rule's primitive in its cases, with concrete
    operands of its shapes, or None (only in sub-programs, or symbolic shapes)."""
    for case in RULES[name].cases:
        if case.skip:  # the installed JAX cannot run it
            continue
        try:
            program, _, _ = traced(case)
        except Exception:  # noqa: BLE001, S112 - test_rules.py reports cases that do not trace
            continue
        eqn = next((e for e in iter_eqns(program.closed_jaxpr) if e.primitive.name == name), None)
        if eqn is not None and all(isinstance(d, int) for v in eqn.invars for d in v.aval.shape):
            return eqn
    return None


def _omittable(eqn):
    specs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    found = []
    for p in sorted(eqn.params):
        params = {k: v for k, v in eqn.params.items() if k != p}
        try:
            jax.make_jaxpr(lambda *xs, params=params: eqn.primitive.bind(*xs, **params))(*specs)
        except Exception:  # noqa: BLE001, S112 - JAX needs this parameter
            continue
        found.append(p)
    return found


def _svd_invariants(outs):
    """Singular vectors are unique up to sign (JAX's LAPACK picks one): compare the singular values
    and the reconstruction U diag(s) V^T instead."""
    if len(outs) == 1:
        return outs
    s, u, vt = (np.asarray(o, np.float64) for o in outs)
    k = s.shape[-1]
    return [s, (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]]


# Results unique only up to a convention, compared through what is unique.
INVARIANTS = {"svd": _svd_invariants}


def test_rules_accept_every_parameter_jax_may_omit():
    problems = []
    rng = np.random.default_rng(0)
    for name in sorted(RULES):
        eqn = _application(name)
        if eqn is None:
            continue
        omitted = [p for p in _omittable(eqn) if p not in ("sharding", "out_sharding")]
        if not omitted:
            continue
        params = {k: v for k, v in eqn.params.items() if k not in omitted}
        args = [np.asarray(rng.uniform(1, 3, v.aval.shape)).astype(v.aval.dtype) for v in eqn.invars]
        fun = lambda *xs, params=params, eqn=eqn: eqn.primitive.bind(*xs, **params)
        try:
            expected = jax.tree_util.tree_leaves(jax.jit(fun)(*args))
        except Exception:  # noqa: BLE001 - JAX itself cannot run it: the lowering must still work
            expected = None
        try:
            actual = jax.tree_util.tree_leaves(noxla.convert(fun)(*args))
            if expected is not None:
                same = INVARIANTS.get(name, lambda outs: outs)
                expected, actual = same([np.asarray(e) for e in expected]), same([np.asarray(a) for a in actual])
                assert_matches(expected, actual,
                               [str(i) for i in range(len(expected))], where=name)
        except UnsupportedError:
            if expected is None:  # JAX cannot run it either: a declared rejection is the answer
                continue
            problems.append(f"{name} without {omitted}: rejected, although JAX runs it")
        except Exception as e:  # noqa: BLE001 - every failure is listed
            problems.append(f"{name} without {omitted}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    assert not problems, "\n".join(problems)
