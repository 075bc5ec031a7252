"""The TF.js converter's op fusions, made independent of the exporting CPU and checked against
what TF.js runs.

TF.js's converter (tensorflowjs's ``optimize_graph``) fused Conv2D/MatMul + BiasAdd + activation
with grappler's remapper, and what the remapper fuses depends on the exporting machine: where
TF's oneDNN path is on (by default on CPUs with AVX-512 VNNI or BF16, AVX-VNNI or AMX, such as
AMD Zen 4; anywhere with TF_ENABLE_ONEDNN_OPTS=1) it also fuses Tanh and Sigmoid activations,
Gelu, Swish, Mish, LayerNorm, Conv + BiasAdd + Add and more (``IsMKLEnabled()`` in TF's
grappler/optimizers/remapper.cc), and adds ``_input_shapes`` annotations. TF.js has no kernel
for some of those (a _FusedMatMul with Tanh: "Activation tanh has not been implemented for the
CPU backend"). TF decides oneDNN once per process, so the remapper is not run at all
(``noxla.writers.tfjs.optimize``): ``portable_fusions`` applies, in Python, the fusions the remapper
makes without oneDNN (the ones every export made on an AVX2 machine), and ``check_fused_ops`` refuses any fused op or
activation that TF.js's cpu, wasm and webgl backends do not all implement.

Implementing a fused op is not computing it right. TF.js 4.22's wasm _FusedMatMul is wrong with
transpose_a or transpose_b and a bias or an activation (tests/test_emitted_forms.py: W @ x + b under
vmap, W 10x256, off by 12.4; the cpu backend is exact), so a transposed MatMul is never
fused. A constant right-hand side read only by its MatMul is stored transposed instead
(``_untransposed_weights``): that MatMul then fuses, and wasm's untransposed MatMul is also ~10x
faster (measured at 8x512 @ 512x512 and 32x1024 @ 1024x1024: 0.19 vs 1.9 ms, 2.2 vs 31 ms).
"""
from __future__ import annotations

import collections

from noxla.errors import ExportError

# What grappler's remapper fuses into a Conv2D or MatMul + BiasAdd without oneDNN.
PORTABLE_ACTIVATIONS = ("Relu", "Relu6", "Elu", "LeakyRelu")
# The activations TF.js 4.22 applies after a fused contraction on cpu (fused_utils' applyActivation),
# wasm (FusableActivation) and webgl (mapActivationToShaderProgram) alike.
TFJS_FUSED_ACTIVATIONS = frozenset({"Relu", "Relu6", "Elu", "LeakyRelu", "Sigmoid", "Prelu"})
TFJS_FUSED_OPS = frozenset({"_FusedConv2D", "_FusedMatMul", "FusedDepthwiseConv2dNative"})
# Ops that TF.js only knows unfused, or not at all, that a remapper may emit.
_HOST_FUSED_OPS = frozenset({"_FusedDepthwiseConv2dNative", "_FusedConv3D", "_FusedBatchMatMul",
                             "_FusedBatchMatMulV2", "_MklSwish", "_MklFusedMish", "_MklLayerNorm",
                             "_MklFusedInstanceNorm", "_FusedBatchNormEx"})
_CPU_DTYPES = {"Conv2D": (1, 2), "MatMul": (1,)}  # DT_FLOAT, DT_DOUBLE: the remapper's CPU kernels
_CONTRACTION_ATTRS = {"Conv2D": ("T", "strides", "padding", "explicit_paddings", "dilations", "data_format",
                                 "use_cudnn_on_gpu"),
                      "MatMul": ("T", "transpose_a", "transpose_b")}


def reads_and_controls(graph_def, first_output_only: bool):
    """How many inputs of the main graph read each node (its output 0 only, or any output), and the
    nodes that are some node's control input."""
    reads, controlled = collections.Counter(), set()
    for node in graph_def.node:
        for name in node.input:
            if name.startswith("^"):
                controlled.add(name[1:])
            elif not first_output_only or name.partition(":")[2] in ("", "0"):
                reads[name.partition(":")[0]] += 1
    return reads, controlled


