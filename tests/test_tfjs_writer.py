"""noxla's TF.js graph-model writer (noxla/writers/tfjs/writer.py): the format TF.js loads, its weights and
quantization, the generated op list, and (where the tensorflowjs package is installed, as an
oracle) the zoo written as TF.js's own converter wrote it."""
import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import noxla
import noxla.pipeline.tf_path as export_module
from noxla.front.tracing import trace
from noxla.writers.quantize import tfjs_quantized
from noxla.writers.tfjs.graph import Function, Graph, Node, TensorSpec, dtype_attr, shape_attr
from noxla.writers.tfjs.writer import write_graph_model
from tests import tfjs_oracle, zoo
from tools import gen_tfjs_ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(not os.path.isdir(gen_tfjs_ops.CONVERTER),
                    reason="node_modules/@tensorflow/tfjs-converter is not installed (npm install)")
def test_tfjs_op_list_is_generated_from_the_installed_tfjs_converter():
    with open(gen_tfjs_ops.OUTPUT) as f:
        assert f.read() == gen_tfjs_ops.rendered(), "stale: run python3 tools/gen_tfjs_ops.py"


@pytest.mark.parametrize("mode,levels", [("uint8", 255), ("uint16", 65535)])
def test_affine_quantization_reads_back_within_half_a_step_and_zero_exactly(mode, levels):
    data = np.random.default_rng(0).standard_normal((40, 7)).astype(np.float32)
    data[3, 3] = 0.0
    stored, q = tfjs_quantized(data, mode)
    assert stored.dtype == np.dtype(mode) and q["dtype"] == mode and q["original_dtype"] == "float32"
    back = stored.astype(np.float64) * q["scale"] + q["min"]  # TF.js's loader: v * scale + min
    assert np.max(np.abs(back - data)) <= q["scale"] / 2 + 1e-7
    assert back[3, 3] == 0.0
    assert np.isclose(q["scale"], (data.max() - data.min()) / levels)
    flat, q = tfjs_quantized(np.full((3,), 2.5, np.float32), mode)  # one value: no range to divide
    assert not flat.any() and q["min"] == 2.5 and q["scale"] == 1.0


@pytest.mark.parametrize("mode", ["uint8", "uint16", "float16"])
def test_quantization_leaves_tables_non_finite_and_non_float32_weights_exact(mode):
    for data in (np.array([1.0, 0.5, 2.0 ** -30, 7.0], np.float32), np.array([0.3, np.inf], np.float32),
                 np.arange(5, dtype=np.int32)):
        stored, q = tfjs_quantized(data, mode)
        assert q is None and stored is data
    half, q = tfjs_quantized(np.array([0.1, -0.3], np.float32), "float16")
    assert half.dtype == np.float16 and q == {"dtype": "float16", "original_dtype": "float32"}


def _affine_graph(w: np.ndarray, b: np.ndarray) -> Graph:
    """y = x @ w + b, built without TensorFlow, with a function whose constants the writer renames."""
    f32 = dtype_attr(np.float32)
    nodes = [Node("x", "Placeholder", attrs={"dtype": f32, **shape_attr((None, w.shape[0]))}),
             Node("w", "Const", attrs={"dtype": f32}, value=w),
             Node("b", "Const", attrs={"dtype": f32}, value=b),
             Node("mm", "MatMul", ["x", "w"], {"T": f32}),
             Node("y", "AddV2", ["mm", "b"], {"T": f32})]
    body = Function({"name": "body", "inputArg": [{"name": "a", "type": "DT_INT32"}],
                     "outputArg": [{"name": "out", "type": "DT_BOOL"}]},
                    [Node("Equal_3", "Const", attrs={"dtype": dtype_attr(np.int32)}, value=np.int32(3)),
                     Node("Equal_35", "Equal", ["a", "Equal_3", "^Equal_3"], {"T": dtype_attr(np.int32)}),
                     Node("Not", "LogicalNot", ["Equal_35:0"])],
                    {"out": "Not:0"})
    return Graph(nodes, [body], {"producer": 1})


