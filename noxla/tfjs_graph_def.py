"""The adapter from a TF GraphDef to ``noxla.tfjs_graph``'s node interface (what the TF.js writer takes)."""
from __future__ import annotations

from noxla.tfjs_graph import Function, Graph, Node


def graph_from_graph_def(graph_def) -> Graph:
    """``graph_def`` (main graph, function library, versions) as a ``Graph``, each Const's value read
    into an array. The Consts' tensor contents are cleared from ``graph_def`` on the way (their
    bytes would otherwise be written into the JSON form of every attribute)."""
    from google.protobuf.json_format import MessageToDict
    values = {}
    for prefix, nodes in [("", graph_def.node)] + [(f.signature.name + "/", f.node_def)
                                                    for f in graph_def.library.function]:
        for node in nodes:
            if node.op == "Const":
                values[prefix + node.name] = _const_value(node)
    as_json = MessageToDict(graph_def)
    main = [_node(n, values.get(n["name"])) for n in as_json.get("node", [])]
    functions = []
    for f in as_json.get("library", {}).get("function", []):
        signature = f.pop("signature")
        prefix = signature["name"] + "/"
        nodes = [_node(n, values.get(prefix + n["name"])) for n in f.pop("nodeDef", [])]
        functions.append(Function(signature, nodes, f.pop("ret", {}), f))
    return Graph(main, functions, as_json.get("versions", {}))


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


def _node(as_json: dict, value) -> Node:
    attrs = as_json.get("attr", {})
    if as_json["op"] == "Const":
        attrs = {k: v for k, v in attrs.items() if k != "value"}  # the writer writes it from ``value``
    return Node(as_json["name"], as_json["op"], as_json.get("input", []), attrs, as_json.get("device", ""),
                value if as_json["op"] == "Const" else None)
