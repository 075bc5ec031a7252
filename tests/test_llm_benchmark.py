"""tools/llm_benchmark.py's arguments and table (fast: no export, no venv)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import llm_benchmark  # noqa: E402


def test_arguments_default_to_a_cache_per_config():
    args = llm_benchmark.parse_args(["--config", "135m", "--threads", "1,4", "--prompt", "1,5,6"])
    assert (args.cache, args.threads, args.prompt) == (256, [1, 4], [1, 5, 6])
    assert llm_benchmark.parse_args([]).cache == 64


def test_parameter_count_of_smollm_135m_shapes():
    # SmolLM-135M's published size: 134.5M parameters (tied embeddings).
    assert abs(llm_benchmark.parameter_count(llm_benchmark.configs()["135m"]) - 134.5e6) < 0.1e6


def test_agreement_counts_leading_equal_tokens():
    assert llm_benchmark.agreement([1, 2, 3, 4], [1, 2, 9, 4]) == "2/4"
    assert llm_benchmark.agreement([1, 2], [1, 2, 3]) == "2/3"
    assert llm_benchmark.agreement(None, [1]) == "—"


def test_table_holds_the_command_ratios_and_failures():
    config = llm_benchmark.configs()["tiny"]
    import dataclasses
    result = {"name": "tiny", "config": dataclasses.asdict(config), "params": 1e6, "cache": 64, "prefill": 16,
              "prompt": [1, 2], "max_new": 4, "load": 3.0,
              "exports": {"noxla": {"wall_s": 10.0, "peak_mb": 500.0, "size_mb": 2.0},
                          "litert-torch": {"wall_s": 40.0, "peak_mb": 2000.0, "size_mb": 4.0}},
              "latency": {1: {("prefill", "noxla"): 2.0, ("prefill", "litert-torch"): 4.0, ("prefill", "ratio"): 0.5,
                              ("decode", "noxla"): 1.0, ("decode", "litert-torch"): 1.25, ("decode", "ratio"): 0.8}},
              "tokens": {"jax": [5, 6, 7], "noxla": [5, 6, 7], "litert-torch": [5, 9, 7]}}
    table = llm_benchmark.report(result, "python3 tools/llm_benchmark.py --config tiny")
    assert "Command: `python3 tools/llm_benchmark.py --config tiny`" in table
    assert "| export time, fresh process (s) | 10 | 40 | 0.250 |" in table
    assert "| peak memory (MB) | 500 | 2e+03 | 0.250 |" in table
    # prefill throughput: 16 tokens in 2 ms; its ratio is the inverse of the latency ratio.
    assert "| LiteRT prefill_16, 1 thread(s): tokens/s | 8e+03 | 4e+03 | 2.000 |" in table
    assert "| LiteRT decode, 1 thread(s): ms/token | 1 | 1.25 | 0.800 |" in table
    assert "| greedy tokens = JAX's (leading) | 3/3 | 1/3 | each other: 1/3 |" in table
    result["exports"]["litert-torch"]["failure"] = "boom"
    table = llm_benchmark.report(result, "python3 tools/llm_benchmark.py --config tiny")
    assert "| export time, fresh process (s) | 10 | — | — |" in table
    assert "litert-torch failed:" in table and "boom" in table


def test_quantize_modes_are_checked_and_tabled_beside_litert_torch():
    import pytest
    assert llm_benchmark.parse_args(["--quantize", "int8,int4"]).quantize == ["int8", "int4"]
    with pytest.raises(SystemExit):
        llm_benchmark.parse_args(["--quantize", "int3"])
    import dataclasses
    names = ["noxla", "litert-torch", "noxla int4", "litert-torch int4"]
    result = {"name": "tiny", "config": dataclasses.asdict(llm_benchmark.configs()["tiny"]), "params": 1e6,
              "cache": 64, "prefill": 16, "prompt": [1, 2], "max_new": 4, "load": 3.0, "threads": [1],
              "modes": ["float32", "int4"], "prompts": [[1, 2], [1, 7]],
              "exports": {"noxla": {"wall_s": 10.0, "peak_mb": 500.0, "size_mb": 2.0},
                          "litert-torch": {"wall_s": 40.0, "peak_mb": 2000.0, "size_mb": 2.0},
                          "noxla int4": {"wall_s": 12.0, "peak_mb": 600.0, "size_mb": 0.5},
                          "litert-torch int4": {"failure": "boom", "wall_s": 1.0}},
              "bound": {n: {"weight_bytes": 4e6 if "int4" not in n else 1e6, "cache_bytes": 1e5, "op_count": 9}
                        for n in names},
              "bandwidth": {"read": 2.0, "copy": 4.0, "samples": 2},
              "agreement": {"noxla": {"leading": 8, "forced": 8, "steps": 8},
                            "noxla int4": {"leading": 3, "forced": 6, "steps": 8}},
              "engine": {1: {"noxla": {"decode_ms_per_token": 4.0, "prefill_ms": 1.0},
                             "litert-torch": {"decode_ms_per_token": 5.0, "prefill_ms": 2.0},
                             "noxla int4": {"decode_ms_per_token": 1.0, "prefill_ms": 0.5},
                             "pair_ratios": {"noxla / litert-torch": 0.75},
                             "pair_quartiles": {"noxla / litert-torch": [0.7, 0.8]}}},
              "tokens": {"jax": [5, 6, 7, 8], "noxla": [5, 6, 7, 8], "noxla int4": [5, 6, 9, 8]}}
    table = llm_benchmark.report(result, "python3 tools/llm_benchmark.py --quantize int4")
    assert ("| recipe | — | none | — | dynamic_wi4c_afp32 | dynamic_wi4_afp32 | — |") in table
    # A failed export has no time, and no ratio.
    assert "| export time, fresh process (s) | 10 | 40 | 0.250 | 12 | — | — |" in table
    # The engine's ratio is the median of per-round ratios, not the ratio of the medians (0.8).
    assert "| LiteRT-LM decode, 1 thread(s): ms/token | 4 | 5 | 0.750 | 1 | — | — |" in table
    assert "| per-round decode ratios: quartiles | | | 0.700 to 0.800 | | | — |" in table
    # 2 prompt tokens in 1 ms; the bound: 4 MB at 2 GB/s is 2 ms, and 4 ms measured is twice that.
    assert "| LiteRT-LM prefill (2 tokens), 1 thread(s): tokens/s | 2e+03 | 1e+03 | 2.000 | 4e+03 | — | — |" in table
    assert "| bandwidth bound: weights read / bandwidth (ms/token) | 2 | 2 | 1.000 | 0.5 | 0.5 | 1.000 |" in table
    assert "| LiteRT-LM decode / bound | 2 | 2.5 | 0.800 | 2 | — | — |" in table
    assert "| teacher-forced top-1 = JAX's over 2 prompts | 8/8 | — | — | 6/8 | — | — |" in table
    assert "2 GB/s read" in table


def test_engine_ratio_is_the_median_of_per_round_ratios_with_quartiles():
    # Per token: noxla made 4 tokens, litert-torch 2 (texts may differ in length).
    reply = {"noxla": {"decode_s": [0.4, 0.8, 0.4, 0.4, 1.2], "tokens": 4},
             "litert-torch": {"decode_s": [0.2, 0.2, 0.25, 0.2, 0.2], "tokens": 2}}
    ratios = llm_benchmark.round_ratios(reply, "noxla", "litert-torch")
    assert [round(x, 6) for x in ratios] == [1.0, 2.0, 0.8, 1.0, 3.0]
    assert llm_benchmark.decode_ratio(reply, "noxla", "litert-torch") == 1.0
    assert llm_benchmark.parse_args(["--engine-rounds", "7"]).engine_rounds == 7
    import dataclasses
    result = {"name": "tiny", "config": dataclasses.asdict(llm_benchmark.configs()["tiny"]), "params": 1e6,
              "cache": 64, "prefill": 16, "prompt": [1, 2], "max_new": 4, "load": 1.0,
              "exports": {}, "tokens": {},
              "engine": {4: {"noxla": {"prefill_ms": 3.0, "decode_ms_per_token": 1.5, "decode_s": [0.1] * 5},
                             "litert-torch": {"prefill_ms": 3.0, "decode_ms_per_token": 2.0, "decode_s": [0.1] * 5},
                             "decode_ratio": 0.75, "decode_ratio_quartiles": [0.7, 0.8]}}}
    table = llm_benchmark.report(result, "cmd")
    assert "| LiteRT-LM engine decode, 4 thread(s): ms/token | 1.5 | 2 | 0.750 |" in table
    assert "| per-round decode ratios, 4 thread(s): quartiles over 5 rounds | | | 0.700 to 0.800 |" in table


def test_export_only_tables_the_exports_alone_with_each_child_s_own_peak():
    """--export-only: export time, CPU time, peak memory and size per quantization, and no rows of
    latencies or agreement that the run did not measure."""
    import dataclasses
    assert llm_benchmark.parse_args(["--export-only"]).export_only
    exports = {n: {"wall_s": 10.0, "cpu_s": 5.0, "peak_mb": 500.0, "size_mb": 2.0}
               for n in ("noxla", "litert-torch", "noxla int8", "litert-torch int8")}
    exports["litert-torch int8"] = {**exports["litert-torch int8"], "peak_mb": 2000.0, "reused": True}
    result = {"name": "tiny", "config": dataclasses.asdict(llm_benchmark.configs()["tiny"]), "params": 1e6,
              "cache": 64, "prefill": 16, "prompt": [1, 2], "max_new": 4, "load": 3.0, "threads": [1],
              "modes": ["float32", "int8"], "prompts": [[1, 2]], "exports": exports, "tokens": {"torch": None},
              "export_only": True}
    table = llm_benchmark.report(result, "python3 tools/llm_benchmark.py --export-only --quantize int8")
    assert "| peak memory (MB) | 500 | 500 | 1.000 | 500 | 2e+03 | 0.250 |" in table
    assert "| export CPU time, user + system (s) | 5 | 5 | 1.000 | 5 | 5 | 1.000 |" in table
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| ")]
    assert not [r for r in rows if any(w in r for w in ("decode", "greedy", "teacher-forced", "prefill"))], rows
    assert "VmHWM" in table and "getrusage" not in table
    assert "when they were made: litert-torch int8." in table
