"""A TF.js graph model from noxla's graph, without TensorFlow: the graph recorded
(``noxla.graph.lower``), rewritten as TF.js's converter rewrites one (``tfjs_passes``), checked
against the ops TF.js runs, and written by ``noxla.writers.tfjs.writer`` with the signature TF's path
writes (inputs keyed by parameter name in parameter order, outputs by output name)."""
from __future__ import annotations

import json
import os
from typing import Mapping

from noxla.graph.dtypes import Uncovered
from noxla.graph.lower import Recorded
from noxla.writers.tfjs import graph as tfjs_graph
from noxla.writers.tfjs.fusions import TFJS_FUSED_ACTIVATIONS, TFJS_FUSED_OPS
from noxla.writers.tfjs.graph_half_floats import carried_in_float32
from noxla.writers.tfjs.passes import optimize_for_tfjs
from noxla.writers.tfjs.signatures import merged_signatures
from noxla.writers.tfjs.writer import DEFAULT_SHARD_BYTES, write_graph_model

# GraphDef's versions as TF 2.21 writes them (model.json's ``versions``; TF.js reads no field of it).
VERSIONS = {"producer": 2238}


def tfjs_graph_of(recorded: Recorded) -> tfjs_graph.Graph:
    """The recorded graph rewritten for TF.js, as ``noxla.writers.tfjs.graph``'s nodes. Raises ``Uncovered``
    for an op TF.js does not run (TF's path then gives the full diagnosis)."""
    graph = recorded.graph
    functions = optimized_for_tfjs(recorded)
    missing = sorted({n.op for n in unsupported_nodes(graph, functions)})
    if missing:
        raise Uncovered(f"ops TF.js does not run: {', '.join(missing)}")
    # TF.js computes a half-float node in float32: each result is rounded back, as on TF's path.
    carried_in_float32(graph, recorded.outputs)
    for function in functions:
        function.rets = carried_in_float32(function.graph, function.rets)
    for node in graph.nodes:
        if node.op in TFJS_FUSED_OPS:
            fused = tfjs_graph.attr_strings(node.attrs.get("fused_ops"))
            if fused[0] != "BiasAdd" or (len(fused) == 2 and fused[1] not in TFJS_FUSED_ACTIVATIONS):
                raise AssertionError(f"{node.name}: fused_ops {fused}")  # the passes make no other
    nodes = [tfjs_graph.Node(n.name, n.op, [t.ref for t in n.inputs], dict(n.attrs), "",
                             n.value if n.op == "Const" else None) for n in graph.nodes]
    return tfjs_graph.Graph(nodes, [_function(f) for f in functions], dict(VERSIONS))


def optimized_for_tfjs(recorded: Recorded) -> list:
    """The recorded graph rewritten in place by TF.js's converter passes; its While/If bodies, rewritten too."""
    optimize_for_tfjs(recorded.graph, recorded.outputs, recorded.inputs)
    return _functions(recorded.graph.nodes)


def unsupported_nodes(graph, functions) -> list:
    """The nodes (main graph and bodies) of an op TF.js does not run: the TF.js check's backstop reads
    their names (``noxla.writers.tfjs.ops``), this writer refuses them."""
    supported = tfjs_graph.tfjs_supported_ops()
    every_node = [*graph.nodes, *(m for f in functions for m in f.graph.nodes)]
    return [n for n in every_node if n.op not in supported and n.op != "_Arg"]


def _functions(nodes) -> list:
    """The While/If bodies the nodes name, and those their bodies name, each once, each rewritten as
    the main graph is (grappler optimizes a function body as a graph of its own, its ``_Arg``s its
    inputs and its results kept)."""
    out, seen = [], set()
    stack = [f for n in nodes for f in n.functions.values()]
    while stack:
        function = stack.pop(0)
        if function.name not in seen:
            seen.add(function.name)
            optimize_for_tfjs(function.graph, function.rets, function.args)
            out.append(function)
            stack.extend(f for n in function.graph.nodes for f in n.functions.values())
    return out


