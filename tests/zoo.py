"""Real models written with Flax (linen and NNX), with weights closed over as a trained model's are.

Each ``ZooModel`` is a JAX function of its inputs and a way to draw inputs of any batch size.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

VOCAB = 50


@dataclasses.dataclass(frozen=True)
class ZooModel:
    name: str
    fun: Callable
    input_shapes: tuple[tuple[int, ...], ...]   # without the batch dimension
    input_dtypes: tuple[np.dtype, ...]

    def inputs(self, batch: int, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for shape, dtype in zip(self.input_shapes, self.input_dtypes):
            if np.issubdtype(dtype, np.integer):
                out.append(rng.integers(0, VOCAB, size=(batch, *shape)).astype(dtype))
            else:
                out.append(rng.standard_normal((batch, *shape)).astype(dtype))
        return out

    def calibration_samples(self, count: int = 16) -> Callable:
        """int8 representative data: ``count`` batch-1 inputs drawn as ``inputs`` draws them, from
        seeds other than the default one, so an error measured on ``inputs(1)`` is on unseen data."""
        return lambda: (self.inputs(1, seed) for seed in range(1, 1 + count))

    @property
    def polymorphic_shapes(self) -> list[str]:
        return ["(b, ...)"] * len(self.input_shapes)


def _weights(path: tuple, shape, dtype, rng: np.random.Generator, trained_stats: bool) -> np.ndarray:
    """A value for one variable, drawn like a trained model's: no zero biases, scaled kernels."""
    name = str(getattr(path[-1], "key", path[-1]))
    normal = rng.standard_normal(shape)
    if name == "kernel":
        value = normal / np.sqrt(max(1, int(np.prod(shape[:-1]))))
    elif name == "embedding":
        value = normal
    elif name == "scale":
        value = 1 + 0.1 * normal
    elif name == "var":
        value = 1 + 0.5 * np.abs(normal) if trained_stats else np.ones(shape)
    elif name == "mean":
        value = 0.5 * normal if trained_stats else np.zeros(shape)
    else:  # biases
        value = 0.1 * normal
    return value.astype(dtype)


def _linen(module: nn.Module, example: np.ndarray, perturb_batch_stats: bool = False) -> Callable:
    # Shapes from an abstract init, values from numpy: running Flax's initializers compiles their
    # ops and the model's forward pass with XLA, which took 4-24 s a model.
    shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0), example)
    rng = np.random.default_rng(0)
    variables = jax.tree_util.tree_map_with_path(
        lambda path, s: _weights(path, s.shape, s.dtype, rng, perturb_batch_stats), shapes)
    fun = lambda x: module.apply(variables, x)
    fun.flax = ("linen", module, variables)  # tools/benchmark.py rebuilds the model in other venvs
    return fun


def _nnx(module: nnx.Module) -> Callable:
    graphdef, state = nnx.split(module)
    fun = lambda x: nnx.merge(graphdef, state)(x)
    fun.flax = ("nnx", module)
    return fun


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(64, 128, rngs=rngs)
        self.out = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        return nn.log_softmax(nn.Dense(10)(x))


class ResNetBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        norm = lambda: nn.BatchNorm(use_running_average=True)
        y = nn.relu(norm()(nn.Conv(8, (3, 3), use_bias=False)(x)))
        y = norm()(nn.Conv(8, (3, 3), use_bias=False)(y))
        return nn.relu(x + y)


class MobileNetBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        channels = x.shape[-1]
        norm = lambda: nn.BatchNorm(use_running_average=True)
        y = nn.Conv(channels, (3, 3), strides=(2, 2), feature_group_count=channels, use_bias=False)(x)
        y = nn.relu6(norm()(y))
        y = nn.Conv(16, (1, 1), use_bias=False)(y)
        return nn.relu6(norm()(y))


class LSTMClassifier(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, 16)(tokens)
        x = nn.RNN(nn.OptimizedLSTMCell(24))(x)
        return nn.Dense(4)(x[:, -1])


class TransformerEncoder(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, width: int = 32, heads: int = 4, length: int = 16):
        self.embed = nnx.Embed(VOCAB, width, rngs=rngs)
        self.position = nnx.Param(jax.random.normal(rngs.params(), (length, width)) * 0.02)
        self.attention = nnx.MultiHeadAttention(heads, width, decode=False, rngs=rngs)
        self.norm1 = nnx.LayerNorm(width, rngs=rngs)
        self.norm2 = nnx.LayerNorm(width, rngs=rngs)
        self.up = nnx.Linear(width, 4 * width, rngs=rngs)
        self.down = nnx.Linear(4 * width, width, rngs=rngs)
        self.head = nnx.Linear(width, 3, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens) + self.position[...]
        x = x + self.attention(self.norm1(x))
        x = x + self.down(nnx.gelu(self.up(self.norm2(x))))
        return nnx.softmax(self.head(x.mean(axis=1)))


