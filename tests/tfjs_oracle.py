"""The TF.js export as noxla wrote it before ``noxla.writers.tfjs.writer``: through the ``tensorflowjs``
package's converter (with noxla's fixes of its bugs, applied by patching it), as a TEST ORACLE
for the writer (tests/test_tfjs_writer.py). Only where tensorflowjs is installed (it no longer
installs beside current TF/protobuf; the Python 3.11 environment has it with --no-deps)."""
from __future__ import annotations

import contextlib
import importlib.util
import os

import numpy as np

AVAILABLE = importlib.util.find_spec("tensorflowjs") is not None


def converter_module(name: str):
    """Import a tensorflowjs submodule without the package's ``__init__`` files, which import its
    Keras converter (tf_keras, absent here): the packages are stood in for by their directories
    while it imports, and TF Hub / TF Decision Forests (imported by the converter, used only for
    their own model kinds) by empty modules."""
    import importlib
    import importlib.machinery
    import sys
    import types
    if name in sys.modules:
        return sys.modules[name]
    added = []
    try:
        for package in ("tensorflowjs", "tensorflowjs.converters"):
            if package not in sys.modules:
                parent = sys.modules.get(package.rpartition(".")[0])
                spec = (importlib.util.find_spec(package) if parent is None else
                        importlib.machinery.PathFinder.find_spec(package, parent.__path__))
                sys.modules[package] = importlib.util.module_from_spec(spec)
                added.append(package)
        for unused in ("tensorflow_hub", "tensorflow_decision_forests"):
            if unused not in sys.modules:
                sys.modules[unused] = types.ModuleType(unused)
                added.append(unused)
        return importlib.import_module(name)
    finally:
        for module in added:
            sys.modules.pop(module, None)


def _converter():
    return tuple(converter_module("tensorflowjs." + name) for name in (
        "converters.tf_saved_model_conversion_v2", "converters.normalize_bias_add",
        "converters.graph_rewrite_util", "write_weights"))


@contextlib.contextmanager
def _patched(obj, name, replacement):
    original = getattr(obj, name)
    setattr(obj, name, replacement(original))
    try:
        yield
    finally:
        setattr(obj, name, original)


def _vector_bias_adds_only(original):
    """Its normalize pass, on Adds whose addend is a rank-1 constant only (hidden under another op)."""
    def normalize(graph_def):
        nodes = {n.name: n for n in graph_def.node}

        def vector(name):
            node = nodes.get(name.split(":")[0].lstrip("^"))
            return node is not None and node.op == "Const" and len(node.attr["value"].tensor.tensor_shape.dim) == 1
        kept = {n.name: n.op for n in graph_def.node if n.op in ("Add", "AddV2") and not vector(n.input[1])}
        for node in graph_def.node:
            if node.name in kept:
                node.op = "NoxlaUnfusableAdd"
        graph_def = original(graph_def)
        for node in graph_def.node:
            if node.op == "NoxlaUnfusableAdd":
                node.op = kept[node.name]
        return graph_def
    return normalize


def _exact_renames(original):
    """Its rename of function constants, by exact node name instead of name prefix."""
    from tensorflow.core.framework import node_def_pb2

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
                if name.split(":")[0] in constants:
                    new_node.input[i] = prefix + "/" + name
        return nodes
    return rename_constants


def _finite_weights_only(original):
    def quantize_entry(entry, dtype):
        data = entry["data"]
        exact = np.all((data == np.round(data)) | (np.abs(np.frexp(data)[0]) == 0.5))
        if data.dtype == np.float32 and (not np.all(np.isfinite(data)) or exact):
            return entry
        return original(entry, dtype)
    return quantize_entry


def _portable_remapping(keep):
    from noxla.writers.tfjs.fusions import portable_fusions

    def wrap(original):
        def run_grappler(config, graph_def, graph, signature_def):
            optimizers = list(config.graph_options.rewrite_options.optimizers)
            if "remap" not in optimizers:
                return original(config, graph_def, graph, signature_def)
            portable = type(config)()
            portable.CopyFrom(config)
            portable.graph_options.rewrite_options.optimizers[:] = [o for o in optimizers if o != "remap"]
            return original(portable, portable_fusions(graph_def, keep), graph, signature_def)
        return run_grappler
    return wrap


def vector_bias_adds_only():
    """While the converter runs: its normalize pass makes BiasAdds of vector constants only."""
    return _patched(converter_module("tensorflowjs.converters.normalize_bias_add"), "normalize_bias_add_op",
                    _vector_bias_adds_only)


def write_tfjs(concrete, path: str, quantize: str | None = None, weight_shard_size_bytes: int = 4 << 20) -> None:
    """``noxla.pipeline.tf_tfjs.write_tfjs`` as it was, through the tensorflowjs converter."""
    import tensorflow as tf
    from google.protobuf.json_format import MessageToDict
    from tensorflow.core.protobuf import meta_graph_pb2

    from noxla.pipeline.tf_function import frozen_graph_def
    from noxla.pipeline.tf_tfjs import name_tfjs_signature
    from noxla.writers.tfjs.fusions import check_fused_ops
    conversion, normalize_bias_add, graph_rewrite_util, write_weights = _converter()
    graph_def, inputs = frozen_graph_def(concrete)
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(graph_def, name="")
    signature = meta_graph_pb2.SignatureDef()
    for entries, tensors in ((signature.inputs, inputs), (signature.outputs, concrete.outputs)):
        for tensor in tensors:
            entries[tensor.name].name = tensor.name
            entries[tensor.name].dtype = tensor.dtype.as_datatype_enum
            entries[tensor.name].tensor_shape.CopyFrom(tensor.shape.as_proto())
    os.makedirs(path, exist_ok=True)
    keep = {t.name.split(":")[0] for t in concrete.outputs}
    with _patched(normalize_bias_add, "normalize_bias_add_op", _vector_bias_adds_only), \
            _patched(write_weights, "_quantize_entry", _finite_weights_only), \
            _patched(graph_rewrite_util, "rename_constants", _exact_renames), \
            _patched(conversion, "_run_grappler", _portable_remapping(keep)):
        optimized = conversion.optimize_graph(graph, signature)
        check_fused_ops(optimized)
        weights = conversion.extract_weights(optimized)
        conversion.write_artifacts(
            MessageToDict(optimized), weights, os.path.join(path, "model.json"), tf.__version__, signature,
            quantization_dtype_map=None if quantize is None else {quantize: True},
            weight_shard_size_bytes=weight_shard_size_bytes,
            metadata={"structuredOutputKeys": sorted(concrete.structured_outputs)})
    name_tfjs_signature(os.path.join(path, "model.json"), concrete, inputs)
