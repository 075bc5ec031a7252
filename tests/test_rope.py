"""lowering_rules.patterns.rope: rotary embeddings in fewer TFLite ops with JAX's values bit for bit.

The rule cases (run against JAX in every runtime by test_rules.py) compare within a tolerance,
as JAX's jit contracts x*c + y*s into FMAs. Here the reference is JAX op by op (no jit: each
product and sum rounded on its own, as the spelling says and every lowering computes), and the
comparison is of the bits: signed zeros and NaN positions included, in strict and default mode.
"""
from __future__ import annotations

import collections
import inspect

import jax
import numpy as np
import pytest

import noxla
from lowering_rules.core.cases import ArgSpec
from lowering_rules.patterns import rope
from noxla.runtimes import run_tflite, tflite_op_names
from tests import tiny_llama

# The cases whose equations are no rotation of x's halves (or whose products are read elsewhere,
# or whose tables cannot be joined): the rule must leave them as written.
KEPT = {"rope_halves_not_a_rotation", "rope_halves_product_read_twice", "rope_halves_of_two_arrays",
        "rope_rotate_half_halves_swapped", "rope_rotate_half_scalar_tables", "rope_pairs_swapped"}
CASES = [c for c in (*rope.HALVES_CASES, *rope.PAIRS_CASES, *rope.ROTATE_HALF_CASES) if not c.polymorphic_shapes]


def _arguments(case):
    rng = np.random.default_rng(7)
    return [a.materialize(rng) if isinstance(a, ArgSpec) else np.asarray(a) for a in case.args]


def _same_bits(actual, expected, where: str):
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    assert actual.shape == expected.shape, where
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan, err_msg=where)
    # NaN's sign and payload are not IEEE results; every other bit is (the sign of zero included).
    np.testing.assert_array_equal(actual[~nan].view(np.uint32), expected[~nan].view(np.uint32), err_msg=where)


def _without_rule(monkeypatch):
    monkeypatch.setattr(rope, "halves_rotation", lambda ctx: None)
    monkeypatch.setattr(rope, "rotate_half", lambda ctx: None)
    monkeypatch.setattr(rope, "pairs_rotation", lambda ctx: None)


# JAX op by op multiplies the edge cases' inf by 0 in NumPy, which warns of the NaN it makes.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rotation_is_jax_op_by_op_bit_for_bit(case, strict, tmp_path, monkeypatch):
    args = _arguments(case)
    with jax.disable_jit():
        expected = jax.tree.leaves(case.fun(*args))
    tf_out = jax.tree.leaves(noxla.convert(case.fun, strict=strict)(*args))
    fused = noxla.export_tflite(case.fun, *args, path=str(tmp_path / "fused.tflite"), strict=strict)
    names = list(inspect.signature(case.fun).parameters)
    lite_out = list(run_tflite(fused, dict(zip(names, args))).values())
    for i, e in enumerate(expected):
        _same_bits(tf_out[i], e, f"TF, output {i}")
        _same_bits(lite_out[i], e, f"TFLite, output {i}")
    _without_rule(monkeypatch)
    plain = noxla.export_tflite(case.fun, *args, path=str(tmp_path / "plain.tflite"), strict=strict)
    fired = tflite_op_names(fused) != tflite_op_names(plain)
    assert fired == (case.name not in KEPT), (tflite_op_names(fused), tflite_op_names(plain))


