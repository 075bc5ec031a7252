"""The graph TFLite writer (noxla.writers.tflite) against TF's converter, operator for operator: a small
CNN, real-size Keras CNNs and transformer encoders (tools/real_models.py, tiny), selects, gathers,
pools, DenseGeneral and transposed convolutions, each equal to JAX on LiteRT; and what it leaves to
TF's path (or writes no longer than it) where the converter writes a form its legalized ops lack.
(These held the direct writer, noxla's first TensorFlow-free writer, to the converter before.)"""
from __future__ import annotations

import collections
import os
import sys
from unittest import mock

import flax.linen
import jax
import numpy as np
import pytest

from noxla.front.tracing import trace
from noxla.runtimes import run_tflite
from noxla.runtimes.verify import relative_error
from tests.small_cnn import CNN_INPUT, small_cnn
from tests.test_graph_tflite import graph_tflite_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- a small CNN

def _ops(data: bytes) -> list:
    """Each operator's builtin, input and output shapes and options, in order."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    graph = model.subgraphs[0]
    shape = lambda i: tuple(int(d) for d in graph.tensors[i].shape) if i >= 0 else None  # noqa: E731
    out = []
    for op in graph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        options = vars(op.builtinOptions) if op.builtinOptions is not None else {}
        out.append((names[max(code.builtinCode, code.deprecatedBuiltinCode)], [shape(i) for i in op.inputs],
                    [shape(i) for i in op.outputs],
                    sorted((k, v.tolist() if hasattr(v, "tolist") else v) for k, v in options.items())))
    return out


def _tf_path_bytes(fun, args, tmp_path) -> bytes:
    from noxla.pipeline.tf_path import export
    path = str(tmp_path / "tf_path.tflite")
    export(fun, args, tflite=path)
    with open(path, "rb") as f:
        return f.read()


def test_small_cnn_is_the_converters_graph_and_matches_jax(tmp_path):
    program = trace(small_cnn, (CNN_INPUT,))
    data = graph_tflite_bytes(program)
    converted = _tf_path_bytes(small_cnn, (CNN_INPUT,), tmp_path)
    kinds = [op[0] for op in _ops(data)]
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "HARD_SWISH", "MEAN", "MAX_POOL_2D", "SOFTMAX",
            "FULLY_CONNECTED"} <= set(kinds), kinds
    assert _ops(data) == _ops(converted)
    expected = np.asarray(jax.jit(small_cnn)(CNN_INPUT))
    for written in (data, converted):
        got = run_tflite(written, {program.in_names[0]: CNN_INPUT})[program.out_names[0]]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# Of error / max(1, max |JAX|). tools/real_models.py keeps these random networks' activations at unit
# scale, and so at float32 they amplify rounding: JAX's own logits move by 9.9e-5 (EfficientNetB0)
# and 5.1e-4 (ResNet50) of their scale when the weights are rounded by half an ulp, and a
# BatchNormalization folded into a convolution rounds every weight once more. 10x that; a wrong
# weight moves them by O(1) (tests/test_browser_benchmark.py).
KERAS_TOLERANCE = {"keras_mobilenet_v3_small": 1e-4, "keras_efficientnet_b0": 1e-3, "keras_resnet50": 5e-3}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["keras_mobilenet_v3_small", "keras_efficientnet_b0", "keras_resnet50"])
def test_keras_cnn_is_the_converters_graph_and_matches_jax(name, tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import real_models
    model = real_models.build([name], tiny=True)[name]
    program = trace(model.fun, tuple(model.example))
    data = graph_tflite_bytes(program)
    assert _ops(data) == _ops(_tf_path_bytes(model.fun, model.example, tmp_path))
    got = run_tflite(data, dict(zip(program.in_names, model.example)))[program.out_names[0]]
    assert relative_error(np.asarray(jax.jit(model.fun)(*model.example)), got) < KERAS_TOLERANCE[name]


@pytest.mark.parametrize("name, own, fewer", [("whisper_tiny_encoder", "CONV_2D", {}),
                                              ("vit_b16", "CONV_2D", {}), ("bert_base", "GATHER", {})])
def test_transformer_encoder_has_the_converters_operators_and_matches_jax(name, own, fewer, tmp_path):
    """Whisper's (1-D convolutions, GELU), ViT's (patches, class token) and BERT's (token embeddings:
    a gather with negative indices wrapped and out-of-range ones filled) encoders: the TF path's
    operators, kind for kind and option for option (the converter orders them otherwise), with
    four heads of four, so that attention's scale is a power of two the converter folds too.
    (Whisper's had one RESHAPE fewer until TF's path's remove_reshape_pairs took a reshape back to
    the scores' shape without its leading unit axis too.)"""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import real_models
    weights, apply, example = real_models.BUILDERS[name](dict(real_models.TINY[name], heads=4),
                                                         np.random.default_rng(0))
    fun = lambda *args: apply(weights, *args)  # noqa: E731
    program = trace(fun, tuple(example))
    data = graph_tflite_bytes(program)
    summary = lambda data: collections.Counter((kind, repr(options)) for kind, _, _, options in _ops(data))  # noqa: E731
    written, converted = summary(data), summary(_tf_path_bytes(fun, example, tmp_path))
    assert not written - converted and converted - written == collections.Counter(fewer), (written - converted,
                                                                                          converted - written)
    assert {"BATCH_MATMUL", "SOFTMAX", "GELU", "FULLY_CONNECTED", own} <= {k for k, _ in written}
    got = run_tflite(data, dict(zip(program.in_names, example)))[program.out_names[0]]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fun)(*example)), rtol=1e-5, atol=2e-5)


