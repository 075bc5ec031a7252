"""Export one zoo model through an anchor path, inside that anchor's own venv (run by benchmark.py).

    <venv>/bin/python tools/bench_anchor.py {native,old,litert} MODEL WORK_DIR

- native: jax2tf's native serialization (one XlaCallModule) + TFLiteConverter, builtins only:
  the official JAX -> TFLite path today.
- old: jax2tf.convert(enable_xla=False) (JAX 0.4.30, TF 2.17) + TFLiteConverter, builtins only; also
  writes a SavedModel that the main environment converts to TF.js.
- litert: jax.export -> StableHLO -> litert-converter (LiteRT's own converter, no TensorFlow).

The model is the zoo's Flax module, or a tools/real_models.py model (plain JAX, or keras.applications
on Keras's JAX backend), rebuilt here from its class and the weights benchmark.py wrote to
WORK_DIR/MODEL.npz, so every anchor runs the very same model as noxla. This file runs under old
JAX/Flax/TF releases: it uses only APIs that exist from JAX 0.4.30 / Flax 0.8.5 / TF 2.17 on.
Writes WORK_DIR/<mode>/MODEL.tflite and WORK_DIR/<mode>/MODEL.json (timings, JAX error, failure,
``first_s`` / ``first_cpu_s``: the process's wall / CPU time from its start through the first export,
imports and building the model included, as a user's first export costs, ``build_cpu_s`` the part that
built the model; ``peak_mb``: the process's peak resident memory, ``first_peak_mb`` up to then).
"""
from __future__ import annotations

import time

PROCESS_START = time.perf_counter()

import json  # noqa: E402  (after the clock starts: the first export's time includes every import)
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def peak_mb() -> float:
    """This process's peak resident memory (Linux VmHWM). Not getrusage's ru_maxrss, which a child
    started by a bigger process reports as the parent's peak until it outgrows it."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kib / 1024


def unflatten(flat: dict) -> dict:
    """'a/b/c' keys back to the nested dict Flax linen variables are."""
    tree: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split("/")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def nnx_path_key(path) -> str:
    """A key-path of an nnx State leaf, spelled the same across Flax versions (no '.value' parts)."""
    parts = []
    for k in path:
        name = getattr(k, "key", getattr(k, "name", getattr(k, "idx", None)))
        if name not in ("value", "raw_value", None):
            parts.append(str(name))
    return "/".join(parts)


def build_function(spec: dict, weights: dict):
    import jax
    if spec["kind"] in ("real", "keras"):
        import real_models
        return real_models.rebuild(spec, weights)

    from tests import zoo
    cls = getattr(zoo, spec["class"])
    if spec["kind"] == "linen":
        module = cls(**spec.get("fields", {}))
        variables = unflatten(weights)
        return lambda *xs: module.apply(variables, *xs)
    from flax import nnx
    graphdef, state = nnx.split(cls(nnx.Rngs(0)))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
    values = [weights[nnx_path_key(path)] for path, _ in leaves]
    state = jax.tree_util.tree_unflatten(treedef, values)
    return lambda *xs: nnx.merge(graphdef, state)(*xs)


def litert_convert(fun, example: list) -> bytes:
    """jax.export's StableHLO through litert-converter (its API: /work/shared/reference/README.md)."""
    import jax
    from litert_converter import converter_api_ext as converter
    from litert_converter.mlir import ir, passmanager
    from litert_converter.mlir.dialects import stablehlo
    exported = jax.export.export(jax.jit(fun))(*[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in example])
    context = ir.Context()
    converter.prepare_mlir_context(context)
    with context:
        module = stablehlo.deserialize_portable_artifact(context, exported.mlir_module_serialized)
        outputs = len(exported.out_avals)
        converter.set_signature(module.operation, signature_name="serving_default",
                                input_names=[f"input_{i}" for i in range(len(example))],
                                output_names=[f"output_{i:03d}" for i in range(outputs)])
        config = converter.ConvertToTFLConfig()
        config.model_origin_framework = "JAX"
        converter.run_convert_to_tfl_passes(module, passmanager.PassManager(), config)
        return converter.export_flatbuffer_to_bytes(module.operation)


def to_tflite(mode: str, fun, example: list):
    """The .tflite bytes and the tf.function they came from (None for litert)."""
    if mode == "litert":
        return litert_convert(fun, example), None
    import tensorflow as tf
    from jax.experimental import jax2tf
    converted = jax2tf.convert(fun, enable_xla=False) if mode == "old" else jax2tf.convert(fun)
    specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in example]
    function = tf.function(converted, input_signature=specs, autograph=False)
    concrete = function.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert(), function


def main() -> int:
    mode, name, work = sys.argv[1:4]
    import numpy as np
    out_dir = os.path.join(work, mode)
    os.makedirs(out_dir, exist_ok=True)
    result: dict = {"model": name, "mode": mode}
    try:
        import jax
        with open(os.path.join(work, name + ".json")) as f:
            spec = json.load(f)
        build_start = time.perf_counter()   # loading the weights is part of having the model
        data = np.load(os.path.join(work, name + ".npz"))
        weights = {k[len("w:"):]: data[k] for k in data.files if k.startswith("w:")}
        example = [data[f"x:{i}"] for i in range(spec["inputs"])]
        expected = [data[f"y:{i}"] for i in range(spec["outputs"])]
        build_cpu = time.process_time()
        fun = build_function(spec, weights)
        result["build_cpu_s"] = time.process_time() - build_cpu  # the model's own cost, the same in every venv
        # Its wall time too: the first export less it is what the exporter costs (imports included);
        # building a Keras model costs more where more packages are installed for Keras to import.
        result["build_s"] = time.perf_counter() - build_start
        result["versions"] = {"jax": jax.__version__}
        if mode != "litert":  # the converter's import is then part of the first export, as for noxla
            import tensorflow as tf
            result["versions"]["tensorflow"] = tf.__version__
        start = time.perf_counter()
        to_tflite(mode, fun, example)
        result["cold_s"] = time.perf_counter() - start
        result["first_s"] = time.perf_counter() - PROCESS_START
        result["first_cpu_s"], result["first_peak_mb"] = time.process_time(), peak_mb()  # all threads, so far
        start = time.perf_counter()
        model, function = to_tflite(mode, fun, example)
        result["warm_s"] = time.perf_counter() - start
        with open(os.path.join(out_dir, name + ".tflite"), "wb") as f:
            f.write(model)
        # The rebuilt model must compute what noxla's does, or the comparison means nothing (checked
        # after the exports, which a JAX run before them would warm up).
        got = jax.tree_util.tree_leaves(jax.jit(fun)(*example))
        result["jax_error"] = max(float(np.max(np.abs(np.asarray(g) - e))) for g, e in zip(got, expected))
        if mode == "old":  # the main environment's tensorflowjs converts it (TF 2.17 has none here)
            import tensorflow as tf
            module = tf.Module()
            module.f = function
            sm = os.path.join(out_dir, name + "_sm")
            tf.saved_model.save(module, sm, signatures=function.get_concrete_function())
            result["saved_model"] = sm
    except Exception as e:  # a failing anchor is a finding, reported in the table
        result["failure"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        result["traceback"] = traceback.format_exc()[-2000:]
    result["peak_mb"] = peak_mb()
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
