"""RESHAPEs and TRANSPOSEs that move nothing (``noxla.writers.tflite.flatbuffer.reshapes``): RESHAPE pairs around an
elementwise chain removed where running the chain in the first reshape's input layout pairs the
same elements and kept where it would not, squeezed caches read by BATCH_MATMUL itself, transposes
of transposes composed; the .tflite gives JAX's values either way (LiteRT with its default XNNPACK
delegate and without)."""
from __future__ import annotations

import collections
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import noxla
import noxla.pipeline.tf_tflite_finish
from noxla.runtimes import tflite_op_names
from noxla.writers.tflite.flatbuffer.reshapes import _pairs_alike, static_shape

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("other, b, a, alike", [
    ((1, 256), (3, 3, 1, 256), (3, 3, 256), True),   # attention's mask over the unit axis
    ((), (2, 3, 4), (6, 4), True),                    # a scalar pairs with everything
    ((4,), (2, 3, 4), (6, 4), True),                  # the last axis kept: same column everywhere
    ((1, 4), (2, 3, 4), (6, 4), True),
    ((2, 1), (2, 2, 3), (2, 6), False),               # o[j] at b[i, j, k], but o[i] at a[i, :]
    ((3, 4), (2, 3, 4), (6, 4), False),               # does not broadcast to a
    ((1, 1, 4), (2, 3, 4), (6, 4), False),            # would grow a's rank: the output shape changes
    ((3, 1), (1, 3, 5), (3, 5), True),                # o[j] at b[0, j, k] and at a[j, k]
    ((3, 1), (3, 5), (1, 3, 5), True),
    ((3, 1, 256), (3, 3, 1, 256), (3, 3, 256), False),  # o[j, 0, k] at b[i, j, 0, k], but o[i, 0, k] at a[i, j, k]
])
def test_pairing_is_decided_on_element_indices(other, b, a, alike):
    assert _pairs_alike(other, a, b) is alike


def test_dynamic_and_unranked_shapes_are_not_rewritten():
    # A polymorphic dimension is written as 1 in ``shape`` and -1 in ``shape_signature``: the 1
    # would let a wrong pairing pass the check. (The converter folds the pair itself in the
    # polymorphic exports tried, so this is checked on the tensor.)
    from noxla.writers.tflite.flatbuffer.schema import schema
    tensor = schema.TensorT()
    tensor.shape, tensor.shapeSignature, tensor.hasRank = np.array([1, 8], np.int32), np.array([-1, 8], np.int32), True
    assert static_shape(tensor) is None
    tensor.shapeSignature = np.array([1, 8], np.int32)
    assert static_shape(tensor) == (1, 8)
    tensor.shape, tensor.shapeSignature, tensor.hasRank = np.array([], np.int32), None, False
    assert static_shape(tensor) is None


def attention(q, k, v, mask):
    """A decode step's attention as JAX writes it: scores get a unit axis for the [1, keys] mask."""
    scores = jnp.einsum("hqd,hkd->hqk", q, k) * 0.125
    probs = jax.nn.softmax(scores.reshape(3, 3, 1, 256) + mask, axis=-1).reshape(3, 3, 256)
    return jnp.einsum("hqk,hkd->hqd", probs, v)


def chain(x, o):
    return jax.nn.relu(jnp.tanh(x.reshape(3, 1, 8) - o) * 2.0).reshape(3, 8)


def reshaped_inside(x):
    """Flax's attention weights: the scale under one unit axis, the softmax under another."""
    scaled = (x.reshape(1, 4, 16, 1, 16) * 0.5).reshape(1, 1, 4, 16, 16)
    return jax.nn.softmax(scaled, axis=-1).reshape(1, 4, 16, 16)


def reshaped_inside_to_other_rows(x):
    return jax.nn.softmax((x.reshape(3, 1, 8) * 2.0).reshape(3, 2, 4), axis=-1).reshape(3, 8)


def pairing_changes(x, o):
    return (x.reshape(2, 2, 3) + o).reshape(2, 6)


def softmax_axis_changes(x):
    return jax.nn.softmax(x.reshape(3, 2, 4), axis=-1).reshape(3, 8)


def read_twice(x):
    inner = jnp.tanh(x.reshape(3, 2, 4))
    return (inner + 1.0).reshape(3, 8), inner.sum(-1)


