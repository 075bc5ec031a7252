"""The .tflite exported for LiteRT.js's WebGPU delegate (``target="litertjs-webgpu"``): the ops the
delegate refuses are replaced by exact alternatives, which LiteRT matches JAX with, while the
default .tflite keeps its leaner ops; from noxla's graph (the default) and from TF's path
(``NOXLA_TFLITE_GRAPH=0``). tests/test_litertjs.py runs TF's path's files on WebGPU in Chromium,
tests/test_graph_tflite_variants.py the graph's."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

import noxla
from noxla.runtimes import run_tflite, tflite_op_names
from noxla.runtimes.verify import jax_outputs, relative_error

pytestmark = pytest.mark.slow


def _ops_and_check(fun, args, path, target, writer):
    """The .tflite's ops (with each TRANSPOSE_CONV's version) after checking it against JAX in LiteRT,
    and that ``writer`` wrote it."""
    from noxla.writers.tflite.flatbuffer.schema import read_model_file, schema
    steps = []
    noxla.export_tflite(fun, *args, path=str(path), target=target, on_step=lambda name, s: steps.append(name))
    assert ("lower+write (graph tflite)" in steps) == (writer == "graph"), steps
    from noxla.front.tracing import trace
    program = trace(fun, tuple(args))
    outs = run_tflite(str(path), dict(zip(program.in_names, args)))
    for name, expected in zip(program.out_names, jax_outputs(fun, args)):
        assert outs[name].shape == expected.shape and relative_error(expected, outs[name]) <= 1e-6, (target, name)
    model = read_model_file(str(path))
    versions = {c.version for c in model.operatorCodes
                if max(c.builtinCode, c.deprecatedBuiltinCode) == schema.BuiltinOperator.TRANSPOSE_CONV}
    shrinking = [op for op in model.subgraphs[0].operators
                 if isinstance(op.builtinOptions, schema.StridedSliceOptionsT) and op.builtinOptions.shrinkAxisMask]
    gathers_2d = [op for op in model.subgraphs[0].operators
                  if isinstance(op.builtinOptions, schema.GatherOptionsT)
                  and len(model.subgraphs[0].tensors[op.inputs[1]].shape) > 1]
    return tflite_op_names(str(path)), versions, len(shrinking), len(gathers_2d)


class _Decoder(nn.Module):
    @nn.compact
    def __call__(self, z):
        x = nn.relu(nn.ConvTranspose(4, (3, 3), strides=(2, 2))(z))
        return jax.nn.log_softmax(x.reshape(x.shape[0], -1))


def _embed_and_scan(table, tokens):
    rows = table[tokens]                                    # [batch, length, width]: a 2-D index gather

    def step(c, x):
        return jnp.tanh(c + x), c * 2.0
    carry, ys = jax.lax.scan(step, rows[:, 0] * 0.0, jnp.swapaxes(rows, 0, 1))
    return carry, ys


@pytest.fixture(params=["graph", "tf_path"])
def writer(request, monkeypatch):
    """Which writer takes the .tflite: noxla's graph, or TF's path (``NOXLA_TFLITE_GRAPH=0``)."""
    if request.param == "tf_path":
        monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")
    else:
        monkeypatch.delenv("NOXLA_TFLITE_GRAPH", raising=False)
    return request.param


def test_webgpu_export_replaces_the_ops_the_delegate_refuses(tmp_path, writer):
    rng = np.random.default_rng(0)
    z = rng.standard_normal((1, 4, 4, 3)).astype(np.float32)
    decoder = _Decoder()
    # A nonzero bias: the converter fuses the RELU only into a TRANSPOSE_CONV that adds one.
    params = jax.tree.map(lambda a: a + 0.1, decoder.init(jax.random.PRNGKey(0), z))
    fun = lambda z: decoder.apply(params, z)  # noqa: E731
    default, default_versions, _, _ = _ops_and_check(fun, [z], tmp_path / "d.tflite", "tflite", writer)
    webgpu, webgpu_versions, _, _ = _ops_and_check(fun, [z], tmp_path / "w.tflite", "litertjs-webgpu", writer)
    assert "LOG_SOFTMAX" in default and "LOG_SOFTMAX" not in webgpu
    # No activation fused into the TRANSPOSE_CONV: version 4 is the one with it (3 takes a bias input).
    # This decoder's uneven SAME crop is VALID + a slice there (TF's converter's STRIDED_SLICE, the
    # graph's SLICE of unit strides), the bias and RELU in the ADD after the crop (version 1), which
    # the delegate runs (tests/test_graph_tflite_variants.py runs the graph's there).
    assert default_versions == {4} and max(webgpu_versions) < 4
    crop = "SLICE" if writer == "graph" else "STRIDED_SLICE"
    assert crop in webgpu and crop not in default

    table = rng.standard_normal((10, 5)).astype(np.float32)
    tokens = rng.integers(0, 10, (2, 6)).astype(np.int32)
    default, _, default_shrinking, default_2d = _ops_and_check(_embed_and_scan, [table, tokens],
                                                               tmp_path / "d2.tflite", "tflite", writer)
    webgpu, _, webgpu_shrinking, webgpu_2d = _ops_and_check(_embed_and_scan, [table, tokens],
                                                            tmp_path / "w2.tflite", "litertjs", writer)
    assert (default, default_shrinking, default_2d) == (webgpu, webgpu_shrinking, webgpu_2d)  # litertjs: same graph
    # An unrolled scan's rows come from one UNPACK in every .tflite (one op where there was one
    # STRIDED_SLICE per step; the delegate refuses those), the 2-D embedding GATHER only in WebGPU's.
    assert default_shrinking == 0 and "UNPACK" in default and default_2d == 1
    webgpu, _, webgpu_shrinking, webgpu_2d = _ops_and_check(_embed_and_scan, [table, tokens],
                                                            tmp_path / "w3.tflite", "litertjs-webgpu", writer)
    assert webgpu_shrinking == 0 and webgpu_2d == 0 and "UNPACK" in webgpu
    # The default keeps its single GATHER: the flattened one costs two RESHAPEs on the CPU.
    assert default.count("GATHER") == webgpu.count("GATHER") == 1


def test_webgpu_target_is_checked_up_front(tmp_path):
    def f(x):
        return jnp.argmax(x, axis=-1).astype(jnp.int32)
    x = np.ones((2, 3), np.float32)
    noxla.export_tflite(f, x, path=str(tmp_path / "wasm.tflite"), target="litertjs")
    with pytest.raises(noxla.UnsupportedError, match="argmax"):
        noxla.export_tflite(f, x, path=str(tmp_path / "webgpu.tflite"), target="litertjs-webgpu")
    with pytest.raises(noxla.ExportError, match="builtin ops only"):
        noxla.export_tflite(f, x, path=str(tmp_path / "flex.tflite"), target="litertjs", allow_flex=True)


def test_cli_tflite_target(tmp_path, capfd, writer):
    from noxla.cli import main
    for target, path in (("tflite", tmp_path / "d.tflite"), ("litertjs-webgpu", tmp_path / "w.tflite")):
        assert main(["export", "--tflite", str(path), "--tflite-target", target]) == 0, capfd.readouterr().out
    # The CLI's example (an MNIST CNN) ends in log_softmax.
    assert "LOG_SOFTMAX" in tflite_op_names(str(tmp_path / "d.tflite"))
    assert "LOG_SOFTMAX" not in tflite_op_names(str(tmp_path / "w.tflite"))

