"""A 2-D product of two computed operands keeps the activation that reads it, through the TFLite converter.

TF 2.21's converter turns ``MatMul(x, w)`` into a FULLY_CONNECTED, fuses a RELU, RELU6 or
RELU_N1_TO_1 reading it into that op, and then, ``w`` not being a constant, writes the op as a
BATCH_MATMUL, which has no fused activation: the activation is dropped. ``relu(x @ w)`` with ``w``
a program input came out of LiteRT as ``x @ w`` (found by the browser benchmark's LiteRT.js test
model; measured: the same for ``maximum(., 0)``, ``clip(., 0, 6)``, ``clip(., -1, 1)``, and with a
second reader of the product; an ADD between them takes the activation instead, and TANH, LOGISTIC,
ELU and LEAKY_RELU are never fused).

This pass writes such a product, before the converter sees it, as the rank-3 BatchMatMulV2 of the
operands with a unit batch axis (squeezed back): the converter keeps a rank-3 BATCH_MATMUL and the
activation after it. Only products with an operand that is not a constant and a reader the converter
may fuse are rewritten (two RESHAPEs more each); loop and branch bodies likewise.
"""
from __future__ import annotations

from noxla.writers.tflite.converter.transpose_moves import constant_nodes, node_name

__all__ = ["keep_activations_after_products"]

# What the converter fuses into a FULLY_CONNECTED (as RELU, RELU6 or RELU_N1_TO_1).
_FUSED_READERS = frozenset({"Relu", "Relu6", "Maximum", "Minimum", "ClipByValue"})
_DT_FLOAT, _DT_INT32 = 1, 3


def keep_activations_after_products(graph_def) -> bool:
    """Rewrites, in place, each float ``MatMul`` of ``graph_def`` (main graph and library functions) whose
    second operand is computed and that a fusable activation reads. Whether it changed anything."""
    changed = _rewrite(graph_def.node, None)
    for function in graph_def.library.function:
        changed = _rewrite(function.node_def, function) or changed
    return changed


def _rewrite(nodes, function) -> bool:
    if not any(n.op == "MatMul" for n in nodes):  # most graphs: no walk for constants
        return False
    constant = constant_nodes(nodes)
    readers: dict[str, set[str]] = {}
    for node in nodes:
        for i in node.input:
            readers.setdefault(node_name(i), set()).add(node.op)
    products = [n for n in nodes if n.op == "MatMul" and n.attr["T"].type == _DT_FLOAT
                and node_name(n.input[1]) not in constant and readers.get(n.name, set()) & _FUSED_READERS]
    for product in products:
        _as_unit_batch(nodes, product, function)
    return bool(products)


def _as_unit_batch(nodes, product, function) -> None:
    """``product`` (a MatMul) becomes ``Squeeze(BatchMatMulV2(ExpandDims(a, 0), ExpandDims(b, 0)), [0])``
    under its own name, so that its readers read the same values."""
    name, (a, b) = product.name, list(product.input[:2])
    adj_x, adj_y = product.attr["transpose_a"].b, product.attr["transpose_b"].b
    axis = nodes.add(name=f"{name}/unit_batch_axis", op="Const")
    axis.attr["dtype"].type = _DT_INT32
    axis.attr["value"].tensor.dtype = _DT_INT32
    axis.attr["value"].tensor.tensor_shape.SetInParent()
    axis.attr["value"].tensor.int_val.append(0)
    axis_ref = f"{axis.name}:output:0" if function is not None else axis.name
    expanded = []
    for k, operand in enumerate((a, b)):
        e = nodes.add(name=f"{name}/unit_batch_{k}", op="ExpandDims", input=[operand, axis_ref])
        e.attr["T"].type = _DT_FLOAT
        e.attr["Tdim"].type = _DT_INT32
        expanded.append(f"{e.name}:output:0" if function is not None else e.name)
    bmm = nodes.add(name=f"{name}/unit_batch_product", op="BatchMatMulV2", input=expanded)
    bmm.attr["T"].type = _DT_FLOAT
    bmm.attr["adj_x"].b, bmm.attr["adj_y"].b = adj_x, adj_y
    product.op = "Squeeze"
    del product.input[:]
    product.input.append(f"{bmm.name}:output:0" if function is not None else bmm.name)
    for key in list(product.attr):
        if key != "T":
            del product.attr[key]
    product.attr["squeeze_dims"].list.i.append(0)
    if function is not None:  # a body names a MatMul's result "product", a Squeeze's "output"
        old, new = f"{name}:product:", f"{name}:output:"
        for node in nodes:
            node.input[:] = [i.replace(old, new, 1) if i.startswith(old) else i for i in node.input]
        for key, value in function.ret.items():
            if value.startswith(old):
                function.ret[key] = value.replace(old, new, 1)
