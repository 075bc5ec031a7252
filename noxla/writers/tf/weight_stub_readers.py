"""Readers of a stubbed weight put in the forms ``noxla.writers.tf.weight_stubs`` stands weights in for, before
it decides (a GraphDef rewrite, exact).

A tied embedding (keras-hub's ``ReversibleEmbedding``: the lookup ``take(E, ids)`` and the logits
``x @ transpose(E)``) is read by a GatherV2 and by a Transpose feeding a MatMul. A weight read by
any op but MatMul's right-hand side or GatherV2's params is handed to the converter as a real
constant, and the converter holds several copies of it: Gemma 3 1B's 262144 x 1152 table (1.2 GB
in float32) took the decode signature's conversion past 14 GB. So:
- a Transpose of a weight (perm [1, 0]) that only MatMuls read as their right-hand side is folded
  into them (``transpose_b`` flipped), the MatMuls reading the weight itself;
- a weight then read both as GatherV2's params and as MatMul's right-hand side gets a second Const
  node for the MatMuls (the same weight, the same stand-in key): each node is then a stand-in of
  one kind, and the weight is stored once;
- a weight of rank 3 or more that only Reshapes to a matrix read, each as MatMul's right-hand side
  (keras's EinsumDense kernels, [hidden, heads, head_dim]: Qwen 3 0.6B's attention, 0.7 GB, took its
  export to 12.5 GB), becomes that matrix (a view of the array), which the MatMuls read directly.
"""
from __future__ import annotations

import numpy as np


def untie(graph_def, pending: dict) -> None:
    """Rewrite the readers of ``pending``'s nodes (name -> (key, array), ``WeightStubs._pending``,
    which gains the MatMuls' copies) in ``graph_def``."""
    nodes = {node.name: node for node in graph_def.node}
    readers = _readers(graph_def)
    dropped = set()
    for name in list(pending):
        matrix = _reshaped_to_matrix(name, pending[name][1], readers, nodes)
        if matrix is not None:
            key, array = pending[name]
            # The reshaped weight is a weight of its own: its key keeps it apart from the array's.
            pending[name] = ((key, matrix.shape), matrix)
            for reshape, _ in readers[name]:
                for matmul, _ in readers[reshape.name]:
                    matmul.input[1] = name
                dropped.add(reshape.name)
    for name in list(pending):
        for transpose, i in list(readers.get(name, [])):
            if i == 0 and transpose.op == "Transpose" and _is_matrix_flip(transpose, nodes, pending[name][1]):
                matmuls = readers.get(transpose.name, [])
                if matmuls and all(r.op == "MatMul" and j == 1 for r, j in matmuls):
                    for matmul, _ in matmuls:
                        matmul.input[1] = name
                        matmul.attr["transpose_b"].b = not matmul.attr["transpose_b"].b
                    dropped.add(transpose.name)
    if dropped:
        kept = [node for node in graph_def.node if node.name not in dropped]
        del graph_def.node[:]
        graph_def.node.extend(kept)
        readers = _readers(graph_def)
    for name in list(pending):
        uses = readers.get(name, [])
        kinds = {(r.op, i) for r, i in uses}
        if kinds != {("GatherV2", 0), ("MatMul", 1)}:
            continue
        copy = graph_def.node.add()
        copy.CopyFrom(nodes[name])
        copy.name = f"{name}/matmul"
        pending[copy.name] = pending[name]
        for r, i in uses:
            if r.op == "MatMul":
                r.input[i] = copy.name


def _readers(graph_def) -> dict:
    """node name -> [(reader, input index)], control inputs left out (a reader by control only
    keeps a weight real, as before)."""
    readers: dict = {}
    for node in graph_def.node:
        for i, name in enumerate(node.input):
            readers.setdefault(name.split(":")[0].lstrip("^"), []).append(
                (node, -1 if name.startswith("^") else i))
    return readers


def _reshaped_to_matrix(name: str, array: np.ndarray, readers: dict, nodes: dict):
    """``array`` as the matrix the Reshapes of ``name`` make, where those are its only readers and
    only MatMuls read them, each as its right-hand side; else None."""
    uses = readers.get(name, [])
    if array.ndim < 3 or not uses or any(r.op != "Reshape" or i != 0 or len(r.input) != 2 for r, i in uses):
        return None
    shapes = set()
    for reshape, _ in uses:
        shape = nodes.get(reshape.input[1].split(":")[0])
        after = readers.get(reshape.name, [])
        if shape is None or shape.op != "Const" or not after or any(r.op != "MatMul" or i != 1 for r, i in after):
            return None
        import tensorflow as tf
        shapes.add(tuple(int(d) for d in tf.make_ndarray(shape.attr["value"].tensor).reshape(-1)))
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        return None
    return array.reshape(next(iter(shapes)))


def _is_matrix_flip(transpose, nodes: dict, array: np.ndarray) -> bool:
    perm = nodes.get(transpose.input[1].split(":")[0]) if len(transpose.input) == 2 else None
    if array.ndim != 2 or perm is None or perm.op != "Const":
        return False
    import tensorflow as tf
    return tf.make_ndarray(perm.attr["value"].tensor).tolist() == [1, 0]