def _cache_step(k_cache, v_cache, q, k, v, pos, mask, returned):
    """A decode step's cache writes, then its attention on the squeezed caches (``cache[0]``);
    the caches are outputs, so each squeeze is a copy unless the products read the caches."""
    k_cache = jax.lax.dynamic_update_slice(k_cache, k[None, :, None, :], (0, 0, pos, 0))
    v_cache = jax.lax.dynamic_update_slice(v_cache, v[None, :, :, None], (0, 0, 0, pos))
    scores = jnp.einsum("kgd,kcd->kgc", q, k_cache[0]) * 0.125 + mask
    out = jnp.einsum("kgc,kdc->kgd", jax.nn.softmax(scores, -1), v_cache[0]).reshape(1, -1)
    extra = {"out": (), "scores": (scores,), "sum": ((scores.sum(1) * 2.0).reshape(-1),)}[returned]
    return (out, k_cache, v_cache, *extra)


def cache_step(k_cache, v_cache, q, k, v, pos, mask):
    return _cache_step(k_cache, v_cache, q, k, v, pos, mask, "out")


def cache_scores_returned(k_cache, v_cache, q, k, v, pos, mask):
    return _cache_step(k_cache, v_cache, q, k, v, pos, mask, "scores")


def cache_scores_summed(k_cache, v_cache, q, k, v, pos, mask):
    return _cache_step(k_cache, v_cache, q, k, v, pos, mask, "sum")


CACHE_SHAPES = [(1, 3, 16, 8), (1, 3, 8, 16), (3, 3, 8), (3, 8), (3, 8), (), (1, 16)]

# function, its arguments' shapes, the RESHAPEs the passes remove
CASES = {
    "attention": (attention, [(3, 3, 64), (3, 256, 64), (3, 256, 64), (1, 256)], 2),
    "chain": (chain, [(3, 8), (8,)], 2),
    "reshaped_inside": (reshaped_inside, [(1, 4, 16, 16)], 3),
    "pairing_changes": (pairing_changes, [(2, 6), (2, 1)], 0),
    "softmax_axis_changes": (softmax_axis_changes, [(3, 8)], 0),
    "reshaped_inside_to_other_rows": (reshaped_inside_to_other_rows, [(3, 8)], 0),
    "read_twice": (read_twice, [(3, 8)], 0),
    # The products read the caches: both squeezes go.
    "cache_step": (cache_step, CACHE_SHAPES, 2),
    # The scores are an output (their shape would change) or summed (over an axis that would
    # move): the keys' squeeze stays, the values' goes.
    "cache_scores_returned": (cache_scores_returned, CACHE_SHAPES, 1),
    "cache_scores_summed": (cache_scores_summed, CACHE_SHAPES, 1),
}


def _export(f, args, path, monkeypatch, with_pass: bool) -> str:
    with monkeypatch.context() as patch:
        if not with_pass:
            patch.setattr(noxla.pipeline.tf_tflite_finish, "remove_reshape_pairs", lambda model: 0)
            patch.setattr(noxla.pipeline.tf_tflite_finish, "read_caches_in_batch_matmul", lambda model: 0)
        return str(noxla.export_tflite(f, *args, path=path, overwrite=True))


def _run(path: str, f, args, delegates: bool) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = OpResolverType.AUTO if delegates else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    runner = Interpreter(model_path=path, experimental_op_resolver_type=resolver).get_signature_runner()
    # Inputs are named after the function's parameters (the runner lists them sorted by name).
    out = runner(**dict(zip(inspect.signature(f).parameters, args, strict=True)))
    return [out[k] for k in sorted(out)]


