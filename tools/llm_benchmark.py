"""noxla.llm against litert-torch's export_hf on one decoder, side by side in one run.

    python3 tools/llm_benchmark.py --config tiny          # a quick run
    nice -n 10 python3 tools/llm_benchmark.py --config 135m   # SmolLM-135M's shapes
    python3 tools/llm_benchmark.py --config tiny --no-anchor --quantize int8,int4
    python3 tools/llm_benchmark.py --config 1b --export-only --no-anchor

The decoder is tests/tiny_llama.py's JAX Llama (GQA, RoPE, RMSNorm, tied embeddings) with random
weights of a fixed seed. noxla exports its decode step with noxla.llm; litert-torch exports a
transformers LlamaConfig of the same shapes carrying the same weights (tools/llm_bench_anchor.py,
in a venv of its own under --venv-dir, created on first use: litert-torch needs torch and protobuf
6). Per export: time and peak RSS of a fresh process (imports included), file size, greedy tokens
against JAX's and against each other; per .tflite: prefill tokens/s and decode ms/token in LiteRT's
signature runners at 1 and 4 threads; per .litertlm: prefill and decode in LiteRT-LM's engine.
Latencies alternate the two exports round by round and report the median per-round ratio, as
tools/benchmark.py does: the machine is shared, so ratios hold where absolute numbers do not.
``--quantize int8,int4`` adds noxla's quantized exports (noxla.llm_quantize): their size, export
time and memory, greedy tokens against float JAX (leading agreement, and teacher-forced: each
step fed JAX's tokens, see tests/tiny_llama.forced_tokens) and LiteRT-LM's decode ms/token.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tools"))
from interleaving import checkout_version  # noqa: E402  (tools/ is on the path from here)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ANCHOR = os.path.join(REPO, "tools", "llm_bench_anchor.py")
# litert-torch 0.10.0 takes any torch in [2.4, 2.15); 2.13.0 resolves to the CPU wheel here
# (without a pin pip may pick a CUDA build of several GB). TensorFlow: litert-torch 0.10.0 does not
# declare it, but export_hf imports tensorflow.lite (model_ext/bonsai_flux2) and fails without it.
ANCHOR_PACKAGES = ["torch==2.13.0", "litert-torch==0.10.0", "tensorflow-cpu"]
BOS, EOS = 1, 2
RMS_NORM_EPS = 1e-6  # tests/tiny_llama.py's rms_norm; the HF config is given the same
SEED = 2


def configs() -> dict:
    from tests import tiny_llama
    return {"tiny": tiny_llama.Config(), "135m": tiny_llama.SMOLLM_135M,
            "1b": tiny_llama.Config(vocab=32000, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64,
                                    ffn=8192)}


def parameter_count(c) -> int:
    attention = c.hidden * c.head_dim * (2 * c.heads + 2 * c.kv_heads)
    return c.vocab * c.hidden + c.layers * (attention + 3 * c.hidden * c.ffn + 2 * c.hidden) + c.hidden


def layout(c, cache_length: int):
    from noxla.llm import CacheLayout
    return CacheLayout(c.layers, c.kv_heads, c.head_dim, cache_length)


def flat_weights(params: dict) -> dict:
    flat = {"embed": params["embed"], "final_norm": params["final_norm"]}
    for i, layer in enumerate(params["layers"]):
        flat.update({f"layers/{i}/{k}": v for k, v in layer.items()})
    return flat


def nested_weights(flat) -> dict:
    layers: dict = {}
    for key in flat.files if hasattr(flat, "files") else flat:
        if key.startswith("layers/"):
            _, i, name = key.split("/")
            layers.setdefault(int(i), {})[name] = flat[key]
    return {"embed": flat["embed"], "final_norm": flat["final_norm"], "layers": [layers[i] for i in sorted(layers)]}


# --------------------------------------------------------------------------- fresh processes

def measured_run(argv: list[str], timeout: float = 7200) -> dict:
    """Run argv; its wall time and the peak RSS of that child (os.wait4's rusage, kB on Linux)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for line in child.stdout:
        out.append(line)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    result = {"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
              "peak_mb": usage.ru_maxrss / 1024, "exit": child.returncode}
    if child.returncode != 0:
        # -9 is a SIGKILL: on Linux, most often the kernel's OOM killer.
        killed = " (killed: out of memory?)" if child.returncode == -9 else ""
        log = "".join(line for line in out if "computation_placer" not in line)
        result["failure"] = f"exit {child.returncode}{killed}\n" + log[-3000:]
    return result


def call_script(python: str, command: str, request: dict, work: str, script: str | None = None) -> tuple[dict, dict]:
    """Run ``command`` of llm_bench_anchor.py (or this file's child, or ``script``'s) under ``python``:
    (reply, run)."""
    request_path = os.path.join(work, f"{command}.request.json")
    reply_path = os.path.join(work, f"{command}.reply.json")
    with open(request_path, "w") as f:
        json.dump(request, f)
    script = script or (__file__ if command == "noxla-export" else ANCHOR)
    run = measured_run([python, script, command, request_path, reply_path])
    if run["exit"] != 0 or not os.path.exists(reply_path):
        return {}, run
    with open(reply_path) as f:
        return json.load(f), run


def noxla_export_child(request: dict) -> dict:
    """The timed noxla side: imports, weights from the .npz (as litert-torch reads its safetensors),
    noxla.llm.export_tflite."""
    start = time.perf_counter()
    import functools

    import numpy as np

    from noxla import llm
    from tests import tiny_llama
    imported = time.perf_counter()
    config = tiny_llama.Config(**request["config"])
    params = nested_weights(np.load(request["weights"]))
    step = functools.partial(tiny_llama.step, config)
    llm.export_tflite(step, params, request["output"], layout=layout(config, request["cache_length"]),
                      prefill_lengths=(request["prefill"],), quantize=request.get("quantize"), overwrite=True)
    return {"import_s": imported - start, "export_s": time.perf_counter() - imported}


# --------------------------------------------------------------------------- the anchor venv

def anchor_python(venv_dir: str) -> str | None:
    """litert-torch's venv, made by tools/bench_exports.py's helper (its mode names a package list)."""
    import bench_exports
    bench_exports.VENV_PACKAGES.setdefault("litert-torch", ANCHOR_PACKAGES)
    return bench_exports.ensure_venv("litert-torch", None, venv_dir)


# --------------------------------------------------------------------------- measurements

def jax_greedy(config, params, prompt: list[int], max_new: int, cache_length: int) -> list[int]:
    import functools

    import jax
    import numpy as np

    from tests import tiny_llama
    generate = jax.jit(functools.partial(tiny_llama.generate, config, params, max_new=max_new,
                                         cache_length=cache_length))
    tokens, count = generate(np.asarray(prompt, np.int32), np.int32(EOS))
    return [int(t) for t in np.asarray(tokens)[:int(count)]]


def signature_timers(path: str, threads: int, prefill: int, cache_length: int, lay) -> dict:
    """Timers (k -> ms per run) of the prefill and decode signatures, fed a cache of zeros."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from noxla import llm
    interpreter = Interpreter(model_path=path, num_threads=threads)
    cache = dict(zip(llm.cache_names(lay), (x for pair in lay.empty() for x in pair)))
    positions = np.arange(prefill, dtype=np.int32)
    feeds = {f"prefill_{prefill}": dict(tokens=(positions[None] % 50 + 3).astype(np.int32), input_pos=positions,
                                        mask=llm.causal_mask(positions, cache_length), **cache),
             "decode": dict(tokens=np.array([[7]], np.int32), input_pos=np.array([prefill], np.int32),
                            mask=llm.causal_mask([prefill], cache_length), **cache)}
    # One thread: that thread's CPU time (XNNPACK runs every op on it), which other processes'
    # load does not inflate; more threads: wall time.
    clock = time.thread_time if threads == 1 else time.perf_counter
    timers = {}
    for name, feed in feeds.items():
        runner = interpreter.get_signature_runner(name)
        runner(**feed)

        def batch(k: int, runner=runner, feed=feed) -> float:
            start = clock()
            for _ in range(k):
                runner(**feed)
            return (clock() - start) * 1e3 / k
        timers[name] = batch
    return timers


def interleaved_latencies(paths: dict, threads: int, args, lay) -> dict:
    """{(signature kind, export): ms} and {(kind, 'ratio'): noxla / litert-torch}."""
    from benchmark import interleaved
    timers = {name: signature_timers(p, threads, args.prefill, args.cache, lay) for name, p in paths.items()}
    out = {}
    for kind, signature in (("prefill", f"prefill_{args.prefill}"), ("decode", "decode")):
        ms, ratios = interleaved({name: t[signature] for name, t in timers.items()}, args.rounds,
                                 args.batch_ms, args.warmup_ms)
        for name, value in ms.items():
            out[(kind, name)] = value
        if len(ms) == 2:
            out[(kind, "ratio")] = ratios[tuple(paths)]
    return out


def engine_latencies(bundles: dict, threads: int, args, work: str) -> dict:
    from noxla import litertlm_bundle
    prompt = " ".join(f"t{t}" for t in args.prompt[1:])
    # litert-torch's bundle names no start token (its llm_metadata holds none for this checkpoint),
    # so LiteRT-LM prepends none: its prompt carries <bos> itself, and both decode the same tokens.
    request = {"models": bundles, "threads": threads, "max_num_tokens": args.cache, "prompt": prompt,
               "prompts": {"litert-torch": "<bos> " + prompt},
               "max_output_tokens": args.max_new, "rounds": args.engine_rounds}
    reply, run = call_script(litertlm_bundle.engine_python(), "engine", request, work)
    if not reply:
        return {"failure": run.get("failure", "no reply")}
    if "noxla" in reply and "litert-torch" in reply:
        ratios = round_ratios(reply, "noxla", "litert-torch")
        reply["decode_ratio"] = statistics.median(ratios)
        reply["decode_ratio_quartiles"] = statistics.quantiles(ratios, n=4)[::2] if len(ratios) > 1 else ratios * 2
    return reply


def round_ratios(reply: dict, name: str, reference: str) -> list[float]:
    """Per round, the ratio of two bundles' decode times per token (their texts may differ in length):
    the bundles alternate within a round, so each ratio compares runs made moments apart."""
    a, b = ([x / reply[n]["tokens"] for x in reply[n]["decode_s"]] for n in (name, reference))
    return [x / y for x, y in zip(a, b)]


def decode_ratio(reply: dict, name: str, reference: str) -> float:
    """The median per-round ratio of two bundles' decode times."""
    return statistics.median(round_ratios(reply, name, reference))


# --------------------------------------------------------------------------- the table

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


def quantized_table(r: dict) -> list[str]:
    """noxla's quantized exports beside its float one (``--quantize``)."""
    if not r.get("quantized"):
        return []
    from noxla.llm_quantize import QUANTIZER_MODES
    tokens, engine = r["tokens"], r.get("engine", {}).get(r["threads"][0], {})
    lines = ["", f"noxla's quantized exports (LiteRT's quantizer, ai-edge-quantizer); greedy tokens of "
             f"{r['max_new']} against float JAX; LiteRT-LM at {r['threads'][0]} thread(s), decode time "
             f"as a median per-round ratio to the float bundle:", "",
             "| quantize | recipe | .tflite size (MB) | of float | export time (s) | peak memory (MB) "
             "| leading tokens = JAX's | teacher-forced = JAX's | in LiteRT-LM: leading = JAX's "
             "| LiteRT-LM decode ms/token | decode / float |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    float_size = r["exports"].get("noxla", {}).get("size_mb")
    for mode, q in [("float32", {**r["exports"].get("noxla", {}), "recipe": "—"}),
                    *((m, {**q, "recipe": QUANTIZER_MODES[m][0]}) for m, q in r["quantized"].items())]:
        name = "noxla" if mode == "float32" else f"noxla {mode}"
        size = q.get("size_mb")
        cells = [mode, q["recipe"], fmt(size), fmt(size / float_size if size and float_size else None),
                 fmt(None if "failure" in q else q.get("wall_s")), fmt(None if "failure" in q else q.get("peak_mb")),
                 agreement(tokens.get(name), tokens.get("jax")), q.get("forced", "—" if mode != "float32" else
                                                                       r.get("forced_float", "—")),
                 agreement(tokens.get(f"{name} in LiteRT-LM"), tokens.get("jax")),
                 fmt(engine.get(name, {}).get("decode_ms_per_token")), fmt(engine.get("ratios", {}).get(name))]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    for mode, q in r["quantized"].items():
        if "failure" in q:
            lines += ["", f"noxla {mode} failed:", "", "```", q["failure"][-1500:], "```"]
    return lines


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
    lines.append("| greedy tokens = JAX's (leading) | "
                 + " | ".join(agreement(tokens.get(n), tokens.get("jax")) for n in names)
                 + f" | each other: {agreement(tokens.get('noxla'), tokens.get('litert-torch'))} |")
    if any(f"{n} in LiteRT-LM" in tokens for n in names):
        lines.append("| greedy tokens in LiteRT-LM's engine = JAX's (leading) | " + " | ".join(
            agreement(tokens.get(f"{n} in LiteRT-LM"), tokens.get("jax")) for n in names) + " | |")
    if tokens.get("torch") is not None:
        lines.append(f"| PyTorch (the copied weights) = JAX | | {agreement(tokens['torch'], tokens['jax'])} | |")
    lines += quantized_table(r)
    for n in names:
        if "failure" in ex.get(n, {}):
            lines += ["", f"{n} failed:", "", "```", ex[n]["failure"][-1500:], "```"]
    lines += ["", "Export time: wall time of a fresh process, imports and loading the weights from disk "
              "included (noxla: an .npz; litert-torch: the safetensors checkpoint); its CPU time (the load "
              "stretches the wall time, not this). Peak memory: that "
              "process's max RSS (getrusage). LiteRT latencies: signature runners of each .tflite, the KV "
              "cache (zeros) copied in and out on every call, alike for both; 1 thread timed by the "
              "thread's CPU time, 4 threads by wall time on a 2-core machine. Tokens:",
              "", "```", json.dumps(tokens), "```", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main

def run(args) -> dict:
    import numpy as np

    from noxla import llm
    from tests import tiny_llama
    config = configs()[args.config]
    params = tiny_llama.init_params(config, SEED)
    work = args.work
    os.makedirs(work, exist_ok=True)
    weights = os.path.join(work, "weights.npz")
    np.savez(weights, **flat_weights(params))
    # Read back when JAX generates: the exports run beside this process (1B: 4 GB of weights).
    del params
    r = {"name": args.config, "config": dataclasses.asdict(config), "params": parameter_count(config),
         "cache": args.cache, "prefill": args.prefill, "prompt": args.prompt, "max_new": args.max_new,
         "load": os.getloadavg()[0], "exports": {}, "tokens": {}, "commit": checkout_version()}
    lay = layout(config, args.cache)
    base = {"config": dataclasses.asdict(config), "weights": weights, "cache_length": args.cache,
            "prefill": args.prefill}
    paths, quantized_paths = {}, {}
    print("noxla export ...", file=sys.stderr, flush=True)
    noxla_tflite = os.path.join(work, "noxla.tflite")
    reply, measured = call_script(sys.executable, "noxla-export", {**base, "output": noxla_tflite}, work)
    r["exports"]["noxla"] = {**measured, **reply}
    if reply:
        r["exports"]["noxla"]["size_mb"] = os.path.getsize(noxla_tflite) / 2**20
        paths["noxla"] = noxla_tflite
    r["threads"], r["quantized"] = args.threads, {}
    for mode in args.quantize:
        print(f"noxla export, quantize={mode} ...", file=sys.stderr, flush=True)
        path = os.path.join(work, f"noxla_{mode}.tflite")
        reply, measured = call_script(sys.executable, "noxla-export", {**base, "output": path, "quantize": mode}, work)
        r["quantized"][mode] = {**measured, **reply}
        if reply:
            r["quantized"][mode]["size_mb"] = os.path.getsize(path) / 2**20
            quantized_paths[mode] = path
    python = None if args.no_anchor else anchor_python(args.venv_dir)
    tokenizer = os.path.join(work, "tokenizer.json")
    from tests import tiny_llama
    tiny_llama.word_level_tokenizer(tokenizer, config.vocab)
    if python:
        print("litert-torch checkpoint and export ...", file=sys.stderr, flush=True)
        hf_dir, out_dir = os.path.join(work, "hf"), os.path.join(work, "litert_torch")
        ck, ck_run = call_script(python, "checkpoint", {
            "config": dataclasses.asdict(config), "weights": weights, "rms_norm_eps": RMS_NORM_EPS,
            "cache_length": args.cache, "bos": BOS, "eos": EOS, "output": hf_dir, "tokenizer": tokenizer,
            "prompt": args.prompt, "max_new": 0 if args.export_only else args.max_new}, work)
        if not ck:
            r["exports"]["litert-torch"] = ck_run
        else:
            r["tokens"]["torch"] = ck["torch_tokens"] if not args.export_only else None
            reply, measured = call_script(python, "export", {"checkpoint": hf_dir, "output": out_dir,
                                                             "prefill": args.prefill, "cache_length": args.cache,
                                                             "bundle": not args.no_engine}, work)
            r["exports"]["litert-torch"] = {**measured, **reply}
            anchor_tflite = os.path.join(out_dir, "model.tflite")
            if reply and os.path.exists(anchor_tflite):
                r["exports"]["litert-torch"]["size_mb"] = os.path.getsize(anchor_tflite) / 2**20
                paths["litert-torch"] = anchor_tflite
    if args.export_only:
        return r
    params = nested_weights(np.load(weights))
    r["tokens"]["jax"] = jax_greedy(config, params, args.prompt, args.max_new, args.cache)
    for name, path in paths.items():
        try:
            r["tokens"][name] = llm.greedy_tokens(path, args.prompt, args.max_new, lay, stop_tokens=[EOS])
        except Exception as e:  # noqa: BLE001 -- a row of the table, not a crash of the run
            r["exports"][name]["failure"] = f"greedy_tokens: {type(e).__name__}: {e}"
    if quantized_paths:
        quantized_tokens(r, quantized_paths, paths.get("noxla"), args, lay)
    del params
    r["latency"] = {}
    for threads in args.threads:
        print(f"LiteRT latencies, {threads} thread(s) ...", file=sys.stderr, flush=True)
        r["latency"][threads] = interleaved_latencies(paths, threads, args, lay)
    if not args.no_engine:
        from noxla import litertlm_bundle
        bundles = {}
        llm_metadata = os.path.join(work, "llm_metadata.textproto")
        with open(llm_metadata, "w") as f:
            f.write(litertlm_bundle.metadata_textproto(BOS, [EOS], args.cache))
        noxla_tflites = {**({"noxla": paths["noxla"]} if "noxla" in paths else {}),
                         **{f"noxla {mode}": path for mode, path in quantized_paths.items()}}
        for name, path in noxla_tflites.items():
            bundles[name] = os.path.join(work, name.replace(" ", "_") + ".litertlm")
            litertlm_bundle.call("build", {"tflite": path, "metadata": llm_metadata, "tokenizer": tokenizer,
                                           "output": bundles[name]})
        anchor_bundle = os.path.join(work, "litert_torch", "model.litertlm")
        if os.path.exists(anchor_bundle):
            bundles["litert-torch"] = anchor_bundle
        r["engine"] = {}
        for threads in args.threads:
            print(f"LiteRT-LM engine, {threads} thread(s) ...", file=sys.stderr, flush=True)
            r["engine"][threads] = engine_latencies(bundles, threads, args, work)
        first = r["engine"][args.threads[0]]
        if "noxla" in first:
            first["ratios"] = {f"noxla {m}": decode_ratio(first, f"noxla {m}", "noxla")
                               for m in quantized_paths if f"noxla {m}" in first}
        for name in bundles:
            text = r["engine"][args.threads[0]].get(name, {}).get("text")
            if text is not None:
                r["tokens"][f"{name} in LiteRT-LM"] = [int(t) for t in re.findall(r"t(\d+)", text)]
    return r


def quantized_tokens(r: dict, quantized_paths: dict, float_path: str | None, args, lay) -> None:
    """Greedy tokens of each quantized export, and how many of JAX's it predicts teacher-forced."""
    from noxla import llm
    from tests import tiny_llama
    expected = r["tokens"]["jax"]
    for mode, path in [("float32", float_path), *quantized_paths.items()]:
        if path is None:
            continue
        forced = tiny_llama.forced_tokens(path, args.prompt, expected, lay)
        count = f"{sum(a == b for a, b in zip(forced, expected))}/{len(expected)}"
        if mode == "float32":
            r["forced_float"] = count
            continue
        r["quantized"][mode]["forced"] = count
        r["tokens"][f"noxla {mode}"] = llm.greedy_tokens(path, args.prompt, args.max_new, lay, stop_tokens=[EOS])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=("tiny", "135m", "1b"), default="tiny")
    parser.add_argument("--cache", type=int, default=None, help="KV cache length (default 64 tiny, 256 otherwise)")
    parser.add_argument("--prefill", type=int, default=16)
    parser.add_argument("--prompt", type=lambda s: [int(t) for t in s.split(",")], default=[BOS, 17, 42, 5, 9, 23, 11])
    parser.add_argument("--max-new", type=int, default=16)
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 4])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--engine-rounds", type=int, default=12,
                        help="rounds of LiteRT-LM's engine (each bundle generates once per round, alternating)")
    parser.add_argument("--batch-ms", type=float, default=50.0)
    parser.add_argument("--warmup-ms", type=float, default=500.0)
    parser.add_argument("--quantize", type=lambda s: [m for m in s.split(",") if m], default=[],
                        help="also export noxla quantized: a comma list of noxla.llm_quantize's modes (int8,int4)")
    parser.add_argument("--export-only", action="store_true", help="exports only: time, memory, size")
    parser.add_argument("--no-anchor", action="store_true", help="noxla alone (no litert-torch venv)")
    parser.add_argument("--no-engine", action="store_true", help="skip LiteRT-LM's engine")
    parser.add_argument("--venv-dir", default=os.path.expanduser("~/.cache/noxla-bench"))
    parser.add_argument("--work", help="keep the artifacts here (default: a fresh temporary directory)")
    parser.add_argument("--append", action="store_true", help="add the table to --out instead of replacing it")
    parser.add_argument("--out", default=os.path.join(REPO, "tools", "benchmark_results", "llm_benchmark.md"))
    args = parser.parse_args(argv)
    if args.cache is None:
        args.cache = 64 if args.config == "tiny" else 256
    from noxla.llm_quantize import QUANTIZER_MODES
    bad = [m for m in args.quantize if m not in QUANTIZER_MODES]
    if bad:
        parser.error(f"--quantize {','.join(bad)}: expected modes among {', '.join(QUANTIZER_MODES)}")
    return args


def main(argv=None) -> int:
    if argv is None and len(sys.argv) == 4 and sys.argv[1] == "noxla-export":
        with open(sys.argv[2]) as f:
            reply = noxla_export_child(json.load(f))
        with open(sys.argv[3], "w") as f:
            json.dump(reply, f)
        return 0
    args = parse_args(argv)
    command = "python3 tools/llm_benchmark.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    scratch = None
    if args.work is None:  # the exports, bundles and LiteRT-LM's weight caches: 4 GB at 135M's shapes
        args.work = scratch = tempfile.mkdtemp(prefix="noxla-llmbench-")
    try:
        table = report(run(args), command)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a" if args.append else "w") as f:
        f.write(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