_X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
_I = np.array([2, -1, 0, 5], np.int32)


@pytest.mark.parametrize("fun, args", [
    (lambda x: jax.numpy.where(x > 0, x, 0.0), (_X,)),
    (lambda i: jax.numpy.where(i < 1, i, 3), (_I,)),
    (lambda x, i: jax.numpy.take(x, i, axis=1, mode="clip"), (_X, _I)),
    (lambda x, i: jax.numpy.take(x, i.reshape(2, 2), axis=1), (_X, _I)),
], ids=["where_float_splat", "where_int32_splat", "take_clip", "take_fill_2d_indices"])
def test_selects_and_gathers_have_the_converters_operators_and_match_jax(fun, args, tmp_path):
    """The converter reads a float constant of one value in a select as a scalar (``SELECT_V2``),
    an int32 one whole (``SELECT``); a gather's index is clamped, and masked where it filled."""
    program = trace(fun, args)
    data = graph_tflite_bytes(program)
    kinds = lambda data: sorted((kind, [len(s) for s in shapes]) for kind, shapes, _, _ in _ops(data))  # noqa: E731
    assert kinds(data) == kinds(_tf_path_bytes(fun, args, tmp_path))
    got = run_tflite(data, dict(zip(program.in_names, args)))[program.out_names[0]]
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fun)(*args)))


_POOLED = np.random.default_rng(1).standard_normal((2, 7, 6, 3)).astype(np.float32)


@pytest.mark.parametrize("fun", [
    lambda x: flax.linen.avg_pool(x, (2, 2), (2, 2)),
    lambda x: flax.linen.avg_pool(x, (3, 3), (2, 2), padding="SAME"),
    lambda x: jax.nn.log_softmax(x * 3.0),
], ids=["avg_pool_valid", "avg_pool_same", "log_softmax"])
def test_pools_and_log_softmax_are_the_converters_graph_and_match_jax(fun, tmp_path):
    """flax's avg_pool is a window sum divided by its size: one AVERAGE_POOL_2D, after a PAD where
    padded (a SAME average would divide by the unpadded count); JAX's log_softmax one LOG_SOFTMAX."""
    program = trace(fun, (_POOLED,))
    data = graph_tflite_bytes(program)
    assert _ops(data) == _ops(_tf_path_bytes(fun, (_POOLED,), tmp_path))
    got = run_tflite(data, {program.in_names[0]: _POOLED})[program.out_names[0]]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fun)(_POOLED)), rtol=1e-5, atol=1e-6)


def test_a_stride_past_the_window_keeps_same_and_matches_jax(tmp_path):
    """The one graph that differs from the TF path's by design: the TF path pads and convolves VALID
    where a stride steps past the window (for TF.js's wasm SAME, which wrote zeros); LiteRT
    computes SAME right there, so the writer keeps one CONV_2D."""
    w = np.random.default_rng(1).standard_normal((1, 3, 3, 4)).astype(np.float32)
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 3)).astype(np.float32)
    fun = lambda x: jax.lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))  # noqa: E731
    program = trace(fun, (x,))
    data = graph_tflite_bytes(program)
    assert [op[0] for op in _ops(data)] == ["CONV_2D"]
    assert [op[0] for op in _ops(_tf_path_bytes(fun, (x,), tmp_path))] == ["PAD", "CONV_2D"]
    got = run_tflite(data, {program.in_names[0]: x})[program.out_names[0]]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fun)(x)), rtol=1e-5, atol=1e-5)


