"""Several signatures converted on TF's path (NOXLA_TFLITE_GRAPH=0) with their large weights as
stand-ins (noxla.writers.tf.weight_stubs): the converter never sees the weights' bytes, and the .tflite still
computes what JAX computes. By default noxla's graph writes them and no converter runs: its own
test of what the stand-ins are for (each weight stored once, JAX's values) is here too."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import noxla
from noxla.writers.tf import weight_stubs
from tests import tiny_llama

# hidden 128: wq and wo are square and 64 KiB, so stubbed (wk and wv, 32 KiB, stay Consts); the
# converter would transpose them for FULLY_CONNECTED, which a square stand-in cannot show
# (weight_stubs hands them over transposed).
CONFIG = tiny_llama.Config(layers=1, vocab=256, hidden=128, heads=4, kv_heads=2, head_dim=32, ffn=256)
CACHE = 16
PARAMS = tiny_llama.init_params(CONFIG)


def _step(tokens, input_pos, mask, kv_cache):
    logits, cache = tiny_llama.step(CONFIG, PARAMS, tokens, input_pos, mask, kv_cache)
    return {"logits": logits, "kv_cache": cache}


def _signatures():
    rng = np.random.default_rng(0)
    out = {}
    for key, start, length in (("prefill_4", 0, 4), ("decode", 6, 1)):
        positions = np.arange(start, start + length, dtype=np.int32)
        # A cache of random values: a wrongly spliced K or V projection shows in the logits.
        cache = [tuple(rng.standard_normal(np.shape(x)).astype(np.float32) for x in layer)
                 for layer in tiny_llama.empty_cache(CONFIG, CACHE)]
        args = (rng.integers(0, CONFIG.vocab, (1, length)).astype(np.int32), positions,
                np.asarray(tiny_llama.causal_mask(positions, CACHE)), cache)
        out[key] = (_step, args)
    return out


def _tied_embedding():
    """keras-hub's tied embedding (below), and its weights."""
    rng = np.random.default_rng(2)
    table = (rng.standard_normal((1024, 64)) / 8).astype(np.float32)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)

    def f(ids):
        x = jnp.take(table, ids, axis=0) @ w
        return {"logits": jnp.matmul(x, jnp.transpose(table))}
    return {"decode": (f, (rng.integers(0, 1024, (1, 3)).astype(np.int32),))}, (table, w)


def _einsum_dense():
    """keras's EinsumDense kernels (below), and its weights."""
    rng = np.random.default_rng(3)
    wq = (rng.standard_normal((64, 8, 32)) / 8).astype(np.float32)
    wo = (rng.standard_normal((8, 32, 64)) / 8).astype(np.float32)

    def f(x):
        q = jnp.einsum("btd,dhk->bthk", x, wq)
        return {"y": jnp.einsum("bthk,hkd->btd", jnp.tanh(q), wo)}
    return {"decode": (f, (rng.standard_normal((1, 3, 64)).astype(np.float32),))}, (wq, wo)


def _check_against_jax(path, signatures):
    from ai_edge_litert.interpreter import Interpreter

    from noxla.front.tracing import trace
    interpreter = Interpreter(model_path=path)
    for key, (fun, args) in signatures.items():
        program = trace(fun, args)
        outs = interpreter.get_signature_runner(key)(**dict(zip(program.in_names, jax.tree_util.tree_leaves(args))))
        expected = dict(zip(program.out_names, jax.tree_util.tree_leaves(fun(*args))))
        for name, value in expected.items():
            np.testing.assert_allclose(outs[name], np.asarray(value), atol=2e-4, rtol=1e-4, err_msg=f"{key}: {name}")


def _graph_sizes(monkeypatch) -> list:
    """The sizes of the GraphDefs handed to TF's converter from now on (the list fills as it runs),
    on TF's path: stand-ins are its converter's machinery. noxla's graph, which takes several
    signatures by default, hands no converter anything (test_the_graph_stores_the_weights_once_...)."""
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")
    from tensorflow.lite.python import convert
    sizes = []
    original = convert.convert_graphdef

    def recording(graph_def, *args, **kwargs):
        sizes.append(len(graph_def.SerializeToString()))
        return original(graph_def, *args, **kwargs)
    monkeypatch.setattr(convert, "convert_graphdef", recording)
    return sizes


