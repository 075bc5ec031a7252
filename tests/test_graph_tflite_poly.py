"""Polymorphic programs through the graph's TFLite writer (noxla.writers.tflite.legalize_shapes): symbolic
sizes written as TF's converter writes a tf.function's None sizes (1 in a tensor's shape, -1 in its
shape signature), the rules' run-time shape arithmetic as LiteRT builtins, and the file run on LiteRT
at several sizes (``noxla.runtimes.run_tflite``: each input resized, then allocated) against JAX."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import noxla
from noxla.front.tracing import trace
from noxla.graph.dtypes import Uncovered
from noxla.runtimes import run_tflite
from noxla.writers.tflite.model import DYNAMIC, RunTimeSize, broadcast_shape
from tests.differential import graph_tflite_bytes, grouped_cases

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
K = np.linspace(-1, 1, 54, dtype=np.float32).reshape(3, 3, 3, 2)   # HWIO
NHWC = ("NHWC", "HWIO", "NHWC")


def _x(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


# (fun, polymorphic shapes, inputs at the traced sizes, inputs at other sizes)
PROGRAMS = {
    "elementwise": (lambda x: jnp.sin(x) * 2 + x, ["(b, 3)"], [_x(2, 3)], [_x(5, 3)]),
    "reshape_one_unknown": (lambda x: x.reshape(x.shape[0], 2, -1), ["(b, 6)"], [_x(2, 6)], [_x(7, 6)]),
    # (b, c) -> (b*c,) -> (c, b): the second reshape restores no shape, though both read "(?, ?)"
    "reshape_swapped_sizes": (lambda x: x.reshape(-1).reshape(x.shape[1], x.shape[0]) * 2, ["(b, c)"],
                              [_x(2, 3)], [_x(4, 5)]),
    "iota": (lambda x: x + jnp.arange(x.shape[0], dtype=jnp.float32)[:, None], ["(b, 3)"], [_x(2, 3)], [_x(6, 3)]),
    "concatenate_zeros_like": (lambda x: jnp.concatenate([x, jnp.zeros_like(x)], 0), ["(b, 3)"], [_x(2, 3)],
                               [_x(5, 3)]),
    "pad": (lambda x: jnp.pad(x, ((1, 2), (0, 1))), ["(b, 3)"], [_x(2, 3)], [_x(4, 3)]),
    "slices": (lambda x: x[1:] - x[:-1], ["(b, 3)"], [_x(3, 3)], [_x(6, 3)]),
    "dense": (lambda x: jnp.tanh(x @ W + 0.5), ["(b, 3)"], [_x(2, 3)], [_x(9, 3)]),
    # rows b * 2 flattened for the FULLY_CONNECTED and unflattened after: it reads x as it is
    "dense_over_rows": (lambda x: jax.nn.relu(x @ W + 0.5), ["(b, 2, 3)"], [_x(1, 2, 3)], [_x(5, 2, 3)]),
    "reductions": (lambda x: (jnp.mean(x, axis=0), jnp.sum(x), jnp.max(x, axis=1)), ["(b, 3)"], [_x(2, 3)],
                   [_x(5, 3)]),
    "full": (lambda x: x * jnp.full((x.shape[0], 1), 3.0, jnp.float32), ["(b, 3)"], [_x(2, 3)], [_x(4, 3)]),
    # Sizes read at run time by the builtin that takes them as a tensor: TRANSPOSE_CONV's output
    # shape (the batch packed with the known sizes), SPLIT_V's sizes, SCATTER_ND's shape.
    "conv_transpose": (lambda x: jax.nn.relu(lax.conv_transpose(x, K, (2, 2), "SAME", dimension_numbers=NHWC) + 0.1),
                       ["(b, 4, 4, 3)"], [_x(2, 4, 4, 3)], [_x(5, 4, 4, 3)]),
    "split_sizes": (lambda x: jnp.split(x, [1]), ["(b, 3)"], [_x(3, 3)], [_x(6, 3)]),
    "split_halves": (lambda x: [h * 2 for h in jnp.split(x, 2)], ["(2*b, 3)"], [_x(4, 3)], [_x(10, 3)]),
    "scatter_add": (lambda x, i: jnp.zeros_like(x).at[i].add(x), ["(b,)", "(b,)"],
                    [_x(4), np.array([0, 2, 2, 1], np.int32)], [_x(6), np.array([5, 0, 5, 1, 1, 3], np.int32)]),
    # a reversal of 7 axes: the rules merge them through rank-7 RESHAPEs (LiteRT's RESHAPE takes any rank)
    "rank7_transpose": (lambda x: jnp.transpose(x, tuple(range(6, -1, -1))), ["(b, 1, 2, 1, 2, 1, 2)"],
                        [_x(3, 1, 2, 1, 2, 1, 2)], [_x(5, 1, 2, 1, 2, 1, 2)]),
    "two_inputs": (lambda x, y: jnp.concatenate([x, y], 1).sum(0) + y.shape[1], ["(b, n)", "(b, 2*n)"],
                   [_x(2, 1), _x(2, 2)], [_x(3, 2), _x(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_polymorphic_program_written_from_the_graph_matches_jax_at_two_sizes(name):
    fun, shapes, args, other = PROGRAMS[name]
    program = trace(fun, tuple(args), shapes)
    data = graph_tflite_bytes(program)
    for inputs in (args, other):
        outs = run_tflite(data, dict(zip(program.in_names, inputs)))
        expected = jax.tree_util.tree_leaves(jax.jit(fun)(*inputs))
        for out_name, want in zip(program.out_names, expected):
            np.testing.assert_allclose(outs[out_name], np.asarray(want), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} at {[a.shape for a in inputs]}")


@pytest.mark.parametrize("name,builtin", [("conv_transpose", "TRANSPOSE_CONV"), ("split_sizes", "SPLIT_V"),
                                          ("scatter_add", "SCATTER_ND")])
def test_run_time_shape_read_by_its_builtin_with_no_more_operators_than_tf_path(name, builtin, tmp_path):
    """TRANSPOSE_CONV, SPLIT_V and SCATTER_ND read the shape computed at run time (SHAPE,
    STRIDED_SLICE, PACK: JAX's ``b * 1 + 0`` folded as grappler folds it), as TF's path's file for
    the same polymorphic program does, with no more operators than it."""
    from noxla.pipeline.tf_path import export
    from tests.test_graph_tflite import _op_counts
    fun, shapes, args, _ = PROGRAMS[name]
    graph = _op_counts(graph_tflite_bytes(trace(fun, tuple(args), shapes)))
    export(fun, args, tflite=str(tmp_path / "tf.tflite"), polymorphic_shapes=shapes)   # TF's path
    with open(tmp_path / "tf.tflite", "rb") as f:
        converted = _op_counts(f.read())
    assert graph[builtin] == converted[builtin] == 1
    if name == "conv_transpose":   # the converter's form: SHAPE, STRIDED_SLICE, PACK, TRANSPOSE_CONV
        assert graph == converted
    assert sum(graph.values()) <= sum(converted.values()), (graph - converted, converted - graph)


def _signatures(path: str) -> list:
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=path)
    runner = interpreter.get_signature_runner()
    details = [*runner.get_input_details().items(), *runner.get_output_details().items()]
    return [(name, list(d["shape"]), list(d["shape_signature"])) for name, d in sorted(details)]


def test_export_takes_the_graph_and_writes_the_converters_shapes_and_signatures(tmp_path, monkeypatch):
    """The default export of a polymorphic program is the graph's, its inputs and outputs shaped as
    TF's path (its converter) shapes them: 1 in ``shape``, -1 in ``shape_signature``."""
    fun, shapes, args, other = PROGRAMS["two_inputs"]
    steps = []
    graph_path = noxla.export_tflite(fun, *args, path=str(tmp_path / "graph.tflite"), polymorphic_shapes=shapes,
                                     on_step=lambda name, s: steps.append(name))
    assert "lower+write (graph tflite)" in steps, steps
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")
    tf_path = noxla.export_tflite(fun, *args, path=str(tmp_path / "tf.tflite"), polymorphic_shapes=shapes)
    assert _signatures(graph_path) == _signatures(tf_path)
    assert _signatures(graph_path) == [("output", [1], [-1]), ("x", [1, 1], [-1, -1]), ("y", [1, 1], [-1, -1])]
    program = trace(fun, tuple(args), shapes)
    outs = run_tflite(graph_path, dict(zip(program.in_names, other)))
    np.testing.assert_allclose(outs[program.out_names[0]], np.asarray(jax.jit(fun)(*other)), rtol=1e-5)


def test_an_input_returned_unchanged_is_copied_at_its_run_time_shape():
    fun = lambda x: (x, x * 2)  # noqa: E731
    program = trace(fun, (_x(2, 3),), ["(b, 3)"])
    outs = run_tflite(graph_tflite_bytes(program), {program.in_names[0]: _x(5, 3)})
    np.testing.assert_array_equal(outs[program.out_names[0]], _x(5, 3))


def test_a_size_known_only_at_run_time_is_never_computed_with():
    """A pass that needs an unknown size's value raises Uncovered (the export takes TF's path) instead
    of crashing or guessing; it equals only itself, and a reshape's fresh sizes equal no other."""
    for compute in (lambda: DYNAMIC + 1, lambda: 2 * DYNAMIC, lambda: int(DYNAMIC), lambda: DYNAMIC > 1,
                    lambda: np.prod((DYNAMIC, 3)), lambda: np.zeros((DYNAMIC, 3)),
                    lambda: np.asarray((DYNAMIC, 3), np.int32), lambda: min(DYNAMIC, 4)):
        with pytest.raises(Uncovered, match="known only at run time"):
            compute()
    assert (DYNAMIC, 3) == (DYNAMIC, 3) and DYNAMIC != 1 and 0 not in (DYNAMIC, 3)
    assert (RunTimeSize(), 3) != (RunTimeSize(), 3)
    assert broadcast_shape((DYNAMIC, 3), (1, 3)) == (DYNAMIC, 3) == broadcast_shape((3,), (DYNAMIC, 1))
    assert broadcast_shape((DYNAMIC, 3), (RunTimeSize(), 3)) is None and broadcast_shape((DYNAMIC,), (4,)) is None


def _poly_cases():
    from tests.test_graph import POLY_CASES
    return POLY_CASES


@pytest.mark.slow
@pytest.mark.parametrize("case", grouped_cases(_poly_cases()))
def test_polymorphic_case_through_the_graph_tflite_matches_jax_at_two_sizes(case):
    """Each polymorphic rule case the writer covers, at its own sizes (``tools.graph_coverage``'s
    check) and with each symbolic size grown by 1 (tests/test_graph.py's sizes for the TF.js
    writer), on LiteRT against JAX."""
    from noxla.runtimes.verify import jax_outputs
    from tests.differential import assert_matches, default_mode_inputs
    from tests.test_graph import SIZE_STEPS, _inputs_at
    from tools.graph_coverage import tflite_case
    outcome = tflite_case(case)
    if outcome != "matched":
        pytest.skip(f"{outcome}: TF's path exports it" if outcome.startswith("uncovered")
                    else "JAX cannot run it or TFLite's check refuses it: nothing to write")
    program, args, _ = default_mode_inputs(case)
    data = graph_tflite_bytes(program)
    sized = _inputs_at(program, args, SIZE_STEPS[1])
    outs = run_tflite(data, dict(zip(program.in_names, sized)))
    assert_matches(jax_outputs(case.fun, sized), [outs[n] for n in program.out_names], program.out_names,
                   case.atol, case.rtol, where=f"{case.id} [graph tflite, sizes +{SIZE_STEPS[1]}]")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vae_decoder", "unet", "sampling_vae_decoder"])
def test_zoo_model_with_transposed_convolutions_at_a_polymorphic_batch(name, tmp_path):
    """Their transposed convolutions' output shape holds the run-time batch: written from the graph
    (a TRANSPOSE_CONV reading the packed shape), equal to JAX at batches 1 and 3, with no more
    operators than TF's path's file of the same polymorphic program."""
    from noxla.pipeline.tf_path import export
    from tests import zoo
    from tests.differential import assert_matches
    from tests.test_graph_tflite import _op_counts
    model = zoo.build([name])[name]
    example = model.inputs(1)
    program = trace(model.fun, tuple(example), model.polymorphic_shapes)
    data = graph_tflite_bytes(program)
    for batch in (1, 3):
        args = model.inputs(batch, seed=batch)
        outs = run_tflite(data, dict(zip(program.in_names, args)))
        expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(model.fun)(*args))]
        assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, 1e-5, 1e-5,
                       f"{name} batch={batch} [tflite, graph, polymorphic]")
    path = str(tmp_path / "tf_path.tflite")
    export(model.fun, example, tflite=path, polymorphic_shapes=model.polymorphic_shapes)   # TF's path
    with open(path, "rb") as f:
        converted = _op_counts(f.read())
    graph = _op_counts(data)
    assert graph["TRANSPOSE_CONV"] == converted["TRANSPOSE_CONV"] > 0
    assert sum(graph.values()) <= sum(converted.values()), (graph - converted, converted - graph)


@pytest.mark.parametrize("fn", [lax.argmax, lax.argmin])
def test_an_empty_output_of_a_run_time_size_is_filled_at_run_time(fn):
    """No constant holds a size known only at run time: an empty output of one is TF's path's FILL of
    its run-time shape and a CAST to int16 (argmax/argmin:empty_symbolic_int16_index), at any size."""
    from tests.test_graph_tflite import _op_counts
    fun = lambda x: fn(x, 0, np.int16)  # noqa: E731
    program = trace(fun, (np.zeros((3, 4, 0), np.int8),), ["(3, b, 0)"])
    data = graph_tflite_bytes(program)
    assert _op_counts(data) == {"SHAPE": 1, "STRIDED_SLICE": 1, "PACK": 1, "FILL": 1, "CAST": 1}, _op_counts(data)
    for b in (1, 4, 7):
        x = np.zeros((3, b, 0), np.int8)
        got = run_tflite(data, {program.in_names[0]: x})[program.out_names[0]]
        expected = np.asarray(jax.jit(fun)(x))
        assert (got.shape, got.dtype) == (expected.shape, expected.dtype) == ((b, 0), np.int16)
