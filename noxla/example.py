"""The built-in example: a small MNIST-shaped CNN in plain JAX, so `noxla export` works with no arguments.

Weights are drawn from a fixed seed and closed over, the way a trained model's
parameters are: they become constants in every exported format. NumPy draws them: with
``jax.random`` the draws alone compiled 13 XLA programs, 4.6 of the CLI's 8 CPU s.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax

INPUT = "f32[1,28,28,1]"


def _init(seed: int) -> dict:
    rng = np.random.default_rng(seed)

    def normal(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    return {
        "conv1": normal((3, 3, 1, 8), 0.3),
        "conv2": normal((3, 3, 8, 16), 0.1),
        "dense": normal((7 * 7 * 16, 10), 0.05),
        "bias": np.zeros((10,), np.float32),
    }


PARAMS = _init(0)


def _conv(x, kernel):
    return lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _max_pool(x):
    return lax.reduce_window(x, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def mnist_cnn(images):
    """Log-probabilities of the 10 digit classes for a batch of 28x28x1 images."""
    x = _max_pool(jax.nn.relu(_conv(images, PARAMS["conv1"])))
    x = _max_pool(jax.nn.relu(_conv(x, PARAMS["conv2"])))
    x = x.reshape((x.shape[0], -1))
    return jax.nn.log_softmax(x @ PARAMS["dense"] + PARAMS["bias"])
