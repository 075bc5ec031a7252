"""The TFLite writer of noxla's graph (noxla.writers.tflite): every rule case it covers and the whole
zoo on LiteRT against JAX, its operator counts against TF's path's, and its export without
TensorFlow (the default for a lone default .tflite; NOXLA_TFLITE_GRAPH=0 sends it through TF's
path). tests/test_graph_tflite_converter.py holds it to the converter operator for operator."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import noxla
from lowering_rules import RULES
from lowering_rules.core.vocabulary import Target
from noxla.front.tracing import trace
from noxla.graph.dtypes import Uncovered
from noxla.pipeline.preflight import full_check
from noxla.runtimes import run_tflite
from tests import zoo
from tests.differential import assert_matches, default_mode_inputs, graph_tflite_bytes, grouped_cases
from tests.small_cnn import CNN_INPUT, small_cnn
from tools.graph_coverage import DECLARED_DIFFERENCES

CASES = [c for rule in RULES.values() for c in rule.cases]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = zoo.build()


def _declared_on_tflite(case) -> bool:
    """A difference from JAX its rule declares for TFLite (top_k's signed NaNs are TF.js's alone)."""
    declared = (targets for targets, _ in RULES[case.primitive].differs)
    return case.id in DECLARED_DIFFERENCES and any(Target.TFLITE in targets for targets in declared)


@pytest.mark.parametrize("case", grouped_cases(CASES))
def test_case_graph_tflite(case):
    program, args, expected = default_mode_inputs(case)
    if isinstance(expected, Exception) or not full_check(program.closed_jaxpr, Target.TFLITE).ok:
        pytest.skip("JAX cannot run it or TFLite's check refuses it (tests/test_rules.py holds it to that)")
    try:
        data = graph_tflite_bytes(program)
    except Uncovered as e:
        pytest.skip(f"the graph's TFLite writer does not cover it ({e}); another path exports it")
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    if _declared_on_tflite(case):   # a rule's declared difference from JAX (tests/test_rules.py) shows here too
        with pytest.raises(AssertionError, match="(?i)not equal"):
            assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol,
                           case.id)
        return
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol,
                   f"{case.id} [tflite, graph]")


def _op_counts(data) -> collections.Counter:
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    return collections.Counter(names[codes[op.opcodeIndex]] for g in model.subgraphs for op in g.operators)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_through_the_graph_tflite_writer_matches_jax(name):
    model = MODELS[name]
    args = model.inputs(2)
    program = trace(model.fun, tuple(args))
    outs = run_tflite(graph_tflite_bytes(program), dict(zip(program.in_names, args)))
    expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(model.fun)(*args))]
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, 1e-5, 1e-5,
                   f"{name} [tflite, graph]")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_through_the_graph_has_no_more_tflite_ops_than_tf_path(name, tmp_path):
    from noxla.pipeline.tf_path import export
    model = MODELS[name]
    args = model.inputs(2)
    path = str(tmp_path / "tf_path.tflite")
    export(model.fun, args, tflite=path)   # TF's path (noxla.pipeline.tf_path.export never takes a writer without TF)
    with open(path, "rb") as f:
        converted = _op_counts(f.read())
    graph = _op_counts(graph_tflite_bytes(trace(model.fun, tuple(args))))
    assert sum(graph.values()) <= sum(converted.values()), (graph - converted, converted - graph)


def test_scaled_product_of_x_by_its_transpose_keeps_one_scale():
    """The rule case symmetric_product:alpha_beta: the moved scale pass put 0.5 on both operands of
    a @ a.T (one tensor), giving 0.25 * a @ a.T."""
    a = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    c = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    fun = lambda a, c: jax.lax.linalg.symmetric_product(a, c, alpha=0.5, beta=2.0)  # noqa: E731
    program = trace(fun, (a, c))
    got = run_tflite(graph_tflite_bytes(program), dict(zip(program.in_names, (a, c))))[program.out_names[0]]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fun)(a, c)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fun, x", [
    (lambda x: x ** 2, np.array([1e20, -3.0, 2.0], np.float32)),
    (lambda x: jax.numpy.square(x), np.array([3, -46341, 7], np.int32)),
], ids=["pow_2_overflows_to_inf", "int32_square_wraps"])
def test_squares_are_products(fun, x):
    """LiteRT's POW gives the largest float where x ** 2 overflows (JAX: inf); its SQUARE has no int32
    kernel. Both are x * x."""
    program = trace(fun, (x,))
    data = graph_tflite_bytes(program)
    assert set(_op_counts(data)) == {"MUL"}
    got = run_tflite(data, {program.in_names[0]: x})[program.out_names[0]]
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fun)(x)))


def test_export_tflite_writes_it_without_tensorflow(tmp_path):
    """In a fresh process: the default export of a transformer encoder and of a small CNN imports no
    TensorFlow and runs in LiteRT with JAX's result; an uncovered program still exports, through
    TensorFlow, with a step saying why."""
    script = textwrap.dedent(f"""
        import sys
        import numpy as np, jax
        sys.path.insert(0, {ROOT!r})
        import noxla
        from noxla.runtimes import run_tflite
        from noxla.front.tracing import trace
        from tests import zoo
        from tests.small_cnn import small_cnn, CNN_INPUT
        model = zoo.build()["transformer_encoder"]
        (tokens,) = model.inputs(2)
        for fun, x, name in ((model.fun, tokens, "encoder"), (small_cnn, CNN_INPUT, "cnn")):
            steps = []
            path = noxla.export_tflite(fun, x, path={str(tmp_path)!r} + f"/{{name}}.tflite",
                                       on_step=lambda name, s: steps.append(name))
            assert "tensorflow" not in sys.modules, "the graph's TFLite export imported TensorFlow"
            assert "lower+write (graph tflite)" in steps, steps
            got = list(run_tflite(path, {{trace(fun, (x,)).in_names[0]: x}}).values())[0]
            np.testing.assert_allclose(got, np.asarray(jax.jit(fun)(x)), rtol=1e-5, atol=1e-6)
        steps = []
        import tensorflow as tf
        from jax.experimental import jax2tf
        called = lambda x: jax.numpy.sin(jax2tf.call_tf(tf.math.cos)(x))
        noxla.export_tflite(called, np.ones((1, 5, 5, 2), np.float32), path={str(tmp_path / "c.tflite")!r},
                            on_step=lambda name, s: steps.append(name))
        assert any(s.startswith("graph tflite writer: ") and "tf.config" in s for s in steps), steps
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "NOXLA_TFLITE_GRAPH"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path),
                          env=dict(env, PYTHONPATH=ROOT))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_what_the_graph_writer_does_not_take_goes_through_tensorflow(tmp_path, monkeypatch):
    # strict and WebGPU files are the graph's too (tests/test_graph_tflite_variants.py)
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")
    steps = []
    path = noxla.export_tflite(small_cnn, CNN_INPUT, path=str(tmp_path / "m.tflite"),
                               on_step=lambda name, s: steps.append(name))
    assert os.path.exists(path) and steps and "lower+write (graph tflite)" not in steps, steps


