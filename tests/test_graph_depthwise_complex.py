"""Two programs noxla's graph left to TF's path until session 27, now recorded for its writers.

- A dilated depthwise convolution is one DepthwiseConv2dNative with TF's ``dilations`` attribute:
  TFLite's DEPTHWISE_CONV_2D with its dilation factors, and TF.js's DepthwiseConv2dNative, whose
  cpu, wasm and webgl kernels dilate (TF's Python writes SpaceToBatchND around an undilated one,
  as TF's CPU kernel takes no dilation: the TF writer replays it so). Checked against JAX on
  LiteRT, on TF.js's Node cpu and wasm backends, and replayed in TF.
- A complex program input is split by Real and Imag into the pair the rules compute with: TFLite's
  REAL and IMAG of a complex64 input, as TF's converter writes them. A complex output stays refused
  up front for TFLite's builtins (no op builds one), and TF.js takes no complex input at all.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lowering_rules import RULES
from lowering_rules.core.vocabulary import Target
from noxla.front.tracing import trace
from noxla.graph.lower import record_program
from noxla.pipeline.graph_path import write_program_tfjs
from noxla.pipeline.preflight import full_check
from noxla.runtimes import run_tflite
from noxla.runtimes.verify import jax_outputs
from noxla.writers.tf.replay import replay_numpy
from tests.differential import assert_matches, default_mode_inputs, graph_tflite_bytes
from tests.test_graph_tflite import _op_counts

CASES = {c.id: c for rule in RULES.values() for c in rule.cases}
_RNG = np.random.default_rng(27)
_W = _RNG.standard_normal((3, 3, 1, 6)).astype(np.float32)
_B = _RNG.standard_normal(6).astype(np.float32)


def _dilated_bias_relu(x):
    """SAME padding, unequal dilations, two outputs per channel, then a bias and a relu (which TF.js's
    passes fuse into one FusedDepthwiseConv2dNative, its dilations kept)."""
    y = jax.lax.conv_general_dilated(x, _W, (1, 1), "SAME", rhs_dilation=(2, 3),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=3)
    return jax.nn.relu(y + _B)


def _complex_parts(z):
    return jnp.abs(z), z.real * 2 - z.imag, (z == z.conj()).astype(jnp.float32)


_Z = (np.array([[1 + 2j, -3.5 + 0j, 0 - 1j], [1e38 + 1e38j, -0.0 + 0j, 2 - 2j]], np.complex64),)
_X = (_RNG.standard_normal((2, 9, 10, 3)).astype(np.float32),)
DILATED = {"conv_general_dilated:depthwise_rhs_dilation": None,
           "conv_general_dilated:polymorphic_batch_depthwise_dilated": None,
           "dilated_bias_relu": (_dilated_bias_relu, _X)}
# The rule cases with a complex input that TFLite's check accepts, and a program of this file.
COMPLEX = {"real:complex_input": None, "imag:complex_input": None, "fft:complex_input": None,
           "complex_parts": (_complex_parts, _Z)}


def _program(table: dict, name: str):
    """(program, args, JAX's outputs, atol, rtol)."""
    if table[name] is None:
        case = CASES[name]
        program, args, expected = default_mode_inputs(case)
        return program, args, expected, case.atol, case.rtol
    fun, args = table[name]
    return trace(fun, args), args, jax_outputs(fun, args), 1e-5, 1e-5


def _replayed_equals_jax(name, program, args, expected, atol, rtol):
    recorded = record_program(program)
    actual = replay_numpy(recorded.graph, recorded.inputs, recorded.outputs, args)
    assert_matches(expected, actual, program.out_names, atol, rtol, f"{name} [graph replayed in TF]")
    return recorded


def _tflite_equals_jax(name, program, args, expected, atol, rtol):
    data = graph_tflite_bytes(program)
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, atol, rtol,
                   f"{name} [graph tflite]")
    return _op_counts(data)


@pytest.mark.parametrize("name", sorted(DILATED))
def test_dilated_depthwise_is_one_dilated_node_replayed_in_tf_as_jax(name):
    program, args, expected, atol, rtol = _program(DILATED, name)
    recorded = _replayed_equals_jax(name, program, args, expected, atol, rtol)
    convs = [n for n in recorded.graph.nodes if n.op == "DepthwiseConv2dNative"]
    assert len(convs) == 1 and convs[0].attrs["dilations"]["list"]["i"] != ["1"] * 4, convs
    assert not any(n.op.endswith("SpaceToBatchND") for n in recorded.graph.nodes)


@pytest.mark.parametrize("name", sorted(DILATED))
def test_dilated_depthwise_is_one_tflite_operator_equal_to_jax(name):
    counts = _tflite_equals_jax(name, *_program(DILATED, name))
    assert counts["DEPTHWISE_CONV_2D"] == 1 and "SPACE_TO_BATCH_ND" not in counts, counts


@pytest.mark.parametrize("backend", ["cpu", "wasm"])
@pytest.mark.parametrize("name", sorted(DILATED))
def test_dilated_depthwise_is_one_tfjs_op_equal_to_jax(name, backend, tfjs_runner, tmp_path):
    program, args, expected, atol, rtol = _program(DILATED, name)
    assert full_check(program.closed_jaxpr, Target.TFJS).ok
    write_program_tfjs(program, str(tmp_path))
    with open(tmp_path / "model.json") as f:
        nodes = json.load(f)["modelTopology"]["node"]
    convs = [n for n in nodes if n["op"].endswith("DepthwiseConv2dNative")]
    assert len(convs) == 1 and convs[0]["attr"]["dilations"]["list"]["i"] != ["1"] * 4, convs
    assert not any(n["op"].endswith("SpaceToBatchND") for n in nodes)
    outs = tfjs_runner.run(str(tmp_path), dict(zip(program.in_names, args)), backend=backend)
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, atol, rtol,
                   f"{name} [graph, tfjs_{backend}]")


@pytest.mark.parametrize("name", sorted(COMPLEX))
def test_complex_input_is_split_by_real_and_imag(name):
    program, args, expected, atol, rtol = _program(COMPLEX, name)
    assert full_check(program.closed_jaxpr, Target.TFLITE).ok
    _replayed_equals_jax(name, program, args, expected, atol, rtol)
    counts = _tflite_equals_jax(name, program, args, expected, atol, rtol)
    assert {"REAL", "IMAG"} & set(counts), counts


def test_complex_tflite_input_is_complex64():
    from ai_edge_litert.interpreter import Interpreter
    program = trace(_complex_parts, _Z)
    details = Interpreter(model_content=graph_tflite_bytes(program)).get_input_details()
    assert [d["dtype"] for d in details] == [np.complex64], details


def test_complex_output_is_refused_up_front_for_tflite_and_tfjs_takes_no_complex_input():
    program = trace(lambda z: z * 2, _Z)
    report = full_check(program.closed_jaxpr, Target.TFLITE)
    assert [(v.source, "cannot return complex values" in v.reason) for v in report.violations] == \
        [("program output #0", True)], report.format()
    report = full_check(trace(_complex_parts, _Z).closed_jaxpr, Target.TFJS)
    assert any(v.source == "program input #0" and "complex" in v.reason for v in report.violations), report.format()
