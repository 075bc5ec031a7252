"""An LLM's KV-cache write (``lax.dynamic_update_slice``) in a .tflite is one DYNAMIC_UPDATE_SLICE
builtin, made from an XlaDynamicUpdateSlice that only the TFLite converter sees: no artifact of the
same export (SavedModel, TF.js, the .tflite itself) nor ``noxla.convert``'s function holds an XLA op."""
from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest
import tensorflow as tf
from jax import lax

import noxla
from noxla.pipeline.tf_path import export
from noxla.runtimes import run_tflite

CACHE = np.random.default_rng(0).standard_normal((1, 2, 16, 4)).astype(np.float32)
NEW = np.random.default_rng(1).standard_normal((1, 2, 1, 4)).astype(np.float32)


def cache_write(cache, new, pos):
    """A decode step's cache write, and a read of the cache so the result is used as a decoder does."""
    cache = lax.dynamic_update_slice(cache, new, (0, 0, pos[0], 0))
    return {"cache": cache, "scores": (cache * 2.0).sum(axis=-1)}


def _tflite_ops(path) -> list[tuple[str, tuple]]:
    """(builtin, its first output's shape) per op."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=path)
    shapes = {t["index"]: tuple(t["shape"]) for t in interpreter.get_tensor_details()}
    return [(op["op_name"], shapes.get(op["outputs"][0], ())) for op in interpreter._get_ops_details()]


def _assert_one_cache_write(ops):
    names = [name for name, _ in ops]
    assert names.count("DYNAMIC_UPDATE_SLICE") == 1, ops
    # No PAD or SELECT over the cache (``lax.dynamic_update_slice``'s own wrap of a negative start
    # is a SELECT of one index).
    assert not [(name, shape) for name, shape in ops
                if name in ("PAD", "PADV2", "SELECT", "SELECT_V2") and shape != (1,) and shape != ()], ops


def _saved_model_ops(path) -> set[str]:
    from tensorflow.core.protobuf import saved_model_pb2
    model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        model.ParseFromString(f.read())
    graph = model.meta_graphs[0].graph_def
    return {n.op for n in graph.node} | {n.op for fn in graph.library.function for n in fn.node_def}


def _tfjs_ops(path) -> set[str]:
    with open(os.path.join(path, "model.json")) as f:
        topology = json.load(f)["modelTopology"]
    functions = topology.get("library", {}).get("function", [])
    return ({n["op"] for n in topology.get("node", [])}
            | {n["op"] for fn in functions for n in fn.get("nodeDef", [])})


@pytest.mark.slow
def test_cache_write_is_one_builtin_and_no_artifact_holds_an_xla_op(tmp_path):
    paths = {kind: str(tmp_path / name) for kind, name in
             (("tflite", "m.tflite"), ("tfjs", "m_tfjs"), ("saved_model", "m_sm"))}
    # One export of all three: the formats whose lowerings it would otherwise share.
    export(cache_write, (CACHE, NEW, np.array([3], np.int32)), demo_page=False, **paths)

    _assert_one_cache_write(_tflite_ops(paths["tflite"]))
    for pos in (-3, 0, 7, 15, 16, 40):  # past either end, the kernel clamps as JAX does
        args = {"cache": CACHE, "new": NEW, "pos": np.array([pos], np.int32)}
        got = run_tflite(paths["tflite"], args)
        want = jax.jit(cache_write)(CACHE, NEW, args["pos"])
        np.testing.assert_array_equal(got["cache"], np.asarray(want["cache"]), err_msg=f"pos {pos}")
        # (a sum in another order: ulps apart)
        np.testing.assert_allclose(got["scores"], np.asarray(want["scores"]), rtol=1e-6, atol=1e-6)

    # The other artifacts: plain TF ops (the PAD + SELECT form), never an Xla* op.
    saved, tfjs = _saved_model_ops(paths["saved_model"]), _tfjs_ops(paths["tfjs"])
    assert "SelectV2" in saved, saved  # the cache write is there
    assert not [op for op in saved if op.startswith("Xla")], saved
    assert "SelectV2" in tfjs and not [op for op in tfjs if op.startswith("Xla")], tfjs
    loaded = tf.saved_model.load(paths["saved_model"])
    np.testing.assert_array_equal(loaded.signatures["serving_default"](
        cache=CACHE, new=NEW, pos=np.array([40], np.int32))["cache"],
        np.asarray(cache_write(CACHE, NEW, np.array([40], np.int32))["cache"]))


def test_convert_holds_no_xla_op():
    converted = tf.function(noxla.convert(cache_write), autograph=False).get_concrete_function(
        tf.TensorSpec(CACHE.shape), tf.TensorSpec(NEW.shape), tf.TensorSpec([1], tf.int32))
    ops = {op.type for op in converted.graph.get_operations()}
    assert "SelectV2" in ops and not [op for op in ops if op.startswith("Xla")], ops


@pytest.mark.slow
def test_signatures_cache_write(tmp_path):
    """``export_tflite({...})`` (LLM exports take this path) and its SavedModel twin."""
    signatures = {"decode": (cache_write, (CACHE, NEW, np.array([3], np.int32)))}
    tflite, saved = str(tmp_path / "s.tflite"), str(tmp_path / "s_sm")
    noxla.export_tflite(signatures, path=tflite)
    noxla.export_saved_model(signatures, path=saved)
    _assert_one_cache_write(_tflite_ops(tflite))
    assert not [op for op in _saved_model_ops(saved) if op.startswith("Xla")]