def _unreferenced(path: str) -> int:
    from noxla.writers.tflite.flatbuffer.schema import read_model
    with open(path, "rb") as f:
        graph = read_model(bytearray(f.read())).subgraphs[0]
    used = set(graph.inputs) | set(graph.outputs)
    for op in graph.operators:
        used.update(op.inputs, op.outputs)
    return len(set(range(len(graph.tensors))) - used)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_reshape_pairs(name, tmp_path, monkeypatch):
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")   # TF's path's pass (the graph writer's: test_graph_tflite)
    f, shapes, removed = CASES[name]
    args = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    if name == "attention":  # a causal-style mask: -1e9 on some keys, 0 on the rest
        args[3] = np.where(RNG.random((1, 256)) < 0.3, -1e9, 0.0).astype(np.float32)
    if name.startswith("cache"):  # a position and a mask
        args[5], args[6] = np.int32(5), np.where(RNG.random((1, 16)) < 0.3, -1e9, 0.0).astype(np.float32)
    before = _export(f, args, str(tmp_path / "without.tflite"), monkeypatch, with_pass=False)
    after = _export(f, args, str(tmp_path / "with.tflite"), monkeypatch, with_pass=True)
    ops_before = collections.Counter(tflite_op_names(before))
    ops_after = collections.Counter(tflite_op_names(after))
    # Without the pass the converter leaves the pair: the case exercises the pattern.
    assert ops_before["RESHAPE"] >= 2, ops_before
    assert ops_after == ops_before - collections.Counter(RESHAPE=removed), (ops_before, ops_after)
    assert _unreferenced(after) <= _unreferenced(before)
    expected = jax.tree_util.tree_leaves(f(*args))
    for delegates in (True, False):
        for got, want in zip(_run(after, f, args, delegates), expected, strict=True):
            np.testing.assert_allclose(got, np.asarray(want), rtol=2e-6, atol=2e-6)
    if removed:  # the same kernels on the same values: the layout alone changed
        for got, want in zip(_run(after, f, args, True), _run(before, f, args, True), strict=True):
            np.testing.assert_array_equal(got, want)


def keras_layout_cache(k_cache, v_cache, k, pos, q):
    """noxla.llm.keras's shape of a keras-hub step: the caches moved to keras-hub's layout and
    stacked, read back and updated there, read by the scores (keys transposed once more), stacked
    again and moved back for the output."""
    both = jnp.stack([jnp.transpose(k_cache, (0, 2, 1, 3)), jnp.transpose(v_cache, (0, 2, 1, 3))], 1)
    keys = lax.dynamic_update_slice(both[:, 0], k, (0, pos, 0, 0))
    scores = jnp.einsum("bhqd,bhdc->bhqc", q, jnp.transpose(keys, (0, 2, 3, 1)))
    out = jnp.stack([keys, both[:, 1]], 1)
    return scores, jnp.transpose(out[:, 0], (0, 2, 1, 3)), jnp.transpose(out[:, 1], (0, 2, 1, 3))


def twice_transposed(x):
    y = jnp.transpose(jnp.tanh(x), (1, 0, 2))
    return jnp.transpose(y, (2, 1, 0)) * 2.0, y + 1.0


# function, its arguments' shapes, the TRANSPOSEs the pass removes
TRANSPOSE_CASES = {
    "keras_layout_cache": (keras_layout_cache, [(1, 2, 16, 8), (1, 2, 16, 8), (1, 1, 2, 8), (), (1, 2, 1, 8)], 3),
    "twice_transposed": (twice_transposed, [(2, 3, 4)], 0),  # composed, not removed: one reader each
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TRANSPOSE_CASES))
def test_transpose_pairs(name, tmp_path, monkeypatch):
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", "0")   # TF's path's pass; several signatures run it on the graph's too
    f, shapes, removed = TRANSPOSE_CASES[name]
    args = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    if name == "keras_layout_cache":
        args[3] = np.int32(9)
    paths = {}
    for with_pass in (False, True):
        with monkeypatch.context() as patch:
            if not with_pass:
                patch.setattr(noxla.pipeline.tf_tflite_finish, "fold_transpose_pairs", lambda model: 0)
            paths[with_pass] = str(noxla.export_tflite(f, *args, path=str(tmp_path / f"{with_pass}.tflite")))
    before, after = (collections.Counter(tflite_op_names(paths[w])) for w in (False, True))
    assert before["TRANSPOSE"] - after["TRANSPOSE"] == removed, (before, after)
    assert after - collections.Counter(TRANSPOSE=after["TRANSPOSE"]) == \
        before - collections.Counter(TRANSPOSE=before["TRANSPOSE"]), (before, after)
    expected = jax.tree_util.tree_leaves(f(*args))
    for delegates in (True, False):
        for got, want in zip(_run(paths[True], f, args, delegates), expected, strict=True):
            np.testing.assert_allclose(got, np.asarray(want), rtol=2e-6, atol=2e-6)
