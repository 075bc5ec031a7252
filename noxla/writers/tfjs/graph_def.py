"""The adapter from a TF GraphDef to ``noxla.writers.tfjs.graph``'s node interface (what the TF.js writer takes)."""
from __future__ import annotations

from noxla.errors import ExportError
from noxla.writers.tfjs.graph import Function, Graph, Node


def graph_from_graph_def(graph_def) -> Graph:
    """``graph_def`` (main graph, function library, versions) as a ``Graph``, each Const's value read
    into an array and each function body's tensors named by flat output index (``flat_output_names``).
    The Consts' tensor contents are cleared from ``graph_def`` on the way (their bytes would otherwise
    be written into the JSON form of every attribute)."""
    from google.protobuf.json_format import MessageToDict
    values = {}
    for prefix, nodes in [("", graph_def.node)] + [(f.signature.name + "/", f.node_def)
                                                    for f in graph_def.library.function]:
        for node in nodes:
            if node.op == "Const":
                values[prefix + node.name] = _const_value(node)
    flat = {f.signature.name: flat_output_names(f, graph_def.library) for f in graph_def.library.function}
    as_json = MessageToDict(graph_def)
    main = [_node(n, values.get(n["name"])) for n in as_json.get("node", [])]
    functions = []
    for f in as_json.get("library", {}).get("function", []):
        signature = f.pop("signature")
        prefix, names = signature["name"] + "/", flat[signature["name"]]
        nodes = [_node(n, values.get(prefix + n["name"]), names) for n in f.pop("nodeDef", [])]
        ret = {arg: names.get(tensor, tensor) for arg, tensor in f.pop("ret", {}).items()}
        functions.append(Function(signature, nodes, ret, f))
    return Graph(main, functions, as_json.get("versions", {}))


def flat_output_names(function_def, library) -> dict[str, str]:
    """``node:N`` for each ``node:arg:i`` of a function body, N the flat output index (output args
    in op-def order; a list arg's i-th tensor at its start + i). TF names a body's tensors by output
    arg and index within it; TF.js's GraphModel reads the last number as the node's output index
    (tfjs-converter ``mapFunction``), so ``TopKV2:indices:0`` would be TopKV2's values."""
    from tensorflow.python.framework import op_def_registry
    signatures = {f.signature.name: f.signature for f in library.function}
    names = {}
    for node in function_def.node_def:
        op_def = signatures.get(node.op) or op_def_registry.get(node.op)
        if op_def is None:
            raise ExportError(f"the op {node.op} ({node.name}) is not registered with TensorFlow")
        start = 0
        for arg in op_def.output_arg:
            if arg.number_attr:
                count = node.attr[arg.number_attr].i
            elif arg.type_list_attr:
                count = len(node.attr[arg.type_list_attr].list.type)
            else:
                count = 1
            names.update({f"{node.name}:{arg.name}:{i}": f"{node.name}:{start + i}" for i in range(count)})
            start += count
    return names


def _const_value(node):
    """The Const's value as an array; its tensor keeps only its dtype and shape."""
    from tensorflow.python.framework import tensor_util
    tensor = node.attr["value"].tensor
    value = tensor_util.MakeNdarray(tensor)
    dtype, shape = tensor.dtype, type(tensor.tensor_shape)()
    shape.CopyFrom(tensor.tensor_shape)
    tensor.Clear()
    tensor.dtype = dtype
    tensor.tensor_shape.CopyFrom(shape)
    return value


def _node(as_json: dict, value, flat_names: dict[str, str] | None = None) -> Node:
    attrs = as_json.get("attr", {})
    if as_json["op"] == "Const":
        attrs = {k: v for k, v in attrs.items() if k != "value"}  # the writer writes it from ``value``
    inputs = [(flat_names or {}).get(i, i) for i in as_json.get("input", [])]
    return Node(as_json["name"], as_json["op"], inputs, attrs, as_json.get("device", ""),
                value if as_json["op"] == "Const" else None)
