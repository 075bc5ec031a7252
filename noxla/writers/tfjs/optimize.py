"""The graph optimisation of a TF.js export: the steps TF.js's converter takes on a frozen graph, with
noxla's fixes, run here on the GraphDef before ``noxla.writers.tfjs.writer`` writes it.

0. function calls (PartitionedCall, which TF.js does not run) inlined, as TF's freezing
   (``convert_variables_to_constants_v2``, which TF.js's converter ran on a SavedModel) inlines them;
1. grappler (pruning, constant folding, arithmetic and dependency optimisation, twice);
2. an Add/AddV2 of a rank-1 constant that alone reads a Conv2D, DepthwiseConv2dNative or MatMul
   becomes a BiasAdd, so that it can fuse (only a vector: TF.js's wasm backend rejects a fused
   MatMul whose bias is not rank 1);
3. ``noxla.writers.tfjs.fusions.portable_fusions`` (Conv2D/MatMul + BiasAdd + activation), then grappler
   again without its remapper (constant folding, arithmetic, dependency);
4. DepthwiseConv2dNative + BiasAdd (+ Relu, Relu6 or Elu) into one FusedDepthwiseConv2dNative,
   which grappler does not fuse;
5. the writer's own passes (``TFJS_PASSES``): bfloat16 and float16 carried in float32, each result
   rounded (``noxla.writers.tfjs.half_floats``; after grappler, whose rewrites would not keep a rounding's
   float arithmetic as it is written);
6. the op check: every op must be one TF.js runs (``tfjs_supported_ops``), every fusion one it runs
   fused (``check_fused_ops``).
"""
from __future__ import annotations

import collections

from noxla.errors import ExportError
from noxla.writers.tfjs.fusions import check_fused_ops, portable_fusions, reads_and_controls
from noxla.writers.tfjs.graph import tfjs_supported_ops
from noxla.writers.tfjs.half_floats import carry_half_floats_in_float32

# The rewrites of the optimised GraphDef that TF.js needs, in order: each rewrites it in place and
# says whether it changed anything.
TFJS_PASSES = (carry_half_floats_in_float32,)

_FIRST_PASS = ("pruning", "constfold", "arithmetic", "dependency", "pruning", "constfold", "arithmetic", "dependency")
_SECOND_PASS = ("constfold", "arithmetic", "dependency")  # the converter's list less "remap"
_CALLS = ("PartitionedCall", "StatefulPartitionedCall")
_CONTROL_FLOW = ("If", "StatelessIf", "While", "StatelessWhile")
_BIAS_CONTRACTIONS = ("Conv2D", "DepthwiseConv2dNative", "MatMul")
_DEPTHWISE_ACTIVATIONS = ("Relu", "Relu6", "Elu")  # what TF.js's converter fuses into a depthwise conv


def optimized_for_tfjs(graph_def, inputs, outputs):
    """The optimised GraphDef. ``inputs``, ``outputs``: the function's input and output tensors
    (the outputs' nodes are kept: grappler's fetches)."""
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
    from tensorflow.python.framework import importer, ops
    signature_def = meta_graph_pb2.SignatureDef()  # grappler's feeds and fetches
    for entries, tensors in ((signature_def.inputs, inputs), (signature_def.outputs, outputs)):
        for tensor in tensors:
            entries[tensor.name].name = tensor.name
            entries[tensor.name].dtype = tensor.dtype.as_datatype_enum
            entries[tensor.name].tensor_shape.CopyFrom(tensor.shape.as_proto())
    graph_def = inlined_calls(graph_def, [t.name for t in (*inputs, *outputs)])
    outputs = [t.name.split(":")[0] for t in outputs]
    graph = ops.Graph()
    with graph.as_default():
        importer.import_graph_def(graph_def, name="")
    for name in outputs:
        graph.add_to_collection("train_op", graph.get_operation_by_name(name))  # grappler's fetch nodes
    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.optimizers[:] = _FIRST_PASS
    optimized = _grappler(config, graph.as_graph_def(), graph, signature_def)
    optimized = bias_adds_for_vector_constants(optimized)
    for node in optimized.node:  # the placement grappler fuses a contraction at (tfjs_fusions)
        if node.op in ("Conv2D", "MatMul"):
            node.device = "/device:CPU:0"
    config.graph_options.rewrite_options.optimizers[:] = _SECOND_PASS
    optimized = _grappler(config, portable_fusions(optimized, set(outputs)), graph, signature_def)
    # Placeholders grappler leaves for the control-flow inputs it pruned: read by nothing.
    optimized = _with_nodes(optimized, [n for n in optimized.node if not (
        n.op == "Placeholder" and n.name.startswith("unused_control_flow_input"))])
    optimized = fused_depthwise_convolutions(optimized, set(outputs))
    for rewrite in TFJS_PASSES:
        rewrite(optimized)
    check_tfjs_ops(optimized)
    check_fused_ops(optimized)
    return optimized