@pytest.mark.slow
def test_the_converter_gets_stand_ins_and_the_tflite_holds_the_real_weights(tmp_path, monkeypatch):
    graph_bytes = _graph_sizes(monkeypatch)
    steps = []
    signatures = _signatures()
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"),
                               on_step=lambda name, seconds: steps.append(name))
    weight_bytes = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(PARAMS))
    assert len(graph_bytes) == 2 and max(graph_bytes) < weight_bytes / 5, (graph_bytes, weight_bytes)
    assert not any("stubbed" in s for s in steps), steps
    _check_against_jax(path, signatures)
    # The tied embedding (gathered, and transposed for the logits) is stored once.
    assert abs(os.path.getsize(path) - weight_bytes) < 0.1 * weight_bytes


@pytest.mark.slow
def test_a_tied_embedding_read_through_a_transpose_goes_to_the_converter_as_a_stand_in(tmp_path, monkeypatch):
    """keras-hub's tied embedding: ``take(E, ids)`` and ``x @ transpose(E)`` on [1, T, hidden]
    activations, a GatherV2 and a Transpose feeding a MatMul. Before noxla.writers.tf.weight_stub_readers the
    table went to the converter as a real constant (Gemma 3 1B's, 1.2 GB, took a conversion past
    14 GB); now as stand-ins only, stored once, and the values are JAX's."""
    graph_bytes = _graph_sizes(monkeypatch)
    signatures, (table, w) = _tied_embedding()
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"))
    assert max(graph_bytes) < table.nbytes / 5, (graph_bytes, table.nbytes)
    _check_against_jax(path, signatures)
    # One copy of the table, not a transposed second one.
    assert os.path.getsize(path) < 1.3 * (table.nbytes + w.nbytes), os.path.getsize(path)


@pytest.mark.slow
def test_einsum_dense_kernels_reshaped_to_matrices_go_to_the_converter_as_stand_ins(tmp_path, monkeypatch):
    """keras's EinsumDense kernels ([hidden, heads, head_dim] and back) reach MatMuls through a
    Reshape: stand-ins of the reshaped matrices (noxla.writers.tf.weight_stub_readers), not real constants
    (Qwen 3 0.6B's attention, 0.7 GB, took its export to 12.5 GB); the values are JAX's."""
    graph_bytes = _graph_sizes(monkeypatch)
    signatures, (wq, _) = _einsum_dense()
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"))
    assert max(graph_bytes) < wq.nbytes / 5, (graph_bytes, wq.nbytes)
    _check_against_jax(path, signatures)


@pytest.mark.slow
def test_a_weight_the_converter_changes_is_converted_from_its_real_bytes(tmp_path, monkeypatch):
    steps = []
    calls = []
    original = weight_stubs.WeightStubs.attach

    def changed_once(self, model):
        calls.append(1)
        raise weight_stubs.StubMismatch("as if the converter had folded a weight")
    monkeypatch.setattr(weight_stubs.WeightStubs, "attach", changed_once)
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")   # stand-ins are TF's path's converter machinery
    signatures = _signatures()
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"),
                               on_step=lambda name, seconds: steps.append(name))
    assert calls == [1] and any("stubbed" in s for s in steps), steps
    monkeypatch.setattr(weight_stubs.WeightStubs, "attach", original)
    _check_against_jax(path, signatures)


@pytest.mark.slow
def test_weights_read_with_constants_or_by_other_ops_are_not_stubbed(tmp_path, monkeypatch):
    """A MatMul of two constants is folded by the converter, and an Add reads its weight as is:
    those weights go to the converter as they are, the others as stand-ins, and all come out right."""
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")   # stand-ins are TF's path's converter machinery
    rng = np.random.default_rng(1)
    w_folded, w_added, w_matmul = (rng.standard_normal((128, 128)).astype(np.float32) for _ in range(3))
    ones = np.ones((2, 128), np.float32)

    def f(x):
        return {"y": (x @ w_matmul + ones @ w_folded) @ w_matmul + jnp.sum(w_added, axis=0)}

    def g(x):
        return {"y": x @ w_matmul}
    signatures = {"f": (f, (rng.standard_normal((2, 128)).astype(np.float32),)),
                  "g": (g, (rng.standard_normal((2, 128)).astype(np.float32),))}
    steps = []
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"),
                               on_step=lambda name, seconds: steps.append(name))
    assert not any("stubbed" in s for s in steps), steps
    _check_against_jax(path, signatures)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["llama", "tied_embedding", "einsum_dense"])
