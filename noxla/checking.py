"""The up-front check as ``noxla.check`` and the exporters run it.

Declarations and dtypes need no TensorFlow (``lowering_rules.lazy_tensorflow``): checking for TF,
TFLite or LiteRT.js imports none. Only TF.js's targets add the op-list backstop, which lowers the
program once to read the ops the TF.js converter would get, and so imports it.
"""
from __future__ import annotations

from limitations.engine import Report, check_jaxpr
from lowering_rules.vocabulary import Target
from noxla.errors import UnsupportedError
from noxla.tracing import Program


def full_check(closed_jaxpr, target: Target | str, backstop=None) -> Report:
    """Every violation for ``target``; ``backstop``: the TF.js op-list backstop to run once the
    declarations pass (by default ``noxla.tfjs_ops.TFJS_BACKSTOP`` for TF.js's targets)."""
    target = Target.parse(target)
    if backstop is None and target.within((Target.TFJS,)):
        from noxla.tfjs_ops import TFJS_BACKSTOP
        backstop = TFJS_BACKSTOP
    return check_jaxpr(closed_jaxpr, target, tf_ops=backstop)


def require_supported(program: Program, target: Target | str, backstop=None) -> None:
    report = full_check(program.closed_jaxpr, target, backstop)
    if not report.ok:
        raise UnsupportedError(report)
