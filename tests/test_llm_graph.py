"""tools/llm_graph.py's census: the weight bytes a decode signature reads per call, counted from the
file (the bandwidth bound of tools/llm_benchmark.py rests on it)."""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import llm_graph  # noqa: E402


def test_census_counts_each_weight_once_and_a_lookup_as_its_rows(tmp_path):
    import jax.numpy as jnp

    from noxla.pipeline.tf_path import export_signatures
    rng = np.random.default_rng(0)
    table = rng.standard_normal((64, 16)).astype(np.float32)  # 4 kB
    up = rng.standard_normal((16, 32)).astype(np.float32)  # 2 kB, read by two projections
    down = rng.standard_normal((32, 16)).astype(np.float32)  # 2 kB

    def decode(tokens, kv_cache_k_0):
        x = jnp.take(table, tokens[0], axis=0)  # one row of 16 floats: 64 bytes
        h = x @ up + jnp.tanh(x) @ up
        # the table again as the logits' weight (tied): read whole
        return {"logits": (h @ down) @ table.T, "kv_cache_k_0": kv_cache_k_0 + 1}
    example = (np.zeros((1, 1), np.int32), np.zeros((1, 2, 8, 4), np.float32))
    path = export_signatures({"decode": (decode, example)}, tflite=str(tmp_path / "m.tflite"))["tflite"]
    census = llm_graph.census(path)
    assert census["lookup_bytes"] == 16 * 4
    assert census["weight_bytes"] == 16 * 4 + up.nbytes + down.nbytes + table.nbytes
    assert census["cache_bytes"] == 2 * 8 * 4 * 4
    assert census["ops"]["FULLY_CONNECTED"] + census["ops"].get("BATCH_MATMUL", 0) >= 3
