"""The built-in example: a small MNIST-shaped CNN in plain JAX, so `noxla export` works with no arguments.

Weights are drawn from a fixed seed and closed over, the way a trained model's
parameters are: they become constants in every exported format.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

INPUT = "f32[1,28,28,1]"


def _init(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "conv1": jax.random.normal(k1, (3, 3, 1, 8)) * 0.3,
        "conv2": jax.random.normal(k2, (3, 3, 8, 16)) * 0.1,
        "dense": jax.random.normal(k3, (7 * 7 * 16, 10)) * 0.05,
        "bias": jnp.zeros((10,)),
    }


PARAMS = _init(jax.random.PRNGKey(0))


def _conv(x, kernel):
    return lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def mnist_cnn(images):
    """Log-probabilities of the 10 digit classes for a batch of 28x28x1 images."""
    x = _max_pool(jax.nn.relu(_conv(images, PARAMS["conv1"])))
    x = _max_pool(jax.nn.relu(_conv(x, PARAMS["conv2"])))
    x = x.reshape((x.shape[0], -1))
    return jax.nn.log_softmax(x @ PARAMS["dense"] + PARAMS["bias"])
