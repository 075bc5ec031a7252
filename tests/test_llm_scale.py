"""tools/llm_scale.py end to end at gemma3_tiny, Gemma 3 1B's structure at a tiny size (the 1B run
takes minutes and 7-8 GB: its numbers are in tools/benchmark_results/llm_scale.md)."""
from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))


@pytest.mark.slow
def test_tiny_gemma3_exports_int4_with_its_peak_memory_and_litertlm_generates(tmp_path):
    pytest.importorskip("keras_hub", reason="keras-hub is in the test extra")
    pytest.importorskip("litert_lm", reason="LiteRT-LM's engine is in the llm extra")
    import llm_scale
    out = tmp_path / "result.json"
    assert llm_scale.main(["--shapes", "gemma3_tiny", "--cache-length", "64", "--prefill", "8", "--max-new", "8",
                           "--rounds", "1", "--work", str(tmp_path), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    export, engine = result["export"], result["engine"]
    assert export["params"] == 65040 and export["exit"] == 0
    # The peak of the export's own process, and the steps it timed (the quantization among them).
    assert export["peak_mb"] > export["peak_mb_after_build"] > 100
    assert "rewrite" in [step[0] for step in export["steps"]]
    assert engine["exit"] == 0 and engine["tokens"] >= 1 and engine["decode_ms_per_token"] > 0, engine