@pytest.mark.parametrize("dtype", [np.uint16, np.int8, np.float16])
def test_narrow_types_are_moved_with_jax_s_values(dtype):
    """JAX's harnesses found a reshape of uint16 crashing noxla's first TensorFlow-free writer; the
    graph writer moves half floats and 8/16-bit integers (RESHAPE, SLICE, CAST: the builtins TF's
    path writes for them) and LiteRT gives JAX's values, the extremes of the type included."""
    info = np.finfo(dtype) if np.issubdtype(dtype, np.floating) else np.iinfo(dtype)
    x = np.array([[info.min, 0, 1], [info.max, 2, 3]], dtype)
    program = trace(lambda x: x.reshape(3, 2)[1:], (x,))
    got = run_tflite(graph_tflite_bytes(program), {program.in_names[0]: x})[program.out_names[0]]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, x.reshape(3, 2)[1:])


@pytest.mark.parametrize("fun", [lambda x: (x * 2, x * 2), lambda x: x + 0.0, lambda x: (x + 1, x + 1.0),
                                 lambda x: (x, x * 2)],
                         ids=["outputs_computed_alike", "output_is_the_input", "outputs_alike",
                              "an_input_as_output"])
def test_outputs_its_passes_could_merge_come_out_whole(fun, tmp_path):
    """Two outputs computed alike, or an output its passes make the input (x + 0): the file has each
    output as its own tensor, from the graph writer or, where it declines, the TF path."""
    x = np.arange(3, dtype=np.float32)
    path = noxla.export_tflite(fun, x, path=str(tmp_path / "m.tflite"))
    got = run_tflite(path, {"x": x})
    expected = fun(x) if isinstance(fun(x), tuple) else (fun(x),)
    assert len(got) == len(expected)
    for name, e in zip(sorted(got), expected):
        np.testing.assert_array_equal(got[name], np.asarray(e))


# Rule cases whose forms this writer took from TF's path's .tflite (issue 41, stage 4): scans and
# scatters, half floats and narrow integers moved by CAST, empty tensors folded, outputs that are
# inputs or constants, filters computed at run time, uint32 arithmetic in int64.
_AS_TF_PATH = ["cumsum:axis0_reverse", "cumsum:i32", "round:half_even", "slice:i8", "neg:empty",
               "concatenate:with_empty", "dot_general:empty_contraction", "reduce_max:only_input_empty",
               "conv_general_dilated:nhwc_hwio_strides", "add:conv_bias_relu", "atan:f32", "sign:i32",
               "reduce_and:bool_axis1", "lt:u32_edges"]


@pytest.mark.parametrize("case_id", _AS_TF_PATH)
def test_case_is_written_with_the_tf_paths_operators(case_id):
    """Written (not Uncovered), equal to JAX on LiteRT, and with the builtins TF's path's converter
    writes for the same case, as many of each."""
    from noxla.pipeline.tf_path import serving_function
    from noxla.pipeline.tf_tflite import tflite_bytes
    (case,) = [c for c in CASES if c.id == case_id]
    program, args, expected = default_mode_inputs(case)
    data = graph_tflite_bytes(program)
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol, case_id)
    assert _op_counts(data) == _op_counts(tflite_bytes(serving_function(program, tflite=True)))