def test_a_window_sum_not_averaged_is_no_longer_than_the_tf_paths(tmp_path):
    """An average pool scaled otherwise is one AVERAGE_POOL_2D and the scale; a window sum (no pool
    builtin sums) is written no longer than TF's path writes it."""
    program = trace(lambda x: flax.linen.avg_pool(x, (2, 2), (2, 2)) * 4.0 + 1.0, (_POOLED,))
    assert "AVERAGE_POOL_2D" in [op[0] for op in _ops(graph_tflite_bytes(program))]
    _no_longer_than_the_tf_paths(lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 1, 1, 1),
                                                                  "VALID"), (_POOLED,), tmp_path)


def _no_longer_than_the_tf_paths(fun, args, tmp_path) -> None:
    """Written by the graph writer with JAX's values and no more operators than TF's path writes."""
    program = trace(fun, args)
    data = graph_tflite_bytes(program)
    assert len(_ops(data)) <= len(_ops(_tf_path_bytes(fun, args, tmp_path))), _ops(data)
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    for name, want in zip(program.out_names, jax.tree_util.tree_leaves(jax.jit(fun)(*args))):
        np.testing.assert_allclose(outs[name], np.asarray(want), rtol=1e-5, atol=1e-5)


_HEADS_IN = np.random.default_rng(2).standard_normal((8, 4, 3)).astype(np.float32)   # [in, heads, dim]
_HEADS_OUT = np.random.default_rng(3).standard_normal((4, 3, 8)).astype(np.float32)  # [heads, dim, out]


@pytest.mark.parametrize("fun, shape", [
    (lambda x: jax.lax.dot_general(x, _HEADS_IN, (((2,), (0,)), ((), ()))), (2, 5, 8)),
    (lambda x: jax.lax.dot_general(x, _HEADS_IN, (((1,), (0,)), ((), ()))), (5, 8)),
    (lambda x: jax.lax.dot_general(x, _HEADS_OUT, (((2, 3), (0, 1)), ((), ()))), (2, 5, 4, 3)),
    (lambda x: jax.lax.dot_general(x, _HEADS_OUT, (((3, 2), (1, 0)), ((), ()))), (2, 5, 4, 3)),
    (lambda x: jax.nn.relu(jax.lax.dot_general(x, _HEADS_OUT, (((2, 3), (0, 1)), ((), ()))) + 1.0), (2, 5, 4, 3)),
], ids=["into_heads", "into_heads_2d", "from_heads", "from_heads_pairs_reordered", "from_heads_bias_relu"])
def test_dense_general_is_the_converters_graph_and_matches_jax(fun, shape, tmp_path):
    """Flax's DenseGeneral (a weight of rank 3: attention's projections into and out of heads) is
    a FULLY_CONNECTED between the RESHAPEs that join x's contracted axes and split its output."""
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    program = trace(fun, (x,))
    data = graph_tflite_bytes(program)
    assert _ops(data) == _ops(_tf_path_bytes(fun, (x,), tmp_path))
    assert "FULLY_CONNECTED" in [op[0] for op in _ops(data)]
    got = run_tflite(data, {program.in_names[0]: x})[program.out_names[0]]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fun)(x)), rtol=1e-5, atol=1e-5)


_IMAGE = np.random.default_rng(5).standard_normal((1, 5, 6, 3)).astype(np.float32)


def _conv_transpose(features, kernel, strides, padding="SAME"):
    module = flax.linen.ConvTranspose(features, kernel, strides, padding=padding)
    variables = module.init(jax.random.PRNGKey(0), _IMAGE)
    variables = jax.tree_util.tree_map(lambda v: v + 0.1, variables)   # a bias that is not zero
    return lambda x: jax.nn.relu(module.apply(variables, x))