def portable_fusions(graph_def, keep: set[str]):
    """The graph with each Conv2D or MatMul + BiasAdd (+ Relu, Relu6, Elu or LeakyRelu) of its main
    graph fused into one _FusedConv2D or _FusedMatMul (and Conv2D + Squeeze + BiasAdd into
    _FusedConv2D + Squeeze), under the conditions grappler's remapper checks without oneDNN:
    float32 (or float64 Conv2D) on the CPU device, NHWC, each intermediate read once, no control
    edges, none of ``keep`` (the outputs) fused away. Nodes are named as the remapper names them.
    Unlike the remapper, a MatMul that transposes an operand is not fused (TF.js's wasm computes
    that wrong), after its constant right-hand side is stored transposed where it can be."""
    from tensorflow.core.framework import graph_pb2, node_def_pb2
    graph_def = _untransposed_weights(graph_def, keep)
    nodes = {n.name: n for n in graph_def.node}
    reads, controlled = reads_and_controls(graph_def, first_output_only=True)

    def plain(node) -> bool:  # no control edges in or out
        return node.name not in controlled and not any(i.startswith("^") for i in node.input)

    def producer(node):  # the node whose output 0 is ``node``'s first input
        name = node.input[0] if node.input else "^"
        return nodes.get(name) if ":" not in name or name.endswith(":0") else None

    def same_type(a, b) -> bool:
        return a.attr["T"].type == b.attr["T"].type != 0

    def contraction_of(bias_add):
        contraction = producer(bias_add)
        if (contraction is None or contraction.op not in _CPU_DTYPES or not same_type(bias_add, contraction)
                or not plain(contraction) or reads[contraction.name] > 1 or contraction.name in keep
                or "CPU" not in contraction.device.upper()
                or contraction.attr["T"].type not in _CPU_DTYPES[contraction.op]
                or (contraction.op == "Conv2D" and contraction.attr["data_format"].s != b"NHWC")
                or (contraction.op == "MatMul"
                    and (contraction.attr["transpose_a"].b or contraction.attr["transpose_b"].b))):
            return None
        return contraction

    def fuse(name, contraction, bias_add, activation=None):
        node = node_def_pb2.NodeDef(name=name, op="_Fused" + contraction.op, device=contraction.device,
                                    input=[*contraction.input[:2], bias_add.input[1]])
        for attr in _CONTRACTION_ATTRS[contraction.op]:
            if attr in contraction.attr:
                node.attr[attr].CopyFrom(contraction.attr[attr])
        node.attr["fused_ops"].list.s.extend([b"BiasAdd"] + ([activation.op.encode()] if activation else []))
        node.attr["num_args"].i = 1
        if contraction.op == "Conv2D":  # the types of the fused arguments (the bias), as the remapper writes them
            node.attr["TArgs"].list.type.append(contraction.attr["T"].type)
        node.attr["epsilon"].f = 0.0
        if activation is not None and activation.op == "LeakyRelu":
            node.attr["leakyrelu_alpha"].CopyFrom(activation.attr["alpha"])
        return node

    replaced, removed = {}, set()
    for activation in graph_def.node:  # Conv2D/MatMul + BiasAdd + activation
        if activation.op not in PORTABLE_ACTIVATIONS or not plain(activation):
            continue
        bias_add = producer(activation)
        if (bias_add is None or bias_add.op != "BiasAdd" or not plain(bias_add) or reads[bias_add.name] > 1
                or bias_add.name in keep or not same_type(activation, bias_add)):
            continue
        contraction = contraction_of(bias_add)
        if contraction is not None:
            replaced[activation.name] = fuse(activation.name, contraction, bias_add, activation)
            removed.update((contraction.name, bias_add.name))
    for bias_add in graph_def.node:
        if bias_add.op != "BiasAdd" or bias_add.name in removed or not plain(bias_add):
            continue
        contraction = contraction_of(bias_add)
        if contraction is not None:  # Conv2D/MatMul + BiasAdd
            replaced[bias_add.name] = fuse(bias_add.name, contraction, bias_add)
            removed.add(contraction.name)
            continue
        # Conv2D + Squeeze (a 1-D convolution) + BiasAdd: the bias moves into the convolution,
        # whose name it keeps, and the Squeeze takes the BiasAdd's name and place.
        squeeze = producer(bias_add)
        if (squeeze is None or squeeze.op != "Squeeze" or not same_type(bias_add, squeeze) or not plain(squeeze)
                or reads[squeeze.name] > 1 or squeeze.name in keep or "squeeze_dims" not in squeeze.attr
                or 3 in squeeze.attr["squeeze_dims"].list.i):
            continue
        conv = contraction_of(squeeze)
        if conv is not None and conv.op == "Conv2D" and same_type(bias_add, conv):
            replaced[conv.name] = fuse(conv.name, conv, bias_add)
            moved = node_def_pb2.NodeDef()
            moved.CopyFrom(squeeze)
            moved.name, moved.input[0] = bias_add.name, conv.name
            replaced[bias_add.name] = moved
            removed.add(squeeze.name)

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    del out.node[:]
    out.node.extend(replaced.get(n.name, n) for n in graph_def.node if n.name not in removed)
    return out


