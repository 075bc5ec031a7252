"""Quantized LLM exports through LiteRT's own quantizer (PyPI ``ai-edge-quantizer``), the tool
LiteRT-LM's models are quantized with, applied to the float .tflite that noxla.llm writes.

Modes (``quantize=`` of noxla.llm.export_tflite / export_litertlm, ``--quantize`` of the CLI):
- ``"int8"``: the recipe ``dynamic_wi8_afp32``: weights int8, one scale per output channel;
  activations float32, quantized on the fly by the kernels that can (dynamic range).
- ``"int4"``: ``dynamic_wi4c_afp32``: weights int4, one scale per output channel, activations as
  in ``int8``: what litert-torch's export_hf writes for int4 (its ``dynamic_wi4_afp32``, which is
  this recipe). XNNPACK runs it with its qc4w kernels: at SmolLM-135M's shapes a decode step
  executes 92 M instructions where blockwise's qb4w kernels execute 143 M (callgrind, 1 thread,
  tools/llm_graph.py --callgrind).
- ``"int4_b32"``: ``dynamic_wi4b32_afp32``: weights int4 with one scale per block of 32 input
  values (blockwise): a step a third finer than per channel at 576 inputs, so closer to float,
  for those instructions and 12% more bytes (a 16-bit scale per 32 weights).

The quantizer's recipes cover FULLY_CONNECTED, BATCH_MATMUL and EMBEDDING_LOOKUP, not GATHER:
the embedding table's lookup (a GATHER of whole rows, as ``jnp.take(embed, tokens, axis=0)``
lowers) is first rewritten into the equivalent EMBEDDING_LOOKUP
(``noxla.writers.tflite.flatbuffer.quantize_weights.embedding_lookups``), so the table is quantized too.
Without it, a tied embedding (the table also the logits' FULLY_CONNECTED weight) stayed float32
beside its quantized copy (measured on the tiny Llama): with SmolLM-135M's shapes, 49152 x 576
float32 values, 113 MB, in every quantized file.

Why in-process: ai-edge-quantizer 0.10.0 needs only ai-edge-litert 2.3.0 (as measured with noxla), numpy,
scipy, ml_dtypes and absl, so it installs beside TensorFlow 2.19 and protobuf 5.29 unchanged. It
also pulls litert-lm-builder, whose protos need protobuf 6, but imports it only in its ``aeq``
command line (for .litertlm files), never from ``Quantizer``.
"""
from __future__ import annotations

import importlib.util

# mode -> (the ai_edge_quantizer.recipe function, what it stores)
QUANTIZER_MODES = {
    "int8": ("dynamic_wi8_afp32", "int8 weights, per output channel"),
    "int4": ("dynamic_wi4c_afp32", "int4 weights, per output channel"),
    "int4_b32": ("dynamic_wi4b32_afp32", "int4 weights, blockwise (32 values per scale)"),
}
# noxla.export_tflite's own modes (noxla.writers.quantize), which noxla.llm passes to the export: LiteRT's
# quantizer quantizes the merged file where noxla's graph writes the signatures (noxla.pipeline.graph_signatures),
# else TF's converter each signature (no quantizer installed, NOXLA_TFLITE_QUANTIZER=tf, or a signature the
# graph does not cover).
EXPORT_MODES = ("float16", "dynamic_int8")
MODES = (*QUANTIZER_MODES, *EXPORT_MODES)


def check_mode(quantize: str | None) -> None:
    """Refuse a bad mode, or a quantizer mode without the quantizer installed, before any work."""
    # Here, not at the top: the CLI reads this module's modes for its --help, which must not
    # load JAX and TensorFlow (noxla.errors imports JAX's internals).
    from noxla.errors import QuantizationError
    if quantize is None or quantize in EXPORT_MODES:
        return
    if quantize not in QUANTIZER_MODES:
        described = ", ".join(f"{m!r} ({QUANTIZER_MODES[m][1]})" for m in QUANTIZER_MODES)
        raise QuantizationError(f"LLM quantize={quantize!r}: expected one of {described}, "
                                f"{', '.join(map(repr, EXPORT_MODES))} (noxla.export_tflite's), or None")
    if importlib.util.find_spec("ai_edge_quantizer") is None:
        raise QuantizationError(f"LLM quantize={quantize!r} uses LiteRT's quantizer: pip install \"noxla[quantize]\"")


def uses_quantizer(quantize: str | None) -> bool:
    return quantize in QUANTIZER_MODES


def weight_rewrite(quantize: str):
    """The ``rewrite(model, stubs)`` of a several-signature export (``noxla.api.run``) that
    quantizes the merged model's weights with ``quantize``'s recipe as the file is written
    (``noxla.writers.tflite.flatbuffer.quantize_weights``: the quantizer's own functions, weight by weight, so that no
    float .tflite is made; the same quantized weights as ``quantize_tflite`` gives,
    tests/test_llm_quantize.py). Written by noxla's graph where it covers the signatures, without
    TensorFlow, else by TF's path, the rewrite the same on either."""
    from noxla.writers.tflite.flatbuffer.quantize_weights import quantize_weights
    recipe_name = QUANTIZER_MODES[quantize][0]
    return lambda model, stubs: quantize_weights(model, stubs, recipe_name)


def quantize_tflite(data: bytes, quantize: str) -> bytes:
    """The float multi-signature .tflite ``data`` quantized with ``quantize``'s recipe by the
    quantizer itself (the whole file at once: a file of 0.5 GB of weights or less); the
    signatures, their tensor names and the weights they share are kept."""
    import numpy as np
    from ai_edge_quantizer import quantizer, recipe

    from noxla.writers.tflite.flatbuffer.merge import share_constant_buffers  # noxla.errors imports the rules, and TF
    from noxla.writers.tflite.flatbuffer.quantize_weights import embedding_lookups
    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model
    model = read_model(data)
    _unique_tensor_names(model)
    embedding_lookups(model)
    prepared = model_bytes(model)
    del model
    recipe_name = QUANTIZER_MODES[quantize][0]
    result = quantizer.Quantizer(prepared, getattr(recipe, recipe_name)()).quantize(
        enable_progress_bar=False, enable_progress_report=False)
    quantized = read_model(result.quantized_model)
    for buffer in quantized.buffers:
        # A large model comes back with its buffers after the flatbuffer (offset and size), which
        # the reader hands over as bytearray slices: as uint8 arrays, like inline buffers.
        if isinstance(buffer.data, (bytes, bytearray, memoryview)):
            buffer.data = np.frombuffer(buffer.data, np.uint8)
    _unique_tensor_names(quantized, undo=True)
    # Where one weight feeds ops the recipe treats differently, the quantizer gives every tensor
    # of it a buffer of its own, also across signatures: equal buffers are joined again.
    share_constant_buffers(quantized)
    return model_bytes(quantized)


def _unique_tensor_names(model, undo: bool = False) -> None:
    """Prefix each tensor's name with its signature key (``undo``: take the prefix off again).
    The quantizer keys its work by tensor name across the whole file, and refuses a model where
    two subgraphs share one (every signature has a ``tokens``); the signatures name their inputs
    and outputs in maps of their own, which stay as they are."""
    for signature in model.signatureDefs or []:
        prefix = signature.signatureKey.decode() + "/"
        for tensor in model.subgraphs[signature.subgraphIndex].tensors:
            name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name or "")
            if undo:
                tensor.name = name.removeprefix(prefix).encode()
            else:
                tensor.name = (prefix + name).encode()
