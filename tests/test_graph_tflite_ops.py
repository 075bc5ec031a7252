"""TF ops and types the graph's TFLite writer left ``Uncovered`` until noxla.writers.tflite.legalize_more
(with the recorder's tf.bitcast, tf.nn.conv3d, tf.broadcast_dynamic_shape and softmaxes over another
axis): each rule case is written from the graph, equal to JAX on LiteRT, with the builtin it was
legalized into; where TF's path's converter writes the same operators, as many of each."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from lowering_rules import RULES
from lowering_rules.elementwise import _U32_EDGES
from noxla.front.tracing import trace
from noxla.runtimes import run_tflite
from tests.differential import assert_matches, default_mode_inputs, graph_tflite_bytes
from tests.test_graph_tflite import _op_counts

CASES = {c.id: c for rule in RULES.values() for c in rule.cases}

# Rule case: a builtin its file holds (what the op that was Uncovered became).
WRITTEN = {
    "top_k:nan_and_signed_zeros": "BITCAST",   # a float32's sign bit (-NaN last)
    "broadcast_in_dim:f16": "BITCAST",         # float16 carried as its int16 bits
    "select_n:one_case_f16_batched": "BITCAST",
    "cond:top_k_in_branch": "BITCAST",         # in an IF's branch
    "mul:u32_wraps": "MUL",                    # LiteRT's MUL has a uint32 kernel
    "mul:u32_hash_literal": "MUL",
    "iota_2x32_shape:matrix": "ADD",           # a uint32 sum, through int32
    "concatenate:bool": "CONCATENATION",
    "stack:bool": "CONCATENATION",             # PACK has no bool kernel
    "reduce:or_body_bool": "CONCATENATION",
    "scan:int_and_bool_outputs": "CONCATENATION",
    "conv_general_dilated:3d_ndhwc": "CONV_3D",
    "conv_general_dilated:3d_strided_rhs_dilation": "CONV_3D",
    "conv_general_dilated:feature_groups_3_nchw_3d": "CONV_3D",
    "abs:complex": "ABS",                      # IsInf: |x| == inf
    "abs:complex_huge": "ABS",
    "log:complex_negative_real_axis": "ABS",
    "sub:log_softmax_axis1_3d": "LOG_SOFTMAX",  # over another axis: transposed, as TF does
    "div:softmax_axis0_3d": "SOFTMAX",
    "atan2:broadcast_rows": "ATAN2",           # tf.broadcast_dynamic_shape of known shapes, folded
    "pad:crop_into_other_side": "PADV2",       # a PadV2 of an empty slice by a run-time value
    "split:empty_piece": "SPLIT_V",            # of the non-empty pieces, the empty one a constant
    "dynamic_update_slice:empty_update": "RESHAPE",   # its operand (an input: the output's copy)
    # Types LiteRT's kernels move (model.GRAPH_WRITER_KINDS), each checked on LiteRT first.
    "tile:bool": "TILE",
    "dynamic_update_slice:bool": "DYNAMIC_UPDATE_SLICE",
    "dynamic_update_slice:f16": "DYNAMIC_UPDATE_SLICE",
    "dynamic_update_slice:i8": "DYNAMIC_UPDATE_SLICE",
    "pad:u8_zero_fill_interior": "PAD",
    "cond:f16": "IF",                          # float16 branch values, copied as they are
    "while:vmapped_f16_i8_carries": "WHILE",   # float16 and int8 loop variables
}
# Those the converter writes with the same operators (TF's path), as many of each.
AS_TF_PATH = ["broadcast_in_dim:f16", "select_n:one_case_f16_batched", "mul:u32_wraps", "mul:u32_hash_literal",
              "iota_2x32_shape:matrix", "concatenate:bool", "stack:bool", "reduce:or_body_bool",
              "conv_general_dilated:3d_ndhwc", "abs:complex", "sub:log_softmax_axis1_3d", "div:softmax_axis0_3d",
              "atan2:broadcast_rows", "pad:crop_into_other_side", "tile:bool", "dynamic_update_slice:bool",
              "dynamic_update_slice:f16", "dynamic_update_slice:i8", "split:empty_piece"]
# dynamic_update_slice:empty_update: TF's path writes 6 operators (its DYNAMIC_UPDATE_SLICE of the
# empty update, which LiteRT runs, the starts' SLICEs and PACK, 2 RESHAPEs); the graph its operand.


def _written(case_id):
    case = CASES[case_id]
    program, args, expected = default_mode_inputs(case)
    data = graph_tflite_bytes(program)   # Uncovered before legalize_more
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol,
                   f"{case_id} [tflite, graph]")
    return program, data


@pytest.mark.parametrize("case_id", sorted(WRITTEN))
def test_case_is_written_and_equals_jax(case_id):
    _, data = _written(case_id)
    assert WRITTEN[case_id] in _op_counts(data), _op_counts(data)


@pytest.mark.parametrize("case_id", AS_TF_PATH)
def test_case_has_the_tf_paths_operators(case_id):
    from noxla.pipeline.tf_path import serving_function
    from noxla.pipeline.tf_tflite import tflite_bytes
    program, data = _written(case_id)
    assert _op_counts(data) == _op_counts(tflite_bytes(serving_function(program, tflite=True)))


def _run(fun, *args):
    program = trace(fun, args)
    data = graph_tflite_bytes(program)
    return _op_counts(data), run_tflite(data, dict(zip(program.in_names, args)))[program.out_names[0]]


def test_uint32_sums_wrap_as_jax():
    """LiteRT's ADD has no uint32 kernel: the words are added as int32 (the same bits), which wraps
    modulo 2^32 as JAX's uint32 sum; at the edges of the word (2^32 - 1 + 2^32 - 1, 2^31 + 2^31 + 1)."""
    a, b = _U32_EDGES
    counts, got = _run(lambda a, b: a + b, a, b)
    assert counts == {"CAST": 3, "ADD": 1}, counts
    np.testing.assert_array_equal(got, np.asarray(jax.jit(lambda a, b: a + b)(a, b)))


def test_bool_pack_is_reshapes_into_a_concatenation():
    x = np.array([[True, False, True], [False, False, True]])
    counts, got = _run(lambda x: jax.numpy.stack([x, ~x, x], axis=1), x)
    assert counts == {"RESHAPE": 2, "CONCATENATION": 1, "LOGICAL_NOT": 1}, counts
    np.testing.assert_array_equal(got, np.stack([x, ~x, x], axis=1))


def test_is_inf_reads_an_exact_infinity():
    """|x + yi| with an infinite part is infinite (the rule's IsInf picks it where its scaled form
    gives inf / inf). The converter stores an infinite constant as the largest float, under which
    |x| == inf would be false for inf; this writer stores it as it is."""
    x = np.array([np.inf, -np.inf, np.inf, 3.4028235e38, -0.0, 1.0], np.float32)
    y = np.array([np.inf, 2.0, -np.inf, 3.4028235e38, 0.0, -np.inf], np.float32)
    fun = lambda x, y: jax.numpy.abs(jax.lax.complex(x, y))  # noqa: E731
    counts, got = _run(fun, x, y)
    assert {"ABS", "EQUAL"} <= set(counts), counts
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fun)(x, y)))


def test_uint32_words_are_stacked_as_they_are():
    a, b = _U32_EDGES
    counts, got = _run(lambda a, b: jax.numpy.stack([a, b, a], axis=1), a, b)
    assert counts == {"PACK": 1}, counts
    np.testing.assert_array_equal(got, np.stack([a, b, a], axis=1))
