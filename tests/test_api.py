"""The public API's contract: inputs, outputs, names, errors, and exports that lose nothing."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax import lax

import noxla
from noxla.runtimes import run_tflite

X = np.arange(6, dtype=np.float32).reshape(2, 3) / 7


def affine(x, params):
    return {"y": jnp.sin(x) * params["scale"] + params["shift"], "x_again": x}


PARAMS = {"scale": np.full((3,), 2.0, np.float32), "shift": np.ones((3,), np.float32)}


def test_convert_takes_pytrees_numpy_and_tensors_eagerly_and_in_graph():
    f_tf = noxla.convert(affine)
    expected = jax.tree_util.tree_map(np.asarray, affine(X, PARAMS))
    for run in (f_tf, tf.function(f_tf, autograph=False)):
        out = run(tf.constant(X), PARAMS)
        assert set(out) == {"y", "x_again"}
        np.testing.assert_allclose(out["y"].numpy(), expected["y"], rtol=1e-6)
        np.testing.assert_array_equal(out["x_again"].numpy(), X)


def test_converted_function_saves_in_a_saved_model(tmp_path):
    module = tf.Module()
    module.f = tf.function(noxla.convert(lambda x: jnp.sin(x) + 1), autograph=False,
                           input_signature=[tf.TensorSpec([2, 3], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "sm"))
    restored = tf.saved_model.load(str(tmp_path / "sm"))
    np.testing.assert_allclose(restored.f(X).numpy(), np.sin(X) + 1, rtol=1e-6)


def test_inputs_and_outputs_have_readable_names_in_every_format(tmp_path, tfjs_runner):
    tflite = noxla.export_tflite(affine, X, PARAMS, path=str(tmp_path / "m.tflite"))
    outs = run_tflite(tflite, {"x": X, "params_scale": PARAMS["scale"], "params_shift": PARAMS["shift"]})
    assert set(outs) == {"y", "x_again"}
    js = noxla.export_tfjs(affine, X, PARAMS, path=str(tmp_path / "js"))
    outs_js = tfjs_runner.run(js, {"x": X, "params_scale": PARAMS["scale"], "params_shift": PARAMS["shift"]})
    assert set(outs_js) == {"y", "x_again"}  # both outputs share shape and dtype
    with open(os.path.join(js, "demo_data.json")) as f:  # the demo page feeds the same flat names
        assert set(json.load(f)["inputs"]) == {"x", "params_scale", "params_shift"}
    np.testing.assert_allclose(outs_js["y"], outs["y"], rtol=1e-6)
    sm = noxla.export_saved_model(affine, X, PARAMS, path=str(tmp_path / "sm"))
    serve = tf.saved_model.load(sm).signatures["serving_default"]
    assert set(serve.structured_outputs) == {"y", "x_again"}


def test_shape_dtype_struct_example_args(tmp_path):
    spec = jax.ShapeDtypeStruct((2, 3), jnp.float32)
    path = noxla.export_tflite(lambda x: jnp.sin(x), spec, path=str(tmp_path / "m.tflite"))
    np.testing.assert_allclose(run_tflite(path, {"x": X})["output"], np.sin(X), rtol=1e-6)


def test_not_callable_is_a_clear_error():
    with pytest.raises(noxla.TracingError, match="expects a callable"):
        noxla.convert(42)


def test_non_array_argument_is_a_clear_error(tmp_path):
    with pytest.raises(noxla.TracingError, match="is a str, not an array.*functools.partial"):
        noxla.export_tflite(lambda x, mode: x, X, "fast", path=str(tmp_path / "m.tflite"))


def test_python_control_flow_on_traced_values_points_to_lax_cond(tmp_path):
    def branchy(x):
        if x.sum() > 0:  # the user's line, reported in the error
            return x
        return -x
    with pytest.raises(noxla.TracingError) as err:
        noxla.export_tflite(branchy, X, path=str(tmp_path / "m.tflite"))
    text = str(err.value)
    assert "lax.cond" in text and "jnp.where" in text and f"{__file__}:" in text and "branchy" in text
    assert not os.path.exists(tmp_path / "m.tflite")


def test_primitive_without_rule_names_primitive_target_and_line(tmp_path):
    def uses_callback(x):
        jax.debug.print("x = {}", x)  # a host callback: no rule, rejected up front
        return jnp.sin(x)
    with pytest.raises(noxla.UnsupportedError) as err:
        noxla.export_tflite(uses_callback, X, path=str(tmp_path / "m.tflite"))
    text = str(err.value)
    assert "debug_print" in text and "TFLite (builtins)" in text and f"{__file__}:" in text
    assert "uses_callback" in text
    assert not os.path.exists(tmp_path / "m.tflite")


def test_existing_output_is_kept_unless_overwrite(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"precious")
    with pytest.raises(noxla.ExportError, match="already exists.*overwrite=True"):
        noxla.export_tflite(lambda x: jnp.sin(x), X, path=str(path))
    assert path.read_bytes() == b"precious"
    noxla.export_tflite(lambda x: jnp.sin(x), X, path=str(path), overwrite=True)
    assert path.read_bytes() != b"precious"


def test_overwriting_a_directory_export_replaces_it_whole(tmp_path):
    path = tmp_path / "js"
    noxla.export_tfjs(lambda x: jnp.sin(x), X, path=str(path))
    (path / "stale.bin").write_bytes(b"old")
    noxla.export_tfjs(lambda x: jnp.cos(x), X, path=str(path), overwrite=True)
    assert not (path / "stale.bin").exists() and (path / "model.json").exists()


def test_failed_export_leaves_nothing_behind(tmp_path, monkeypatch):
    from noxla.pipeline import tf_path as export

    def broken(*args, **kwargs):
        raise noxla.ExportError("converter exploded")
    monkeypatch.setattr(export, "tflite_bytes", broken)
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")   # the TF path's converter
    with pytest.raises(noxla.ExportError, match="exploded"):
        noxla.export_tflite(lambda x: jnp.cumsum(x), X, path=str(tmp_path / "m.tflite"))
    assert os.listdir(tmp_path) == []


def test_graph_tflite_export_failing_mid_write_leaves_nothing_behind(tmp_path, monkeypatch):
    import noxla.writers.tflite as graph_tflite

    def failing_chunk():
        raise noxla.ExportError("disk exploded")
    monkeypatch.setattr(graph_tflite, "graph_tflite_chunks", lambda program, **variant: [b"TFL3" * 100, failing_chunk])
    with pytest.raises(noxla.ExportError, match="exploded"):
        noxla.export_tflite(lambda x: jnp.sin(x), X, path=str(tmp_path / "m.tflite"))
    assert os.listdir(tmp_path) == []


def _weight_constants(fun, x, shape):
    from noxla.front.tracing import trace
    from noxla.pipeline.tf_path import serving_function
    graph_def = serving_function(trace(fun, [x])).graph.as_graph_def()
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return [n.name for n in nodes if n.op == "Const"
            and [d.size for d in n.attr["value"].tensor.tensor_shape.dim] == list(shape)]


def test_weights_become_one_constant_each():
    weights = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    assert len(_weight_constants(lambda x: lax.sin(x @ weights) @ weights, X, (3, 3))) == 1


def test_a_weight_first_used_inside_loops_and_branches_is_emitted_once():
    weights = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    inner = jax.jit(lambda c: jnp.sin(c @ weights))

    def scanned(x):
        def step(c, _):
            c = lax.cond(c.sum() > 0, inner, lambda c: c - 1, c)
            return c, c
        return lax.scan(step, x, None, length=10)[1]
    assert len(_weight_constants(scanned, X, (3, 3))) == 1


def test_check_report_is_ok_for_a_clean_function():
    report = noxla.check(lambda x: jnp.sin(x) * 2, X, target="tfjs")
    assert report.ok and "everything converts" in report.format()


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_batch_polymorphic_export_runs_at_any_batch_size(batch, tmp_path_factory, tfjs_runner):
    outdir = tmp_path_factory.getbasetemp() / "poly_exports"
    fun = lambda x: jnp.sin(x) * 2 + x  # noqa: E731
    if not outdir.exists():
        outdir.mkdir()
        noxla.export_tflite(fun, X, path=str(outdir / "m.tflite"), polymorphic_shapes=["(b, 3)"])
        noxla.export_tfjs(fun, X, path=str(outdir / "js"), polymorphic_shapes=["(b, 3)"])
    x = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
    expected = np.asarray(fun(x))
    np.testing.assert_allclose(run_tflite(str(outdir / "m.tflite"), {"x": x})["output"], expected, rtol=1e-6)
    np.testing.assert_allclose(tfjs_runner.run(str(outdir / "js"), {"x": x})["output"], expected, rtol=1e-5)


def test_an_input_returned_unchanged_keeps_its_polymorphic_sizes_in_tflite(tmp_path):
    # Found by tests/fuzz_poly.py: the output's own copy of the input (for LiteRT.js) reshaped it to
    # its conversion-time shape, 1 where a size is symbolic, so LiteRT failed every other size.
    fun = lambda x, y: (x, lax.reduce(y, np.int32(0), lax.add, ()), x * 2)  # noqa: E731
    path = str(tmp_path / "m.tflite")
    noxla.export_tflite(fun, X, np.ones((2, 3), np.int32), path=path, polymorphic_shapes=["(b, 3)", "(c, b)"])
    x, y = np.arange(12, dtype=np.float32).reshape(4, 3), np.arange(20, dtype=np.int32).reshape(5, 4)
    outs = run_tflite(path, {"x": x, "y": y})
    for name, expected in zip(sorted(outs), fun(x, y)):
        np.testing.assert_array_equal(outs[name], expected)


def test_shared_dimension_variables_and_expressions_across_arguments():
    def f(x, y):  # x: (b, 2*n), y: (n,)
        return x.reshape((x.shape[0], 2, -1)) * y
    f_tf = noxla.convert(f, polymorphic_shapes=["(b, 2*n)", "(n,)"])
    graph = tf.function(f_tf, autograph=False, input_signature=[
        tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.float32)])
    for b, n in [(1, 2), (3, 5)]:
        x = np.random.default_rng(b).standard_normal((b, 2 * n)).astype(np.float32)
        y = np.random.default_rng(n).standard_normal((n,)).astype(np.float32)
        np.testing.assert_allclose(graph(x, y).numpy(), np.asarray(f(x, y)), rtol=1e-6)


def test_input_violating_the_specification_is_reported_not_miscomputed():
    f_tf = noxla.convert(lambda x, y: x + y, polymorphic_shapes=["(b, n)", "(b, n)"])
    with pytest.raises(noxla.ShapeMismatchError, match="input y has size 4 in dimension 1"):
        f_tf(np.ones((2, 3), np.float32), np.ones((2, 4), np.float32))
    graph = tf.function(f_tf, autograph=False, input_signature=[tf.TensorSpec([None, None], tf.float32)] * 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="polymorphic shape"):
        graph(np.ones((2, 3), np.float32), np.ones((2, 4), np.float32))


def test_non_divisible_reshape_explains_which_specification_to_fix():
    with pytest.raises(noxla.TracingError) as err:
        noxla.check(lambda x: x.reshape((2, -1)), np.ones((4, 5), np.float32), polymorphic_shapes=["(b, 5)"])
    assert "polymorphic_shapes" in str(err.value) and "Fix the specification" in str(err.value)


def test_inconclusive_comparison_explains_which_specification_to_fix():
    def f(x):
        return x[:4] if x.shape[0] >= 4 else x  # the comparison depends on b
    with pytest.raises(noxla.TracingError) as err:
        noxla.check(f, np.ones((5,), np.float32), polymorphic_shapes=["(b,)"])
    assert "Fix the specification" in str(err.value) and f"{__file__}:" in str(err.value)


def test_a_weight_used_by_every_step_of_an_unrolled_loop_is_stored_once(tmp_path):
    import json
    weights = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)

    def recurrent(x):  # the rule transposes the weight for its matmul in each of the 8 steps
        step = lambda c, _: (jnp.tanh(lax.dot_general(c, weights, (((1,), (1,)), ((), ())))) @ weights, None)
        return lax.scan(step, x, None, length=8)[0]
    path = noxla.export_tfjs(recurrent, np.ones((2, 3), np.float32), path=str(tmp_path / "js"))
    with open(os.path.join(path, "model.json")) as f:
        manifest = [w for group in json.load(f)["weightsManifest"] for w in group["weights"]]
    assert len([w for w in manifest if sorted(w["shape"]) == [3, 4]]) <= 2, manifest  # W and its transpose


def _pooled_relu(x):
    return jax.nn.relu(lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"))


def test_default_mode_fuses_and_strict_mode_keeps_nan_semantics(tmp_path):
    from noxla.runtimes import tflite_op_names
    x = np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2) - 16.0
    x[0, 0, 0, 0] = np.nan
    expected = np.asarray(_pooled_relu(x))
    assert np.isnan(expected[0, 0, 0, 0])
    strict = noxla.convert(_pooled_relu, strict=True)(x).numpy()
    np.testing.assert_array_equal(strict, expected)  # NaN where JAX has NaN
    finite = np.nan_to_num(x)
    np.testing.assert_array_equal(noxla.convert(_pooled_relu)(finite).numpy(), np.asarray(_pooled_relu(finite)))
    ops = {mode: tflite_op_names(noxla.export_tflite(_pooled_relu, x, path=str(tmp_path / f"{mode}.tflite"),
                                                     strict=mode == "strict"))
           for mode in ("default", "strict")}
    assert ops["default"] == ["MAX_POOL_2D"], ops  # the relu is fused into the pool
    assert "MAX_POOL_2D" not in ops["strict"] and len(ops["strict"]) > 1, ops


def test_a_program_of_constants_keeps_its_infinities_in_tflite(tmp_path):
    # Without inputs (or with empty ones only) every output is a constant the converter folds, and
    # it writes -inf as -FLT_MAX (float16: -65504): the export writes the exact values back.
    def f():
        return jnp.full((3,), -jnp.inf), jnp.array([jnp.inf, 1.5], jnp.float16), jnp.arange(2)
    with open(noxla.export_tflite(f, path=str(tmp_path / "m.tflite")), "rb") as file:
        got = run_tflite(file.read(), {})
    for name, expected in zip(("output_0", "output_1", "output_2"), f()):
        np.testing.assert_array_equal(got[name], expected)


def test_tflite_constants_with_equal_bytes_share_one_buffer(tmp_path):
    # 2.0f and the int32 0x40000000 have the same bytes: the converter stores two buffers, which its
    # own last step shares. tflite_bytes skips that step (its full unpack and pack of the model) and
    # finish_tflite shares them instead: TF's step must find nothing left to share.
    from tensorflow.lite.python.convert import deduplicate_readonly_buffers

    from noxla.writers.tflite.flatbuffer.schema import read_model

    def f(x, i):
        return x + 2.0, i + 0x40000000
    x, i = np.ones(3, np.float32), np.arange(3, dtype=np.int32)
    path = noxla.export_tflite(f, x, i, path=str(tmp_path / "m.tflite"))
    with open(path, "rb") as file:
        data = file.read()
    graph = read_model(bytearray(data)).subgraphs[0]
    constants = {graph.tensors[t].buffer for op in graph.operators for t in op.inputs if t not in graph.inputs}
    assert len(constants) == 1, constants
    assert bytes(deduplicate_readonly_buffers(data)) == data
    got = run_tflite(data, {"x": x, "i": i})
    for name, expected in zip(("output_0", "output_1"), f(x, i)):
        np.testing.assert_array_equal(got[name], expected)
