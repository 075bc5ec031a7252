"""Run exported artifacts on sample inputs and measure them against JAX."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import jax
import numpy as np


def as_real(x) -> np.ndarray:
    """A complex array as its (real, imaginary) parts on a new last axis; a real one as float64."""
    x = np.asarray(x)
    if np.iscomplexobj(x):
        return np.stack([x.real, x.imag], axis=-1).astype(np.float64)
    return x.astype(np.float64)


def relative_error(expected: np.ndarray, actual: np.ndarray) -> float:
    """Max |actual - expected| over finite entries, relative to the output's scale (at least 1)."""
    e, a = as_real(expected), as_real(actual)
    finite = np.isfinite(e)
    if not finite.any():
        return 0.0
    scale = max(1.0, float(np.max(np.abs(e[finite]))))
    return float(np.max(np.abs(a[finite] - e[finite]))) / scale


def jax_outputs(fun: Callable, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fun)(*args))]


def verify_artifacts(fun: Callable, program, args: Sequence[np.ndarray], written: Mapping[str, str]) -> dict:
    """For each runtime that can run what was written: the worst output error against JAX (or why not
    run). Only the files written are run: a .tflite or TF.js export imports no TensorFlow to verify."""
    from noxla import runtimes

    expected = jax_outputs(fun, args)
    named = dict(zip(program.in_names, args))
    results: dict[str, Sequence[np.ndarray] | str] = {}
    if "saved_model" in written:
        import tensorflow as tf
        serve = tf.saved_model.load(written["saved_model"]).signatures["serving_default"]
        outs = serve(**{k: tf.constant(v) for k, v in named.items()})
        results["tf (SavedModel)"] = [outs[n].numpy() for n in program.out_names]
    if "tflite" in written:
        outs = runtimes.run_tflite(written["tflite"], named)
        results["tflite"] = [outs[n] for n in program.out_names]
    if "tfjs" in written:
        try:
            runner = runtimes.TfjsRunner()
        except runtimes.TfjsUnavailable as e:
            results["tfjs"] = f"not run: {e}"
        else:
            for backend in ("cpu", "wasm"):
                outs = runner.run(written["tfjs"], named, backend)
                results[f"tfjs ({backend})"] = [outs[n] for n in program.out_names]
            runner.close()
    return {runtime: outs if isinstance(outs, str) else
            max((relative_error(e, a) for e, a in zip(expected, outs)), default=0.0)
            for runtime, outs in results.items()}
