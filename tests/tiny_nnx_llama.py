"""A tiny Llama written as a Flax NNX module, called in noxla.llm's decode-step form without
``params``: ``model(tokens, input_pos, mask, kv_cache) -> (logits, kv_cache)``, the cache layout
and additive mask of tests/tiny_llama.py (which it shares RoPE and RMSNorm with)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax

from tests import tiny_llama


def _normal(scale):
    # Scaled like tiny_llama.init_params: each layer moves the residual stream far enough from the
    # token's own (tied) embedding that greedy decoding does not repeat one token.
    def init(key, shape, dtype=jnp.float32):
        return jax.random.normal(key, shape, dtype) * scale / np.sqrt(shape[0])
    return init


def _near_one(key, shape, dtype=jnp.float32):
    return 1.0 + 0.1 * jax.random.normal(key, shape, dtype)


class Block(nnx.Module):
    def __init__(self, c: tiny_llama.Config, rngs: nnx.Rngs):
        self.c = c
        linear = lambda i, o, scale=1.0: nnx.Linear(i, o, use_bias=False, kernel_init=_normal(scale), rngs=rngs)
        self.attn_norm = nnx.RMSNorm(c.hidden, epsilon=1e-6, scale_init=_near_one, rngs=rngs)
        self.q = linear(c.hidden, c.heads * c.head_dim)
        self.k = linear(c.hidden, c.kv_heads * c.head_dim)
        self.v = linear(c.hidden, c.kv_heads * c.head_dim)
        self.o = linear(c.heads * c.head_dim, c.hidden, 3.0)
        self.mlp_norm = nnx.RMSNorm(c.hidden, epsilon=1e-6, scale_init=_near_one, rngs=rngs)
        self.gate = linear(c.hidden, c.ffn)
        self.up = linear(c.hidden, c.ffn)
        self.down = linear(c.ffn, c.hidden, 3.0)

    def __call__(self, x, input_pos, mask, k_cache, v_cache):
        c, t = self.c, x.shape[0]
        h = self.attn_norm(x)
        q = tiny_llama.rope(self.q(h).reshape(t, c.heads, c.head_dim), input_pos, c.rope_theta)
        k = tiny_llama.rope(self.k(h).reshape(t, c.kv_heads, c.head_dim), input_pos, c.rope_theta)
        v = self.v(h).reshape(t, c.kv_heads, c.head_dim)
        start = input_pos[0]
        k_cache = lax.dynamic_update_slice(k_cache, k.transpose(1, 0, 2)[None], (0, 0, start, 0))
        v_cache = lax.dynamic_update_slice(v_cache, v.transpose(1, 2, 0)[None], (0, 0, 0, start))
        q = q.reshape(t, c.kv_heads, c.heads // c.kv_heads, c.head_dim)
        scores = jnp.einsum("tkgd,kcd->kgtc", q, k_cache[0]) / np.sqrt(c.head_dim) + mask[0, 0]
        attn = jnp.einsum("kgtc,kdc->tkgd", jax.nn.softmax(scores, axis=-1), v_cache[0])
        x = x + self.o(attn.reshape(t, c.heads * c.head_dim))
        h = self.mlp_norm(x)
        return x + self.down(jax.nn.silu(self.gate(h)) * self.up(h)), (k_cache, v_cache)


class Llama(nnx.Module):
    def __init__(self, c: tiny_llama.Config, seed: int = 1):
        rngs = nnx.Rngs(seed)
        self.c = c
        self.embed = nnx.Embed(c.vocab, c.hidden, embedding_init=nnx.initializers.normal(0.1), rngs=rngs)
        self.blocks = nnx.List([Block(c, rngs) for _ in range(c.layers)])
        self.final_norm = nnx.RMSNorm(c.hidden, epsilon=1e-6, scale_init=_near_one, rngs=rngs)

    def __call__(self, tokens, input_pos, mask, kv_cache):
        x = self.embed(tokens[0])
        new_cache = []
        for block, (k_cache, v_cache) in zip(self.blocks, kv_cache):
            x, pair = block(x, input_pos, mask, k_cache, v_cache)
            new_cache.append(pair)
        return self.embed.attend(self.final_norm(x))[None], new_cache


def greedy(model: Llama, prompt, max_new: int, cache_length: int, eos: int) -> list[int]:
    """JAX's greedy tokens: the prompt in one call, then one call per token, on the contract's
    cache, stopping after ``eos``."""
    call = nnx.jit(lambda m, *a: m(*a))
    c = model.c
    cache = tiny_llama.empty_cache(c, cache_length)
    positions = jnp.arange(len(prompt), dtype=jnp.int32)
    logits, cache = call(model, jnp.asarray([prompt], jnp.int32), positions,
                         tiny_llama.causal_mask(positions, cache_length), cache)
    out = []
    for pos in range(len(prompt), len(prompt) + max_new):
        token = int(jnp.argmax(logits[0, -1]))
        out.append(token)
        if token == eos or pos >= cache_length:
            break
        position = jnp.asarray([pos], jnp.int32)
        logits, cache = call(model, jnp.asarray([[token]], jnp.int32), position,
                             tiny_llama.causal_mask(position, cache_length), cache)
    return out
