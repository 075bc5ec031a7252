"""Write a TF.js graph model (``model.json`` and its weight shards) from a ``noxla.writers.tfjs.graph.Graph``.

The format, as TF.js 4.22's loader reads it (tfjs-converter's GraphModel / OperationMapper,
tfjs-core's io ``decodeWeights``):

- model.json: ``format`` "graph-model", ``modelTopology`` (``node``: the main graph's nodes;
  ``library.function``: the While/If bodies; ``versions``), ``signature`` (``inputs``/``outputs``
  keyed by name, each ``{name: "node:0", dtype, tensorShape}``), ``userDefinedMetadata`` and
  ``weightsManifest``: one group ``{paths, weights}``, each weight ``{name, shape, dtype}`` and,
  when quantized, ``quantization`` (``dtype`` uint8/uint16 with ``min`` and ``scale``, read back
  as ``value * scale + min``; or float16).
- Inside a function body every input and ``ret`` entry names a tensor ``node:N`` (N its flat output
  index), never TF's ``node:arg:i``: TF.js reads the last number as the output index. Two ``ret``
  entries never read different outputs of one node: TF.js keeps one output per returned node
  (``defaultOutput``), so both would read the last (the lowering gives each its own Snapshot).
- The weights are the Const nodes' values in node order (main graph, then each function's,
  named ``<function>/<const>``), their bytes little-endian and concatenated in that order, then
  split into files ``group1-shard<i>of<n>.bin`` of at most ``weight_shard_size_bytes``.
  TF.js decodes float32, int32, bool, complex64 and string weights only: other floats are
  stored as float32 and other integers as int32 (the Const's own dtype attr stays as it is;
  TF.js reads DT_INT64/DT_DOUBLE nodes as int32/float32 anyway). A string is its byte length
  (uint32, little-endian) and then its bytes.

No TensorFlow here: a graph built without it can be written the same way.
"""
from __future__ import annotations

import json
import math
import os
from typing import Mapping, Sequence

import numpy as np

from noxla.errors import ExportError
from noxla.writers import quantize as quantization
from noxla.writers.tfjs import DEFAULT_SHARD_BYTES
from noxla.writers.tfjs.graph import Function, Graph, Node, TensorSpec, shape_json

_STORED_AS = {"f": np.dtype(np.float32), "i": np.dtype(np.int32), "u": np.dtype(np.int32),
              "b": np.dtype(np.bool_), "c": np.dtype(np.complex64), "O": np.dtype(object)}
_MANIFEST_DTYPES = {"f": "float32", "i": "int32", "u": "int32", "b": "bool", "c": "complex64", "O": "string"}


def write_graph_model(graph: Graph, path: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *,
                      quantize: str | None = None, weight_shard_size_bytes: int = DEFAULT_SHARD_BYTES,
                      metadata: Mapping | None = None, generated_by: str = "") -> None:
    """Write ``graph`` into the directory ``path`` as ``model.json`` and its weight shards.
    ``inputs``/``outputs``: the signature, keyed by tensor name (``"x:0"``)."""
    quantization.check_mode(quantize, quantization.TFJS_MODES, "TF.js")
    if weight_shard_size_bytes is not None and weight_shard_size_bytes <= 0:
        raise ExportError(f"weight_shard_size_bytes must be positive (got {weight_shard_size_bytes})")
    functions = [_with_renamed_constants(f) for f in graph.functions]
    constants = [n for n in graph.nodes if n.op == "Const"] + [
        n for f in functions for n in f.nodes if n.op == "Const"]
    os.makedirs(path, exist_ok=True)
    manifest = _write_weights(constants, path, quantize, weight_shard_size_bytes)
    topology = {"node": [_node_json(n) for n in graph.nodes],
                "library": {"function": [_function_json(f) for f in functions]} if functions else {},
                "versions": dict(graph.versions)}
    model = {"format": "graph-model", "generatedBy": generated_by, "convertedBy": "noxla",
             "signature": {"inputs": _signature(inputs), "outputs": _signature(outputs)},
             "modelTopology": topology}
    if metadata:
        model["userDefinedMetadata"] = dict(metadata)
    model["weightsManifest"] = [manifest]
    with open(os.path.join(path, "model.json"), "w") as f:
        json.dump(model, f)


def _signature(specs: Sequence[TensorSpec]) -> dict:
    return {s.name: {"name": s.name, "dtype": s.dtype, "tensorShape": shape_json(s.shape)} for s in specs}


