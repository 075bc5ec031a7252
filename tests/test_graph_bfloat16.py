"""bfloat16 inside a program, written from noxla's graph (noxla/writers/tflite/bfloat16.py and
noxla/writers/tfjs/graph_half_floats.py): carried in float32, each computed value rounded to bfloat16
as TF's path rounds it, on LiteRT and TF.js's Node cpu and wasm. Bit for bit against JAX op by op
(``jax.disable_jit``: each bfloat16 result rounded, which is what the carry computes) where every
float32 result is exact; within JAX's own bfloat16 tolerance (1e-2) where a sum's order or a
tanh/exp kernel may round differently. Each export must be the graph's, not TF's path."""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import noxla
from noxla.pipeline.graph_path import ENV
from noxla.runtimes import run_tflite
from tests.test_tflite_bfloat16 import EDGES, _op_by_op, _same_bits

BF16 = jnp.bfloat16
TFJS_BACKENDS = ("cpu", "wasm")
JAX_BFLOAT16_TOLERANCE = 1e-2   # jax._src.public_test_util's default for bfloat16


@pytest.fixture(autouse=True)
def _graph_paths(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("NOXLA_TFLITE_GRAPH", raising=False)


def _bf16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _rounding():
    return (lambda v: v.astype(BF16).astype(jnp.float32)), {"v": EDGES}


def _arithmetic():
    # Chains of bfloat16 products and sums: each result rounded before the next reads it.
    rng = np.random.default_rng(0)
    x, y = (_bf16(rng.standard_normal(1024) * 8) for _ in range(2))

    def fun(x, y):
        a, b = x.astype(BF16), y.astype(BF16)
        return [r.astype(jnp.float32) for r in (a * b * a * b * a, (a * b + a) / b, jnp.maximum(a, b) - a * 3)]
    return fun, {"x": x, "y": y}


def _reductions():
    # Sums of small multiples of 1/8 are exact in float32 in any order: bit for bit; max picks one.
    x = np.random.default_rng(1).integers(-64, 64, (6, 40)).astype(np.float32) / 8

    def fun(x):
        h = x.astype(BF16) * BF16(1.5)
        return h.sum(axis=1).astype(jnp.float32), h.max(axis=0).astype(jnp.float32), jnp.argmax(h, axis=1)
    return fun, {"x": x}


def _control_flow():
    x = _bf16(np.random.default_rng(3).standard_normal(64) * 4)

    def fun(x):
        h = x.astype(BF16)
        looped = lax.fori_loop(0, 5, lambda i, c: c * h / (c + BF16(3)) + h, h)
        tested = lax.cond(x[1] > 0, lambda v: v * v + h, lambda v: v / (h + BF16(5)), looped)
        return looped.astype(jnp.float32), tested.astype(jnp.float32)
    return fun, {"x": x}


EXACT_FORMS = {"rounding": _rounding, "arithmetic": _arithmetic, "reductions": _reductions,
               "control_flow": _control_flow}


def _mlp(x):
    rng = np.random.default_rng(4)
    w1, w2 = (jnp.asarray(rng.standard_normal(s) / 4, BF16) for s in ((16, 32), (32, 8)))
    b1, b2 = (jnp.asarray(rng.standard_normal(s), BF16) for s in (32, 8))
    h = jnp.tanh(x.astype(BF16) @ w1 + b1)
    return jnp.exp(h @ w2 + b2).astype(jnp.float32)


def _export_tflite(fun, inputs, path) -> str:
    steps = []
    noxla.export_tflite(fun, *inputs.values(), path=str(path), on_step=lambda name, s: steps.append(name))
    assert "lower+write (graph tflite)" in steps and not any("TensorFlow" in s for s in steps), steps
    return str(path)


def _export_tfjs(fun, inputs, path) -> str:
    steps = []
    noxla.export_tfjs(fun, *inputs.values(), path=str(path), on_step=lambda name, s: steps.append(name))
    assert "lower (noxla's graph, no TensorFlow)" in steps and not any("through TensorFlow" in s for s in steps), steps
    with open(os.path.join(path, "model.json")) as f:
        model = json.load(f)
    assert model["generatedBy"] == "noxla.graph", steps
    assert "DT_BFLOAT16" not in json.dumps(model["modelTopology"])   # TF.js would compute it unrounded
    return str(path)


def _runs(fun, inputs, tmp_path, tfjs_runner, name) -> dict[str, list[np.ndarray]]:
    """Each runtime's outputs, in the program's output order."""
    from noxla.front.tracing import trace
    names = trace(fun, tuple(inputs.values())).out_names
    runs = {"litert": run_tflite(_export_tflite(fun, inputs, tmp_path / f"{name}.tflite"), inputs)}
    tfjs = _export_tfjs(fun, inputs, tmp_path / f"{name}_tfjs")
    runs.update({f"tfjs {b}": tfjs_runner.run(tfjs, inputs, b) for b in TFJS_BACKENDS})
    return {runtime: [np.asarray(outs[n]) for n in names] for runtime, outs in runs.items()}


@pytest.mark.parametrize("form", sorted(EXACT_FORMS))
def test_bfloat16_inside_matches_jax_bit_for_bit(form, tmp_path, tfjs_runner):
    fun, inputs = EXACT_FORMS[form]()
    expected = _op_by_op(fun, *inputs.values())
    for runtime, outs in _runs(fun, inputs, tmp_path, tfjs_runner, form).items():
        for want, got in zip(expected, outs):
            if want.dtype == np.float32:
                _same_bits(want, got.astype(np.float32))
            else:
                np.testing.assert_array_equal(got, want, err_msg=runtime)
    if form == "arithmetic":   # each product's rounding matters on these inputs: float32's chain differs
        x, y = inputs.values()
        assert not np.array_equal(_bf16(x * y * x * y * x), expected[0])
    if form == "rounding":   # JAX's jit rounds as op by op here (no arithmetic to keep in float32)
        _same_bits(np.asarray(jax.jit(fun)(EDGES)), expected[0])


def test_bfloat16_loop_and_conditional_are_written_as_bodies(tmp_path):
    fun, inputs = _control_flow()
    with open(os.path.join(_export_tfjs(fun, inputs, tmp_path / "m"), "model.json")) as f:
        assert json.load(f)["modelTopology"]["library"]["function"], "no While/If body written"


def test_bfloat16_mlp_matches_jax_within_its_tolerance(tmp_path, tfjs_runner):
    x = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)
    expected = np.asarray(jax.jit(_mlp)(x))
    for runtime, (actual,) in _runs(_mlp, {"x": x}, tmp_path, tfjs_runner, "mlp").items():
        np.testing.assert_allclose(actual, expected, rtol=JAX_BFLOAT16_TOLERANCE, atol=JAX_BFLOAT16_TOLERANCE,
                                   err_msg=runtime)
        assert not (actual.view(np.uint32) & 0xFFFF).any(), runtime   # every output a bfloat16 value