def inlined_calls(graph_def, fetches: list[str]):
    """``graph_def`` with its function calls inlined by grappler's function optimizer, the While
    and If ops kept as they are (not lowered to Switch/Merge); as it is when it makes no call.
    ``fetches``: the tensors to keep (the inputs and outputs)."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.framework import importer, ops
    from tensorflow.python.grappler import tf_optimizer
    from tensorflow.python.training.saver import export_meta_graph
    bodies = [graph_def.node] + [f.node_def for f in graph_def.library.function]
    if not any(n.op in _CALLS for nodes in bodies for n in nodes):
        return graph_def
    for node in (n for nodes in bodies for n in nodes if n.op in _CONTROL_FLOW):
        node.attr["_lower_using_switch_merge"].b = False
    for function in graph_def.library.function:
        if "api_implements" in function.attr:  # an alternative implementation is never inlined
            del function.attr["api_implements"]
    graph = ops.Graph()
    with graph.as_default():
        importer.import_graph_def(graph_def, name="")
    meta_graph = export_meta_graph(graph_def=graph_def, graph=graph)
    meta_graph.collection_def["train_op"].node_list.value.extend(fetches)
    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.min_graph_nodes = -1  # small graphs too
    config.graph_options.rewrite_options.optimizers.append("function")
    return tf_optimizer.OptimizeGraph(config, meta_graph)


def _grappler(config, graph_def, graph, signature_def):
    """``graph_def`` through grappler, on the one-GPU cluster TF.js's converter gave it."""
    from tensorflow.core.protobuf import device_properties_pb2
    from tensorflow.python.grappler import cluster as gcluster
    from tensorflow.python.grappler import tf_optimizer
    from tensorflow.python.training.saver import export_meta_graph
    meta_graph = export_meta_graph(graph_def=graph_def, graph=graph)
    meta_graph.signature_def["not_used_key"].CopyFrom(signature_def)
    device = device_properties_pb2.NamedDevice(name="/GPU:0")
    device.properties.type = "GPU"
    device.properties.environment["architecture"] = "4"
    return tf_optimizer.OptimizeGraph(config, meta_graph, cluster=gcluster.Cluster(devices=[device]))


def bias_adds_for_vector_constants(graph_def):
    """Each Add/AddV2 of the main graph whose first input is a Conv2D, DepthwiseConv2dNative or
    MatMul read by nothing else and whose second is a rank-1 Const, as a BiasAdd (NHWC)."""
    nodes = {n.name: n for n in graph_def.node}
    readers = collections.Counter(i for n in graph_def.node for i in n.input)
    for node in graph_def.node:
        if node.op not in ("Add", "AddV2") or len(node.input) != 2:
            continue
        source = nodes.get(node.input[0])
        addend = nodes.get(node.input[1].split(":")[0].lstrip("^"))
        if (source is not None and source.op in _BIAS_CONTRACTIONS and readers[node.input[0]] == 1
                and addend is not None and addend.op == "Const"
                and len(addend.attr["value"].tensor.tensor_shape.dim) == 1):
            node.op = "BiasAdd"
            node.attr["data_format"].s = b"NHWC"
    return graph_def


def fused_depthwise_convolutions(graph_def, keep: set[str]):
    """Each DepthwiseConv2dNative + BiasAdd (+ Relu, Relu6 or Elu) of the main graph as one
    FusedDepthwiseConv2dNative named as the last node it replaces, when each intermediate is read
    only by the next node, has no control edges and is not one of ``keep``."""
    from tensorflow.core.framework import node_def_pb2
    nodes = {n.name: n for n in graph_def.node}
    reads, controlled = reads_and_controls(graph_def, first_output_only=False)

    def only_reader_of(node):  # the node that alone reads output 0 of ``node``'s first input
        name = node.input[0] if node.input else "^"
        source = nodes.get(name[:-2] if name.endswith(":0") else name)
        if (source is None or reads[source.name] != 1 or source.name in keep or source.name in controlled
                or any(i.startswith("^") for i in source.input)):
            return None
        return source

    replaced, removed = {}, set()
    # Chains ending in an activation first, so that their BiasAdd is not fused on its own.
    ends = [n for n in graph_def.node if n.op in _DEPTHWISE_ACTIVATIONS] + [
        n for n in graph_def.node if n.op == "BiasAdd"]
    for last in ends:
        if last.name in removed or last.name in replaced or any(i.startswith("^") for i in last.input):
            continue
        chain = [last]
        if last.op in _DEPTHWISE_ACTIVATIONS:
            bias_add = only_reader_of(last)
            if bias_add is None or bias_add.op != "BiasAdd":
                continue
            chain.insert(0, bias_add)
        elif last.op != "BiasAdd":
            continue
        conv = only_reader_of(chain[0])
        if conv is None or conv.op != "DepthwiseConv2dNative" or conv.name in removed:
            continue
        fused = node_def_pb2.NodeDef(name=last.name, op="FusedDepthwiseConv2dNative", device=conv.device,
                                     input=[*conv.input[:2], chain[0].input[1]])
        for key, value in conv.attr.items():
            fused.attr[key].CopyFrom(value)
        fused.attr["fused_ops"].list.s.extend([b"BiasAdd"] + [n.op.encode() for n in chain[1:]])
        fused.attr["num_args"].i = 1
        replaced[last.name] = fused
        removed.update(n.name for n in [conv, *chain[:-1]])
    if not replaced:
        return graph_def
    return _with_nodes(graph_def, [replaced.get(n.name, n) for n in graph_def.node if n.name not in removed])


def _with_nodes(graph_def, nodes):
    """A GraphDef of ``nodes`` with ``graph_def``'s function library and versions."""
    from tensorflow.core.framework import graph_pb2
    out = graph_pb2.GraphDef(node=nodes)
    out.library.CopyFrom(graph_def.library)
    out.versions.CopyFrom(graph_def.versions)
    return out


def check_tfjs_ops(graph_def) -> None:
    """Raise ExportError for an op (main graph or function body) that TF.js does not run."""
    supported = tfjs_supported_ops()
    found = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
    if found - supported:
        raise ExportError(f"the TF.js graph holds ops that TF.js does not run: {', '.join(sorted(found - supported))}")
