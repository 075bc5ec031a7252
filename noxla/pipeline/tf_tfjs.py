"""TF.js's graph model through TF (``write_tfjs``): a lowered function's frozen GraphDef rewritten
by grappler as TF.js's converter rewrites it (``noxla.writers.tfjs.optimize``), written by noxla's
TF.js writer, and its signature keyed by the function's names (``name_tfjs_signature``). The
default TF.js export writes noxla's graph instead (``noxla.writers.tfjs.from_graph``) where it
records the program."""
from __future__ import annotations

import json
import os
from typing import Sequence

import tensorflow as tf

from noxla.errors import ExportError
from noxla.pipeline.preflight import DEFAULT_SHARD_BYTES
from noxla.pipeline.tf_function import frozen_graph_def
from noxla.writers.tfjs.graph import TensorSpec
from noxla.writers.tfjs.graph_def import graph_from_graph_def
from noxla.writers.tfjs.optimize import optimized_for_tfjs
from noxla.writers.tfjs.writer import write_graph_model


def write_tfjs(concrete, path: str, quantize: str | None = None,
               weight_shard_size_bytes: int = DEFAULT_SHARD_BYTES) -> None:
    """The function's frozen graph (``frozen_graph_def``: it holds no variables), optimised as TF.js's
    converter optimises a graph (``noxla.writers.tfjs.optimize``), written as a TF.js graph model."""
    graph_def, inputs = frozen_graph_def(concrete)
    try:
        optimized = optimized_for_tfjs(graph_def, inputs, concrete.outputs)
    except ExportError:
        raise
    except Exception as e:  # grappler raises TF's error types
        raise ExportError(f"the TF.js graph optimisation rejected the lowered program: {e}") from e
    specs = [[TensorSpec(t.name, _dtype_name(t.dtype),
                         None if t.shape.rank is None else tuple(t.shape.as_list())) for t in tensors]
             for tensors in (inputs, concrete.outputs)]
    write_graph_model(graph_from_graph_def(optimized), path, *specs, quantize=quantize,
                      weight_shard_size_bytes=weight_shard_size_bytes, generated_by=tf.__version__,
                      # As TF.js's converter writes it: the output keys, in flattening order.
                      metadata={"structuredOutputKeys": sorted(concrete.structured_outputs)})
    name_tfjs_signature(os.path.join(path, "model.json"), concrete, inputs)


def _dtype_name(dtype) -> str:
    """A TF dtype as model.json names it (``DT_FLOAT``)."""
    from tensorflow.core.framework import types_pb2
    return types_pb2.DataType.Name(tf.as_dtype(dtype).as_datatype_enum)


def name_tfjs_signature(model_json: str, concrete, inputs: Sequence) -> None:
    """Key the graph model's signature by our readable names, its inputs (``frozen_graph_def``'s,
    in the function's parameter order) in that order.

    The TF.js converter keys outputs by graph node (``Identity_1:0``) and drops
    the name of any that share shape and dtype; TF.js's GraphModel reports and
    accepts signature keys, so keying them by name makes them stable.
    """
    with open(model_json) as f:
        model = json.load(f)
    signature = model.setdefault("signature", {})
    out_names = sorted(concrete.structured_outputs)  # tf.nest flattens dicts in key order
    by_node = {t.name: name for t, name in zip(concrete.outputs, out_names)}
    outputs = signature.get("outputs", {})
    signature["outputs"] = {by_node.get(info["name"], key): info for key, info in outputs.items()}
    # TF.js's GraphModel lists its inputs (``model.inputs``, and the order a positional
    # ``execute([...])`` feeds them in) in the order of the signature's keys, which the converter
    # writes in no particular order (f(s, t) came out [t, s]): they follow the parameters here.
    order = {t.name: i for i, t in enumerate(inputs)}
    entries = sorted(signature.get("inputs", {}).values(), key=lambda info: order.get(info["name"], len(order)))
    signature["inputs"] = {info["name"].split(":")[0]: info for info in entries}
    nodes = model["modelTopology"].get("node", [])
    slots = [i for i, n in enumerate(nodes) if n.get("op") == "Placeholder"]
    by_order = sorted((nodes[i] for i in slots), key=lambda n: order.get(n["name"] + ":0", len(order)))
    for i, node in zip(slots, by_order):  # without a signature, TF.js lists the placeholders in graph order
        nodes[i] = node
    placeholders = [nodes[i]["attr"].get("shape", {}).get("shape", {}) for i in slots]
    for shape in (*placeholders, *(info.get("tensorShape", {}) for info in signature["inputs"].values()),
                  *(info.get("tensorShape", {}) for info in signature["outputs"].values())):
        for dim in shape.get("dim", []):
            # proto3 JSON omits zero values, and TF.js reads a missing size as NaN.
            dim.setdefault("size", "0")
    with open(model_json, "w") as f:
        json.dump(model, f)
