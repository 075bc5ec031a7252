"""The suite must pass on any x86 CPU, not only the one it runs on.

TF picks its CPU kernels by CPU: it turns oneDNN on by default only on some x86 CPUs (Intel
ones with AVX-512 among them), and the oneDNN kernels accept more than TF's own (Eigen) ones:
dilated Conv3D, dilated or unequally strided DepthwiseConv2dNative. A lowering that relied
on them failed with "This is a noxla bug" on an AMD EPYC without AVX-512. The test suite runs
with this machine's default; the test below runs the rules that call TF's native kernels again
in TF eager, with oneDNN switched the other way, so every run covers both kernel families.

TFLite's XNNPACK also picks kernels by instruction set (its AVX2 log returned log(inf) = 88.38
where AVX-512 returns inf); the rules guard those edges themselves (``special.py``'s ``log``),
and the :edges cases check them on whichever CPU runs the suite.

Which CPUs the suite has passed on: AMD EPYC (family 25, AVX2 without AVX-512, oneDNN off by
default), 2026-11-22. No Intel machine was at hand; there, oneDNN is on by default, and this test
runs the oneDNN kernels here (as it runs Eigen's on a machine where oneDNN is the default).

The exported artifacts must not depend on the exporting CPU either: with oneDNN on, grappler's
remapper, which the TF.js converter runs, fuses more (a MatMul + BiasAdd + Tanh into one
_FusedMatMul, which TF.js cannot run), so noxla runs the remapper's portable part itself
(``noxla.writers.tfjs.fusions``). The tests below export the same programs with oneDNN on and off, in two
processes, and compare the TF.js and TFLite artifacts.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tensorflow.python.util import _pywrap_util_port

# Rules whose lowering reaches TF kernels that differ between oneDNN and Eigen.
NATIVE_KERNEL_RULES = ("conv_general_dilated", "dot_general", "reduce_window_sum", "reduce_window_max",
                       "reduce_window_min")

_CHILD = """
import json, sys
from lowering_rules import RULES
from tests.differential import Runtimes, run_case
failures = []
for name in sys.argv[1:]:
    for case in RULES[name].cases:
        if case.skip:  # the installed JAX cannot run it (test_rules reports it skipped, with the reason)
            continue
        try:
            run_case(case, "tf_eager", Runtimes("", None))
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures.append(f"{case.id}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
print("RESULT " + json.dumps(failures))
"""


@pytest.mark.slow
def test_rules_pass_with_the_other_tf_cpu_kernels():
    onednn_here = _pywrap_util_port.IsMklEnabled()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0" if onednn_here else "1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _CHILD, *NATIVE_KERNEL_RULES], check=False, cwd=root,
                          env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"the child run failed:\n{proc.stderr[-3000:]}"
    failures = json.loads(lines[-1][len("RESULT "):])
    kernels = "Eigen (oneDNN off)" if onednn_here else "oneDNN"
    assert not failures, f"with TF's {kernels} CPU kernels:\n" + "\n".join(failures)


# Dense and conv layers (2-D and 1-D) with every activation a remapper might fuse (the oneDNN one fuses more),
# the sampling head whose Tanh was fused on an AMD Zen 4, and a loop body (function library).
_ARTIFACT_CHILD = r"""
import hashlib, json, os, sys, tempfile
import jax, jax.numpy as jnp, numpy as np
from tensorflow.python.util import _pywrap_util_port
from noxla.writers.tfjs import optimize as tfjs_optimize
from noxla.errors import ExportError
from noxla.pipeline.tf_path import export
from tests.zoo import _categorical_sampling_head

rng = np.random.default_rng(0)
W, b = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
K, kb = rng.standard_normal((3, 3, 2, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
dense = lambda x: x @ W + b
conv = lambda x: jax.lax.conv_general_dilated(x.reshape(1, 2, 4, 2), K, (1, 1), "SAME",
                                              dimension_numbers=("NHWC", "HWIO", "NHWC")) + kb
x8 = [np.ones((2, 8), np.float32)]
MODELS = {
    "tanh": (lambda x: jnp.tanh(dense(x)), x8), "sigmoid": (lambda x: jax.nn.sigmoid(dense(x)), x8),
    "relu": (lambda x: jax.nn.relu(dense(x)), x8), "relu6": (lambda x: jax.nn.relu6(dense(x)), x8),
    "gelu": (lambda x: jax.nn.gelu(dense(x)), x8), "swish": (lambda x: jax.nn.swish(dense(x)), x8),
    "mish": (lambda x: jax.nn.mish(dense(x)), x8), "max_leaky": (lambda x: jnp.maximum(dense(x), 0.2 * dense(x)), x8),
    "layer_norm": (lambda x: (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5), x8),
    "conv_relu": (lambda x: jax.nn.relu(conv(x)), x8), "conv_tanh": (lambda x: jnp.tanh(conv(x)), x8),
    "conv_add": (lambda x: conv(x) + x.reshape(1, 2, 4, 2).sum(-1, keepdims=True), x8),
    "conv1d_relu": (lambda x: jax.nn.relu(jax.lax.conv_general_dilated(  # Conv2D + Squeeze + BiasAdd
        x.reshape(1, 8, 2), K[0], (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")) + kb), x8),
    "scan_tanh": (lambda x: jax.lax.scan(lambda h, _: (jnp.tanh(h @ W[:6] + b), None), x[:, :6], None,
                                         length=3)[0], x8),
    "categorical_sampling_head": (_categorical_sampling_head(),
                                  [np.ones((2, 24), np.float32), np.arange(2, dtype=np.int32)]),
}

def fused(model_dir):
    with open(os.path.join(model_dir, "model.json")) as f:
        model = json.load(f)
    nodes = sorted((json.dumps(n, sort_keys=True) for n in model["modelTopology"]["node"]))
    library = json.dumps(model["modelTopology"].get("library", {}), sort_keys=True)
    data = b"".join(open(os.path.join(model_dir, p), "rb").read() for g in model["weightsManifest"] for p in g["paths"])
    return {"nodes": nodes, "library": library, "weights": model["weightsManifest"],
            "data": hashlib.sha256(data).hexdigest()}

scratch = tempfile.TemporaryDirectory()  # removed when the child exits
tmp = scratch.name
result = {"onednn": bool(_pywrap_util_port.IsMklEnabled()), "noxla": {}, "converter": {}}
for name, (fun, args) in MODELS.items():
    base = os.path.join(tmp, name)
    export(fun, args, tfjs=base + "_js", tflite=base + ".tflite", demo_page=False)
    with open(base + ".tflite", "rb") as f:
        result["noxla"][name] = dict(fused(base + "_js"), tflite=hashlib.sha256(f.read()).hexdigest())
    # Grappler's own remapper instead of noxla's portable fusions, as TF.js's converter ran it
    # (noxla's check still on): what an export was before.
    passes, portable = tfjs_optimize._SECOND_PASS, tfjs_optimize.portable_fusions
    tfjs_optimize._SECOND_PASS, tfjs_optimize.portable_fusions = ("remap", *passes), lambda graph, keep: graph
    try:
        export(fun, args, tfjs=base + "_converter_js", demo_page=False)
        result["converter"][name] = fused(base + "_converter_js")
    except ExportError as e:
        result["converter"][name] = {"error": str(e)}
    finally:
        tfjs_optimize._SECOND_PASS, tfjs_optimize.portable_fusions = passes, portable
print("RESULT " + json.dumps(result))
"""


def _export_in_child(onednn: bool) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _ARTIFACT_CHILD], check=False, cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"the child export failed:\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.slow
def test_artifacts_are_the_same_with_onednn_on_and_off():
    on, off = _export_in_child(True), _export_in_child(False)
    if not on["onednn"]:
        pytest.skip("this TF build has no oneDNN path (TF_ENABLE_ONEDNN_OPTS=1 leaves it off)")
    assert not off["onednn"]
    # The CPU-specific path is real: the converter's own remapper fuses Tanh with oneDNN on, and
    # noxla's check refuses that graph, naming the fusion.
    assert "Tanh" in on["converter"]["tanh"].get("error", ""), on["converter"]["tanh"]
    assert "Tanh" in on["converter"]["categorical_sampling_head"].get("error", "")
    differ = sorted(name for name in on["noxla"] if on["noxla"][name] != off["noxla"][name])
    assert not differ, f"TF.js or TFLite artifacts differ between oneDNN on and off: {differ}"
    # Without oneDNN, noxla's fusions are the converter's own, node for node: nothing TF.js ran
    # fused before runs unfused now.
    kept = sorted(name for name in off["noxla"]
                  if {k: v for k, v in off["noxla"][name].items() if k != "tflite"} != off["converter"][name])
    assert not kept, f"noxla's fusions differ from the converter's remapper (oneDNN off): {kept}"


def _graph(*nodes, body=()):
    """A GraphDef as model.json's modelTopology spells it: (name, op, fused_ops) per node."""
    from google.protobuf.json_format import ParseDict
    from tensorflow.core.framework import graph_pb2

    def node(name, op, fused_ops=()):
        fused = {"fused_ops": {"list": {"s": [base64.b64encode(s.encode()).decode() for s in fused_ops]}}}
        return {"name": name, "op": op, "attr": fused if fused_ops else {}}
    topology = {"node": [node(*n) for n in nodes]}
    if body:
        topology["library"] = {"function": [{"signature": {"name": "body"}, "nodeDef": [node(*n) for n in body]}]}
    return ParseDict(topology, graph_pb2.GraphDef())


@pytest.mark.parametrize("graph,refused", [
    (_graph(("dense", "_FusedMatMul", ["BiasAdd", "Tanh"])), "Tanh"),
    (_graph(("conv", "_FusedConv2D", ["BiasAdd", "Add", "Relu"])), "'Add'"),
    (_graph(("conv", "_FusedConv2D", ["Relu"])), "['Relu']"),  # oneDNN's Conv2D + Relu, no bias
    (_graph(("swish", "_MklSwish")), "_MklSwish"),
    (_graph(("x", "Placeholder"), body=[("dense", "_FusedMatMul", ["BiasAdd", "Sigmoid"]),
                                        ("dense_1", "_FusedMatMul", ["BiasAdd", "Tanh"])]), "body/dense_1"),
], ids=["tanh", "bias_add_add_relu", "relu_without_bias", "mkl_swish", "in_a_loop_body"])
def test_fusions_tfjs_cannot_run_are_refused(graph, refused):
    from noxla.errors import ExportError
    from noxla.writers.tfjs.fusions import check_fused_ops
    with pytest.raises(ExportError, match="cannot run") as info:
        check_fused_ops(graph)
    assert refused in str(info.value)


def test_fusions_tfjs_runs_pass():
    from noxla.writers.tfjs.fusions import check_fused_ops
    check_fused_ops(_graph(("a", "_FusedMatMul", ["BiasAdd"]), ("b", "_FusedConv2D", ["BiasAdd", "Relu6"]),
                           ("c", "FusedDepthwiseConv2dNative", ["BiasAdd", "LeakyRelu"]), ("d", "Tanh")))


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["Relu", "Relu6", "Elu", "LeakyRelu", "Sigmoid", "Tanh"])
def test_the_fused_activations_allowed_are_those_tfjs_runs(tmp_path, activation):
    """The allowed list against TF.js itself: a dense layer's _FusedMatMul with each activation
    (Prelu takes a second argument and is made by the converter's own fuse_prelu, not tested here),
    run on the cpu and wasm backends in Node and compared with NumPy; Tanh must fail there."""
    import jax.numpy as jnp

    from noxla import runtimes
    from noxla.pipeline.tf_path import export
    from noxla.writers.tfjs.fusions import TFJS_FUSED_ACTIVATIONS
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    path = str(tmp_path / "m")
    export(lambda x: jnp.maximum(x @ w + b, 0.0), [x], tfjs=path, demo_page=False)
    with open(os.path.join(path, "model.json")) as f:
        model = json.load(f)
    (node,) = [n for n in model["modelTopology"]["node"] if n["op"] == "_FusedMatMul"]
    assert [base64.b64decode(s).decode() for s in node["attr"]["fused_ops"]["list"]["s"]] == ["BiasAdd", "Relu"]
    node["attr"]["fused_ops"]["list"]["s"][1] = base64.b64encode(activation.encode()).decode()
    with open(os.path.join(path, "model.json"), "w") as f:
        json.dump(model, f)
    z = x @ w + b
    expected = {"Relu": np.maximum(z, 0), "Relu6": np.clip(z, 0, 6), "Elu": np.where(z > 0, z, np.expm1(z)),
                "LeakyRelu": np.where(z > 0, z, 0.2 * z), "Sigmoid": 1 / (1 + np.exp(-z))}.get(activation)
    try:
        runner = runtimes.TfjsRunner()
    except runtimes.TfjsUnavailable as e:
        pytest.skip(str(e))
    try:
        for backend in ("cpu", "wasm"):
            if activation in TFJS_FUSED_ACTIVATIONS:
                (out,) = runner.run(path, {"x": x}, backend).values()
                np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6, err_msg=backend)
            else:
                with pytest.raises(RuntimeError, match="has not been implemented|not yet supported"):
                    runner.run(path, {"x": x}, backend)
    finally:
        runner.close()


# The graph's .tflite writer (noxla.writers.tflite) folds constants in NumPy, or by running JAX's own
# primitive, which XLA compiles for this CPU's instruction set: its file must not change with it, nor
# with the kernels OpenBLAS picks for the CPU (a LayerNorm's offset folded into the projections), nor
# with the loops NumPy picks for it (its float32 exp, log, tanh, sin, cos differ in the last bit
# between its AVX2 and baseline loops: noxla.graph.elementwise folds them in long double).
_DIRECT_CHILD = """
import hashlib, sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, {root!r})
from noxla.writers.tflite import graph_tflite_chunks as tflite_chunks
from noxla.front.tracing import trace
from tests.small_cnn import CNN_INPUT, small_cnn
c = np.linspace(-3, 3, 10, dtype=np.float32)
def f(x):  # exp, tanh and erf of constants: folded by XLA, not NumPy
    return small_cnn(x) * jnp.exp(c[:5]).sum() + jnp.tanh(c[:5]) + jax.scipy.special.erf(c[5:])
def g(x):  # the same of an iota inside the program: folded by noxla's graph, in NumPy
    t = jnp.arange(4096, dtype=jnp.float32) * 0.003 - 6
    p = t * t + 0.5
    return (x + jnp.exp(t) + jnp.log(p) + jnp.tanh(t) + jnp.sin(t) + jnp.cos(t) + jax.nn.sigmoid(t)
            + jnp.arctan2(t, 2.0) + p ** t + jnp.expm1(t) + jnp.log1p(p) + jnp.sinh(t) + jnp.arctan(t))
sys.path.insert(0, {root!r} + "/tools")
import real_models
config = dict(real_models.TINY["whisper_tiny_encoder"], width=64, heads=4, hidden=128)
weights, apply, example = real_models.whisper_tiny_encoder(config, np.random.default_rng(0))
for fun, args in ((f, (CNN_INPUT,)), (lambda mel: apply(weights, mel), tuple(example)),
                  (g, (np.zeros(4096, np.float32),))):
    chunks = tflite_chunks(trace(fun, args))
    print(hashlib.sha256(b"".join(bytes(k() if callable(k) else k) for k in chunks)).hexdigest())
"""


@pytest.mark.slow
def test_the_graph_tflite_writers_file_is_the_same_whatever_instruction_set_xla_and_openblas_use():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digests = set()
    numpy_core = getattr(np, "_core", None) or np.core
    found = [f for f in numpy_core._multiarray_umath.__cpu_dispatch__
             if numpy_core._multiarray_umath.__cpu_features__.get(f)]   # NumPy's loops this CPU runs
    # None: this CPU's own; OpenBLAS's Sandybridge kernels use AVX without FMA
    for isa, blas, numpy_off in (("SSE4_2", "Sandybridge", found),
                                 ("AVX2", "Haswell", [f for f in found if "512" in f or f == "X86_V4"]),
                                 (None, None, [])):
        env = dict(os.environ, PYTHONPATH=root)
        if isa:
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_cpu_max_isa={isa}".strip()
            env["OPENBLAS_CORETYPE"] = blas
        if numpy_off:
            env["NPY_DISABLE_CPU_FEATURES"] = ",".join(numpy_off)
        proc = subprocess.run([sys.executable, "-c", _DIRECT_CHILD.format(root=root)], capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        digests.add(tuple(proc.stdout.strip().splitlines()[-3:]))
    assert len(digests) == 1, digests
