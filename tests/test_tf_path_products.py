"""TF's path keeps the activation after a product of two computed operands
(``noxla.writers.tflite.converter.products``): TF 2.21's converter fused RELU, RELU6 and RELU_N1_TO_1
into a FULLY_CONNECTED it then wrote as a BATCH_MATMUL, without the activation (``relu(x @ w)``, ``w``
a program input, came out of LiteRT as ``x @ w``)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TF's path (its TFLite converter) is the noxla[tf] extra")

from noxla.pipeline.tf_path import export as tf_path_export  # noqa: E402
from noxla.runtimes import run_tflite, tflite_op_names  # noqa: E402

RNG = np.random.default_rng(0)
X, W = RNG.standard_normal((2, 16), np.float32), RNG.standard_normal((16, 8), np.float32) * 3

ACTIVATIONS = {
    "relu": jax.nn.relu,
    "maximum_zero": lambda v: jnp.maximum(v, 0.0),
    "relu6": jax.nn.relu6,
    "clip_unit": lambda v: jnp.clip(v, -1.0, 1.0),
    "two_readers": lambda v: jax.nn.relu(v) - 0.5 * v,
    "transposed": None,  # relu(x @ w.T)
    "in_a_loop": None,   # relu(h @ w) in a fori_loop's body
}


def _fun(name):
    if name == "transposed":
        return lambda x, w: jax.nn.relu(x @ w.T.T)
    if name == "in_a_loop":  # a data-dependent condition: a WHILE, its body a library function
        return lambda x, w: jax.lax.while_loop(lambda c: (c[0] < 2) & (jnp.sum(c[1]) > -1e30),
                                               lambda c: (c[0] + 1, jax.nn.relu(c[1] @ w)), (0, x))[1]
    act = ACTIVATIONS[name]
    return lambda x, w: act(x @ w)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_an_activation_after_a_product_of_inputs_survives_tf_path(name, tmp_path):
    fun = _fun(name)
    w = RNG.standard_normal((16, 16), np.float32) if name == "in_a_loop" else W
    path = str(tmp_path / "m.tflite")
    program = tf_path_export(fun, [X, w], tflite=path).program
    outs = run_tflite(path, dict(zip(program.in_names, [X, w])))
    assert (name == "in_a_loop") == ("WHILE" in tflite_op_names(path))
    expected = np.asarray(jax.jit(fun)(X, w))
    np.testing.assert_allclose(outs[program.out_names[0]], expected, rtol=1e-5, atol=1e-5)


def test_a_product_with_constant_weights_stays_one_fully_connected(tmp_path):
    path = str(tmp_path / "m.tflite")
    program = tf_path_export(lambda x: jax.nn.relu(x @ W), [X], tflite=path).program
    assert tflite_op_names(path) == ["FULLY_CONNECTED"]
    outs = run_tflite(path, dict(zip(program.in_names, [X])))
    np.testing.assert_allclose(outs[program.out_names[0]], np.maximum(X @ W, 0), rtol=1e-5, atol=1e-5)
