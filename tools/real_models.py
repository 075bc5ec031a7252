"""Real-size models for tools/benchmark.py --real-size: the sizes phones run, random weights.

Each model is a plain JAX function ``apply(params, *inputs)`` of a flat dict of NumPy weights
(plain JAX so that every anchor venv, down to JAX 0.4.30, rebuilds it from this file and the same
weights), or a keras.applications model on Keras 3's JAX backend (rebuilt from its class name and
its weights, in venvs that have Keras). ``build(tiny=True)`` gives the same architectures at toy
sizes, for tests.

- keras_mobilenet_v3_small, keras_efficientnet_b0, keras_resnet50: 224x224x3 images to 1000 logits, their
  BatchNormalization statistics set from 8 images so that activations keep unit scale (``_calibrate_batch_norms``);
- bert_base: 12 post-norm layers, width 768, 12 heads, 128 tokens;
- whisper_tiny_encoder: 80x3000 log-mel frames, two 1D convolutions (the second strided), 4 layers of 384;
- vit_b16: 224x224 image, 16x16 patches, 12 layers of 768, class token, 1000 logits;
- vae_decoder_64: a 64-wide latent through a dense layer to 4x4x256, then four stride-2, 3x3, SAME
  transposed convolutions (``lax.conv_transpose``, biased, ReLU) to 64x64x32 and a 3x3 convolution to an
  RGB image (sigmoid): the decoder form issue 40 measured LiteRT.js slowest on;
- smollm_135m_decode: one decode step of a 30-layer, 576-wide decoder (9 query and 3 key/value heads,
  RoPE, SwiGLU, RMSNorm, tied embeddings) over a 256-position KV cache that it updates.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np

# keras.applications models' BatchNormalization statistics are those of this many images (the
# first is the example input): see _calibrate_batch_norms.
CALIBRATION_IMAGES = 8
KERAS = {"keras_mobilenet_v3_small": "MobileNetV3Small", "keras_efficientnet_b0": "EfficientNetB0",
         "keras_resnet50": "ResNet50"}

FULL = {
    "bert_base": dict(vocab=30522, width=768, layers=12, heads=12, hidden=3072, tokens=128),
    "whisper_tiny_encoder": dict(mels=80, frames=3000, width=384, layers=4, heads=6, hidden=1536),
    "vit_b16": dict(image=224, patch=16, width=768, layers=12, heads=12, hidden=3072, classes=1000),
    "smollm_135m_decode": dict(vocab=49152, width=576, layers=30, heads=9, kv_heads=3, head_dim=64,
                               hidden=1536, context=256),
    "vae_decoder_64": dict(latent=64, base=4, widths=(256, 128, 64, 32), out=3),
}
TINY = {
    "bert_base": dict(vocab=50, width=16, layers=2, heads=2, hidden=32, tokens=8),
    "whisper_tiny_encoder": dict(mels=8, frames=20, width=16, layers=2, heads=2, hidden=32),
    "vit_b16": dict(image=32, patch=8, width=16, layers=2, heads=2, hidden=32, classes=10),
    "smollm_135m_decode": dict(vocab=50, width=24, layers=2, heads=3, kv_heads=1, head_dim=8, hidden=32,
                               context=8),
    "vae_decoder_64": dict(latent=8, base=2, widths=(16, 8), out=3),
}


@dataclasses.dataclass
class RealModel:
    """What benchmark.py needs of a model (as of a tests/zoo.py ZooModel), plus what an anchor
    needs to rebuild it: ``spec`` (JSON) and ``weights`` (name -> array)."""
    name: str
    fun: Callable
    example: list
    spec: dict
    weights: dict

    def inputs(self, batch: int = 1, seed: int = 0) -> list:
        assert batch == 1, "real-size models are measured at batch 1"
        return self.example


# ---------------------------------------------------------------------------------------------
# Building blocks (jax.numpy only, as JAX 0.4.30 has it)

def _layer_norm(x, scale, bias, eps=1e-6):
    import jax.numpy as jnp
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * (scale / jnp.sqrt(var + eps)) + bias


def _rms_norm(x, scale, eps=1e-5):
    import jax.numpy as jnp
    return x * (scale / jnp.sqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps))


def _attention(q, k, v, mask=None):
    """q [T, H, D], k/v [S, H, D] -> [T, H * D]."""
    import jax
    import jax.numpy as jnp
    scores = jnp.einsum("thd,shd->hts", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    if mask is not None:
        scores = jnp.where(mask, scores, -1e9)
    out = jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(out.shape[0], -1)


def _encoder_layer(p, prefix, x, heads, post_norm):
    """A BERT (post-norm) or ViT/Whisper (pre-norm) layer on x [T, W]."""
    import jax
    w = lambda n: p[f"{prefix}/{n}"]
    width = x.shape[-1]

    def attend(h):
        q, k, v = [(h @ w(f"{n}_w") + w(f"{n}_b")).reshape(h.shape[0], heads, width // heads) for n in "qkv"]
        return _attention(q, k, v) @ w("o_w") + w("o_b")

    def mlp(h):
        return jax.nn.gelu(h @ w("fc1_w") + w("fc1_b")) @ w("fc2_w") + w("fc2_b")
    if post_norm:
        x = _layer_norm(x + attend(x), w("ln1_s"), w("ln1_b"))
        return _layer_norm(x + mlp(x), w("ln2_s"), w("ln2_b"))
    x = x + attend(_layer_norm(x, w("ln1_s"), w("ln1_b")))
    return x + mlp(_layer_norm(x, w("ln2_s"), w("ln2_b")))


def _encoder_weights(rng, prefix, width, hidden) -> dict:
    shapes = {"q_w": (width, width), "k_w": (width, width), "v_w": (width, width), "o_w": (width, width),
              "fc1_w": (width, hidden), "fc2_w": (hidden, width)}
    out = {f"{prefix}/{n}": _normal(rng, s, s[0] ** -0.5) for n, s in shapes.items()}
    for n, size in (("q_b", width), ("k_b", width), ("v_b", width), ("o_b", width), ("fc1_b", hidden),
                    ("fc2_b", width), ("ln1_b", width), ("ln2_b", width)):
        out[f"{prefix}/{n}"] = _normal(rng, (size,), 0.02)
    for n in ("ln1_s", "ln2_s"):
        out[f"{prefix}/{n}"] = (1.0 + _normal(rng, (width,), 0.02)).astype(np.float32)
    return out


def _normal(rng, shape, std) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# The models: (weights, apply, example inputs) per config

def bert_base(c, rng, p=None):
    import jax.numpy as jnp
    p = p if p is not None else _bert_weights(c, rng)

    def apply(p, tokens):
        x = _layer_norm(jnp.take(p["tok"], tokens[0], axis=0) + p["pos"], p["ln_s"], p["ln_b"])
        for i in range(c["layers"]):
            x = _encoder_layer(p, f"l{i}", x, c["heads"], post_norm=True)
        return x[None]
    return p, apply, [rng.integers(0, c["vocab"], (1, c["tokens"])).astype(np.int32)]


def _bert_weights(c, rng):
    p = {"tok": _normal(rng, (c["vocab"], c["width"]), 0.02), "pos": _normal(rng, (c["tokens"], c["width"]), 0.02),
         "ln_s": np.ones(c["width"], np.float32), "ln_b": np.zeros(c["width"], np.float32)}
    for i in range(c["layers"]):
        p.update(_encoder_weights(rng, f"l{i}", c["width"], c["hidden"]))
    return p


def whisper_tiny_encoder(c, rng, p=None):
    import jax
    import jax.numpy as jnp
    from jax import lax
    m = c["mels"]
    p = p if p is not None else _whisper_weights(c, rng)

    def apply(p, mel):
        dims = ("NCH", "HIO", "NHC")
        x = jax.nn.gelu(lax.conv_general_dilated(mel, p["conv1_w"], (1,), [(1, 1)], dimension_numbers=dims)
                        + p["conv1_b"])
        x = jax.nn.gelu(lax.conv_general_dilated(x, p["conv2_w"], (2,), [(1, 1)],
                                                 dimension_numbers=("NHC", "HIO", "NHC")) + p["conv2_b"])
        x = x[0] + p["pos"]
        for i in range(c["layers"]):
            x = _encoder_layer(p, f"l{i}", x, c["heads"], post_norm=False)
        return jnp.expand_dims(_layer_norm(x, p["ln_s"], p["ln_b"]), 0)
    return p, apply, [rng.standard_normal((1, m, c["frames"])).astype(np.float32)]


def _whisper_weights(c, rng):
    w, m = c["width"], c["mels"]
    p = {"conv1_w": _normal(rng, (3, m, w), (3 * m) ** -0.5), "conv1_b": _normal(rng, (w,), 0.02),
         "conv2_w": _normal(rng, (3, w, w), (3 * w) ** -0.5), "conv2_b": _normal(rng, (w,), 0.02),
         "pos": _normal(rng, (c["frames"] // 2, w), 0.02),
         "ln_s": np.ones(w, np.float32), "ln_b": np.zeros(w, np.float32)}
    for i in range(c["layers"]):
        p.update(_encoder_weights(rng, f"l{i}", w, c["hidden"]))
    return p


def vit_b16(c, rng, p=None):
    import jax.numpy as jnp
    from jax import lax
    w, s = c["width"], c["patch"]
    p = p if p is not None else _vit_weights(c, rng)

    def apply(p, image):
        x = lax.conv_general_dilated(image, p["patch_w"], (s, s), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["patch_b"]
        x = jnp.concatenate([p["cls"], x.reshape(-1, w)], axis=0) + p["pos"]
        for i in range(c["layers"]):
            x = _encoder_layer(p, f"l{i}", x, c["heads"], post_norm=False)
        return (_layer_norm(x[:1], p["ln_s"], p["ln_b"]) @ p["head_w"]) + p["head_b"]
    return p, apply, [rng.standard_normal((1, c["image"], c["image"], 3)).astype(np.float32)]


def _vit_weights(c, rng):
    w, s = c["width"], c["patch"]
    patches = (c["image"] // s) ** 2
    p = {"patch_w": _normal(rng, (s, s, 3, w), (s * s * 3) ** -0.5), "patch_b": _normal(rng, (w,), 0.02),
         "cls": _normal(rng, (1, w), 0.02), "pos": _normal(rng, (patches + 1, w), 0.02),
         "ln_s": np.ones(w, np.float32), "ln_b": np.zeros(w, np.float32),
         "head_w": _normal(rng, (w, c["classes"]), w ** -0.5), "head_b": np.zeros(c["classes"], np.float32)}
    for i in range(c["layers"]):
        p.update(_encoder_weights(rng, f"l{i}", w, c["hidden"]))
    return p


def _rotary(x, position, theta=10000.0):
    """x [1, H, D] rotated by its position (half-split RoPE, as Llama/SmolLM)."""
    import jax.numpy as jnp
    half = x.shape[-1] // 2
    freqs = (1.0 / theta ** (np.arange(half, dtype=np.float32) / half)).astype(np.float32)
    angle = position.astype(jnp.float32) * freqs
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    a, b = x[..., :half], x[..., half:]
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def smollm_135m_decode(c, rng, p=None):
    """One decode step: (token [1, 1], position [1], k/v caches [layers, context, kv_heads, head_dim])
    -> (logits [1, 1, vocab], the caches with this position written)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    d, h, kvh = c["head_dim"], c["heads"], c["kv_heads"]
    p = p if p is not None else _smollm_weights(c, rng)

    def apply(p, token, position, k_cache, v_cache):
        x = jnp.take(p["embed"], token[0], axis=0)  # [1, w]
        pos = position[0]
        visible = (jnp.arange(c["context"]) <= pos)[None, None, :]  # [1 head, 1 query, context]
        new_k, new_v = [], []
        for i in range(c["layers"]):
            y = _rms_norm(x, p[f"l{i}/n1"])
            q = _rotary((y @ p[f"l{i}/q"]).reshape(1, h, d), pos)
            k = _rotary((y @ p[f"l{i}/k"]).reshape(1, kvh, d), pos)
            v = (y @ p[f"l{i}/v"]).reshape(1, kvh, d)
            ks = lax.dynamic_update_slice(k_cache[i], k, (pos, 0, 0))
            vs = lax.dynamic_update_slice(v_cache[i], v, (pos, 0, 0))
            new_k.append(ks)
            new_v.append(vs)
            group = h // kvh
            attended = _attention(q, jnp.repeat(ks, group, axis=1), jnp.repeat(vs, group, axis=1), visible)
            x = x + attended @ p[f"l{i}/o"]
            y = _rms_norm(x, p[f"l{i}/n2"])
            x = x + (jax.nn.silu(y @ p[f"l{i}/gate"]) * (y @ p[f"l{i}/up"])) @ p[f"l{i}/down"]
        logits = _rms_norm(x, p["norm"]) @ p["embed"].T
        return logits[None], jnp.stack(new_k), jnp.stack(new_v)
    cache = (c["layers"], c["context"], kvh, d)
    example = [rng.integers(0, c["vocab"], (1, 1)).astype(np.int32), np.array([c["context"] // 2], np.int32),
               rng.standard_normal(cache).astype(np.float32), rng.standard_normal(cache).astype(np.float32)]
    return p, apply, example


def _smollm_weights(c, rng):
    w, d, h, kvh = c["width"], c["head_dim"], c["heads"], c["kv_heads"]
    p = {"embed": _normal(rng, (c["vocab"], w), 0.02), "norm": np.ones(w, np.float32)}
    for i in range(c["layers"]):
        p.update({f"l{i}/q": _normal(rng, (w, h * d), w ** -0.5), f"l{i}/k": _normal(rng, (w, kvh * d), w ** -0.5),
                  f"l{i}/v": _normal(rng, (w, kvh * d), w ** -0.5),
                  f"l{i}/o": _normal(rng, (h * d, w), (h * d) ** -0.5),
                  f"l{i}/gate": _normal(rng, (w, c["hidden"]), w ** -0.5),
                  f"l{i}/up": _normal(rng, (w, c["hidden"]), w ** -0.5),
                  f"l{i}/down": _normal(rng, (c["hidden"], w), c["hidden"] ** -0.5),
                  f"l{i}/n1": np.ones(w, np.float32), f"l{i}/n2": np.ones(w, np.float32)})
    return p


def vae_decoder_64(c, rng, p=None):
    import jax
    from jax import lax
    p = p if p is not None else _vae_weights(c, rng)
    dims = ("NHWC", "HWIO", "NHWC")

    def apply(p, z):
        b, w0 = c["base"], c["widths"][0]
        x = jax.nn.relu(z @ p["dense_w"] + p["dense_b"]).reshape(1, b, b, w0)
        for i in range(len(c["widths"])):
            x = jax.nn.relu(lax.conv_transpose(x, p[f"up{i}_w"], (2, 2), "SAME", dimension_numbers=dims)
                            + p[f"up{i}_b"])
        return jax.nn.sigmoid(lax.conv_general_dilated(x, p["out_w"], (1, 1), "SAME", dimension_numbers=dims)
                              + p["out_b"])
    return p, apply, [rng.standard_normal((1, c["latent"])).astype(np.float32)]


def _vae_weights(c, rng):
    widths, b = c["widths"], c["base"]
    p = {"dense_w": _normal(rng, (c["latent"], b * b * widths[0]), c["latent"] ** -0.5),
         "dense_b": _normal(rng, (b * b * widths[0],), 0.02)}
    for i, (fin, fout) in enumerate(zip(widths, [*widths[1:], widths[-1]])):
        p[f"up{i}_w"] = _normal(rng, (3, 3, fin, fout), (9 * fin) ** -0.5)
        p[f"up{i}_b"] = _normal(rng, (fout,), 0.02)
    p["out_w"] = _normal(rng, (3, 3, widths[-1], c["out"]), (9 * widths[-1]) ** -0.5)
    p["out_b"] = _normal(rng, (c["out"],), 0.02)
    return p


BUILDERS = {"bert_base": bert_base, "whisper_tiny_encoder": whisper_tiny_encoder, "vit_b16": vit_b16,
            "smollm_135m_decode": smollm_135m_decode, "vae_decoder_64": vae_decoder_64}
NAMES = [*KERAS, *BUILDERS]


def plain_function(name: str, tiny: bool, weights: dict) -> tuple[Callable, list]:
    """The model's function closed over ``weights`` (the anchors pass the weights they loaded)."""
    config = (TINY if tiny else FULL)[name]
    _, apply, example = BUILDERS[name](config, np.random.default_rng(0), weights)
    return (lambda *xs: apply(weights, *xs)), example


def keras_function(class_name: str, weights: list, image: int = 224) -> Callable:
    """A keras.applications model (random init replaced by ``weights``) as a function of its image."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    model = _keras_model(keras, class_name, image)
    model.set_weights(weights)
    return _stateless(model)


def _keras_model(keras, class_name: str, image: int):
    # Logits, not the softmax of 1000 classes: a check against JAX relative to max(1, max |JAX|)
    # cannot see an error in probabilities of about 1e-3.
    return getattr(keras.applications, class_name)(weights=None, input_shape=(image, image, 3),
                                                   classifier_activation=None)


def _calibrate_batch_norms(keras, model, images: np.ndarray) -> None:
    """Set every BatchNormalization's moving mean and variance to the statistics of its input over
    ``images``, layer after layer, so that at inference each normalizes to zero mean and unit
    variance and the activations keep their scale through the network. With Keras's initial
    statistics (mean 0, variance 1) and its Glorot-initialized kernels they shrink layer by layer:
    MobileNetV3Small's and EfficientNetB0's logits came out about 1e-10, where no wrong export
    shows against JAX. One training-mode call does it: with momentum 0 a BatchNormalization
    stores the batch's own statistics, which it also normalizes that call's batch with (dropout
    off, so that the later layers see what inference gives them)."""
    norms = [la for la in model.layers if isinstance(la, keras.layers.BatchNormalization)]
    dropouts = [la for la in model.layers if isinstance(la, keras.layers.Dropout)]
    saved = [la.momentum for la in norms], [la.rate for la in dropouts]
    for la in norms:
        la.momentum = 0.0
    for la in dropouts:
        la.rate = 0.0
    trainable = [v.value for v in model.trainable_variables]
    other = [v.value for v in model.non_trainable_variables]
    _, other = model.stateless_call(trainable, other, images, training=True)
    for variable, value in zip(model.non_trainable_variables, other):
        variable.assign(value)
    for la, momentum in zip(norms, saved[0]):
        la.momentum = momentum
    for la, rate in zip(dropouts, saved[1]):
        la.rate = rate


def _stateless(model) -> Callable:
    trainable = [v.value for v in model.trainable_variables]
    other = [v.value for v in model.non_trainable_variables]
    return lambda x: model.stateless_call(trainable, other, x, training=False)[0]


def _seed_keras(seed: int) -> None:
    """``keras.utils.set_random_seed`` without its TensorFlow step: where TF is installed (noxla's
    environment, not litert-converter's) that step imports it, 2 s and 450 MB of the fresh process a
    first export is measured in, which the exporter being measured did not cause."""
    import random
    try:
        from keras.src.backend.common import global_state
        from keras.src.random import seed_generator
    except ImportError:  # another Keras: its public seeding, TF step included
        import keras
        keras.utils.set_random_seed(seed)
        return
    global_state.set_global_attribute("global_random_seed", seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


def build(names=None, tiny: bool = False) -> dict[str, RealModel]:
    models = {}
    for name in names or NAMES:
        if name in KERAS:
            os.environ.setdefault("KERAS_BACKEND", "jax")
            import keras
            _seed_keras(0)
            image = 32 if tiny else 224
            model = _keras_model(keras, KERAS[name], image)
            # Pixels in [0, 255], what these models take (MobileNetV3 and EfficientNet rescale them
            # inside): standard normal values, MobileNetV3's x / 127.5 - 1 made -1 +- 0.008, which its
            # first BatchNormalization then scaled back up by 125, float32's rounding with it.
            images = np.random.default_rng(0).uniform(0, 255, (CALIBRATION_IMAGES, image, image, 3)).astype(np.float32)
            _calibrate_batch_norms(keras, model, images)
            weights = {f"{i:04d}": np.asarray(w) for i, w in enumerate(model.get_weights())}
            # The model just built, not a second one: an anchor's process builds it once (``rebuild``).
            fun = _stateless(model)
            example = [images[:1]]
            spec = {"kind": "keras", "class": KERAS[name], "image": image}
        else:
            weights, _, example = BUILDERS[name]((TINY if tiny else FULL)[name], np.random.default_rng(0))
            fun, _ = plain_function(name, tiny, weights)
            spec = {"kind": "real", "class": name, "tiny": tiny}
        models[name] = RealModel(name, fun, example, spec, weights)
    return models


def rebuild(spec: dict, weights: dict) -> Callable:
    """In an anchor's venv: the function ``build`` made, from its spec and the weights it saved."""
    if spec["kind"] == "keras":
        return keras_function(spec["class"], [weights[k] for k in sorted(weights)], spec["image"])
    return plain_function(spec["class"], spec["tiny"], weights)[0]
