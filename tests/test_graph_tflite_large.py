"""Large weights in noxla's graph's .tflite (issue 41; Gemma 3 1B's shapes, tools/llm_scale.py): a
tied embedding table larger than the recorder folds is the logits' FULLY_CONNECTED weight, stored
once and quantized with the table; several signatures hold one placeholder per weight
(``WeightStubs.hold``), its bytes made when written."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import noxla
from noxla.graph.ops import FOLD_BYTES
from noxla.writers.tf.weight_stubs import WeightStubs
from noxla.writers.tflite.flatbuffer.schema import read_model_file, schema

# Rows of 64 floats: one row past the size the recorder folds a TRANSPOSE of (grappler's).
ROWS = FOLD_BYTES // (64 * 4) + 1
RNG = np.random.default_rng(5)
TABLE = (RNG.standard_normal((ROWS, 64)) / 8).astype(np.float32)
W = (RNG.standard_normal((64, 64)) / 8).astype(np.float32)


def _decoder(ids):
    """keras-hub's ReversibleEmbedding: the tokens looked up, the logits by the table transposed."""
    x = jnp.tanh(jnp.take(TABLE, ids, axis=0) @ W)
    return {"logits": jnp.matmul(x, jnp.transpose(TABLE))}


def _signatures():
    return {key: (_decoder, (RNG.integers(0, ROWS, (1, n)).astype(np.int32),))
            for key, n in (("prefill_4", 4), ("decode", 1))}


def _kinds(model, graph) -> list:
    return [model.operatorCodes[op.opcodeIndex].builtinCode for op in graph.operators]


def test_a_tied_table_past_the_fold_size_is_the_logits_fully_connected_weight_stored_once(tmp_path):
    """Before: a BATCH_MATMUL of the table's run-time TRANSPOSE, which LiteRT's quantizer leaves
    float32 (Gemma 3 1B's int4 file was 1.64 GB, not 0.49, and decoded at half the speed)."""
    from ai_edge_litert.interpreter import Interpreter
    signatures = _signatures()
    steps = []
    path = noxla.export_tflite(signatures, path=str(tmp_path / "m.tflite"), on_step=lambda n, s: steps.append(n))
    assert "lower+write decode (graph tflite)" in steps, steps
    model = read_model_file(path)
    for graph in model.subgraphs:
        kinds = _kinds(model, graph)
        assert schema.BuiltinOperator.BATCH_MATMUL not in kinds and schema.BuiltinOperator.TRANSPOSE not in kinds, kinds
    with open(path, "rb") as f:
        size = len(f.read())
    assert TABLE.nbytes < size < TABLE.nbytes * 1.1, (size, TABLE.nbytes)   # the table once, in both signatures
    interpreter = Interpreter(model_path=path)
    for key, (fun, (ids,)) in signatures.items():
        out = interpreter.get_signature_runner(key)(ids=ids)
        np.testing.assert_allclose(out["logits"], np.asarray(fun(ids)["logits"]), atol=2e-5, rtol=1e-5, err_msg=key)


def test_int4_quantizes_the_tied_table_once_for_both_its_readers(tmp_path):
    """The LLM rewrite (noxla.llm.quantize.weight_rewrite) on the graph's merged signatures: the table
    is int4 as EMBEDDING_LOOKUP's table and as the logits' weight, one buffer."""
    from noxla.api import run
    from noxla.llm.quantize import weight_rewrite
    from noxla.pipeline.preflight import ExportOptions
    path = str(tmp_path / "q.tflite")
    steps = []
    run(_signatures(), (), ExportOptions(tflite=path, on_step=lambda n, s: steps.append(n)),
        rewrite=weight_rewrite("int4"))
    assert "lower+write decode (graph tflite)" in steps, steps
    model = read_model_file(path)
    readers = {schema.BuiltinOperator.FULLY_CONNECTED: 1, schema.BuiltinOperator.EMBEDDING_LOOKUP: 1}
    tables = set()
    for graph in model.subgraphs:
        for op in graph.operators:
            index = readers.get(model.operatorCodes[op.opcodeIndex].builtinCode)
            tensor = graph.tensors[op.inputs[index]] if index is not None else None
            if tensor is not None and tuple(tensor.shape) == TABLE.shape:
                assert tensor.type == schema.TensorType.INT4, (graph.name, tensor.name, tensor.type)
                tables.add(tensor.buffer)
    assert len(tables) == 1, tables
    with open(path, "rb") as f:
        # int4: an eighth of the float bytes, and per row a float32 scale and an int64 zero point
        # in each of the 4 tensors reading it (the flatbuffer keeps them per tensor): 0.31x the table.
        assert len(f.read()) < TABLE.nbytes * 0.35


def test_hold_gives_one_placeholder_per_memory_and_layout_and_makes_the_bytes_when_asked():
    stubs = WeightStubs()
    w = RNG.standard_normal((300, 200)).astype(np.float32)
    first, again = stubs.hold(w.T), stubs.hold(w.T)   # two view objects of the same memory and layout
    assert first is again and stubs.is_placeholder(first)
    assert first.nbytes == w.nbytes and first.strides == (0,)   # as many bytes, none of them held
    assert stubs.hold(w) is not first   # the other layout is another weight
    np.testing.assert_array_equal(stubs.content(first).view(np.float32).reshape(200, 300), w.T)
