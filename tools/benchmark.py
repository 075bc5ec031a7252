"""Side-by-side benchmark of noxla's exports against JAX's own jax2tf path, in one run.

    python tools/benchmark.py [--repeats 200] [MODEL ...]

For each zoo model (batch 1): the .tflite from noxla and from jax2tf's native serialization
(one XlaCallModule op, legalized by the TFLite converter when it can be), their op counts,
sizes and LiteRT latency (median of --repeats invokes, one thread), JAX's own jit latency on
the CPU, and noxla's TF.js latency on the cpu and wasm backends in Node. Ratios are
jax2tf / noxla for size and latency, and JAX / noxla-LiteRT for latency.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def litert_latency_ms(model: bytes, inputs: list, repeats: int) -> float:
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_content=model, num_threads=1)
    interpreter.allocate_tensors()
    for detail, value in zip(sorted(interpreter.get_input_details(), key=lambda d: d["index"]), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        interpreter.invoke()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def jax2tf_tflite(fun, example) -> bytes | str:
    import jax
    import tensorflow as tf
    from jax.experimental import jax2tf
    # JAX 0.10 serializes at calling-convention version 10, which TF 2.19's XlaCallModule cannot
    # read; 9 is the newest it accepts.
    jax.config.update("jax_export_calling_convention_version", 9)
    try:
        specs = [tf.TensorSpec(a.shape, tf.as_dtype(a.dtype)) for a in example]
        concrete = tf.function(jax2tf.convert(fun), input_signature=specs, autograph=False).get_concrete_function()
        converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        return converter.convert()
    except Exception as e:  # report, don't stop: a failure here is a finding
        return f"not convertible ({type(e).__name__})"


def jax_latency_ms(fun, example, repeats: int) -> float:
    import jax
    jitted = jax.jit(fun)
    jax.block_until_ready(jitted(*example))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(jitted(*example))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()

    import noxla
    from noxla.export import serving_function, tflite_bytes
    from noxla.runtimes import TfjsRunner, tflite_op_names
    from noxla.tracing import trace
    from tests import zoo

    models = zoo.build()
    runner = TfjsRunner()
    header = ["model", "noxla ops", "jax2tf ops", "noxla KiB", "jax2tf KiB", "size ratio",
              "noxla LiteRT ms", "jax2tf LiteRT ms", "latency ratio", "JAX jit ms", "JAX / noxla LiteRT",
              "tfjs cpu ms", "tfjs wasm ms"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in args.models or sorted(models):
        model = models[name]
        example = model.inputs(1)
        program = trace(model.fun, example)
        ours = tflite_bytes(serving_function(program))
        theirs = jax2tf_tflite(model.fun, example)
        our_ms = litert_latency_ms(ours, example, args.repeats)
        row = [name, str(len(tflite_op_names(ours)))]
        if isinstance(theirs, bytes):
            their_ms = litert_latency_ms(theirs, example, args.repeats)
            row += [str(len(tflite_op_names(theirs))), f"{len(ours) / 1024:.1f}", f"{len(theirs) / 1024:.1f}",
                    f"{len(theirs) / len(ours):.2f}", f"{our_ms:.3f}", f"{their_ms:.3f}", f"{their_ms / our_ms:.2f}"]
        else:
            row += [theirs, f"{len(ours) / 1024:.1f}", "-", "-", f"{our_ms:.3f}", "-", "-"]
        jax_ms = jax_latency_ms(model.fun, example, args.repeats)
        row += [f"{jax_ms:.3f}", f"{jax_ms / our_ms:.2f}"]
        with tempfile.TemporaryDirectory() as out:
            js = noxla.export_tfjs(model.fun, *example, path=os.path.join(out, "js"))
            named = dict(zip(program.in_names, example))
            for backend in ("cpu", "wasm"):
                runner.run(js, named, backend)  # warm-up: kernel compilation, weight upload
                start = time.perf_counter()
                repeats = max(1, args.repeats // 10)
                for _ in range(repeats):
                    runner.run(js, named, backend)
                row.append(f"{(time.perf_counter() - start) / repeats * 1e3:.2f}")
        print("| " + " | ".join(row) + " |", flush=True)
    runner.close()
    print("\nTF.js times include the Node round trip (JSON over a pipe), so they bound the model's cost from above.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