def test_writer_shards_weights_and_renames_function_constants_exactly(tmp_path):
    w = np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32)
    b = np.arange(5, dtype=np.float64)  # stored as float32, as TF.js decodes no float64
    write_graph_model(_affine_graph(w, b), str(tmp_path), [TensorSpec("x:0", "DT_FLOAT", (None, 6))],
                      [TensorSpec("y:0", "DT_FLOAT", (None, 5))], weight_shard_size_bytes=50,
                      metadata={"structuredOutputKeys": ["y"]})
    model = json.loads((tmp_path / "model.json").read_text())
    assert model["format"] == "graph-model" and model["userDefinedMetadata"] == {"structuredOutputKeys": ["y"]}
    group, = model["weightsManifest"]
    assert [(e["name"], e["shape"], e["dtype"]) for e in group["weights"]] == [
        ("w", [6, 5], "float32"), ("b", [5], "float32"), ("body/Equal_3", [], "int32")]
    data = b"".join((tmp_path / p).read_bytes() for p in group["paths"])
    assert group["paths"] == [f"group1-shard{i}of3.bin" for i in (1, 2, 3)]
    assert data == w.tobytes() + b.astype(np.float32).tobytes() + np.int32(3).tobytes()
    body, = model["modelTopology"]["library"]["function"]
    # Only the exact name is renamed: not Equal_35 (a prefix match), nor the control input.
    assert [(n["name"], n.get("input")) for n in body["nodeDef"]] == [
        ("body/Equal_3", None), ("Equal_35", ["a", "body/Equal_3", "^Equal_3"]), ("Not", ["Equal_35:0"])]
    const = model["modelTopology"]["node"][1]
    assert const["attr"]["value"] == {"tensor": {"dtype": "DT_FLOAT", "tensorShape": {"dim": [{"size": "6"},
                                                                                            {"size": "5"}]}}}


@pytest.mark.parametrize("inputs, ret, message", [
    (["TopKV2:indices:0"], {"out": "Cast:0"}, "by output argument"),  # TF.js reads TopKV2's values
    (["TopKV2:1"], {"out": "Cast:0", "values": "TopKV2:0", "indices": "TopKV2:1"}, "two outputs of TopKV2"),
])
def test_writer_refuses_body_tensors_tfjs_misreads(tmp_path, inputs, ret, message):
    """Inside a body TF.js reads ``node:N`` only, and one output per returned node."""
    i32 = dtype_attr(np.int32)
    body = Function({"name": "body", "inputArg": [{"name": "a", "type": "DT_FLOAT"}],
                     "outputArg": [{"name": k, "type": "DT_FLOAT"} for k in ret]},
                    [Node("k", "Const", attrs={"dtype": i32}, value=np.int32(2)),
                     Node("TopKV2", "TopKV2", ["a", "k"], {"T": dtype_attr(np.float32)}),
                     Node("Cast", "Cast", inputs, {"SrcT": i32, "DstT": dtype_attr(np.float32)})], ret)
    graph = Graph([Node("x", "Placeholder", attrs={"dtype": dtype_attr(np.float32)})], [body], {"producer": 1})
    with pytest.raises(noxla.ExportError, match=message):
        spec = [TensorSpec("x:0", "DT_FLOAT", (3,))]
        write_graph_model(graph, str(tmp_path), spec, spec)


def test_op_check_keeps_a_jaxprs_constants():
    """JAX 0.11+ folded ClosedJaxpr into Jaxpr: closing one again with no constants dropped its own."""
    import jax
    import jax.numpy as jnp

    from noxla.writers.tfjs import ops as tfjs_ops
    w = jnp.arange(3.0)
    program = tfjs_ops._as_program(jax.make_jaxpr(lambda x: x * w)(np.ones(3, np.float32)))
    consts = program.closed_jaxpr.consts
    assert len(consts) == 1 and np.array_equal(consts[0], w)