def test_the_graph_hands_no_converter_the_weights_and_stores_each_once(case, tmp_path):
    """The default path of several signatures, noxla's graph, what the stand-ins give TF's path: no
    converter sees a weight (none runs), the file holds each weight once (the tied embedding not a
    transposed second time, the EinsumDense kernels once as matrices), and the values are JAX's."""
    from noxla.writers.tflite.flatbuffer.schema import read_model_file
    if case == "llama":
        signatures = _signatures()
        weights = jax.tree_util.tree_leaves(PARAMS)
    else:
        signatures, weights = _tied_embedding() if case == "tied_embedding" else _einsum_dense()
    weight_bytes = sum(np.asarray(x).nbytes for x in weights)
    steps = []
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"),
                               on_step=lambda name, seconds: steps.append(name))
    assert all(f"lower+write {key} (graph tflite)" in steps for key in signatures), steps
    assert not any(s.startswith("convert tflite") for s in steps), steps
    _check_against_jax(path, signatures)
    large = [bytes(b.data) for b in read_model_file(path).buffers if b.data is not None and len(b.data) >= 4096]
    assert len(set(large)) == len(large), "a weight stored twice"
    assert abs(os.path.getsize(path) - weight_bytes) < 0.1 * weight_bytes, (os.path.getsize(path), weight_bytes)


def test_attach_refuses_a_stand_in_read_by_another_operator():
    from noxla.writers.tflite.flatbuffer.schema import schema
    stubs = weight_stubs.WeightStubs()
    stubs.real[0] = np.ones((128, 128), np.float32)
    stubs.shapes[0] = (128, 128)
    model = schema.ModelT()
    model.buffers = [schema.BufferT()]
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.ADD
    model.operatorCodes = [code]
    graph = schema.SubGraphT()
    tensors = []
    for name in (b"x", b"w", b"y"):
        tensor = schema.TensorT()
        tensor.name, tensor.shape, tensor.buffer = name, [128, 128], 0
        tensors.append(tensor)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1], [2]
    graph.tensors, graph.operators, graph.inputs, graph.outputs = tensors, [op], [0, 1], [2]
    model.subgraphs = [graph]
    stubs.inputs = {"w": 0}
    with pytest.raises(weight_stubs.StubMismatch, match="read by operator"):
        stubs.attach(model)
    stubs.inputs = {"v": 0}
    with pytest.raises(weight_stubs.StubMismatch, match="missing"):
        stubs.attach(model)