def _mel_filterbank(n_fft: int, mels: int, rate: int) -> np.ndarray:
    """Triangular filters evenly spaced on the mel scale (HTK), (n_fft // 2 + 1, mels)."""
    to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    to_hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)  # noqa: E731
    edges = to_hz(np.linspace(0.0, to_mel(rate / 2), mels + 2))
    freqs = np.linspace(0.0, rate / 2, n_fft // 2 + 1)
    lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising, falling = (freqs - lower) / (center - lower), (upper - freqs) / (upper - center)
    return np.maximum(0.0, np.minimum(rising, falling)).T.astype(np.float32)


def log_mel_spectrogram(wave, n_fft: int = 256, hop: int = 128, mels: int = 32, rate: int = 16000):
    """Frames -> periodic Hann window -> rfft -> power -> mel projection -> log: (batch, frames, mels)."""
    frames = 1 + (wave.shape[-1] - n_fft) // hop
    index = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    spectrum = jnp.fft.rfft(wave[:, index] * window.astype(np.float32), axis=-1)
    power = jnp.real(spectrum) ** 2 + jnp.imag(spectrum) ** 2
    return jnp.log(power @ _mel_filterbank(n_fft, mels, rate) + 1e-6)


class AudioClassifier(nn.Module):
    """A keyword-spotting-style model: a log-mel front-end feeding a small conv net."""

    @nn.compact
    def __call__(self, wave):
        x = log_mel_spectrogram(wave)[..., None]
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        return nn.Dense(5)(x.mean(axis=(1, 2)))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise (maybe strided), 1x1 linear projection."""
    out_channels: int
    strides: int = 1
    expand: int = 4

    @nn.compact
    def __call__(self, x):
        channels = x.shape[-1]
        hidden = channels * self.expand
        norm = lambda: nn.BatchNorm(use_running_average=True)
        y = nn.relu6(norm()(nn.Conv(hidden, (1, 1), use_bias=False)(x)))
        y = nn.Conv(hidden, (3, 3), strides=(self.strides, self.strides), feature_group_count=hidden,
                    use_bias=False)(y)
        y = nn.relu6(norm()(y))
        y = norm()(nn.Conv(self.out_channels, (1, 1), use_bias=False)(y))
        return x + y if self.strides == 1 and channels == self.out_channels else y


class MobileNetV2Stack(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu6(nn.BatchNorm(use_running_average=True)(
            nn.Conv(16, (3, 3), strides=(2, 2), use_bias=False)(x)))
        for out_channels, strides in ((16, 1), (24, 2), (24, 1), (32, 2)):
            x = InvertedResidual(out_channels, strides)(x)
        return nn.Dense(10)(x.mean(axis=(1, 2)))


class VAEDecoder(nn.Module):
    """Latent vector to image through stride-2, 3x3, SAME transposed convolutions."""
    @nn.compact
    def __call__(self, z):
        x = nn.relu(nn.Dense(8 * 8 * 32)(z)).reshape((z.shape[0], 8, 8, 32))
        x = nn.relu(nn.ConvTranspose(16, (3, 3), strides=(2, 2), padding="SAME")(x))
        x = nn.relu(nn.ConvTranspose(8, (3, 3), strides=(2, 2), padding="SAME")(x))
        return nn.sigmoid(nn.Conv(1, (3, 3))(x))


class UNet(nn.Module):
    """Two-level U-Net: max-pool down, ConvTranspose up, skip connections concatenated."""
    @nn.compact
    def __call__(self, x):
        conv = lambda features, y: nn.relu(nn.Conv(features, (3, 3))(y))
        skip1 = conv(8, x)
        skip2 = conv(16, nn.max_pool(skip1, (2, 2), (2, 2)))
        y = conv(32, nn.max_pool(skip2, (2, 2), (2, 2)))
        y = nn.ConvTranspose(16, (2, 2), strides=(2, 2))(y)
        y = conv(16, jnp.concatenate([y, skip2], axis=-1))
        y = nn.ConvTranspose(8, (3, 3), strides=(2, 2), padding="SAME")(y)
        y = conv(8, jnp.concatenate([y, skip1], axis=-1))
        return nn.Conv(2, (1, 1))(y)



class RMSNorm(nn.Module):
    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def rotary(x):
    """RoPE on [batch, time, heads, head_dim]: each (even, odd) pair rotated by its position's
    angle, and interleaved back with jnp.stack (which binds JAX's ``stack``)."""
    time, half = x.shape[1], x.shape[-1] // 2
    angle = jnp.arange(time, dtype=jnp.float32)[:, None] / 10000.0 ** (jnp.arange(half) / half)
    cos, sin = jnp.cos(angle)[:, None, :], jnp.sin(angle)[:, None, :]
    even, odd = x[..., ::2], x[..., 1::2]
    return jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(x.shape)


class LlamaBlock(nn.Module):
    """Pre-norm decoder block: causal grouped-query attention with RoPE, then a SwiGLU MLP."""
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    hidden: int = 64

    @nn.compact
    def __call__(self, x):
        width = x.shape[-1]
        dense = lambda features, name: nn.DenseGeneral(features, use_bias=False, name=name)
        h = RMSNorm()(x)
        q = rotary(dense((self.heads, self.head_dim), "q")(h))
        k = rotary(dense((self.kv_heads, self.head_dim), "k")(h))
        v = dense((self.kv_heads, self.head_dim), "v")(h)
        group = self.heads // self.kv_heads  # each key/value head serves `group` query heads
        k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(self.head_dim)
        causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
        probs = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        attended = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
        x = x + dense(width, "o")(attended.reshape(*attended.shape[:2], -1))
        h = RMSNorm()(x)
        gated = nn.silu(dense(self.hidden, "gate")(h)) * dense(self.hidden, "up")(h)
        return x + dense(width, "down")(gated)


class Llama(nn.Module):
    """A small Llama/Gemma-style decoder: token embedding, two blocks, final RMSNorm, LM head."""
    width: int = 32
    layers: int = 2

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, self.width)(tokens)
        for _ in range(self.layers):
            x = LlamaBlock()(x)
        return nn.Dense(VOCAB, use_bias=False)(RMSNorm()(x))


def _sampling_vae_decoder() -> Callable:
    """Draws each example's latent in the graph from its int32 seed, then decodes it."""
    decode = _linen(VAEDecoder(), np.zeros((1, 16), np.float32))

    def sample(seeds):
        latents = jax.vmap(lambda s: jax.random.normal(jax.random.key(s), (16,)))(seeds)
        return decode(latents)
    return sample


class LogitsHead(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(VOCAB)(nn.tanh(nn.Dense(32)(x)))


def _categorical_sampling_head() -> Callable:
    """A language model's sampling step: features -> logits -> a token drawn per row from a
    legacy uint32 key made from its seed (temperature 0.8)."""
    logits_of = _linen(LogitsHead(), np.zeros((1, 24), np.float32))

    def sample(features, seeds):
        keys = jax.vmap(jax.random.PRNGKey)(seeds)
        logits = logits_of(features) / 0.8
        return jax.vmap(jax.random.categorical)(keys, logits)
    return sample


def build(names=None) -> dict[str, ZooModel]:
    """The zoo's models, or only those ``names`` names: each is built (its weights initialized) only
    when asked for, so that a benchmark's fresh process exporting one model does not build thirteen."""
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    makers = {
        "mlp": lambda: (_nnx(MLP(nnx.Rngs(0))), ((64,),), (f32,)),
        "cnn": lambda: (_linen(CNN(), np.zeros((1, 28, 28, 1), f32)), ((28, 28, 1),), (f32,)),
        "resnet_block": lambda: (_linen(ResNetBlock(), np.zeros((1, 16, 16, 8), f32), True),
                                 ((16, 16, 8),), (f32,)),
        "mobilenet_block": lambda: (_linen(MobileNetBlock(), np.zeros((1, 16, 16, 8), f32), True),
                                    ((16, 16, 8),), (f32,)),
        "lstm_classifier": lambda: (_linen(LSTMClassifier(), np.zeros((1, 12), i32)), ((12,),), (i32,)),
        "transformer_encoder": lambda: (_nnx(TransformerEncoder(nnx.Rngs(0))), ((16,),), (i32,)),
        "log_mel_audio_classifier": lambda: (_linen(AudioClassifier(), np.zeros((1, 4000), f32)),
                                             ((4000,),), (f32,)),
        "mobilenet_v2": lambda: (_linen(MobileNetV2Stack(), np.zeros((1, 32, 32, 3), f32), True),
                                 ((32, 32, 3),), (f32,)),
        "vae_decoder": lambda: (_linen(VAEDecoder(), np.zeros((1, 16), f32)), ((16,),), (f32,)),
        "unet": lambda: (_linen(UNet(), np.zeros((1, 32, 32, 3), f32)), ((32, 32, 3),), (f32,)),
        "llama": lambda: (_linen(Llama(), np.zeros((1, 16), i32)), ((16,),), (i32,)),
        "sampling_vae_decoder": lambda: (_sampling_vae_decoder(), ((),), (i32,)),
        "categorical_sampling_head": lambda: (_categorical_sampling_head(), ((24,), ()), (f32, i32)),
    }
    return {name: ZooModel(name, *make()) for name, make in makers.items() if names is None or name in names}