def test_writer_output_runs_in_tfjs(tmp_path, tfjs_runner):
    w = np.random.default_rng(2).standard_normal((6, 5)).astype(np.float32)
    b = np.random.default_rng(3).standard_normal(5).astype(np.float32)
    graph = _affine_graph(w, b)
    graph.functions = []
    x = np.random.default_rng(4).standard_normal((3, 6)).astype(np.float32)
    for quantize, tolerance in ((None, 1e-5), ("uint16", 1e-3), ("float16", 1e-2)):
        path = str(tmp_path / str(quantize))
        write_graph_model(graph, path, [TensorSpec("x:0", "DT_FLOAT", (None, 6))],
                          [TensorSpec("y:0", "DT_FLOAT", (None, 5))], quantize=quantize, weight_shard_size_bytes=64)
        for backend in ("cpu", "wasm"):
            got, = tfjs_runner.run(path, {"x:0": x}, backend).values()
            np.testing.assert_allclose(got, x @ w + b, atol=tolerance, err_msg=f"{quantize} {backend}")


# --------------------------------------------------------------------------- the converter as an oracle

MODELS = zoo.build()


def _op_counts(path: str) -> collections.Counter:
    with open(os.path.join(path, "model.json")) as f:
        topology = json.load(f)["modelTopology"]
    nodes = topology["node"] + [n for f in topology.get("library", {}).get("function", []) for n in f["nodeDef"]]
    return collections.Counter(n["op"] for n in nodes if n["op"] != "Const")


@pytest.mark.slow
@pytest.mark.skipif(not tfjs_oracle.AVAILABLE, reason="the tensorflowjs package (the oracle) is not installed")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_writes_as_the_tfjs_converter_did(name, tmp_path, tfjs_runner, monkeypatch):
    """Ours and the converter's export of each zoo model: no more ops, and the same outputs in TF.js
    (cpu and wasm), polymorphic batch and uint8 weights included."""
    model = MODELS[name]
    args = model.inputs(2)
    paths = {}
    for kind, quantize in (("ours", None), ("ours_uint8", "uint8"), ("converter", None), ("converter_uint8", "uint8")):
        if kind == "converter":
            monkeypatch.setattr(export_module, "write_tfjs", tfjs_oracle.write_tfjs)
        paths[kind] = noxla.export_tfjs(model.fun, *args, path=str(tmp_path / kind), quantize=quantize,
                                        polymorphic_shapes=model.polymorphic_shapes)
    ours, converter = _op_counts(paths["ours"]), _op_counts(paths["converter"])
    assert sum(ours.values()) <= sum(converter.values()), (ours, converter)
    named = dict(zip(trace(model.fun, args).in_names, model.inputs(3, seed=5)))
    for suffix in ("", "_uint8"):
        for backend in ("cpu", "wasm"):
            expected = tfjs_runner.run(paths["converter" + suffix], named, backend)
            actual = tfjs_runner.run(paths["ours" + suffix], named, backend)
            assert actual.keys() == expected.keys()
            for key in expected:
                np.testing.assert_allclose(actual[key], expected[key], rtol=1e-6, atol=1e-6,
                                           err_msg=f"{name}{suffix} {backend} {key}")


@pytest.mark.slow
def test_tfjs_export_needs_no_tensorflowjs_package(tmp_path):
    """A TF.js export (loop body and quantized weights included) with tensorflowjs, tf_keras, TF Hub
    and TF Decision Forests made unimportable."""
    code = (
        "import sys, importlib.abc\n"
        "BLOCKED = ('tensorflowjs', 'tf_keras', 'tensorflow_hub', 'tensorflow_decision_forests')\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import jax, numpy as np, noxla\n"
        "w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)\n"
        "f = lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + 1.0, x @ w)\n"
        f"noxla.export_tfjs(f, np.ones((2, 4), np.float32), path={str(tmp_path / 'm')!r}, quantize='uint8')\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "m" / "model.json").exists()
