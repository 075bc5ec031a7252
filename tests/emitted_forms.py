"""The fused and layout forms noxla writes for TF.js and TFLite, each made by a small JAX program.

Every case names the forms it must make noxla write (``forms(...)`` of the exported model.json or
.tflite): a test runs the case only after finding them, so no case passes by writing something else.
Used by tests/test_emitted_forms.py, which runs each export on every backend against JAX.

A form is an op with the attributes that choose its kernel path, e.g.
``_FusedMatMul(ta=0,tb=0,BiasAdd+Relu)`` or ``CONV_2D(SAME,s2x2,d1x1,RELU6)``.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# JAX's spelling of each activation the lowerings write as a TF op the fusions fold. portable_fusions
# also folds Elu and LeakyRelu, which no lowering writes: jax.nn.elu and jax.nn.leaky_relu lower to
# Exp/Select (measured), so those fused forms are never written and the sweep cannot reach them.
ACTIVATIONS = {
    "none": lambda x: x,
    "Relu": jax.nn.relu,
    "Relu6": jax.nn.relu6,
}
TFLITE_ACTIVATION = {"none": "NONE", "Relu": "RELU", "Relu6": "RELU6"}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fun: Callable
    args: tuple
    tfjs: tuple[str, ...] = ()  # forms model.json must hold
    tflite: tuple[str, ...] = ()  # forms export_tflite's .tflite must hold (most from noxla.writers.tflite)
    tflite_tf: tuple[str, ...] | None = None  # the TF path's .tflite (exported beside TF.js), if not ``tflite``

    @property
    def tflite_tf_forms(self) -> tuple[str, ...]:
        return self.tflite if self.tflite_tf is None else self.tflite_tf


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _fused(act: str) -> str:
    return "BiasAdd" + ("" if act == "none" else "+" + act)


def dense_cases(shapes=((2, 8, 16), (5, 33, 7)), activations=tuple(ACTIVATIONS)) -> list[Case]:
    """x @ W + b and Equinox's Linear (W @ x + b under vmap) with constant weights; the same with
    the weights an input (x @ W.T, a transposed right-hand side noxla cannot store transposed)."""
    cases = []
    for m, k, n in shapes:
        for act in activations:
            f_act = ACTIVATIONS[act]
            w, wt, b, x = _rand((k, n), 1), _rand((n, k), 2), _rand((n,), 3), _rand((m, k), 4)
            tail = f"{act}_{m}x{k}x{n}"
            fused = f"_FusedMatMul(ta=0,tb=0,{_fused(act)})"
            fc = f"FULLY_CONNECTED({TFLITE_ACTIVATION[act]},bias,keep)"
            cases.append(Case(f"dense_{tail}", lambda x, w=w, b=b, f=f_act: f(x @ w + b), (x,), (fused,), (fc,)))
            # The vmapped W @ x: a FULLY_CONNECTED of the weight as it is, from either path
            cases.append(Case(f"vmap_linear_{tail}", lambda x, wt=wt, b=b, f=f_act: f(jax.vmap(
                lambda v: wt @ v + b)(x)), (x,), (fused,), (fc,)))
            # The rule's Transpose of the input weights stays a Transpose (TF's path folds it into a
            # MatMul(tb=1) and then leaves that unfused: TF.js's wasm computes it wrong fused).
            cases.append(Case(f"input_weights_{tail}", lambda x, wt, b, f=f_act: f(x @ wt.T + b), (x, wt, b),
                              ("Transpose", fused), ()))
    return cases


def wasm_regression_cases() -> list[Case]:
    """The shapes (W out x in, batch) on which TF.js wasm's _FusedMatMul(transpose_b) + bias was
    measured wrong (max error 12.4, 2.72, 2.28, 0.88) before noxla stopped writing it."""
    cases = []
    for out, inp, batch in ((10, 256, 2), (16, 8, 2), (48, 16, 2), (4, 16, 3)):
        wt, b, x = _rand((out, inp), 5), _rand((out,), 6), _rand((batch, inp), 7)
        cases.append(Case(f"wasm_regression_{out}x{inp}_batch{batch}", lambda x, wt=wt, b=b: jax.vmap(
            lambda v: wt @ v + b)(x), (x,), ("_FusedMatMul(ta=0,tb=0,BiasAdd)",), ("FULLY_CONNECTED(NONE,bias,keep)",)))
    return cases


def transposed_lhs_cases() -> list[Case]:
    """A contraction over the lhs's first axis: the rule's Transpose, then a fused MatMul (TF's path
    folds the Transpose into a MatMul(transpose_a) and leaves that unfused)."""
    cases = []
    for k, m, n in ((8, 3, 5), (16, 2, 10)):
        x, w, b = _rand((k, m), 8), _rand((k, n), 9), _rand((n,), 10)
        cases.append(Case(f"transposed_lhs_{k}x{m}x{n}", lambda x, w=w, b=b: jax.nn.relu(x.T @ w + b), (x,),
                          ("Transpose", "_FusedMatMul(ta=0,tb=0,BiasAdd+Relu)"), ()))
    return cases


def fc_keep_dims_cases() -> list[Case]:
    """A rank-3 input through a dense layer, with and without a bias: FULLY_CONNECTED with keepNumDims;
    a rank-2 slice of it: without (either path)."""
    w, b, x = _rand((12, 6), 11), _rand((6,), 12), _rand((2, 5, 12), 13)
    return [Case("fc_rank3_bias_relu", lambda x: jax.nn.relu(x @ w + b), (x,), (),
                 ("FULLY_CONNECTED(RELU,bias,keep)",)),
            Case("fc_rank3_nobias", lambda x: x @ w, (x,), (), ("FULLY_CONNECTED(NONE,keep)",)),
            Case("fc_rank2_nobias", lambda x: x[0] @ w, (x,), (), ("FULLY_CONNECTED(NONE)",))]


def batch_matmul_cases() -> list[Case]:
    """Batched contractions with either operand transposed: BatchMatMulV2 / BATCH_MATMUL adj_x, adj_y."""
    cases = []
    specs = {(0, 0): "bij,bjk->bik", (1, 0): "bji,bjk->bik", (0, 1): "bij,bkj->bik", (1, 1): "bji,bkj->bik"}
    for (adj_x, adj_y), spec in specs.items():
        for bsz, i, j, k in ((2, 3, 4, 5), (3, 8, 16, 4)):
            a = _rand((bsz, j, i) if adj_x else (bsz, i, j), 14)
            c = _rand((bsz, k, j) if adj_y else (bsz, j, k), 15)
            cases.append(Case(f"batch_matmul_adj{adj_x}{adj_y}_{bsz}x{i}x{j}x{k}",
                              lambda a, c, spec=spec: jnp.einsum(spec, a, c), (a, c),
                              (f"BatchMatMulV2(adj_x={adj_x},adj_y={adj_y})",),
                              (f"BATCH_MATMUL(adj_x={adj_x},adj_y={adj_y})",)))   # either path
    return cases


_PADDINGS = {"SAME": "SAME", "VALID": "VALID", "EXPLICIT": ((1, 2), (2, 0))}


def _conv(x, w, stride, padding, dilation, groups=1):
    return lax.conv_general_dilated(x, w, (stride, stride), _PADDINGS[padding], rhs_dilation=(dilation, dilation),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups)


def conv_cases(activations=tuple(ACTIVATIONS), paddings=tuple(_PADDINGS), strides=(1, 2), dilations=(1, 2),
               depthwise=True) -> list[Case]:
    """A 3x3 convolution + bias + activation (and a depthwise one): padding x stride x dilation with
    a Relu, and each activation with SAME padding, stride 1, no dilation."""
    geometries = [(p, s, d) for p in paddings for s in strides for d in dilations
                  if s == 1 or d == 1]  # TF's Conv2D takes a stride or a dilation, not both
    combos = ([("Relu", *g) for g in geometries if "Relu" in activations]
              + [(a, "SAME", 1, 1) for a in activations if a != "Relu"])
    cases = []
    kinds = [("conv", 1, (3, 3, 3, 5))] + ([("depthwise", 4, (3, 3, 1, 8))] if depthwise else [])
    for (act, padding, stride, dilation), (kind, groups, wshape) in itertools.product(combos, kinds):
        x, w, b = _rand((2, 9, 10, 4 if groups > 1 else 3), 16), _rand(wshape, 17), _rand(wshape[3:], 18)
        fun = (lambda x, w=w, b=b, s=stride, p=padding, d=dilation, g=groups, f=ACTIVATIONS[act]:
               f(_conv(x, w, s, p, d, g) + b))
        # explicit padding is a Pad before a VALID convolution, in both formats
        pad = padding == "EXPLICIT"
        tag = f"{'VALID' if pad else padding},s{stride},d{dilation}"
        tfjs = (f"{'FusedDepthwiseConv2dNative' if groups > 1 else '_FusedConv2D'}({tag},{_fused(act)})",)
        # a dilated depthwise too: noxla's graph writes one node with its dilations, which every TF.js
        # backend's kernel takes (TF's own path wrote a space-to-batch around an undilated one)
        tflite = f"{'DEPTHWISE_CONV_2D' if groups > 1 else 'CONV_2D'}({tag},{TFLITE_ACTIVATION[act]})"
        cases.append(Case(f"{kind}_{act}_{padding}_s{stride}_d{dilation}", fun, (x,),
                          tfjs + (("Pad",) if pad else ()), (tflite,) + (("PAD",) if pad else ())))
    return cases


def conv1d_cases() -> list[Case]:
    """A 1-D convolution + bias (+ Relu, Relu6): TF.js's Conv2D + Squeeze + BiasAdd, fused with the
    bias moved before the Squeeze (portable_fusions' one rewrite that is not a plain fusion); the
    activation after the Squeeze stays apart, there and in the graph tflite writer's .tflite (the TF
    path's fuses it)."""
    cases = []
    for act, padding, stride in (("none", "SAME", 1), ("Relu", "VALID", 2), ("Relu6", "SAME", 2)):
        x, w, b = _rand((2, 11, 3), 22), _rand((3, 3, 5), 23), _rand((5,), 24)
        fun = (lambda x, w=w, b=b, s=stride, p=padding, f=ACTIVATIONS[act]: f(lax.conv_general_dilated(
            x, w, (s,), p, dimension_numbers=("NWC", "WIO", "NWC")) + b))
        apart = () if act == "none" else (act,)
        cases.append(Case(f"conv1d_{act}_{padding}_s{stride}", fun, (x,),
                          (f"_FusedConv2D({padding},s{stride},d1,BiasAdd)", "Squeeze") + apart,
                          (f"CONV_2D({padding},s{stride},d1,NONE)",) + tuple(a.upper() for a in apart),
                          (f"CONV_2D({padding},s{stride},d1,{TFLITE_ACTIVATION[act]})",)))
    return cases


def transpose_conv_cases() -> list[Case]:
    """A stride-2 transposed convolution of kernel 2, 3 and 4, with and without a bias: TRANSPOSE_CONV
    / Conv2DBackpropInput. Kernel 3 at SAME padding crops the full output unevenly (0 before, 1 after)."""
    cases = []
    for k, padding, bias in itertools.product((2, 3, 4), ("SAME", "VALID"), (False, True)):
        x, w, b = _rand((1, 5, 6, 3), 19), _rand((k, k, 3, 4), 20), _rand((4,), 21)
        fun = (lambda x, w=w, b=b, p=padding, bias=bias: lax.conv_transpose(
            x, w, (2, 2), p, dimension_numbers=("NHWC", "HWIO", "NHWC")) + (b if bias else 0.0))
        cases.append(Case(f"transpose_conv_k{k}_{padding}_{'bias' if bias else 'nobias'}", fun, (x,),
                          # the converter gives TRANSPOSE_CONV a bias tensor (zeros) either way
                          # kernel 2 at stride 2: VALID is SAME, written SAME
                          ("Conv2DBackpropInput",), (f"TRANSPOSE_CONV({'SAME' if k == 2 else padding},bias)",)))
    return cases


def all_cases() -> list[Case]:
    return (dense_cases() + wasm_regression_cases() + transposed_lhs_cases() + fc_keep_dims_cases()
            + batch_matmul_cases() + conv_cases() + conv1d_cases() + transpose_conv_cases())


def fast_sample() -> list[Case]:
    """A few cases for the fast loop: the wasm regression, one fused dense, one fused convolution."""
    return (wasm_regression_cases()[:2] + dense_cases(shapes=((2, 8, 16),), activations=("Relu6",))
            + conv_cases(activations=("Relu",), paddings=("SAME",), strides=(2,), dilations=(1,), depthwise=False))


# --------------------------------------------------------------------------- reading the written forms

def tfjs_forms(model_dir: str) -> set[str]:
    with open(os.path.join(model_dir, "model.json")) as f:
        nodes = json.load(f)["modelTopology"]["node"]
    return {_tfjs_form(n) for n in nodes}


def _tfjs_form(node: dict) -> str:
    import base64
    attr = node.get("attr", {})
    flag = lambda name: int(bool(attr.get(name, {}).get("b", False)))  # noqa: E731
    op = node["op"]
    fused = "+".join(base64.b64decode(s).decode() for s in attr.get("fused_ops", {}).get("list", {}).get("s", []))
    if op in ("MatMul", "_FusedMatMul"):
        return f"{op}(ta={flag('transpose_a')},tb={flag('transpose_b')}" + (f",{fused})" if fused else ")")
    if op in ("BatchMatMul", "BatchMatMulV2"):
        return f"{op}(adj_x={flag('adj_x')},adj_y={flag('adj_y')})"
    if op in ("Conv2D", "_FusedConv2D", "DepthwiseConv2dNative", "FusedDepthwiseConv2dNative"):
        ints = lambda name: [int(v) for v in attr.get(name, {}).get("list", {}).get("i", [])] or [1, 1, 1, 1]  # noqa: E731
        padding = base64.b64decode(attr["padding"]["s"]).decode()
        tag = f"{padding},s{ints('strides')[1]},d{ints('dilations')[1]}"
        return f"{op}({tag}" + (f",{fused})" if fused else ")")
    return op


def tflite_forms(path: str) -> set[str]:
    from noxla.writers.tflite.flatbuffer.schema import schema
    with open(path, "rb") as f:
        model = schema.ModelT.InitFromPackedBuf(f.read(), 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    acts = {v: k for k, v in vars(schema.ActivationFunctionType).items() if not k.startswith("_")}
    pads = {v: k for k, v in vars(schema.Padding).items() if not k.startswith("_")}
    forms = set()
    for graph in model.subgraphs:
        for op in graph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            name = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")
            o = op.builtinOptions
            has_bias = len(op.inputs) > 2 and op.inputs[-1] >= 0  # FULLY_CONNECTED, TRANSPOSE_CONV: -1 is none
            if name == "FULLY_CONNECTED":
                name += f"({acts[o.fusedActivationFunction]}" + (",bias" if has_bias else "") + (
                    ",keep" if o.keepNumDims else "") + ")"
            elif name == "BATCH_MATMUL":
                name += f"(adj_x={int(o.adjX)},adj_y={int(o.adjY)})"
            elif name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                name += (f"({pads[o.padding]},s{o.strideH},d{o.dilationHFactor},"
                         f"{acts[o.fusedActivationFunction]})")
            elif name == "TRANSPOSE_CONV":
                name += f"({pads[o.padding]}" + (",bias" if has_bias else "") + ")"
            forms.add(name)
    return forms