def _with_renamed_constants(function: Function) -> Function:
    """The function with each Const renamed ``<function>/<const>`` (weight names are global) and the
    inputs and results that read one renamed to match, by exact node name (a prefix match would also rename
    ``Equal_35:z:0`` after a ``Equal_3``); control inputs (``^name``) are left as they are."""
    constants = {n.name for n in function.nodes if n.op == "Const"}
    prefix = function.name + "/"

    def tensor(name: str) -> str:
        return prefix + name if name.split(":")[0] in constants else name

    def renamed(node: Node) -> Node:
        if node.op == "Const":
            return Node(prefix + node.name, node.op, list(node.inputs), node.attrs, node.device, node.value)
        return Node(node.name, node.op, [tensor(i) for i in node.inputs], node.attrs, node.device, node.value)

    # A body may return a Const itself (noxla's graph does; TF's path returns an Identity of one).
    ret = {k: tensor(v) for k, v in function.ret.items()}
    return Function(function.signature, [renamed(n) for n in function.nodes], ret, function.extra)


def _node_json(node: Node) -> dict:
    out = {"name": node.name, "op": node.op}
    if node.inputs:
        out["input"] = list(node.inputs)
    if node.device:
        out["device"] = node.device
    attrs = dict(node.attrs)
    if node.op == "Const":
        if node.value is None:
            raise ExportError(f"the Const node {node.name} has no value")
        # The value itself is in the weights; the node keeps its dtype and shape.
        dtype = attrs.get("dtype", {}).get("type", "DT_INVALID")
        attrs["value"] = {"tensor": {"dtype": dtype, "tensorShape": shape_json(node.value.shape)}}
    if attrs:
        out["attr"] = attrs
    return out


def _function_json(function: Function) -> dict:
    _check_body_names(function)
    out = {"signature": function.signature, "nodeDef": [_node_json(n) for n in function.nodes]}
    if function.ret:
        out["ret"] = dict(function.ret)
    out.update(function.extra)
    return out


def _check_body_names(function: Function) -> None:
    """Refuse a body whose tensors TF.js would read wrongly (see the module's docstring)."""
    names = [i for n in function.nodes for i in n.inputs if not i.startswith("^")] + list(function.ret.values())
    bad = [name for name in names if name.count(":") > 1 or (":" in name and not name.split(":")[1].isdigit())]
    if bad:
        raise ExportError(f"the function {function.name} names tensors {bad[:3]} by output argument: "
                          "TF.js reads them by flat output index only ('node:N')")
    read = {}
    for tensor in function.ret.values():
        node, _, index = tensor.partition(":")
        if read.setdefault(node, index or "0") != (index or "0"):
            raise ExportError(f"the function {function.name} returns two outputs of {node}: "
                              "TF.js would read the same output for both")


def _stored(node: Node) -> np.ndarray:
    """The Const's value in a dtype TF.js decodes."""
    value = np.asarray(node.value)
    if value.dtype.kind in "SU":
        value = value.astype(object)
    target = _STORED_AS.get(value.dtype.kind)
    if target is None:
        raise ExportError(f"the constant {node.name} has dtype {value.dtype}, which TF.js weights cannot hold")
    return value if value.dtype == target else value.astype(target)


def _weight_bytes(value: np.ndarray) -> bytes:
    if value.dtype == object:
        parts = []
        for item in value.reshape(-1).tolist():
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts += [np.uint32(len(data)).astype("<u4").tobytes(), data]
        return b"".join(parts)
    return np.ascontiguousarray(value, value.dtype.newbyteorder("<")).tobytes()


def _write_weights(constants: Sequence[Node], path: str, quantize: str | None, shard_bytes: int | None) -> dict:
    """Write the constants' values as one weight group's shards; its manifest entry."""
    entries, chunks = [], []
    seen = set()
    for node in constants:
        if node.name in seen:
            raise ExportError(f"two constants are named {node.name}")
        seen.add(node.name)
        value = _stored(node)
        data, quantized = quantization.tfjs_quantized(value, quantize)
        entry = {"name": node.name, "shape": [int(d) for d in value.shape],
                 "dtype": _MANIFEST_DTYPES[value.dtype.kind]}
        if quantized is not None:
            entry["quantization"] = quantized
        entries.append(entry)
        chunks.append(_weight_bytes(data))
    blob = b"".join(chunks)
    size = len(blob) if shard_bytes is None else shard_bytes
    count = math.ceil(len(blob) / size) if blob else 0
    paths = [f"group1-shard{i + 1}of{count}.bin" for i in range(count)]
    for i, name in enumerate(paths):
        with open(os.path.join(path, name), "wb") as f:
            f.write(blob[i * size:(i + 1) * size])
    return {"paths": paths, "weights": entries}
