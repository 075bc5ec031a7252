"""Work-arounds for TF.js converter bugs, applied while the converter runs (see noxla.export)."""
from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types

# What the converter's modules import but a graph-model conversion never uses: tensorflow_hub
# (TF Hub modules) and TF Decision Forests (its custom ops, for TFDF SavedModels).
_UNUSED_BY_GRAPH_CONVERSION = ("tensorflow_hub", "tensorflow_decision_forests")


class _ImportedOnUse(types.ModuleType):
    """Stands in for a module until an attribute is read, then imports the real one."""

    def __getattr__(self, attribute):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attribute)


def tfjs_module(name: str) -> types.ModuleType:
    """Import a module of the tensorflowjs package (``"tensorflowjs.converters.common"``) without
    running the package's ``__init__`` files, which import the Keras converters (tf_keras), TF Hub
    and TF Decision Forests: 1.7 s of a cold TF.js export, none of it used by a graph model.

    While the module imports, ``tensorflowjs`` and ``tensorflowjs.converters`` are empty packages
    (their directories, not their ``__init__``) and TF Hub / TFDF are imported only if used; the
    stand-ins for the packages are removed afterwards, so a later ``import tensorflowjs`` runs the
    real ``__init__`` files, which find the submodules already imported.
    """
    if name in sys.modules:
        return sys.modules[name]
    # tensorflowjs imports TF Decision Forests, whose banner imports IPython whenever stdout is
    # not a terminal (pytest, CI, pipes) and dies without it.
    os.environ.setdefault("TFDF_DISABLE_WELCOME_MESSAGE", "1")
    added = []
    try:
        for package in ("tensorflowjs", "tensorflowjs.converters"):
            if package in sys.modules:
                continue
            parent = sys.modules.get(package.rpartition(".")[0])
            spec = (importlib.util.find_spec(package) if parent is None else
                    importlib.machinery.PathFinder.find_spec(package, parent.__path__))
            sys.modules[package] = importlib.util.module_from_spec(spec)  # not executed: no __init__
            added.append(package)
        for unused in _UNUSED_BY_GRAPH_CONVERSION:
            if unused not in sys.modules:
                sys.modules[unused] = _ImportedOnUse(unused)
                added.append(unused)
        return importlib.import_module(name)
    finally:
        for module in added:
            if isinstance(sys.modules.get(module), _ImportedOnUse) or module.startswith("tensorflowjs"):
                sys.modules.pop(module, None)


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
    graph_rewrite_util = tfjs_module("tensorflowjs.converters.graph_rewrite_util")
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
