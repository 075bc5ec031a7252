"""Prove the TF.js half-float rounding (noxla/writers/tfjs/half_floats.py) on every float32 bit pattern.

The graph the TF.js writer emits for ``x.astype(bfloat16 or float16).astype(float32)`` (the
rewrite itself, not a copy of its formula) runs on all 2^32 patterns against ml_dtypes' round to
nearest even: the normal floats, infinities and NaNs in TensorFlow on the CPU, whose float32
kernels round as IEEE 754 does but flush subnormals (its executor sets flush-to-zero); the 2^24
subnormal patterns in the TF.js model itself, on TF.js's cpu and wasm backends in Node
(tests/test_tfjs_half_floats.py runs a dense set of every kind there in the suite).

    python3 tools/half_float_rounding.py [bfloat16|float16 ...] [--chunk-bits 24]

Prints, per dtype, the patterns that differ (at most 5 shown) and their count; exit status 1 if any.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's noxla

DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def rounding_function(dtype_name: str):
    """A callable running the rewritten graph of ``x.astype(dtype).astype(float32)`` on a float32 array."""
    import tensorflow as tf

    from noxla.writers.tfjs.half_floats import carry_half_floats_in_float32

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def original(x):
        return tf.cast(tf.cast(x, getattr(tf, dtype_name)), tf.float32)

    graph_def = original.get_concrete_function().graph.as_graph_def()
    assert carry_half_floats_in_float32(graph_def)
    output = [n.name for n in graph_def.node if n.op == "Identity"][-1]
    placeholder = [n.name for n in graph_def.node if n.op == "Placeholder"][0]
    run = tf.compat.v1.wrap_function(
        lambda x: tf.graph_util.import_graph_def(graph_def, {placeholder: x}, [output + ":0"])[0],
        [tf.TensorSpec([None], tf.float32)])
    return lambda x: run(tf.constant(x)).numpy()


SUBNORMAL_CHUNK = 1 << 21  # the TF.js model's input size: 2^24 subnormal patterns in 8 runs per backend


def tfjs_rounding_functions(dtype_name: str, scratch: str):
    """Callables running the TF.js model of the same program on ``SUBNORMAL_CHUNK`` floats, per backend."""
    import jax.numpy as jnp

    import noxla
    from noxla.runtimes import TfjsRunner
    path = f"{scratch}/{dtype_name}"
    fun = lambda v: v.astype(getattr(jnp, dtype_name)).astype(jnp.float32)  # noqa: E731
    noxla.export_tfjs(fun, np.zeros(SUBNORMAL_CHUNK, np.float32), path=path)
    runner = TfjsRunner()
    return runner, {backend: (lambda x, b=backend: next(iter(runner.run(path, {"v": x}, b).values())))
                    for backend in ("cpu", "wasm")}


def _differ(dtype_name: str, bits: np.ndarray, got: np.ndarray, where: str, shown: list) -> int:
    x = bits.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(DTYPES[dtype_name]).astype(np.float32)
    nan = np.isnan(expected)
    wrong = (np.isnan(got) != nan) | (~nan & (got.view(np.uint32) != expected.view(np.uint32)))
    for i in np.flatnonzero(wrong)[:max(0, 5 - len(shown))]:
        print(f"  {dtype_name} ({where}): 0x{int(bits[i]):08x} -> {got[i]!r}, ml_dtypes {expected[i]!r}")
        shown.append(i)
    return int(wrong.sum())


def check(dtype_name: str, chunk_bits: int) -> int:
    import tempfile
    rounded = rounding_function(dtype_name)
    step, bad, shown, start_time = 1 << chunk_bits, 0, [], time.time()
    for start in range(0, 1 << 32, step):
        bits = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32)
        normal = (bits & 0x7F800000) != 0  # TF flushes the subnormals: run on TF.js below
        bad += _differ(dtype_name, bits[normal], rounded(bits[normal].view(np.float32)), "TF", shown)
    with tempfile.TemporaryDirectory() as scratch:
        runner, backends = tfjs_rounding_functions(dtype_name, scratch)
        try:
            subnormal = np.arange(1 << 23, dtype=np.uint32)
            subnormal = np.concatenate([subnormal, subnormal | np.uint32(1 << 31)])
            for backend, run in backends.items():
                for start in range(0, subnormal.size, SUBNORMAL_CHUNK):
                    bits = subnormal[start:start + SUBNORMAL_CHUNK]
                    bad += _differ(dtype_name, bits, run(bits.view(np.float32)), f"TF.js {backend}", shown)
        finally:
            runner.close()
    print(f"{dtype_name}: {1 << 32} float32 patterns (the 2^24 subnormal ones on TF.js cpu and wasm), {bad} differ "
          f"({time.time() - start_time:.0f} s)", flush=True)
    return bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dtypes", nargs="*", default=sorted(DTYPES))
    parser.add_argument("--chunk-bits", type=int, default=24)
    args = parser.parse_args(argv)
    return 1 if sum(check(name, args.chunk_bits) for name in args.dtypes) else 0


if __name__ == "__main__":
    sys.exit(main())
