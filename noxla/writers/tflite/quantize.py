"""Quantized .tflite files without TensorFlow (issues 40, 41): the float .tflite that noxla's graph
writes (``noxla.writers.tflite``), quantized by LiteRT's quantizer (PyPI ``ai-edge-quantizer``, the
tool noxla.llm quantizes with; in the ``llm`` extra), in place of TF's converter's post-training modes
(``noxla.writers.quantize.configure_tflite``). The modes mean what they mean there:

- ``"float16"``: the weights of FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and
  EMBEDDING_LOOKUP stored as float16, each DEQUANTIZEd to float32 at load (the quantizer's
  FLOAT_CASTING weight-only config).
- ``"dynamic_int8"``: those weights (and BATCH_MATMUL's) int8, one scale per output channel,
  activations float32, quantized on the fly by the kernels that can (``dynamic_wi8_afp32``).
- ``"int8"``: weights int8 per channel and activations int8 per tensor, their ranges calibrated by
  running the float model in LiteRT on ``representative_data`` (``static_wi8_ai8``), each range the
  min and max over all the samples, as TF's calibration takes them; inputs and outputs stay float32,
  and an op the recipe has no int8 form for stays float between DEQUANTIZE and QUANTIZE ops, as does
  an op that reads or writes an infinite or NaN value on a sample (``_keep_float``).

A constant GATHER of whole rows (an embedding, ``jnp.take(table, ids, axis=0)``) is first made the
EMBEDDING_LOOKUP it computes (``noxla.writers.tflite.flatbuffer.quantize_weights.embedding_lookups``) in the weight-only
modes, so that the table is quantized too; int8's recipe quantizes GATHER itself.

The default where the quantizer is installed, TensorFlow or not (``why_tensorflow_quantizes``):
measured on every tests/zoo.py model against TF 2.21's converter, its files are smaller in 38 of 39
(model, mode) pairs (vae_decoder float16: 2% larger), within tests/test_quantize.py's bounds
(dynamic_int8 quantizes the small weights TF leaves float: mobilenet_block's error 0.009, TF's 2e-7),
every op runs in LiteRT, and two exports write the same bytes, where TF's converter wrote other
bytes for 7 of the 39 (the sampling models in every mode, lstm_classifier's int8). Where the graph's
writer does not cover a program, TF's path converts it and TF's converter quantizes it, as before.
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from typing import Callable

import numpy as np

from noxla.writers.quantize import float_divisions

# NOXLA_TFLITE_QUANTIZER=tf: TF's converter quantizes every .tflite (the oracle, and the way around a
# quantizer bug); unset or "litert": LiteRT's quantizer, where it is installed.
ENV = "NOXLA_TFLITE_QUANTIZER"
INSTALL = 'pip install "noxla[quantize]"'
SIGNATURE = "serving_default"   # the graph's writer's one signature (large_tflite.serving_signature)


def installed() -> bool:
    return importlib.util.find_spec("ai_edge_quantizer") is not None


def why_tensorflow_quantizes(quantize: str) -> str | None:
    """None where LiteRT's quantizer quantizes the graph's .tflite for ``quantize``, else why TF's
    converter does (the reason the export takes TF's path)."""
    if os.environ.get(ENV) == "tf":
        return f"TF's converter: {ENV}=tf"
    if not installed():
        return f"TF's converter; LiteRT's quantizer is not installed: {INSTALL}"
    return None


def quantized(chunks: list, quantize: str, samples: Callable | None) -> bytes:
    """The graph's float .tflite (``chunks``, as ``noxla.writers.tflite.flatbuffer.large.serialized`` gives them)
    quantized by LiteRT's quantizer in ``quantize``'s mode; ``samples``: the int8 representative
    dataset (``noxla.writers.quantize.representative_samples``), None otherwise."""
    from ai_edge_quantizer import quantizer

    from noxla.writers.tflite.flatbuffer.quantize_weights import embedding_lookups
    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model
    data = b"".join(bytes(chunk() if callable(chunk) else chunk) for chunk in chunks)
    model = read_model(bytearray(data))
    if quantize != "int8":
        embedding_lookups(model)
    names = _unique_tensor_names(model)
    float_model = model_bytes(model)
    del model
    manager = _recipe(quantize)
    calibration = None
    with warnings.catch_warnings():
        # LiteRT's warning that keeping every tensor is for debugging: calibrating is what it is for.
        warnings.filterwarnings("ignore", "Warning: Enabling `experimental_preserve_all_tensors`")
        if quantize == "int8":
            inputs = _input_names(float_model)
            dataset = [dict(zip(inputs, sample)) for sample in samples()]
            _keep_float(manager, float_model, _non_finite_tensors(float_model, dataset))
            calibration = _calibrated(float_model, dataset, manager)
        if calibration == {}:   # every op the recipe would quantize stays float (``_keep_float``)
            data = float_model
        else:
            tool = quantizer.Quantizer(bytearray(float_model), manager.get_quantization_recipe())
            data = bytes(tool.quantize(calibration, enable_progress_bar=False, enable_progress_report=False)
                         .quantized_model)
    if names:
        model = read_model(bytearray(data))
        _restore_tensor_names(model, names)
        data = model_bytes(model)
    # LiteRT's int8 DIV refuses a divisor at its zero point (noxla.writers.quantize.float_divisions).
    return float_divisions(data) if quantize == "int8" else data


def _recipe(quantize: str):
    """The quantizer's recipe for ``quantize``, in a RecipeManager (int8 adds configs to it)."""
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe, recipe_manager
    manager = recipe_manager.RecipeManager()
    if quantize == "dynamic_int8":
        manager.load_quantization_recipe(recipe.dynamic_wi8_afp32())
    elif quantize == "int8":
        # Inputs and outputs stay float32, as TF's converter keeps them (the recipe's own are int8):
        # the quantizer adds a QUANTIZE after each input and a DEQUANTIZE before each output.
        manager.load_quantization_recipe(recipe.static_wi8_ai8())
        for end in (qtyping.TFLOperationName.INPUT, qtyping.TFLOperationName.OUTPUT):
            manager.add_quantization_config(".*", end, algorithm_key=algorithm_manager.AlgorithmName.NO_QUANTIZE)
    else:
        manager.add_weight_only_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
                                       num_bits=16, algorithm_key=algorithm_manager.AlgorithmName.FLOAT_CASTING)
    return manager


