"""The primal of a converted function (``noxla.convert``, a SavedModel's ``serve``): noxla's graph of the
program (``noxla.graph.lower.record_program``, recorded once) replayed as TF ops, so TF only writes what
the rules lowered once (issue 41). Inside a ``tf.function`` (SavedModel tracing included) the nodes are
made in its graph; eagerly, through one ``tf.function`` per program, traced on the first call and then
only called: an eager call no longer runs the rules op by op.

Its large constants are captured eager tensors (``replay.CapturedWeights``), shared with the other
programs given the same table (a converted function's input signatures and VJP, a SavedModel's
signatures): each weight held once in memory and stored once in a SavedModel.

A complex output is recorded as its two parts, joined by a Complex op. A program the graph does not
record (``call_tf``, ...) is lowered live on TensorFlow
(``noxla.front.lowering.lower_program``) as before, the reason logged at debug level
(``logging.getLogger("noxla.writers.tf.forward")``) and kept in ``Forward.live_reason``.
``NOXLA_TF_REPLAY=0`` lowers every program live."""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Sequence

import jax
import tensorflow as tf

from noxla.front.lowering import FLOAT0_TF_DTYPE, lower_program
from noxla.front.shapes import Dims
from noxla.front.tracing import Program
from noxla.graph.dtypes import Uncovered
from noxla.graph.lower import record_program
from noxla.writers.tf.replay import CapturedWeights, replay_function, replay_onto

ENV = "NOXLA_TF_REPLAY"
SCOPE = "noxla_replay"  # the name scope of the replayed nodes in a caller's graph
log = logging.getLogger(__name__)


class Forward:
    """``program``'s outputs on its flat inputs (cast to its input dtypes: ``program_inputs``), with
    run-time checks of the inputs against polymorphic shapes, as ``lower_program(check_shapes=True)``."""

    def __init__(self, program: Program, strict: bool, weights: CapturedWeights | None = None):
        self.program, self.strict = program, strict
        self.weights = CapturedWeights() if weights is None else weights
        self.float0 = [a.dtype == jax.dtypes.float0 for a in program.out_avals]
        self.recorded, self.live_reason, self._eager = None, None, None
        if os.environ.get(ENV, "1") == "0":
            self.live_reason = f"{ENV}=0"
        else:
            try:
                self.recorded = record_program(_without_float0(program, self.float0), strict, complex_pairs=True)
            except Uncovered as e:
                self.live_reason = f"noxla's graph does not record it: {e}"
        if self.live_reason is not None:
            log.debug("noxla: %s lowered live on TensorFlow (%s)", program.name, self.live_reason)

    def __call__(self, flat: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        if self.recorded is None:
            return lower_program(self.program, flat, check_shapes=True, strict=self.strict)
        dims = Dims.solve(self.program.in_avals, flat)
        if dims.env:
            checks = dims.check_inputs(self.program.in_avals, flat, self.program.in_names)  # raises eagerly
            if checks:
                with tf.control_dependencies(checks):
                    flat = [tf.identity(a) for a in flat]
        recorded = self.recorded
        if tf.executing_eagerly():
            if self._eager is None:
                self._eager = replay_function(recorded.graph, recorded.inputs, recorded.outputs, exact=False,
                                              weights=self.weights).get_concrete_function()
            outs = iter(self._eager(*flat))
        else:
            with tf.name_scope(SCOPE):
                outs = iter(replay_onto(recorded.graph, recorded.inputs, recorded.outputs, flat, exact=False,
                                        weights=self.weights))
        joined = iter([tf.complex(next(outs), next(outs)) if i in recorded.pairs else next(outs)
                       for i in range(len(recorded.out_names))])
        return [tf.zeros(dims.shape(aval.shape), FLOAT0_TF_DTYPE) if z else next(joined)
                for aval, z in zip(self.program.out_avals, self.float0)]


def _without_float0(program: Program, float0: list[bool]) -> Program:
    """``program`` without its float0 outputs (TF has no float0: each is a zero, made around the replay)."""
    if not any(float0):
        return program
    closed = program.closed_jaxpr
    jaxpr = closed.jaxpr.replace(outvars=[v for v, z in zip(closed.jaxpr.outvars, float0) if not z])
    keep = [not z for z in float0]
    return dataclasses.replace(program, closed_jaxpr=closed.replace(jaxpr=jaxpr),
                               out_avals=tuple(a for a, k in zip(program.out_avals, keep) if k),
                               out_names=tuple(n for n, k in zip(program.out_names, keep) if k))
