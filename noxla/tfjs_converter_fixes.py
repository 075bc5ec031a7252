"""Work-arounds for TF.js converter bugs, applied while the converter runs (see noxla.export)."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def exact_constant_renames():
    """Rename the constants of loop and branch bodies by exact name, not by name prefix.

    The converter moves each function body's constants to the weights under the name
    ``<function>/<constant>`` and rewrites the body's inputs to match, but it rewrites every input
    that merely starts with a constant's name: once grappler folds ``Equal_3`` into a constant,
    the input ``Equal_35:z:0`` is renamed too, and TF.js cannot load the model ("Cannot read
    properties of undefined (reading 'outputs')"). Large loop bodies (schur's QR steps) hit it.
    """
    from tensorflow.core.framework import node_def_pb2
    from tensorflowjs.converters import graph_rewrite_util
    original = graph_rewrite_util.rename_constants

    def rename_constants(node_list, prefix):
        constants = {node.name for node in node_list if node.op == "Const"}
        nodes = []
        for node in node_list:
            new_node = node_def_pb2.NodeDef()
            new_node.CopyFrom(node)
            nodes.append(new_node)
            if node.op == "Const":
                new_node.name = prefix + "/" + node.name
                continue
            for i, name in enumerate(new_node.input):
                # Control inputs ("^name") stay as they are, as in the converter's own version.
                if name.split(":")[0] in constants:
                    new_node.input[i] = prefix + "/" + name
        return nodes

    graph_rewrite_util.rename_constants = rename_constants
    try:
        yield
    finally:
        graph_rewrite_util.rename_constants = original