@pytest.mark.slow
def test_a_model_past_the_flatbuffer_limit_is_written_with_buffer_offsets(tmp_path, monkeypatch):
    """The limit lowered to just under this model's size: the file holds the weights after the
    flatbuffer (buffers with offsets), and LiteRT's signature runners still compute JAX's outputs."""
    from noxla.writers.tflite.flatbuffer import large as large_tflite
    weight_bytes = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(PARAMS))
    monkeypatch.setattr(large_tflite, "FLATBUFFER_LIMIT", large_tflite._TABLES_MARGIN + weight_bytes // 2)
    signatures = _signatures()
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"))
    from noxla.writers.tflite.flatbuffer.schema import schema
    with open(path, "rb") as f:
        data = f.read()
    raw = schema.Model.GetRootAs(data, 0)
    offsets = [raw.Buffers(i).Offset() for i in range(raw.BuffersLength())]
    outside = [o for o in offsets if o > 1]
    # The weights after the flatbuffer's tables (well under 1 MB here), each at an aligned offset.
    assert len(outside) >= 4 and min(outside) < 2**20 and all(o % 64 == 0 for o in outside), offsets
    assert len(data) > weight_bytes * 0.9
    _check_against_jax(path, signatures)


def test_packed_leaves_the_buffers_out_of_the_builder_and_writes_the_same_bytes():
    """large_tflite.packed builds the flatbuffer around room for each large buffer and hands the
    buffers over as chunks of their own: joined, the bytes one flatbuffer builder would write."""
    from noxla.writers.tflite.flatbuffer import large as large_tflite
    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal(48).astype(np.float32)

    def f(x):
        return {"y": jnp.tanh(x @ w + b)}
    import tempfile
    with tempfile.TemporaryDirectory() as scratch:
        path = noxla.export_tflite(f, np.ones((2, 64), np.float32), path=os.path.join(scratch, "m.tflite"))
        with open(path, "rb") as file:
            model = read_model(bytearray(file.read()))
    expected = model_bytes(model)
    chunks = large_tflite.packed(model)
    assert any(isinstance(c, np.ndarray) and c.nbytes == w.nbytes for c in chunks), [type(c) for c in chunks]
    assert b"".join(bytes(c) for c in chunks) == expected


def test_unread_weight_tensors_take_no_memory_and_stand_for_their_arrays():
    """interpreter.Weights(unread=True): the eager tensor has the weight's dtype and shape on
    pages never written (256 MB of weights add well under 64 MB of RSS), and ``array_of`` gives
    the array itself, which noxla.pipeline.tf_function.frozen_graph_def reads in its place."""
    from noxla.front.interpreter import Weights

    def rss_mb():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024
    array = np.ones((1024, 64 * 1024), np.float32)  # 256 MB, written: resident
    weights = Weights(unread=True)
    before = rss_mb()
    weights.add(array, array)
    tensor = weights[id(array)][1]
    assert rss_mb() - before < 64
    assert tensor.shape == array.shape and tensor.dtype == np.float32
    assert weights.array_of(tensor) is array
    assert weights.array_of(np.zeros(3)) is None


def test_equal_buffers_are_shared_by_their_bytes_without_digesting_every_weight(monkeypatch):
    """share_constant_buffers buckets buffers by size and a sample of their bytes, and digests only
    a bucket's second and later buffers. Kept buffers as before: a plain buffer holding a stand-in's
    transposed (or scaled) weight joins it, a buffer that agrees on every sampled byte but one
    other does not, and buffers alone in their bucket are never digested."""
    from noxla.writers.tflite.flatbuffer import merge as tflite_merge
    from noxla.writers.tflite.flatbuffer.schema import schema
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((96, 40)).astype(np.float32)
    stubs = weight_stubs.WeightStubs()
    for marker, transposed in ((0, True), (1, False)):
        stubs.real[marker], stubs.shapes[marker] = weight, weight.T.shape if transposed else weight.shape
        if transposed:
            stubs.transposed.add(marker)
    factors = rng.standard_normal(40).astype(np.float32)
    scaled = stubs.scaled(stubs._placeholder(1), 1, factors)
    twice = stubs.scaled(scaled, 0, np.linspace(0.5, 2.0, 96, dtype=np.float32))  # per output, then input
    positions = np.arange(weight.nbytes)
    for data in (stubs._placeholder(0), stubs._placeholder(1), scaled, twice):
        assert np.array_equal(stubs.sample(data, positions), stubs.content(data))
    near = np.ascontiguousarray(weight.T).reshape(-1).view(np.uint8).copy()
    near[1] ^= 1  # a byte no sample reads (64 of 15,360, evenly spaced from the first)
    payloads = [stubs._placeholder(0), np.ascontiguousarray(weight.T).reshape(-1).view(np.uint8), near,
                stubs._placeholder(1), scaled, (weight * factors).reshape(-1).view(np.uint8),
                rng.standard_normal(7).astype(np.float32).view(np.uint8)]
    model = schema.ModelT()
    model.buffers = [schema.BufferT()]
    tensors = []
    for data in payloads:
        buffer, tensor = schema.BufferT(), schema.TensorT()
        buffer.data, tensor.buffer = data, len(model.buffers)
        model.buffers.append(buffer)
        tensors.append(tensor)
    tensors.append(schema.TensorT())
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, list(range(len(payloads))), [len(payloads)]
    graph = schema.SubGraphT()
    graph.tensors, graph.operators, graph.inputs, graph.outputs = tensors, [op], [], [len(payloads)]
    model.subgraphs = [graph]
    digested = []
    digest = tflite_merge._buffer_digest
    monkeypatch.setattr(tflite_merge, "_buffer_digest", lambda data: digested.append(data.nbytes) or digest(data))
    tflite_merge.share_constant_buffers(model, stubs)
    assert [t.buffer for t in tensors[:-1]] == [1, 1, 3, 4, 5, 5, 7]
    assert model.buffers[2].data is None and model.buffers[6].data is None
    # Digested: the three of the transposed weight's bucket, the two of the scaled one's; not the
    # unscaled weight's nor the small vector's.
    assert sorted(digested) == [weight.nbytes] * 5, digested