@pytest.mark.parametrize("fun", [_conv_transpose(4, (3, 3), (2, 2)), _conv_transpose(4, (2, 2), (2, 2)),
                                 _conv_transpose(2, (3, 2), (2, 1))], ids=["3x3_s2", "2x2_s2", "3x2_s2x1"])
def test_transposed_convolution_is_the_converters_graph_and_matches_jax(fun, tmp_path):
    """flax's ConvTranspose (SAME) is one TRANSPOSE_CONV of the flipped kernel, its bias and ReLU fused."""
    program = trace(fun, (_IMAGE,))
    data = graph_tflite_bytes(program)
    assert [op[0] for op in _ops(data)] == ["TRANSPOSE_CONV"]
    assert _ops(data) == _ops(_tf_path_bytes(fun, (_IMAGE,), tmp_path))
    got = run_tflite(data, {program.in_names[0]: _IMAGE})[program.out_names[0]]
    np.testing.assert_allclose(got, np.asarray(jax.jit(fun)(_IMAGE)), rtol=1e-5, atol=1e-5)


def test_a_transposed_convolution_cropped_otherwise_is_no_longer_than_the_tf_paths(tmp_path):
    _no_longer_than_the_tf_paths(_conv_transpose(4, (3, 3), (2, 2), padding="VALID"), (_IMAGE,), tmp_path)


@pytest.mark.parametrize("name", ["cnn", "vae_decoder", "unet"])
def test_zoo_models_have_the_converters_graph(name, tmp_path):
    """Zoo models (tests/zoo.py) of convolutions: the TF path's operators, in its order, and JAX's
    result on LiteRT."""
    from tests import zoo
    model = zoo.build()[name]
    args = tuple(model.inputs(1))
    program = trace(model.fun, args)
    data = graph_tflite_bytes(program)
    assert _ops(data) == _ops(_tf_path_bytes(model.fun, args, tmp_path))
    got = run_tflite(data, dict(zip(program.in_names, args)))[program.out_names[0]]
    np.testing.assert_allclose(got, np.asarray(jax.jit(model.fun)(*args)), rtol=1e-5, atol=2e-5)


def _rotated(x):
    x1, x2 = x[..., :2], x[..., 2:]
    return jax.numpy.concatenate([x1 * 0.5 - x2 * 0.25, x2 * 0.5 + x1 * 0.25], -1)


# What the TF path writes shorter than the rules' ops, each now no longer from the graph: the reason
# where ``decline.py`` finds TF's path's flatbuffer passes write it shorter (they then run on the
# graph's file: ``noxla.writers.tflite.Passes.merged``; before, the writer declined it).
_SHORTER = {
    "rotary_embedding": (_rotated, [(3, 4)], None),
    "slice_of_a_join": (lambda x, y: jax.numpy.concatenate([x * 2, y * 3])[:3], [(3, 4), (2, 4)], None),
    "repeated_keys": (lambda q, k: jax.numpy.einsum("thd,shd->hts", q, jax.numpy.repeat(k, 2, axis=1)),
                      [(5, 4, 8), (6, 2, 8)], None),
    "reshape_pair": (lambda x: jax.nn.relu(x.reshape(2, 6) * 2.0).reshape(3, 4) @ np.ones((4, 4), np.float32),
                     [(3, 4)], None),
    "projections_of_one_row": (lambda x: (x @ np.eye(4, dtype=np.float32) * 3, x @ np.ones((4, 2), np.float32)),
                               [(1, 4)], "projections"),
}


@pytest.mark.parametrize("name", sorted(_SHORTER))
def test_what_the_tf_path_writes_shorter_is_no_longer_here(name, tmp_path):
    import noxla.writers.tflite as writer
    fun, shapes, declined = _SHORTER[name]
    args = tuple(np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in shapes)
    found, predicate = [], writer.what_the_tf_path_does_better

    def spy(graph):
        reason = predicate(graph)
        if reason is not None:
            found.append(reason)
        return reason
    # The writer decides on the reason: TF's path's passes run on the file (read back) iff one was found.
    with mock.patch.object(writer, "what_the_tf_path_does_better", spy), \
            mock.patch.object(writer, "_read_back", wraps=writer._read_back) as read_back:
        _no_longer_than_the_tf_paths(fun, args, tmp_path)
    assert (declined is None and not found) or any(declined in f for f in found), found
    assert read_back.called == bool(found), (read_back.call_count, found)