def _function(function) -> tfjs_graph.Function:
    """A body as the library function TF.js reads: its ``_Arg``s are the input args (named after them),
    every tensor of a node ``node:N`` (``noxla.writers.tfjs.writer``), the results ``output_i``. Its nodes are
    each named
    ``<function>/<node>`` (the writer so names its Consts): TF.js looks every node of a body up in the
    model's one weight map by name first, so a body's ``x/Reshape`` would read the main graph's
    constant ``x/Reshape`` (a folded one) instead of computing."""
    def name(node) -> str:
        return node.name if node.op == "Const" else f"{function.name}/{node.name}"

    def ref(t) -> str:
        return name(t.node) if t.node.op == "_Arg" else f"{name(t.node)}:{t.index}"
    signature = {"name": function.name,
                 "inputArg": [{"name": name(a.node), "type": a.dtype.json_name} for a in function.args],
                 "outputArg": [{"name": f"output_{i}", "type": r.dtype.json_name} for i, r in enumerate(function.rets)]}
    nodes = [tfjs_graph.Node(name(n), n.op, [ref(t) for t in n.inputs], dict(n.attrs), "",
                             n.value if n.op == "Const" else None) for n in function.graph.nodes if n.op != "_Arg"]
    return tfjs_graph.Function(signature, nodes, {f"output_{i}": ref(r) for i, r in enumerate(function.rets)})


def write_tfjs(recorded: Recorded, path: str, quantize: str | None = None,
               weight_shard_size_bytes: int = DEFAULT_SHARD_BYTES) -> None:
    graph = tfjs_graph_of(recorded)
    write_graph_model(graph, path, _specs(recorded.inputs), _specs(recorded.outputs),
                      quantize=quantize, weight_shard_size_bytes=weight_shard_size_bytes, generated_by="noxla.graph",
                      metadata={"structuredOutputKeys": sorted(recorded.out_names)})
    _key_signature(os.path.join(path, "model.json"), *_keys(recorded))


def write_signatures_tfjs(signatures: Mapping[str, Recorded], path: str, quantize: str | None = None,
                          weight_shard_size_bytes: int = DEFAULT_SHARD_BYTES) -> None:
    """Several signatures (``{key: recorded}``) in one model (``tfjs_signatures``): signature
    ``key``'s inputs and outputs keyed ``key/<name>``, each signature's graph rewritten as a lone
    export's; raises ``Uncovered`` (nothing written) where one of them is not covered."""
    graphs = {}
    for key, recorded in signatures.items():
        try:
            graphs[key] = (tfjs_graph_of(recorded), _specs(recorded.inputs), _specs(recorded.outputs))
        except Uncovered as e:
            raise Uncovered(f"signature {key!r}: {e}") from None
    graph, inputs, outputs = merged_signatures(graphs)
    in_keys, out_keys, listed = {}, {}, {}
    for key, recorded in signatures.items():
        ins, outs = _keys(recorded)
        in_keys.update({f"{key}/{t}": f"{key}/{name}" for t, name in ins.items()})
        out_keys.update({f"{key}/{t}": f"{key}/{name}" for t, name in outs.items()})
        listed[key] = {"inputs": list(recorded.in_names), "outputs": sorted(recorded.out_names)}
    write_graph_model(graph, path, inputs, outputs, quantize=quantize, weight_shard_size_bytes=weight_shard_size_bytes,
                      generated_by="noxla.graph",
                      metadata={"structuredOutputKeys": sorted(out_keys.values()), "signatures": listed})
    _key_signature(os.path.join(path, "model.json"), in_keys, out_keys)


def _specs(tensors) -> list[tfjs_graph.TensorSpec]:
    return [tfjs_graph.TensorSpec(f"{t.node.name}:{t.index}", t.dtype.json_name, tuple(t.shape.dims))
            for t in tensors]


def _keys(recorded: Recorded) -> tuple[dict[str, str], dict[str, str]]:
    """Signature keys as ``noxla.pipeline.tf_tfjs.name_tfjs_signature`` writes them, by tensor name: inputs by
    parameter name, outputs by output name."""
    return ({f"{t.node.name}:0": name for t, name in zip(recorded.inputs, recorded.in_names)},
            {f"{t.node.name}:{t.index}": name for t, name in zip(recorded.outputs, recorded.out_names)})


def _key_signature(model_json: str, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> None:
    """The signature keyed by ``inputs``/``outputs`` (tensor name -> key): inputs in parameter order,
    outputs in sorted order (TF's flattening of the output dict)."""
    with open(model_json) as f:
        model = json.load(f)
    signature = model["signature"]
    signature["inputs"] = {inputs[k]: v for k, v in signature["inputs"].items()}
    by_name = {outputs[k]: v for k, v in signature["outputs"].items()}
    signature["outputs"] = {name: by_name[name] for name in sorted(by_name)}
    with open(model_json, "w") as f:
        json.dump(model, f)