def test_tiny_llama_decode_step_rotates_in_six_ops_per_call(tmp_path, monkeypatch):
    """tests/tiny_llama.py's rope, twice per layer: two SLICEs, four MULs, a SUB, an ADD and a
    CONCATENATION per call become the SLICEs, two MULs, an ADD and a CONCATENATION, plus the joined
    tables made once for every layer (one negation in all, a MUL by -1: the converter shares them
    across layers, and LiteRT's NEG loses the sign of a zero).
    The logits and caches are those of the unfused export bit for bit, and JAX's."""
    config = tiny_llama.Config(layers=3)
    params = tiny_llama.init_params(config)
    rng = np.random.default_rng(5)
    cache = [tuple(rng.standard_normal(x.shape).astype(np.float32) for x in pair)
             for pair in tiny_llama.empty_cache(config, 16)]
    pos = np.array([9], np.int32)
    inputs = (np.array([[11]], np.int32), pos, np.asarray(tiny_llama.causal_mask(pos, 16)), cache)

    def decode(tokens, input_pos, mask, cache):
        return tiny_llama.step(config, params, tokens, input_pos, mask, cache)
    fused = noxla.export_tflite(decode, *inputs, path=str(tmp_path / "fused.tflite"))
    feed = {"tokens": inputs[0], "input_pos": pos, "mask": inputs[2],
            **{f"cache_{i}_{j}": x for i, pair in enumerate(cache) for j, x in enumerate(pair)}}
    got = run_tflite(fused, feed)
    _without_rule(monkeypatch)
    plain = noxla.export_tflite(decode, *inputs, path=str(tmp_path / "plain.tflite"))
    before, after = (collections.Counter(tflite_op_names(p)) for p in (plain, fused))
    calls = 2 * config.layers
    assert after["MUL"] == before["MUL"] - 2 * calls + 1 and "NEG" not in after, (before, after)
    assert after["SUB"] == before["SUB"] - calls and after["ADD"] == before["ADD"], (before, after)
    assert after["SLICE"] == before["SLICE"] and "SPLIT" not in after, (before, after)
    # Per call 3 ops fewer; once per graph the tables' two CONCATENATIONs and the negation, and at most
    # two RESHAPEs to their [1, 1, half] shape (none since session 26: the file's reshape passes
    # read them in place).
    assert after["RESHAPE"] <= before["RESHAPE"] + 2, (before, after)
    assert (sum(after.values()) - after["RESHAPE"]
            == sum(before.values()) - before["RESHAPE"] - 3 * calls + 3), (before, after)
    want = run_tflite(plain, feed)
    assert got.keys() == want.keys()
    for name in got:
        _same_bits(got[name], want[name], name)
    logits, _ = jax.jit(decode)(*inputs)
    np.testing.assert_allclose(got["output_0"], np.asarray(logits), rtol=1e-5, atol=1e-5)


def test_calls_sharing_tables_share_the_joined_tables():
    """Two rotations by the same cos and sin: one NEG and one pair of joined tables in the graph
    (ctx.shared), not a pair per call. TF.js's converter would keep each copy; TFLite's merges them."""
    import tensorflow as tf
    case = next(c for c in rope.HALVES_CASES if c.name == "rope_halves_two_calls")
    specs = [tf.TensorSpec(a.shape, tf.float32) for a in case.args]
    graph = tf.function(noxla.convert(case.fun), autograph=False).get_concrete_function(*specs).graph
    ops = collections.Counter(op.type for op in graph.get_operations())
    assert ops["Neg"] == 1, ops
    assert ops["ConcatV2"] == 2 + 2, ops  # each call's swapped halves, and the two tables once


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rope_halves_two_calls", "rope_pairs", "rope_rotate_half",
                                  "rope_rotate_half_keras_hub"])
def test_rotations_run_on_litertjs_wasm_and_webgpu(name, tmp_path):
    """The default .tflite on LiteRT.js, WebGPU included: its delegate fails to build a model where a
    SPLIT's two outputs are joined again swapped (so the halves are two SLICEs, also for keras-hub)."""
    from noxla.runtimes.litertjs import TOLERANCE
    from noxla.runtimes.verify import relative_error
    from tests.litertjs_harness import runner
    case = next(c for c in CASES if c.name == name)
    args = _arguments(case)
    path = noxla.export_tflite(case.fun, *args, path=str(tmp_path / "m.tflite"))
    assert "SPLIT" not in tflite_op_names(path) and "SPLIT_V" not in tflite_op_names(path)
    expected = jax.tree.leaves(case.fun(*args))
    for accelerator in ("wasm", "webgpu"):
        outs = runner().run(path, dict(zip(inspect.signature(case.fun).parameters, args)), accelerator)
        for e, got in zip(expected, [outs[k] for k in sorted(outs)]):
            assert relative_error(np.asarray(e), got) <= TOLERANCE[accelerator], accelerator
