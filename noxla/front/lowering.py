"""A traced ``Program`` as TF ops: on given tensors, or as one named ``tf.function``.

Below the exporters and the public API, above the primitive-agnostic interpreter.
"""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
import tensorflow as tf

from lowering_rules.core.vocabulary import DEFAULT_LOWERING, LoweringFor
from lowering_rules.values import complex_values, limb_values
from noxla.front.interpreter import Lowering, lower_jaxpr, tf_dtype
from noxla.front.lowering_variants import needs_tfjs_lowering, needs_tflite_lowering, uses_uint32  # noqa: F401  (re-exported)
from noxla.front.shapes import Dims, is_static
from noxla.front.tracing import Program

# jax2tf's documented translation of float0 (the tangent type of integers): a zero of this dtype.
FLOAT0_TF_DTYPE = tf.bfloat16


def lower_program(program: Program, flat_args: Sequence, check_shapes: bool = False,
                  strict: bool = False, weights: dict | None = None,
                  lowering_for: LoweringFor = DEFAULT_LOWERING) -> list[tf.Tensor]:
    """Emit the TF ops of a traced program on flat TF inputs (eagerly or into the current graph).

    ``check_shapes`` verifies inputs against their polymorphic shapes (TF only: Assert ops).
    ``strict`` keeps the IEEE-exact lowerings (see ``noxla.api.convert``).
    ``weights``: a cache shared by lowerings of the same weights (see ``Lowering``).
    ``lowering_for``: the artifact it is lowered for, where the ops differ (``LoweringFor``).
    """
    flat_args = program_inputs(program, flat_args, lowering_for.uint32_as_int32)
    dims = Dims.solve(program.in_avals, flat_args)
    if check_shapes:
        checks = dims.check_inputs(program.in_avals, flat_args, program.in_names)
        if checks:
            with tf.control_dependencies(checks):
                flat_args = [tf.identity(a) for a in flat_args]
    # Complex values travel between rules as (real, imaginary) pairs; see complex_values.
    lowering = Lowering(dims, [a for a in flat_args if not a.dtype.is_complex], strict=strict, weights=weights,
                        lowering_for=lowering_for)
    args = [complex_values.split(a) if a.dtype.is_complex else a for a in flat_args]
    jaxpr = program.closed_jaxpr.jaxpr
    float0 = [a.dtype == jax.dtypes.float0 for a in program.out_avals]
    if any(float0):  # a gradient w.r.t. an integer input holds no value; TF has no float0
        jaxpr = jaxpr.replace(outvars=[v for v, z in zip(jaxpr.outvars, float0) if not z])
    outs = iter(lower_jaxpr(lowering, jaxpr, program.consts, args))
    # uint32 values computed as 16-bit limbs (limb_values.py) leave the program as words.
    return [tf.zeros(dims.shape(aval.shape), FLOAT0_TF_DTYPE) if z
            else complex_values.join(limb_values.materialize(next(outs), lowering.tf_dtype(np.uint32)))
            for aval, z in zip(program.out_avals, float0)]


def program_inputs(program: Program, flat_args: Sequence, uint32_as_int32: bool = False) -> list[tf.Tensor]:
    """The arguments as tensors of the program's input dtypes (cast as JAX canonicalizes them:
    a float64 argument is float32 unless x64 is enabled); uint32 as int32 bits for TF.js's lowering."""
    dtypes = [tf_dtype(aval.dtype, uint32_as_int32) for aval in program.in_avals]
    flat_args = [tf.convert_to_tensor(a, dtype_hint=d) for a, d in zip(flat_args, dtypes)]
    return [a if a.dtype == d else tf.cast(a, d) for a, d in zip(flat_args, dtypes)]


def input_signature(program: Program, uint32_as_int32: bool = False) -> list[tf.TensorSpec]:
    return [tf.TensorSpec([d if is_static([d]) else None for d in aval.shape], tf_dtype(aval.dtype, uint32_as_int32),
                          name=name)
            for aval, name in zip(program.in_avals, program.in_names)]


def serving_function(program: Program, check_shapes: bool = False, strict: bool = False,
                     uint32_as_int32: bool = False, weights: dict | None = None, webgpu: bool = False,
                     tflite: bool = False, sequenced: bool = True) -> tf.types.experimental.ConcreteFunction:
    """The program as one concrete TF function: flat named inputs, a dict of named outputs.

    ``check_shapes`` adds run-time checks of the inputs against polymorphic shapes (TF only);
    ``strict`` keeps JAX's NaN/inf semantics exactly instead of fused ops (see ``convert``).
    ``uint32_as_int32`` (TF.js's own lowering: TF.js has no uint32) carries uint32 inputs, values and
    outputs as the int32s with the same bits (see ``needs_tfjs_lowering``). ``weights``: a cache that
    functions lowered from the same weights share, each large constant held once (see ``Lowering``).
    ``webgpu``: lowered for LiteRT.js's WebGPU delegate (``LoweringFor.webgpu``). ``tflite``: for
    the TFLite converter alone (``LoweringFor.tflite_converter``): its graph may hold ops that only the
    converter takes (it turns them into builtins), so it must never be saved or run as TF.
    ``sequenced=False``: for a function that is only frozen (its GraphDef read), never run or saved:
    built without ``tf.function``'s sequencing of stateful ops, the same graph."""
    lowering_for = LoweringFor(tfjs=uint32_as_int32, tflite_converter=tflite, webgpu=webgpu)

    def serve(*flat_args):
        outs = lower_program(program, flat_args, check_shapes=check_shapes, strict=strict, weights=weights,
                             lowering_for=lowering_for)
        outs = {name: tf.identity(out, name=name) for name, out in zip(program.out_names, outs)}
        if not sequenced:  # the Identity ops ``tf.function`` returns, which name the .tflite's outputs
            outs = {name: tf.identity(outs[name]) for name in sorted(outs)}
        return outs
    signature = input_signature(program, uint32_as_int32)
    if not sequenced:
        # ``tf.function`` sequences stateful ops (automatic control dependencies): a pass over every
        # op once the graph is built, 8-12% of a lowering. A lowering emits no stateful op but
        # ``check_shapes``' Asserts (tied to the inputs by explicit control dependencies), so that
        # pass adds nothing, and a function only frozen and converted does without it.
        return tf.compat.v1.wrap_function(serve, signature)
    return tf.function(serve, input_signature=signature, autograph=False).get_concrete_function()
