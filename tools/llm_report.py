"""The tables of tools/llm_benchmark.py: the float comparison with litert-torch and, with
``--quantize``, each quantization side by side (noxla's bundle and litert-torch's of the same
weights), with the memory-bandwidth bound of the decode step."""
from __future__ import annotations

import json

RMS_NORM_EPS = 1e-6  # tests/tiny_llama.py's rms_norm; the HF config is given the same
SEED = 2  # of the random weights
# litert-torch 0.10's export_hf takes any ai_edge_quantizer.recipe name as quantization_recipe; its
# default is dynamic_wi8_afp32. Its int4 is dynamic_wi4_afp32, which that recipe module defines as
# dynamic_wi4c_afp32: one scale per output channel (not blockwise).
ANCHOR_RECIPES = {"float32": "none", "int8": "dynamic_wi8_afp32", "int4": "dynamic_wi4_afp32"}


def export_name(exporter: str, mode: str) -> str:
    """The name of one export in the run's records: "noxla", "litert-torch int4", ..."""
    return exporter if mode == "float32" else f"{exporter} {mode}"


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def agreement(a: list | None, b: list | None) -> str:
    """How many leading greedy tokens agree, of how many."""
    if a is None or b is None:
        return "—"
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"{same}/{max(len(a), len(b))}"


def report(r: dict, command: str) -> str:
    names = ["noxla", "litert-torch"]
    c = r["config"]
    lines = [f"# noxla.llm vs litert-torch export_hf: `{r['name']}`", "", f"Command: `{command}`", "",
             f"noxla at {r.get('commit', 'an unrecorded commit')}.", "",
             f"Shapes: vocab {c['vocab']}, hidden {c['hidden']}, {c['layers']} layers, {c['heads']} heads, "
             f"{c['kv_heads']} KV heads, head_dim {c['head_dim']}, intermediate {c['ffn']}, tied embeddings, "
             f"RoPE theta {c['rope_theta']:g}, RMSNorm eps {RMS_NORM_EPS:g}; {r['params'] / 1e6:.3g}M parameters, "
             f"random weights (seed {SEED}), float32. Cache {r['cache']}, prefill_{r['prefill']}, prompt "
             f"{r['prompt']}, {r['max_new']} greedy tokens. Load average at start {r['load']:.1f} (2 cores, "
             f"shared): compare the ratios (median of per-round ratios, the two exports alternating), "
             f"not the absolute latencies.", ""]
    lines += ["| | " + " | ".join(names) + " | noxla / litert-torch |", "| --- | --- | --- | --- |"]

    def row(label, values, ratio=None, digits=3):
        # Ratios to three decimals: three significant digits showed 1.004 and 0.9996 both as "1".
        shown = "—" if ratio is None else f"{ratio:.3f}"
        lines.append(f"| {label} | " + " | ".join(fmt(v, digits) for v in values) + f" | {shown} |")

    def div(a, b):
        return a / b if a is not None and b else None
    ex = r["exports"]
    for label, key in (("export time, fresh process (s)", "wall_s"), ("export CPU time, user + system (s)", "cpu_s"),
                       ("peak memory (MB)", "peak_mb")):
        # A failed export's time is not an export time.
        values = [None if "failure" in ex.get(n, {}) else ex.get(n, {}).get(key) for n in names]
        row(label, values, div(*values))
    sizes = [ex.get(n, {}).get("size_mb") for n in names]
    row(".tflite size (MB)", sizes, div(*sizes))
    for threads, lat in sorted(r.get("latency", {}).items()):
        prefill = [r["prefill"] / lat[("prefill", n)] * 1e3 if ("prefill", n) in lat else None for n in names]
        row(f"LiteRT prefill_{r['prefill']}, {threads} thread(s): tokens/s", prefill,
            1 / lat[("prefill", "ratio")] if ("prefill", "ratio") in lat else None)
        row(f"LiteRT decode, {threads} thread(s): ms/token", [lat.get(("decode", n)) for n in names],
            lat.get(("decode", "ratio")))
    for threads, eng in sorted(r.get("engine", {}).items()):
        if "failure" in eng:
            lines.append(f"| LiteRT-LM engine, {threads} thread(s) | failed: {eng['failure'][-200:]!r} | | |")
            continue
        row(f"LiteRT-LM engine prefill, {threads} thread(s): ms", [eng.get(n, {}).get("prefill_ms") for n in names])
        row(f"LiteRT-LM engine decode, {threads} thread(s): ms/token",
            [eng.get(n, {}).get("decode_ms_per_token") for n in names], eng.get("decode_ratio"))
        if eng.get("decode_ratio_quartiles"):
            low, high = eng["decode_ratio_quartiles"]
            lines.append(f"| per-round decode ratios, {threads} thread(s): quartiles over "
                         f"{len(eng['noxla']['decode_s'])} rounds | | | {low:.3f} to {high:.3f} |")
    tokens = r["tokens"]
    if r.get("export_only"):
        tokens = {}  # nothing generated: no agreement rows
    else:
        lines.append("| greedy tokens = JAX's (leading) | "
                     + " | ".join(agreement(tokens.get(n), tokens.get("jax")) for n in names)
                     + f" | each other: {agreement(tokens.get('noxla'), tokens.get('litert-torch'))} |")
    if any(f"{n} in LiteRT-LM" in tokens for n in names):
        lines.append("| greedy tokens in LiteRT-LM's engine = JAX's (leading) | " + " | ".join(
            agreement(tokens.get(f"{n} in LiteRT-LM"), tokens.get("jax")) for n in names) + " | |")
    if tokens.get("torch") is not None:
        lines.append(f"| PyTorch (the copied weights) = JAX | | {agreement(tokens['torch'], tokens['jax'])} | |")
    lines += paired_table(r)
    for n in names:
        if "failure" in ex.get(n, {}):
            lines += ["", f"{n} failed:", "", "```", ex[n]["failure"][-1500:], "```"]
    lines += ["", "Export time: wall time of a fresh process, imports and loading the weights from disk "
              "included (noxla: an .npz; litert-torch: the safetensors checkpoint); its CPU time (the load "
              "stretches the wall time, not this). Peak memory: that process's own high-water mark of "
              "resident memory (Linux VmHWM, which it reports as it ends; not wait4's max RSS, which a child "
              "inherits from the parent that started it). LiteRT latencies: signature runners of each .tflite, the KV "
              "cache (zeros) copied in and out on every call, alike for both; 1 thread timed by the "
              "thread's CPU time, 4 threads by wall time on a 2-core machine. Tokens:",
              "", "```", json.dumps(tokens), "```", ""]
    return "\n".join(lines)


