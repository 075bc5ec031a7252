"""The TF.js export's back half (graph optimisation, adapter, writer) on a graph written in TF alone,
with no JAX lowering: it runs wherever TF does (Python 3.13 beside JAX versions noxla's rules do
not import with yet: ``python -c "import tests.test_tfjs_writer_tf as t; t.main()"``)."""
import json
import os
import tempfile

import numpy as np
import tensorflow as tf

from noxla.writers.tfjs.graph_def import graph_from_graph_def
from noxla.writers.tfjs.optimize import optimized_for_tfjs
from noxla.writers.tfjs.writer import write_graph_model

RNG = np.random.default_rng(0)
KERNEL = RNG.standard_normal((3, 3, 4, 6)).astype(np.float32) / 6
DEPTHWISE = RNG.standard_normal((3, 3, 6, 1)).astype(np.float32) / 3
DENSE = RNG.standard_normal((6, 5)).astype(np.float32) / 3
BIASES = [RNG.standard_normal(n).astype(np.float32) for n in (6, 6, 5)]
BROADCAST = RNG.standard_normal((1, 5)).astype(np.float32)  # a rank-2 addend: never a fused bias


@tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 4], tf.float32)])
def _model(x):
    y = tf.nn.relu(tf.nn.conv2d(x, KERNEL, 1, "SAME") + BIASES[0])
    y = tf.nn.relu6(tf.nn.depthwise_conv2d(y, DEPTHWISE, [1, 1, 1, 1], "SAME") + BIASES[1])
    z = tf.matmul(tf.reduce_mean(y, axis=[1, 2]), DENSE) + BIASES[2]
    steps = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 0.5 + tf.constant(1.0)), (0, z))[1]
    return {"dense": z, "looped": steps + BROADCAST}


@tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 6], tf.float32)])
def _shared_depthwise(x):
    """The depthwise convolution's output is read twice: fusing the bias into it would change the
    other reader's value (TF.js's converter fused it all the same)."""
    y = tf.nn.depthwise_conv2d(x, DEPTHWISE, [1, 1, 1, 1], "SAME")
    return {"biased": tf.nn.relu6(tf.nn.bias_add(y, BIASES[1])), "raw": y * 2.0}


def _export(path: str, quantize: str | None, model=_model) -> dict:
    from tensorflow.core.framework import types_pb2

    from noxla.writers.tfjs.graph import TensorSpec
    concrete = model.get_concrete_function()
    optimized = optimized_for_tfjs(concrete.graph.as_graph_def(), concrete.inputs, concrete.outputs)
    specs = [[TensorSpec(t.name, types_pb2.DataType.Name(t.dtype.as_datatype_enum), tuple(t.shape.as_list()))
              for t in tensors] for tensors in (concrete.inputs, concrete.outputs)]
    write_graph_model(graph_from_graph_def(optimized), path, *specs, quantize=quantize, weight_shard_size_bytes=1000)
    with open(os.path.join(path, "model.json")) as f:
        return json.load(f)


def check(tmp: str, runner) -> list[str]:
    """Export the model plain and uint8, run each in TF.js cpu and wasm; what went wrong, if anything."""
    x = RNG.standard_normal((2, 8, 8, 4)).astype(np.float32)
    expected = {k: v.numpy() for k, v in _model(x).items()}
    by_tensor = {t.name: k for k, t in zip(sorted(expected), _model.get_concrete_function().outputs)}
    problems = []
    for quantize, tolerance in ((None, 1e-4), ("uint8", 0.05)):
        path = os.path.join(tmp, str(quantize))
        model = _export(path, quantize)
        ops = [n["op"] for n in model["modelTopology"]["node"]]
        if not {"_FusedConv2D", "FusedDepthwiseConv2dNative", "_FusedMatMul"} <= set(ops):
            problems.append(f"{quantize}: not fused: {sorted(set(ops))}")
        if not model["modelTopology"]["library"].get("function"):
            problems.append(f"{quantize}: the loop body is missing")
        for backend in ("cpu", "wasm"):
            got = runner.run(path, {"x:0": x}, backend)
            for key, value in got.items():
                error = float(np.max(np.abs(value - expected[by_tensor[key]])))
                if not error <= tolerance:
                    problems.append(f"{quantize} {backend} {by_tensor[key]}: max abs error {error:.3g}")
    return problems


def test_tf_graph_written_for_tfjs_runs_there(tmp_path, tfjs_runner):
    assert check(str(tmp_path), tfjs_runner) == []


def test_depthwise_convolution_read_twice_is_not_fused(tmp_path, tfjs_runner):
    model = _export(str(tmp_path), None, _shared_depthwise)
    assert "FusedDepthwiseConv2dNative" not in [n["op"] for n in model["modelTopology"]["node"]]
    x = RNG.standard_normal((2, 8, 8, 6)).astype(np.float32)
    expected = _shared_depthwise(x)
    names = dict(zip((t.name for t in _shared_depthwise.get_concrete_function().outputs), sorted(expected)))
    got = tfjs_runner.run(str(tmp_path), {"x:0": x}, "cpu")
    for tensor, key in names.items():
        np.testing.assert_allclose(got[tensor], expected[key].numpy(), atol=1e-5, err_msg=key)


def main():
    from noxla.runtimes import TfjsRunner
    runner = TfjsRunner()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            problems = check(tmp, runner)
    finally:
        runner.close()
    print("\n".join(problems) or "ok: TF.js cpu and wasm match TF, plain and uint8")
    return int(bool(problems))


@tf.function
def _called(v):
    return tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(h) * 2.0), (0, v))[1]


@tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
def _calling(x):
    return {"y": _called(x) + 1.0}


def test_function_calls_are_inlined_and_their_loops_kept(tmp_path, tfjs_runner):
    """A call of another tf.function is a PartitionedCall, which TF.js does not run: inlined, with its
    while loop kept a StatelessWhile (not lowered to Switch/Merge)."""
    model = _export(str(tmp_path), None, _calling)
    ops = {n["op"] for n in model["modelTopology"]["node"]}
    assert "PartitionedCall" not in ops and "StatelessWhile" in ops, ops
    x = np.array([0.3, -1.2], np.float32)
    got, = tfjs_runner.run(str(tmp_path), {"x:0": x}, "cpu").values()
    np.testing.assert_allclose(got, _calling(x)["y"].numpy(), atol=1e-6)


@tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
def _top_k_in_loop(x):
    def body(i, h, order):
        values, indices = tf.math.top_k(h, 4)
        first, *_ = tf.unstack(values)  # a list output (Unpack's N tensors)
        return i + 1, values * 0.5 - first, indices
    return {"order": tf.while_loop(lambda i, h, o: i < 2, body, (0, x, tf.zeros(4, tf.int32)))[2]}


def test_body_tensors_are_named_by_flat_output_index(tmp_path, tfjs_runner):
    """Inside a body TF names TopKV2's indices 'TopKV2:indices:0', which TF.js read as its values."""
    model = _export(str(tmp_path), None, _top_k_in_loop)
    x = np.array([0.3, -1.2, 2.0, 0.7], np.float32)
    for backend in ("cpu", "wasm"):
        got, = tfjs_runner.run(str(tmp_path), {"x:0": x}, backend).values()
        np.testing.assert_array_equal(got, _top_k_in_loop(x)["order"].numpy(), err_msg=backend)
    bodies = model["modelTopology"]["library"]["function"]
    inputs = [i for f in bodies for n in f["nodeDef"] for i in n.get("input", [])]
    assert all(i.count(":") < 2 for i in inputs), inputs
