"""The LLM front door: a keras-hub causal LM (noxla.llm.keras), a Flax NNX module or a JAX decode
step to a .tflite (``prefill_{N}`` and ``decode`` signatures, KV cache in and out) and to a
``.litertlm`` bundle that LiteRT-LM's engine runs.

The decode step's form (Equinox or plain JAX code wraps its model in it; a Flax NNX module is
called the same way without ``params``)::

    step(params, tokens, input_pos, mask, kv_cache) -> (logits, kv_cache)

``tokens`` int32 [1, T]; ``input_pos`` int32 [T], the positions of those tokens; ``mask`` float32
[1, 1, T, C], additive (0 where a query may attend to a cache slot, -inf elsewhere);
``kv_cache`` a list with one ``(k, v)`` pair per layer, ``k`` float32 [1, kv_heads, C, head_dim]
and ``v`` stored transposed, [1, kv_heads, head_dim, C]; the step writes the T new keys and values
into slots ``input_pos[0]`` .. ``input_pos[0] + T - 1`` (``lax.dynamic_update_slice``) and returns
the whole cache. ``logits`` float32 [1, T, vocab]. Why contiguous slots: LiteRT-LM runs a short
prompt through a longer ``prefill_N`` with the padding at position 0 (measured with probe models
on litert-lm-api 0.18.1); a scatter at ``input_pos`` would let the padding overwrite slot 0, while
the slots a contiguous write pads are overwritten by the following decode steps before any query
may see them.

The exported tensors are LiteRT-LM's contract (as litert-torch writes it): inputs ``tokens``,
``input_pos``, ``mask``, ``kv_cache_k_{i}``, ``kv_cache_v_{i}``; outputs the same cache names,
and ``logits`` [1, 1, vocab] in ``decode`` only. ``params`` become constants, stored once for
all signatures.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import tempfile
from typing import Callable, Sequence

import numpy as np

from noxla.api import run
from noxla.errors import ExportError
from noxla.llm import quantize as llm_quantize
from noxla.pipeline.preflight import ExportOptions, ensure_writable
from noxla.writers.litertlm import bundle as litertlm_bundle
from noxla.writers.tflite.flatbuffer import large as large_tflite


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """The KV cache's shape: C = ``cache_length`` positions of ``kv_heads`` x ``head_dim`` per layer."""
    num_layers: int
    kv_heads: int
    head_dim: int
    cache_length: int

    def k_shape(self) -> tuple:
        return (1, self.kv_heads, self.cache_length, self.head_dim)

    def v_shape(self) -> tuple:
        return (1, self.kv_heads, self.head_dim, self.cache_length)

    def empty(self) -> list:
        return [(np.zeros(self.k_shape(), np.float32), np.zeros(self.v_shape(), np.float32))
                for _ in range(self.num_layers)]


def _leaves(tree) -> list:
    import jax
    return jax.tree_util.tree_leaves(tree)


def cache_names(layout: CacheLayout) -> list[str]:
    return [f"kv_cache_{kind}_{i}" for i in range(layout.num_layers) for kind in ("k", "v")]


def _signature_function(step: Callable, params, layout: CacheLayout, with_logits: bool) -> Callable:
    """``step`` with the contract's flat, named inputs and outputs."""
    names = cache_names(layout)

    def signature(tokens, input_pos, mask, *caches):
        kv_cache = [(caches[2 * i], caches[2 * i + 1]) for i in range(layout.num_layers)]
        logits, new_cache = step(params, tokens, input_pos, mask, kv_cache)
        outputs = {name: value for name, value in zip(names, (x for pair in new_cache for x in pair))}
        if with_logits:
            outputs["logits"] = logits[:, -1:]
        return outputs
    parameter = inspect.Parameter.POSITIONAL_OR_KEYWORD
    # The exporters name inputs after the parameters: one per cache tensor, not ``caches_0``.
    signature.__signature__ = inspect.Signature(
        [inspect.Parameter(n, parameter) for n in ("tokens", "input_pos", "mask", *names)])
    return signature


def example_inputs(layout: CacheLayout, length: int) -> tuple:
    """Inputs of a signature over ``length`` tokens: the tokens at positions 0..length-1."""
    positions = np.arange(length, dtype=np.int32)
    return (np.zeros((1, length), np.int32), positions, causal_mask(positions, layout.cache_length),
            *(x for pair in layout.empty() for x in pair))


def causal_mask(positions, cache_length: int) -> np.ndarray:
    """[1, 1, T, C]: 0 where a cache slot is at or before the query's position, -inf elsewhere."""
    visible = np.arange(cache_length)[None, :] <= np.asarray(positions)[:, None]
    return np.where(visible, 0.0, -np.inf).astype(np.float32)[None, None]


