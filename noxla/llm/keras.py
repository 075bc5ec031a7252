"""keras-hub causal LMs (or their backbones) on the JAX backend, as noxla.llm decode steps.

Why call keras-hub's own ``call_with_cache`` rather than map the weights into a decoder of our
own: the family's math (Gemma's embedding scaling, norm +1 and soft-capping, GPT-2's learned
positions, Llama 3's RoPE scaling, sliding windows, q/k norms, biases) then stays keras-hub's, for
every family whose causal LM has that method, instead of a re-implementation per family that could
drift silently. Tested (tests/test_llm_keras.py): Llama, Gemma with Gemma 2's soft-caps, post-norms
and sliding window, Gemma 3 (QK norm, sliding-window and global layers interleaved, each kind with
its own RoPE base), Qwen, Qwen 3 (QK norm), Mistral, GPT-2; other families are refused only if their
cache differs. What the adapter owns is only the cache contract: keras-hub keeps one cache tensor
[batch, layers, 2, C, kv_heads, head_dim] (Gemma 3: a tuple of per-layer (key, value) pairs, each
[batch, C, kv_heads, head_dim]), the contract one K [1, kv_heads, C, head_dim] and one
transposed V [1, kv_heads, head_dim, C] per layer, so the step is written as transposes in,
stacks, slices and transposes out. None of that moves the cache in the .tflite: a slice of a
stack reads the stacked part (lowering_rules/patterns/joins.py), the update is made in the contract's
layout before the transpose (slicing.py's dynamic_update_slice), the transposes in and out
then cancel (noxla.writers.tflite.flatbuffer.reshapes.fold_transpose_pairs), and the repeated KV heads of grouped
attention are read unrepeated (lowering_rules/patterns/grouped_query.py). SmolLM-135M's shapes as a
keras-hub Llama: 1.05x the hand-written decoder's decode step in LiteRT (it was 4.9x).

Positions and mask: keras-hub derives both from the index of the first new token (RoPE or learned
positions ``input_pos[0] + t``, the causal and sliding-window mask over the cache), so the step
passes ``input_pos[0]`` and does not read ``input_pos[1:]`` or ``mask``. Every layer, sliding or
not, keeps keras-hub's cache of all C positions, the window being a mask keras-hub makes from the
position: no ring buffer, so the step has no ``local_mask`` input and LiteRT-LM's executor feeds
the one ``mask`` it feeds any model (its ring-buffer local masks are for models whose sliding
layers keep only the window). For the inputs LiteRT-LM
feeds (contiguous positions from ``input_pos[0]``, a short prompt's padding after it) they agree
with keras-hub's for every real token; the padded tokens' outputs and cache slots are never read.
"""
from __future__ import annotations

from noxla.errors import ExportError


def is_keras_model(model) -> bool:
    """True for a Keras model, without importing Keras (it stays unimported for JAX users)."""
    return any(c.__module__.split(".")[0] in ("keras", "keras_hub") for c in type(model).__mro__)


def causal_lm(model):
    """The keras-hub ``CausalLM`` of ``model`` (itself, or one built around a bare backbone)."""
    import keras
    if keras.backend.backend() != "jax":
        raise ExportError(f"noxla exports keras models on the JAX backend only, this one runs on "
                          f"{keras.backend.backend()!r}: set KERAS_BACKEND=jax before importing keras")
    import keras_hub
    if isinstance(model, keras_hub.models.CausalLM):
        lm = model
    elif isinstance(model, keras_hub.models.Backbone):
        name = type(model).__name__.replace("Backbone", "CausalLM")
        cls = getattr(keras_hub.models, name, None)
        if cls is None:
            raise ExportError(f"no keras_hub.models.{name} for the backbone {type(model).__name__}")
        lm = cls(backbone=model, preprocessor=None)
    else:
        raise ExportError(f"expected a keras-hub CausalLM or Backbone, got {type(model).__name__}")
    if not hasattr(lm, "call_with_cache"):
        raise ExportError(f"{type(lm).__name__} has no call_with_cache: not a cached decoder noxla can export")
    return lm


def keras_cache_shape(lm, cache_length: int) -> tuple:
    """keras-hub's cache shape as [1, layers, 2, C, kv_heads, head_dim], from the model's own
    ``_build_cache`` traced abstractly (no compute, no per-family head arithmetic here). Either
    form: one stacked tensor of that shape, or (Gemma3) a tuple of per-layer ``(key, value)``
    pairs, each [1, C, kv_heads, head_dim]."""
    return _cache_form(lm, cache_length)[1]