# Normal values only: TF's CPU kernels (and JAX's) flush subnormal results, the folds do not, float32's
# included (a float32 2^-130 * 1.5 folds to a subnormal where TF gives 0).
_PAIRS = (np.float32([1.0, 1 + 2 ** -7, -3.0, 3e38, 0.1, -0.0, 2.0 ** -120, 7.0]),
          np.float32([1 + 2 ** -8, 1 + 2 ** -7, 0.375, 3e38, 3.0, 5.0, 1.5, -2.5]))


@pytest.mark.parametrize("what,fn,args", [
    ("cast_to_bf16", lambda tf, x: tf.cast(x, tf.bfloat16), (EDGES[np.isfinite(EDGES)],)),
    ("add", lambda tf, x, y: tf.cast(x, tf.bfloat16) + tf.cast(y, tf.bfloat16), _PAIRS),
    ("mul", lambda tf, x, y: tf.cast(x, tf.bfloat16) * tf.cast(y, tf.bfloat16), _PAIRS),
    ("div", lambda tf, x, y: tf.cast(x, tf.bfloat16) / tf.cast(y, tf.bfloat16), _PAIRS),
    ("max", lambda tf, x, y: tf.maximum(tf.cast(x, tf.bfloat16), tf.cast(y, tf.bfloat16)), _PAIRS),
    ("to_int32", lambda tf, x: tf.cast(tf.cast(x, tf.bfloat16), tf.int32), (np.float32([2.5, -7.9, 300.7]),)),
    ("argmax", lambda tf, x: tf.argmax(tf.cast(x, tf.bfloat16), output_type=tf.int32), (_PAIRS[1],)),
])
def test_bfloat16_folds_compute_what_tf_computes(what, fn, args):
    from tests.test_graph import _fold_and_tf
    folded, expected = _fold_and_tf(fn, *args)
    assert folded.dtype == expected.dtype and folded.shape == expected.shape, what
    np.testing.assert_array_equal(np.asarray(folded, np.float32).view(np.uint32) if folded.dtype.itemsize == 2
                                  else folded, np.asarray(expected, np.float32).view(np.uint32)
                                  if expected.dtype.itemsize == 2 else expected, err_msg=what)