def _calibrated(float_model: bytes, dataset: list, manager) -> dict:
    """Each activation's range over the whole dataset, as TF's calibration takes it (the quantizer's
    default is a moving average of the samples' ranges, which clipped values of the test inputs that
    the samples held: mlp's error 0.13 where TF's is 0.011). One thread: the ranges must not depend
    on how a reduction was split."""
    from ai_edge_quantizer import calibrator
    from ai_edge_quantizer.utils import qsv_utils
    calibration = calibrator.Calibrator(bytearray(float_model), num_threads=1,
                                        qsv_update_func=qsv_utils.min_max_update)
    calibration.calibrate({SIGNATURE: dataset}, manager)
    return calibration.get_model_qsvs()


def _non_finite_tensors(float_model: bytes, dataset: list) -> set[str]:
    """The main graph's tensors that took an infinite or NaN value on some sample (in LiteRT)."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_content=float_model, experimental_preserve_all_tensors=True, num_threads=1)
    runner = interpreter.get_signature_runner(SIGNATURE)
    found = set()
    for sample in dataset:
        runner(**sample)
        for detail in interpreter.get_tensor_details():
            try:
                value = interpreter.get_tensor(detail["index"])
            except ValueError:  # a tensor without data (a scratch buffer)
                continue
            if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)):
                found.add(detail["name"])
    return found


def _keep_float(manager, float_model: bytes, names: set[str]) -> None:
    """Leave float every op of the main graph that reads or writes one of the tensors ``names``: an int8
    range must be finite. A sampling model computes infinities on purpose (the largest float, an
    inverse CDF's ends); ``log(0)`` is -inf in JAX and stays so. (TF's converter refuses such
    calibration data instead: ``noxla.writers.quantize.calibrated_int8``.)"""
    import re

    from ai_edge_quantizer import algorithm_manager, qtyping

    from noxla.writers.tflite.flatbuffer.schema import read_model
    if not names:
        return
    graph = read_model(bytearray(float_model)).subgraphs[0]
    scopes = set()
    for op in graph.operators or []:
        touched = [graph.tensors[t].name.decode() for t in (*op.inputs, *op.outputs) if t >= 0]
        if names.intersection(touched):
            scopes.update(graph.tensors[t].name.decode() for t in op.outputs)
    # The quantizer names an op by its outputs' names, each followed by ";".
    regex = "(^|;)(" + "|".join(sorted(map(re.escape, scopes))) + ");"
    manager.add_quantization_config(regex, qtyping.TFLOperationName.ALL_SUPPORTED,
                                    algorithm_key=algorithm_manager.AlgorithmName.NO_QUANTIZE)


def _input_names(data: bytes) -> list[str]:
    from noxla.writers.tflite.flatbuffer.schema import read_model
    signature = read_model(bytearray(data)).signatureDefs[0]
    return [entry.name.decode() if isinstance(entry.name, bytes) else entry.name for entry in signature.inputs]


def _unique_tensor_names(model) -> dict[bytes, bytes]:
    """Name every tensor uniquely across the model (the quantizer keys its work by tensor name in the
    whole file; a While or If body's tensors may be named as the main graph's): {new name: old name}
    of those renamed, for ``_restore_tensor_names``."""
    seen, renamed = set(), {}
    for k, graph in enumerate(model.subgraphs):
        for i, tensor in enumerate(graph.tensors):
            name = tensor.name or b""
            if name in seen or not name:
                tensor.name = b"%s/sub%d_t%d" % (name, k, i)
                renamed[tensor.name] = name
            seen.add(tensor.name)
    return renamed


def _restore_tensor_names(model, renamed: dict) -> None:
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            tensor.name = renamed.get(tensor.name, tensor.name)