# Reshapes around elementwise operators and a squeeze before a batched product: TF's path's
# passes (noxla.writers.tflite.flatbuffer.reshapes) remove them from the graph's file as from the converter's.
_RESHAPES_REMOVED = ["scatter-add:oob_dropped_i32", "scatter-add:window_rows_vmap_vmap", "scatter-add:size_one",
                     "scatter-add:f16", "scatter-sub:i32_clip", "transpose:product_scores"]


@pytest.mark.parametrize("case_id", _RESHAPES_REMOVED)
def test_case_with_reshapes_the_tf_paths_passes_remove_is_written_no_larger(case_id):
    from noxla.pipeline.tf_path import serving_function
    from noxla.pipeline.tf_tflite import tflite_bytes
    (case,) = [c for c in CASES if c.id == case_id]
    program, args, expected = default_mode_inputs(case)
    data = graph_tflite_bytes(program)
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol, case_id)
    graph, converted = _op_counts(data), _op_counts(tflite_bytes(serving_function(program, tflite=True)))
    assert graph["RESHAPE"] <= converted["RESHAPE"] and sum(graph.values()) <= sum(converted.values()), \
        (graph - converted, converted - graph)


@pytest.mark.parametrize("name", ["dense_loop", "norm_loop"])
def test_loop_model_written_with_its_bodies_matches_jax_with_no_more_operators_than_tf_path(name, tmp_path,
                                                                                           monkeypatch):
    """tests/test_graph.py's loop models (a data-dependent trip count: JAX keeps the While): one WHILE
    whose cond and body are subgraphs, equal to JAX on LiteRT, and no more operators (main graph
    and bodies) than TF's path's converter writes."""
    from noxla.pipeline.tf_path import export
    from tests.test_graph import LOOP_MODELS
    fun, args = LOOP_MODELS[name]
    program = trace(fun, args)
    data = graph_tflite_bytes(program)
    counts = _op_counts(data)
    assert counts["WHILE"] == 1, counts
    path = str(tmp_path / "tf_path.tflite")
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")   # TF's path
    export(fun, args, tflite=path)
    with open(path, "rb") as f:
        converted = _op_counts(f.read())
    assert sum(counts.values()) <= sum(converted.values()), (counts - converted, converted - counts)
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(fun)(*args))]
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, 1e-5, 1e-5,
                   f"{name} [tflite, graph]")


def _swap_and_reset(a, b):
    """Loop variables moved to each other's place and one set to a constant each trip: a body result
    that is another variable's input or a constant."""
    def body(c):
        i, a, b, z = c
        return i + 1, b, a, jax.numpy.full((3,), 2.0, np.float32)
    return jax.lax.while_loop(lambda c: (c[0] < 3) & (jax.numpy.sum(c[1]) < 1e6), body,
                              (0, a, b, a))[1:]


def test_loop_variables_moved_between_places_are_copied():
    """LiteRT's WHILE copies a body's results into its inputs one at a time: ``(b, a)`` returned as
    the inputs themselves would read ``a`` after it was overwritten (JAX's result after an odd
    number of trips: the two swapped)."""
    a, b = np.array([1.0, 2.0, 3.0], np.float32), np.array([-4.0, 5.0, -6.0], np.float32)
    program = trace(_swap_and_reset, (a, b))
    data = graph_tflite_bytes(program)
    assert _op_counts(data)["WHILE"] == 1
    outs = run_tflite(data, dict(zip(program.in_names, (a, b))))
    expected = [np.asarray(e) for e in jax.jit(_swap_and_reset)(a, b)]
    np.testing.assert_array_equal(expected[0], b)
    for want, n in zip(expected, program.out_names):
        np.testing.assert_array_equal(outs[n], want)


@pytest.mark.parametrize("case_id", ["cond:several_operands_and_outputs", "while:two_output_cond_in_body",
                                     "scan:loop_lstm_flax_rnn"])
def test_control_flow_case_has_no_more_operators_than_tf_path(case_id, tmp_path, monkeypatch):
    """Rule cases with bodies (branches, a loop whose body holds a conditional, a looped LSTM scan):
    main graph and bodies together no larger than TF's path's (every control-flow case written was
    at most TF's path's in a one-off count, docs/graph.md)."""
    from noxla.pipeline.tf_path import export
    case = next(c for c in CASES if c.id == case_id)
    program, args, _ = default_mode_inputs(case)
    counts = _op_counts(graph_tflite_bytes(program))
    assert counts["WHILE"] + counts["IF"] >= 1, counts
    path = str(tmp_path / "tf_path.tflite")
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")   # TF's path
    export(case.fun, list(args), tflite=path)
    with open(path, "rb") as f:
        converted = _op_counts(f.read())
    assert sum(counts.values()) <= sum(converted.values()), (counts - converted, converted - counts)
