"""A tiny Llama decoder in plain JAX (grouped-query attention, RoPE, RMSNorm, tied embeddings),
written to noxla.llm's decode-step form: the reference model of the LLM tests.

``step(params, tokens, input_pos, mask, kv_cache) -> (logits, kv_cache)`` with tokens int32
[1, T], input_pos int32 [T], mask float32 [1, 1, T, C] (additive 0 / -inf), and per layer a
K cache [1, kv_heads, C, head_dim] and a V cache stored transposed, [1, kv_heads, head_dim, C].
"""
from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 96
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    ffn: int = 64
    rope_theta: float = 10000.0


SMOLLM_135M = Config(vocab=49152, hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64, ffn=1536)


def init_params(config: Config, seed: int = 2) -> dict:
    """Random weights scaled so that each layer moves the residual stream well away from the input
    token's own embedding: greedy decoding then wanders over the vocabulary instead of repeating
    one token (tied embeddings favour the current token otherwise)."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[0])).astype(np.float32)
    c = config
    layers = []
    for _ in range(c.layers):
        layers.append({
            "attn_norm": (1.0 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32),
            "wq": normal(c.hidden, c.heads * c.head_dim), "wk": normal(c.hidden, c.kv_heads * c.head_dim),
            "wv": normal(c.hidden, c.kv_heads * c.head_dim), "wo": normal(c.heads * c.head_dim, c.hidden, scale=3.0),
            "mlp_norm": (1.0 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32),
            "w_gate": normal(c.hidden, c.ffn), "w_up": normal(c.hidden, c.ffn),
            "w_down": normal(c.ffn, c.hidden, scale=3.0)})
    return {"embed": (0.1 * rng.standard_normal((c.vocab, c.hidden))).astype(np.float32), "layers": layers,
            "final_norm": np.ones(c.hidden, np.float32)}


def rms_norm(x, weight, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x, positions, theta):
    """Rotary embedding on [T, heads, head_dim], halves rotated (Llama's layout)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * freqs[None, :]
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def step(config: Config, params, tokens, input_pos, mask, kv_cache):
    c = config
    t = tokens.shape[1]
    group = c.heads // c.kv_heads
    x = jnp.take(params["embed"], tokens[0], axis=0)
    new_cache = []
    for layer, (k_cache, v_cache) in zip(params["layers"], kv_cache):
        h = rms_norm(x, layer["attn_norm"])
        q = rope((h @ layer["wq"]).reshape(t, c.heads, c.head_dim), input_pos, c.rope_theta)
        k = rope((h @ layer["wk"]).reshape(t, c.kv_heads, c.head_dim), input_pos, c.rope_theta)
        v = (h @ layer["wv"]).reshape(t, c.kv_heads, c.head_dim)
        # The T new entries fill the slots from input_pos[0] on: LiteRT-LM pads a short prompt
        # with position 0, and a scatter at input_pos would let the padding overwrite slot 0.
        start = input_pos[0]
        k_cache = lax.dynamic_update_slice(k_cache, k.transpose(1, 0, 2)[None], (0, 0, start, 0))
        v_cache = lax.dynamic_update_slice(v_cache, v.transpose(1, 2, 0)[None], (0, 0, 0, start))
        new_cache.append((k_cache, v_cache))
        q = q.reshape(t, c.kv_heads, group, c.head_dim)
        scores = jnp.einsum("tkgd,kcd->kgtc", q, k_cache[0]) / np.sqrt(c.head_dim) + mask[0, 0]
        attn = jnp.einsum("kgtc,kdc->tkgd", jax.nn.softmax(scores, axis=-1), v_cache[0])
        x = x + attn.reshape(t, c.heads * c.head_dim) @ layer["wo"]
        h = rms_norm(x, layer["mlp_norm"])
        x = x + (jax.nn.silu(h @ layer["w_gate"]) * (h @ layer["w_up"])) @ layer["w_down"]
    logits = rms_norm(x, params["final_norm"]) @ params["embed"].T
    return logits[None], new_cache


def empty_cache(config: Config, cache_length: int) -> list:
    c = config
    return [(jnp.zeros((1, c.kv_heads, cache_length, c.head_dim), jnp.float32),
             jnp.zeros((1, c.kv_heads, c.head_dim, cache_length), jnp.float32)) for _ in range(c.layers)]


def causal_mask(input_pos, cache_length: int):
    """[1, 1, T, C]: 0 where a cache slot is at or before the query's position, else -inf."""
    visible = jnp.arange(cache_length)[None, :] <= input_pos[:, None]
    return jnp.where(visible, 0.0, -jnp.inf).astype(jnp.float32)[None, None]


def generate(config: Config, params, prompt, eos, max_new: int, cache_length: int):
    """Greedy generation as one program: a prefill, then a ``while_loop`` of decode steps that
    stops after ``max_new`` tokens or at ``eos``. Returns (tokens padded with -1, how many)."""
    p = prompt.shape[0]
    positions = jnp.arange(p, dtype=jnp.int32)
    logits, cache = step(config, params, prompt[None], positions, causal_mask(positions, cache_length),
                         empty_cache(config, cache_length))
    first = jnp.argmax(logits[0, -1]).astype(jnp.int32)

    def running(carry):
        i, token, _, _ = carry
        return (i < max_new) & (token != eos)

    def decode(carry):
        i, token, cache, out = carry
        out = out.at[i].set(token)
        pos = jnp.reshape(p + i, (1,)).astype(jnp.int32)
        logits, cache = step(config, params, token.reshape(1, 1), pos, causal_mask(pos, cache_length), cache)
        return i + 1, jnp.argmax(logits[0, -1]).astype(jnp.int32), cache, out

    out = jnp.full((max_new,), -1, jnp.int32)
    count, last, _, out = lax.while_loop(running, decode, (jnp.int32(0), first, cache, out))
    # The EOS token itself is part of the output, as a generation loop reports it.
    stopped_at_eos = (last == eos) & (count < max_new)
    out = jnp.where(stopped_at_eos & (jnp.arange(max_new) == count), eos, out)
    return out, count + stopped_at_eos.astype(jnp.int32)


def word_level_tokenizer(path, vocab: int) -> str:
    """A HF tokenizer.json (WordLevel): token i is the word ``t{i}``, specials at 0-2. Written out
    directly, so the tests need no tokenizer library; LiteRT-LM parses it with HF's tokenizers."""
    words = {"<pad>": 0, "<bos>": 1, "<eos>": 2, **{f"t{i}": i for i in range(3, vocab)}}
    special = [{"id": i, "content": w, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for w, i in list(words.items())[:3]]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
                 "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
                 "decoder": None, "model": {"type": "WordLevel", "vocab": words, "unk_token": "<pad>"}}
    with open(path, "w") as f:
        json.dump(tokenizer, f)
    return str(path)


def token_ids(text: str) -> list[int]:
    """The ids of a text that ``word_level_tokenizer``'s tokenizer decoded (its specials included)."""
    import re
    specials = {"<pad>": 0, "<bos>": 1, "<eos>": 2}
    return [specials[t] if t in specials else int(t[1:]) for t in re.findall(r"t\d+|<pad>|<bos>|<eos>", text)]


def forced_tokens(tflite_path: str, prompt, continuation, layout) -> list[int]:
    """The tokens an exported .tflite predicts after each prefix of ``prompt + continuation``
    (teacher forcing): driven as noxla.llm.greedy_tokens drives it (the prompt but its last token
    through the shortest prefill_N, then decode), but fed ``continuation`` instead of its own
    choices, so one different token does not change every later prediction. With JAX's greedy
    tokens as ``continuation``, the first disagreement is where greedy decoding of the file leaves
    JAX's, and the count of agreements tells the quality of every step."""
    from ai_edge_litert.interpreter import Interpreter

    from noxla import llm
    interpreter = Interpreter(model_path=tflite_path)
    prompt = [int(t) for t in prompt]
    cache = dict(zip(llm.cache_names(layout), (x for pair in layout.empty() for x in pair)))
    head = prompt[:-1]
    if head:
        lengths = sorted(int(k.split("_")[1]) for k in interpreter.get_signature_list() if k.startswith("prefill_"))
        n = next(n for n in lengths if n >= len(head))
        positions = np.zeros(n, np.int32)
        positions[:len(head)] = np.arange(len(head))
        tokens = np.zeros((1, n), np.int32)
        tokens[0, :len(head)] = head
        cache = interpreter.get_signature_runner(f"prefill_{n}")(
            tokens=tokens, input_pos=positions, mask=llm.causal_mask(positions, layout.cache_length), **cache)
    decode = interpreter.get_signature_runner("decode")
    predicted = []
    fed = [prompt[-1], *[int(t) for t in continuation[:-1]]]
    for pos, token in enumerate(fed, start=len(prompt) - 1):
        outs = decode(tokens=np.array([[token]], np.int32), input_pos=np.array([pos], np.int32),
                      mask=llm.causal_mask([pos], layout.cache_length), **cache)
        predicted.append(int(np.argmax(outs.pop("logits")[0, -1])))
        cache = outs
    return predicted


def engine_greedy(bundle: str, words, max_new: int, cache_length: int) -> list[int]:
    """The token ids LiteRT-LM's engine decodes greedily after the prompt ``t{w}...`` of a bundle
    with ``word_level_tokenizer``'s vocabulary (run in the builder's venv: litert_lm does not
    import beside TF 2.19's protobuf)."""
    from noxla.writers.litertlm import bundle as litertlm_bundle
    reply = litertlm_bundle.call("generate", {"model": bundle, "prompt": " ".join(f"t{w}" for w in words),
                                              "max_num_tokens": cache_length, "max_output_tokens": max_new})
    return token_ids("".join(reply["texts"]))