def signatures(step: Callable, params, layout: CacheLayout, prefill_lengths: Sequence[int] = (8,)) -> dict:
    """``{prefill_N: (function, example_args), ..., decode: ...}`` for ``noxla.export_tflite``."""
    lengths = sorted({int(n) for n in prefill_lengths})
    if not lengths or lengths[0] < 1 or lengths[-1] > layout.cache_length:
        raise ExportError(f"prefill lengths must lie in [1, cache_length={layout.cache_length}], got {prefill_lengths}")
    out = {f"prefill_{n}": (_signature_function(step, params, layout, False), example_inputs(layout, n))
           for n in lengths}
    out["decode"] = (_signature_function(step, params, layout, True), example_inputs(layout, 1))
    return out


def decoder(model, *args, layout: CacheLayout | None = None, cache_length: int | None = None) -> tuple:
    """``(step, params, layout, path)`` from what the exporters accept, ``model, *args`` being:

    - ``keras_model, path``: a keras-hub causal LM or backbone on the JAX backend (noxla.llm.keras);
      the layout comes from the model, with ``cache_length``;
    - ``nnx_module, path``: a Flax NNX module called as ``module(tokens, input_pos, mask, kv_cache)
      -> (logits, kv_cache)``, the decode-step form without ``params``; ``layout`` given;
    - ``step, params, path``: the decode-step form above; ``layout`` given.
    """
    if layout is not None and cache_length is not None and layout.cache_length != cache_length:
        raise ExportError(f"cache_length={cache_length} contradicts layout.cache_length={layout.cache_length}")
    from noxla.llm import keras as llm_keras
    if llm_keras.is_keras_model(model) or _is_nnx_module(model):
        if len(args) != 1:
            raise ExportError(f"expected ({type(model).__name__}, path), got {len(args) + 1} arguments")
        path = args[0]
        if llm_keras.is_keras_model(model):
            length = cache_length or (layout.cache_length if layout else None)
            if length is None:
                raise ExportError("a keras model needs cache_length (the KV cache's positions, C)")
            step, params, shape = llm_keras.decode_step(model, int(length))
            return step, params, CacheLayout(*shape, int(length)), path
        step, params = _nnx_step(model)
    else:
        if len(args) != 2 or not callable(model):
            raise ExportError("expected (step, params, path) for a decode step, (model, path) for a keras-hub "
                              "or Flax NNX model")
        step, (params, path) = model, args
    if layout is None:
        raise ExportError("a decode step or NNX module needs layout=noxla.llm.CacheLayout(num_layers, kv_heads, "
                          "head_dim, cache_length)")
    return step, params, layout, path


def _is_nnx_module(model) -> bool:
    # Without importing flax: JAX-only users never pay for it.
    return any(c.__module__.startswith("flax.nnx") and c.__name__ == "Module" for c in type(model).__mro__)


def _nnx_step(module):
    """The decode-step form of an NNX module: its state as ``params``, merged back in the step."""
    from flax import nnx
    graphdef, state = nnx.split(module)

    def step(params, tokens, input_pos, mask, kv_cache):
        return nnx.merge(graphdef, params)(tokens, input_pos, mask, kv_cache)
    return step, state


def export_tflite(model, *args, layout: CacheLayout | None = None, cache_length: int | None = None,
                  prefill_lengths: Sequence[int] = (8,), quantize: str | None = None, overwrite: bool = False,
                  on_step=None) -> str:
    """The .tflite LiteRT-LM runs: a ``prefill_N`` signature per length and ``decode``, sharing weights.
    ``model, *args``: ``keras_model, path`` (with ``cache_length``), ``nnx_module, path`` or
    ``step, params, path`` (with ``layout``); see ``decoder``.
    ``quantize``: None; "int8", "int4" or "int4_b32" (LiteRT's quantizer, see noxla.llm.quantize); or
    ``noxla.export_tflite``'s "float16" or "dynamic_int8" (see noxla.writers.quantize): the merged file
    from noxla's graph quantized by LiteRT's quantizer, else each signature by TF's converter. Past
    2 GB of weights the file is written with buffer offsets (``noxla.writers.tflite.flatbuffer.large``).
    "int8", "int4" and "int4_b32" quantize weight by weight as the file is written
    (noxla.writers.tflite.flatbuffer.quantize_weights), at any size; "float16" and "dynamic_int8"
    quantize the whole float file, which LiteRT's quantizer takes as one flatbuffer and TF's converter
    as one GraphDef, a protobuf (each 2 GB at most): refused up front past that."""
    llm_quantize.check_mode(quantize)
    step, params, layout, path = decoder(model, *args, layout=layout, cache_length=cache_length)
    weight_bytes = sum(int(getattr(x, "nbytes", 0)) for x in _leaves(params))
    if quantize in llm_quantize.EXPORT_MODES and weight_bytes >= large_tflite.FLATBUFFER_LIMIT:
        raise ExportError(f"the weights take {weight_bytes / 2**30:.2f} GiB: quantize={quantize!r} quantizes the "
                          f"whole float file, at most 2 GiB (one flatbuffer for LiteRT's quantizer, one GraphDef "
                          f"for TF's converter); export unquantized (written with buffer offsets past 2 GiB) or "
                          f"quantize the weights beforehand")
    functions = signatures(step, params, layout, prefill_lengths)
    # The entry every export takes: the same preflight and check as noxla.export_tflite's. The
    # quantizer's modes quantize the merged model's weights (a rewrite); float16 and dynamic_int8
    # are the export's own quantize= (LiteRT's quantizer on the graph's merged file, or TF's converter).
    if llm_quantize.uses_quantizer(quantize):
        options = ExportOptions(tflite=path, overwrite=overwrite, on_step=on_step)
        return run(functions, (), options, rewrite=llm_quantize.weight_rewrite(quantize)).written["tflite"]
    return run(functions, (), ExportOptions(tflite=path, quantize=quantize, overwrite=overwrite,
                                            on_step=on_step)).written["tflite"]