def _untransposed_weights(graph_def, keep: set[str]):
    """The graph with each float32 MatMul(transpose_b) whose right-hand side is a Const that only it
    reads (no control edges, not an output) reading that constant stored transposed instead."""
    import tensorflow as tf
    reads = collections.Counter(name.lstrip("^").partition(":")[0] for n in graph_def.node for name in n.input)
    consts = {n.name: n for n in graph_def.node if n.op == "Const"}
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    by_name = {n.name: n for n in out.node}
    for matmul in out.node:
        weight = consts.get(matmul.input[1]) if matmul.op == "MatMul" and len(matmul.input) > 1 else None
        if (weight is None or not matmul.attr["transpose_b"].b or matmul.attr["T"].type != 1
                or reads[weight.name] != 1 or weight.name in keep):
            continue
        value = tf.make_ndarray(weight.attr["value"].tensor)
        by_name[weight.name].attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value.T.copy()))
        matmul.attr["transpose_b"].b = False
    return out


def check_fused_ops(graph_def) -> None:
    """Raise ExportError for a fused op (main graph or function body) that TF.js does not run as
    fused: an op it has no kernel for, or fused ops other than BiasAdd followed by at most one
    activation that its cpu, wasm and webgl backends all implement. TF.js reads only the first
    two fused ops and runs an unknown one as no activation, silently."""
    bodies = [("", graph_def.node)] + [(f.signature.name + "/", f.node_def) for f in graph_def.library.function]
    problems = []
    for prefix, nodes in bodies:
        for node in nodes:
            if node.op in _HOST_FUSED_OPS:
                problems.append(f"{prefix}{node.name}: {node.op} (TF.js has no such op)")
            elif node.op in TFJS_FUSED_OPS:
                ops = [s.decode() for s in node.attr["fused_ops"].list.s]
                activation_ok = len(ops) == 1 or (len(ops) == 2 and ops[1] in TFJS_FUSED_ACTIVATIONS)
                if not ops or ops[0] != "BiasAdd" or not activation_ok:
                    problems.append(f"{prefix}{node.name}: {node.op} with fused_ops {ops}")
    if problems:
        raise ExportError(
            "the TF.js graph has fusions that TF.js cannot run (it fuses BiasAdd then one of "
            f"{', '.join(sorted(TFJS_FUSED_ACTIVATIONS))}); this is a noxla bug, please report it:\n  "
            + "\n  ".join(problems))
