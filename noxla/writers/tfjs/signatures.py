"""Several signatures in one TF.js graph model, written from noxla's graph: one graph holding every
signature's nodes, inputs and outputs (a multi-output graph), each signature's weights stored once.

TF.js runs a graph model's outputs from the inputs they read and no others
(``model.execute({"decode/token": t}, ["decode/logits"])`` computes decode's nodes alone), so one
model serves every signature. Each signature's graph is written as a lone export's is
(``noxla.writers.tfjs.from_graph.tfjs_graph_of``: TF.js's rewrites, half floats carried), then merged here:

- every node, function (a loop or conditional body) and tensor of signature ``key`` is named
  ``key/<its name>`` (TF.js reads every node's value by name from one weight map, so names must
  not meet across signatures), the functions a While/If calls renamed with them;
- a main-graph constant equal to one already written (dtype, shape and bytes: a weight the
  signatures share) is read from that one instead, and stored once;
- the signature keys are ``key/<input name>`` and ``key/<output name>``, and the model's
  ``userDefinedMetadata.signatures`` lists each signature's keys (inputs in parameter order,
  outputs sorted, as a lone export orders them).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from noxla.writers.tfjs.graph import Function, Graph, Node, TensorSpec


def merged_signatures(signatures: Mapping[str, tuple[Graph, Sequence[TensorSpec], Sequence[TensorSpec]]]
                      ) -> tuple[Graph, list[TensorSpec], list[TensorSpec]]:
    """``{key: (graph, inputs, outputs)}`` as one graph and its inputs and outputs (each spec named
    ``key/<tensor>``); the graphs' versions are the first's."""
    nodes, functions, inputs, outputs = [], [], [], []
    shared: dict[tuple, str] = {}  # a constant's (dtype, shape, bytes) -> the name it was written under
    for key, (graph, ins, outs) in signatures.items():
        prefix = key + "/"
        moved: dict[str, str] = {}  # a constant of this signature -> the equal one written before
        for node in graph.nodes:
            node = _renamed(node, prefix, moved)
            if node.op == "Const":
                value = np.asarray(node.value)
                identity = (node.attrs.get("dtype", {}).get("type"), value.dtype.str, value.shape, value.tobytes())
                if identity in shared:
                    moved[node.name] = shared[identity]
                    continue
                shared[identity] = node.name
            nodes.append(node)
        functions += [_renamed_function(f, prefix) for f in graph.functions]
        inputs += [TensorSpec(prefix + s.name, s.dtype, s.shape) for s in ins]
        outputs += [TensorSpec(prefix + s.name, s.dtype, s.shape) for s in outs]
    first = next(iter(signatures.values()))[0]
    return Graph(nodes, functions, dict(first.versions)), inputs, outputs


def _ref(name: str, prefix: str, moved: Mapping[str, str] | None = None) -> str:
    """A tensor reference (``node``, ``node:N``, ``^node``) renamed."""
    control = name.startswith("^")
    node, colon, index = name.lstrip("^").partition(":")
    node = prefix + node
    if moved is not None:
        node = moved.get(node, node)
    return ("^" if control else "") + node + colon + index


def _attrs(attrs: dict, prefix: str) -> dict:
    """Attributes with the functions they name (a While's ``cond``/``body``, an If's branches) renamed."""
    return {k: {"func": {**v["func"], "name": prefix + v["func"]["name"]}} if "func" in v else v
            for k, v in attrs.items()}


def _renamed(node: Node, prefix: str, moved: Mapping[str, str] | None = None) -> Node:
    return Node(prefix + node.name, node.op, [_ref(i, prefix, moved) for i in node.inputs],
                _attrs(node.attrs, prefix), node.device, node.value)


def _renamed_function(function: Function, prefix: str) -> Function:
    """A body renamed: its name, input args, nodes and results (its constants are renamed again by
    the writer, ``<function>/<const>``, with the function's new name)."""
    signature = {**function.signature, "name": prefix + function.name,
                 "inputArg": [{**a, "name": prefix + a["name"]} for a in function.signature.get("inputArg", [])]}
    return Function(signature, [_renamed(n, prefix) for n in function.nodes],
                    {k: _ref(v, prefix) for k, v in function.ret.items()}, dict(function.extra))