def paired_table(r: dict) -> list[str]:
    """``--quantize``: per quantization (float32 too), noxla's export beside litert-torch's of the
    same weights, the ratio noxla / litert-torch, and the decode step's memory-bandwidth bound."""
    modes = r.get("modes", [])
    if len(modes) < 2:
        return []
    from noxla.llm.quantize import QUANTIZER_MODES
    threads = r["threads"][0]
    engine, lat = r.get("engine", {}).get(threads, {}), r.get("latency", {}).get(threads, {})
    bound, bandwidth = r.get("bound", {}), r.get("bandwidth", {}).get("read")
    head = "| |" + "".join(f" noxla {m} | litert-torch {m} | noxla / litert-torch |" for m in modes)
    lines = ["", f"Each quantization side by side, LiteRT-LM's engine and LiteRT at {threads} thread(s); "
             "noxla's recipes are LiteRT's quantizer's (noxla.llm.quantize), litert-torch's those of "
             "its export_hf `quantization_recipe` (its default int8, and its int4):", "",
             head, "| --- |" + " --- | --- | --- |" * len(modes)]

    def row(label, value, ratio=None, digits=3):
        """value(name) for each export; ratio(noxla name, litert-torch name), else value's ratio."""
        cells = []
        for m in modes:
            a, b = (value(export_name(e, m)) for e in ("noxla", "litert-torch"))
            if ratio is not None:
                q = ratio(export_name("noxla", m), export_name("litert-torch", m))
            else:
                q = a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
            cells += [fmt(a, digits), fmt(b, digits), "—" if q is None else f"{q:.3f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def export(key):
        return lambda n: None if "failure" in r["exports"].get(n, {}) else r["exports"].get(n, {}).get(key)

    def text(value):
        return lambda n: value(n) or "—"

    recipes = {export_name("noxla", m): QUANTIZER_MODES[m][0] for m in modes if m in QUANTIZER_MODES}
    recipes |= {export_name("litert-torch", m): ANCHOR_RECIPES[m] for m in modes}
    row("recipe", text(recipes.get), ratio=lambda a, b: None)
    row("export time, fresh process (s)", export("wall_s"))
    row("export CPU time, user + system (s)", export("cpu_s"))
    row("peak memory (MB)", export("peak_mb"))
    row(".tflite size (MB)", export("size_mb"))
    if r.get("export_only"):
        return lines + _reused(r)
    row("decode: weights read per token (MB)", lambda n: bound.get(n, {}).get("weight_bytes", 0) / 1e6 or None)
    row("decode: ops", lambda n: bound.get(n, {}).get("op_count"))
    row(f"LiteRT-LM decode, {threads} thread(s): ms/token", lambda n: engine.get(n, {}).get("decode_ms_per_token"),
        ratio=lambda a, b: engine.get("pair_ratios", {}).get(f"{a} / {b}"))
    cells = []
    for m in modes:
        q = engine.get("pair_quartiles", {}).get(f"{export_name('noxla', m)} / {export_name('litert-torch', m)}")
        cells.append(" | | " + ("—" if not q else f"{q[0]:.3f} to {q[1]:.3f}"))
    lines.append("| per-round decode ratios: quartiles |" + " |".join(cells) + " |")
    prompt_tokens = len(r["prompt"])
    row(f"LiteRT-LM prefill ({prompt_tokens} tokens), {threads} thread(s): tokens/s",
        lambda n: prompt_tokens / engine[n]["prefill_ms"] * 1e3 if engine.get(n, {}).get("prefill_ms") else None)
    row(f"LiteRT prefill_{r['prefill']}, {threads} thread(s): tokens/s",
        lambda n: r["prefill"] / lat[("prefill", n)] * 1e3 if ("prefill", n) in lat else None,
        ratio=lambda a, b: 1 / lat[("prefill", a, b)] if ("prefill", a, b) in lat else None)
    row(f"LiteRT decode, {threads} thread(s): ms/token", lambda n: lat.get(("decode", n)),
        ratio=lambda a, b: lat.get(("decode", a, b)))

    def bound_ms(n):
        weights = bound.get(n, {}).get("weight_bytes")
        return weights / (bandwidth * 1e9) * 1e3 if weights and bandwidth else None
    row("bandwidth bound: weights read / bandwidth (ms/token)", bound_ms)
    row("LiteRT-LM decode / bound", lambda n: engine[n]["decode_ms_per_token"] / bound_ms(n)
        if engine.get(n, {}).get("decode_ms_per_token") and bound_ms(n) else None)
    agree = r.get("agreement", {})
    for key, label in (("leading", "greedy tokens = JAX's, leading, summed"),
                       ("forced", "teacher-forced top-1 = JAX's")):
        row(f"{label} over {len(r.get('prompts', [r['prompt']]))} prompts",
            text(lambda n, key=key: f"{agree[n][key]}/{agree[n]['steps']}" if n in agree else None),
            ratio=lambda a, b: None)
    lines += ["", f"Memory bandwidth of one core, {bandwidth_text(r.get('bandwidth', {}))}. Weights read per "
              "token: the decode signature's constant buffers, each once (tools/llm_graph.py), an embedding "
              "table as the one row it looks up; the KV cache adds "
              f"{fmt(max((b.get('cache_bytes', 0) for b in bound.values()), default=0) / 1e6)} MB per token, "
              "not in the bound. Agreement: greedy decoding through LiteRT's signature runners "
              "(noxla.llm.greedy_tokens) against float JAX's greedy tokens, as the count of leading equal "
              "tokens, and teacher-forced (each step fed JAX's token, tests/tiny_llama.forced_tokens); the "
              "prompts: " + json.dumps(r.get("prompts", [r["prompt"]])) + "."]
    return lines + _reused(r)


def _reused(r: dict) -> list[str]:
    reused = [n for n, e in r["exports"].items() if e.get("reused")]
    if not reused:
        return []
    return ["", f"Exports taken from an earlier run's --work (`--reuse`), with the time and memory recorded "
            f"when they were made: {', '.join(reused)}."]


def bandwidth_text(bw: dict) -> str:
    """How the bandwidth was measured, and what (tools/llm_graph.memory_bandwidth)."""
    if not bw:
        return "not measured"
    return (f"measured before and after the engine's timings: {bw['read']:.3g} GB/s read (OpenBLAS's "
            f"float32 matrix-vector product over a 256 MiB matrix, one thread, the best of 9 runs, and the "
            f"best of the {bw['samples']} measurements), {bw['copy']:.3g} GB/s copying (numpy, bytes read + "
            f"written); the bound uses the read bandwidth")