def export_litertlm(model, *args, tokenizer: str, layout: CacheLayout | None = None, cache_length: int | None = None,
                    start_token: int | None = None, stop_tokens: Sequence[int] | None = None,
                    prefill_lengths: Sequence[int] = (8,), quantize: str | None = None, overwrite: bool = False,
                    on_step=None) -> str:
    """A ``.litertlm`` bundle: the .tflite of ``export_tflite`` (same ``model, *args``), the tokenizer
    (a HF ``tokenizer.json`` or a SentencePiece model) and LLM metadata (start and stop tokens,
    ``max_num_tokens`` = the cache length). A keras-hub causal LM with a preprocessor gives the
    start and stop tokens' defaults. Built by ``litert-lm-builder`` (``pip install "noxla[llm]"``),
    checked for before anything is exported."""
    llm_quantize.check_mode(quantize)
    try:
        litertlm_bundle.require_builder()
    except litertlm_bundle.BundleError as e:
        raise ExportError(str(e)) from e
    step, params, layout, path = decoder(model, *args, layout=layout, cache_length=cache_length)
    from noxla.llm import keras as llm_keras
    if llm_keras.is_keras_model(model):
        default_start, default_stops = llm_keras.special_tokens(model)
        start_token = default_start if start_token is None else start_token
        stop_tokens = default_stops if stop_tokens is None else stop_tokens
    if start_token is None or not stop_tokens:
        raise ExportError("the bundle's metadata needs start_token and stop_tokens")
    path = ensure_writable(path, overwrite)
    if not os.path.exists(tokenizer):
        raise ExportError(f"tokenizer not found: {tokenizer}")
    with tempfile.TemporaryDirectory(prefix="noxla-llm-", dir=os.path.dirname(path) or None) as scratch:
        tflite = export_tflite(step, params, os.path.join(scratch, "model.tflite"), layout=layout,
                               prefill_lengths=prefill_lengths, quantize=quantize, on_step=on_step)
        metadata = os.path.join(scratch, "llm_metadata.textproto")
        with open(metadata, "w") as f:
            f.write(litertlm_bundle.metadata_textproto(start_token, stop_tokens, layout.cache_length))
        bundle = os.path.join(scratch, os.path.basename(path))
        try:
            litertlm_bundle.call("build", {"tflite": tflite, "metadata": metadata,
                                           "tokenizer": os.path.abspath(tokenizer), "output": bundle})
        except litertlm_bundle.BundleError as e:
            raise ExportError(str(e)) from e
        os.replace(bundle, path)
    return path


def greedy_tokens(tflite_path: str, prompt: Sequence[int], max_new: int, layout: CacheLayout,
                  stop_tokens: Sequence[int] = ()) -> list[int]:
    """Greedy generation through LiteRT's signature runners, as LiteRT-LM drives them: the prompt
    but its last token through the shortest ``prefill_N`` that holds it (padded with token 0 at
    position 0), then ``decode`` from the last prompt token. For checking an export against the
    model's own JAX generation."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=tflite_path)
    keys = interpreter.get_signature_list()
    prompt = [int(t) for t in prompt]
    cache = dict(zip(cache_names(layout), (x for pair in layout.empty() for x in pair)))
    head = prompt[:-1]
    if head:
        lengths = sorted(int(k.split("_")[1]) for k in keys if k.startswith("prefill_"))
        n = next((n for n in lengths if n >= len(head)), None)
        if n is None:
            raise ValueError(f"no prefill signature holds {len(head)} tokens (have {lengths})")
        positions = np.zeros(n, np.int32)  # the padding at position 0, as LiteRT-LM pads
        positions[:len(head)] = np.arange(len(head))
        tokens = np.zeros((1, n), np.int32)
        tokens[0, :len(head)] = head
        cache = interpreter.get_signature_runner(f"prefill_{n}")(
            tokens=tokens, input_pos=positions, mask=causal_mask(positions, layout.cache_length), **cache)
    decode = interpreter.get_signature_runner("decode")
    token, out = prompt[-1], []
    for pos in range(len(prompt) - 1, min(len(prompt) - 1 + max_new, layout.cache_length)):
        outs = decode(tokens=np.array([[token]], np.int32), input_pos=np.array([pos], np.int32),
                      mask=causal_mask([pos], layout.cache_length), **cache)
        logits = outs.pop("logits")
        cache = outs
        token = int(np.argmax(logits[0, -1]))
        out.append(token)
        if token in stop_tokens:
            break
    return out
