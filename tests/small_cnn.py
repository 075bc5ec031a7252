"""A small CNN with the blocks of the real-size ones, importing no TensorFlow (a fresh process exports it
to show the graph tflite writer never does)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _cnn_weights():
    rng = np.random.default_rng(0)
    w = {"stem": rng.normal(0, 0.3, (3, 3, 3, 8)), "scale": rng.uniform(0.5, 1.5, 8), "shift": rng.normal(0, 0.1, 8),
         "dw": rng.normal(0, 0.3, (3, 3, 1, 8)), "se1": rng.normal(0, 0.3, (1, 1, 8, 4)), "se1b": rng.normal(0, 0.1, 4),
         "se2": rng.normal(0, 0.3, (1, 1, 4, 8)), "se2b": rng.normal(0, 0.1, 8), "dense": rng.normal(0, 0.3, (8, 5)),
         "denseb": rng.normal(0, 0.1, 5)}
    return {k: v.astype(np.float32) for k, v in w.items()}


def small_cnn(x, w=None):
    """The blocks of MobileNetV3/EfficientNet/ResNet: rescaling, a strided SAME convolution with batch
    norm and hard swish, an explicit zero pad before a VALID depthwise convolution, relu6, a
    squeeze-excite gate (mean, 1x1 convolutions, relu, hard sigmoid), a max pool, a residual add,
    global average pooling, a dense layer and softmax."""
    w = _cnn_weights() if w is None else w
    conv = lambda x, k, s=1, pad="SAME", groups=1: lax.conv_general_dilated(  # noqa: E731
        x, k, (s, s), pad, dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups)
    x = x * (1 / 127.5) - 1
    x = jax.nn.hard_swish(conv(x, w["stem"], 2) * w["scale"] + w["shift"])
    y = jax.nn.relu6(conv(jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0))), w["dw"], 2, "VALID", groups=8))
    gate = jnp.mean(y, axis=(1, 2), keepdims=True)
    gate = jax.nn.relu(conv(gate, w["se1"]) + w["se1b"])
    y = y * jax.nn.hard_sigmoid(conv(gate, w["se2"]) + w["se2b"])
    y = jax.nn.relu(y + lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"))
    return jax.nn.softmax(jnp.mean(y, axis=(1, 2)) @ w["dense"] + w["denseb"])


CNN_INPUT = np.random.default_rng(1).uniform(0, 255, (1, 16, 16, 3)).astype(np.float32)