def _cache_form(lm, cache_length: int) -> tuple:
    """``(per_layer, shape)``: whether ``call_with_cache`` takes per-layer ``(key, value)`` pairs
    rather than one stacked tensor, and the shape as ``keras_cache_shape`` gives it."""
    import inspect

    import jax
    import numpy as np
    # Gemma3's ``_build_cache`` also takes the vision inputs, None for a text-only model.
    extra = (None,) * (len(inspect.signature(lm._build_cache).parameters) - 1)
    cache = jax.eval_shape(lambda t: lm._build_cache(t, *extra)[1],
                           jax.ShapeDtypeStruct((1, cache_length), np.int32))
    if isinstance(cache, (tuple, list)):
        shapes = {tuple(x.shape) for pair in cache for x in (pair if isinstance(pair, (tuple, list)) else [pair])}
        if not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in cache) or len(shapes) != 1 \
                or len(next(iter(shapes))) != 4:
            raise ExportError(f"{type(lm).__name__}'s cache is {jax.tree_util.tree_map(lambda x: x.shape, cache)}, "
                              "not per-layer (key, value) pairs of one shape [batch, C, kv_heads, head_dim]: its "
                              "attention is not one noxla.llm can export")
        _, length, kv_heads, head_dim = next(iter(shapes))
        return True, (1, len(cache), 2, int(length), int(kv_heads), int(head_dim))
    shape = cache.shape
    if len(shape) != 6 or shape[2] != 2:
        raise ExportError(f"{type(lm).__name__}'s cache has shape {shape}, not [batch, layers, 2, C, kv_heads, "
                          "head_dim]: its attention is not one noxla.llm can export")
    return False, tuple(int(d) for d in shape)


def decode_step(model, cache_length: int):
    """``(step, params, (layers, kv_heads, head_dim))`` for noxla.llm: the step calls keras-hub's
    ``call_with_cache`` with the contract's cache converted to keras-hub's layout and back;
    ``params`` is None (the weights are the model's variables, constants of the export)."""
    import jax.numpy as jnp
    lm = causal_lm(model)
    per_layer, (_, layers, _, _, kv_heads, head_dim) = _cache_form(lm, cache_length)

    def step(params, tokens, input_pos, mask, kv_cache):
        # The contract's K [1, kv_heads, C, head_dim] and V [1, kv_heads, head_dim, C] as keras-hub's
        # [1, C, kv_heads, head_dim], and back.
        pairs = [(k.transpose(0, 2, 1, 3), v.transpose(0, 3, 1, 2)) for k, v in kv_cache]
        if per_layer:
            logits, _, cache = lm.call_with_cache(tokens, tuple(pairs), input_pos[0])
            new = [(jnp.asarray(k), jnp.asarray(v)) for k, v in cache]
        else:
            logits, _, cache = lm.call_with_cache(tokens, _LayerCaches([jnp.stack(p, axis=1) for p in pairs]),
                                                  input_pos[0])
            # 6-D slices have no TFLite builtin: drop the batch axis before taking the layers apart.
            cache = jnp.reshape(jnp.asarray(cache), (layers, 2, cache_length, kv_heads, head_dim))
            new = [(cache[i, 0][None], cache[i, 1][None]) for i in range(layers)]
        return jnp.asarray(logits), [(k.transpose(0, 2, 1, 3), v.transpose(0, 2, 3, 1)) for k, v in new]
    return step, None, (layers, kv_heads, head_dim)


def special_tokens(model) -> tuple:
    """(start token, stop tokens) from a causal LM's tokenizer, or (None, ()) when it has none."""
    tokenizer = getattr(getattr(model, "preprocessor", None), "tokenizer", None)
    if tokenizer is None:
        return None, ()
    start, end = getattr(tokenizer, "start_token_id", None), getattr(tokenizer, "end_token_id", None)
    return start, (() if end is None else (end,))


class _LayerCaches:
    """keras-hub's cache as ``call_with_cache`` reads it (``cache[:, i, ...]``, layer i's
    [1, 2, C, kv_heads, head_dim]) without ever making the 6-D tensor: TFLite has no 6-D slice."""

    def __init__(self, layers: list):
        self.layers = layers
        self.shape = (1, len(layers), *layers[0].shape[1:])
        self.dtype = layers[0].dtype

    def __getitem__(self, index):
        if (isinstance(index, tuple) and len(index) == 3 and index[0] == slice(None) and index[2] is Ellipsis
                and isinstance(index[1], int)):
            return self.layers[index[1]]
        raise ExportError(f"keras-hub read its cache as cache[{index}]; noxla.llm knows only cache[:, layer, ...]")
