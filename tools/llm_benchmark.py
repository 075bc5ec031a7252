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
``--quantize int8,int4`` adds each quantization on both sides: noxla's (noxla.llm.quantize) and
litert-torch's export_hf with its int8 (its default) and int4 recipes (llm_report.ANCHOR_RECIPES),
side by side: export time and memory, size, LiteRT-LM decode ms/token and prefill tokens/s, greedy
agreement with float JAX over --prompts prompts (leading and teacher-forced), and the decode step's
bound: its weight bytes per token (tools/llm_graph.py) over the memory bandwidth of one core,
measured around the engine's timings (llm_graph.memory_bandwidth).
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
from llm_report import ANCHOR_RECIPES, RMS_NORM_EPS, SEED, agreement, export_name, report  # noqa: E402, F401

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ANCHOR = os.path.join(REPO, "tools", "llm_bench_anchor.py")
# litert-torch 0.10.0 takes any torch in [2.4, 2.15); 2.13.0 resolves to the CPU wheel here
# (without a pin pip may pick a CUDA build of several GB). TensorFlow: litert-torch 0.10.0 does not
# declare it, but export_hf imports tensorflow.lite (model_ext/bonsai_flux2) and fails without it.
# transformers: 5.25.0 requires kernels 0.19.1, whose use_kernelized_func refuses transformers' own
# gemma3 module, which export_hf imports for every model (seen 2026-12-06); 5.24.0 makes kernels optional.
ANCHOR_PACKAGES = ["torch==2.13.0", "litert-torch==0.10.0", "tensorflow-cpu", "transformers<5.25"]
BOS, EOS = 1, 2


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
    """Run argv; its wall time, CPU time and peak RSS (os.wait4's rusage). That peak is at least this
    process's RSS when it started the child (Linux keeps a forked child's high-water mark across
    exec), so ``call_script`` replaces it with the peak the child reports of itself (VmHWM)."""
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
        reply = json.load(f)
    if "peak_mb" in reply:  # the child's own VmHWM (bench_anchor.peak_mb): see measured_run
        run["peak_mb"] = reply.pop("peak_mb")
    return reply, run


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
    from bench_anchor import peak_mb
    return {"import_s": imported - start, "export_s": time.perf_counter() - imported, "peak_mb": peak_mb()}


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
    """{(signature kind, export): ms}, {(kind, 'ratio'): noxla / litert-torch} and, per quantization,
    {(kind, noxla's export, litert-torch's): their ratio}."""
    from benchmark import interleaved
    timers = {name: signature_timers(p, threads, args.prefill, args.cache, lay) for name, p in paths.items()}
    out = {}
    for kind, signature in (("prefill", f"prefill_{args.prefill}"), ("decode", "decode")):
        ms, ratios = interleaved({name: t[signature] for name, t in timers.items()}, args.rounds,
                                 args.batch_ms, args.warmup_ms)
        for name, value in ms.items():
            out[(kind, name)] = value
        if ("noxla", "litert-torch") in ratios:
            out[(kind, "ratio")] = ratios[("noxla", "litert-torch")]
        for a, b in ratios:
            if a.startswith("noxla") and b == a.replace("noxla", "litert-torch", 1):
                out[(kind, a, b)] = ratios[(a, b)]
    return out


def engine_latencies(bundles: dict, threads: int, args, work: str) -> dict:
    from noxla.writers.litertlm import bundle as litertlm_bundle
    prompt = " ".join(f"t{t}" for t in args.prompt[1:])
    # litert-torch's bundle names no start token (its llm_metadata holds none for this checkpoint),
    # so LiteRT-LM prepends none: its prompt carries <bos> itself, and both decode the same tokens.
    request = {"models": bundles, "threads": threads, "max_num_tokens": args.cache, "prompt": prompt,
               "prompts": {name: "<bos> " + prompt for name in bundles if name.startswith("litert-torch")},
               "max_output_tokens": args.max_new, "rounds": args.engine_rounds}
    reply, run = call_script(litertlm_bundle.engine_python(), "engine", request, work)
    if not reply:
        return {"failure": run.get("failure", "no reply")}
    if "noxla" in reply and "litert-torch" in reply:
        ratios = round_ratios(reply, "noxla", "litert-torch")
        reply["decode_ratio"] = statistics.median(ratios)
        reply["decode_ratio_quartiles"] = quartiles(ratios)
    reply["pair_ratios"], reply["pair_quartiles"] = {}, {}
    for name in reply:
        anchor = name.replace("noxla", "litert-torch", 1)
        if name.startswith("noxla") and anchor in reply:
            ratios = round_ratios(reply, name, anchor)
            reply["pair_ratios"][f"{name} / {anchor}"] = statistics.median(ratios)
            reply["pair_quartiles"][f"{name} / {anchor}"] = quartiles(ratios)
    return reply


def quartiles(ratios: list[float]) -> list[float]:
    return statistics.quantiles(ratios, n=4)[::2] if len(ratios) > 1 else ratios * 2


def round_ratios(reply: dict, name: str, reference: str) -> list[float]:
    """Per round, the ratio of two bundles' decode times per token (their texts may differ in length):
    the bundles alternate within a round, so each ratio compares runs made moments apart."""
    a, b = ([x / reply[n]["tokens"] for x in reply[n]["decode_s"]] for n in (name, reference))
    return [x / y for x, y in zip(a, b)]


def decode_ratio(reply: dict, name: str, reference: str) -> float:
    """The median per-round ratio of two bundles' decode times."""
    return statistics.median(round_ratios(reply, name, reference))


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
    modes = ["float32", *args.quantize]
    r = {"name": args.config, "config": dataclasses.asdict(config), "params": parameter_count(config),
         "cache": args.cache, "prefill": args.prefill, "prompt": args.prompt, "max_new": args.max_new,
         "load": os.getloadavg()[0], "exports": {}, "tokens": {}, "commit": checkout_version(),
         "threads": args.threads, "modes": modes, "prompts": prompts(args, config.vocab),
         "export_only": args.export_only}
    lay = layout(config, args.cache)
    base = {"config": dataclasses.asdict(config), "weights": weights, "cache_length": args.cache,
            "prefill": args.prefill}
    paths, bundles = {}, {}
    for mode in modes:
        name = export_name("noxla", mode)
        print(f"{name} export ...", file=sys.stderr, flush=True)
        path = os.path.join(work, name.replace(" ", "_") + ".tflite")
        request = {**base, "output": path, **({} if mode == "float32" else {"quantize": mode})}
        reply, measured = recorded(args, name, path, sys.executable, "noxla-export", request, work)
        r["exports"][name] = {**measured, **reply}
        if reply:
            r["exports"][name]["size_mb"] = os.path.getsize(path) / 2**20
            paths[name] = path
    python = None if args.no_anchor else anchor_python(args.venv_dir)
    tokenizer = os.path.join(work, "tokenizer.json")
    tiny_llama.word_level_tokenizer(tokenizer, config.vocab)
    if python:
        anchor_exports(r, python, modes, weights, tokenizer, paths, bundles, args, work)
    if args.export_only:
        return r
    params = nested_weights(np.load(weights))
    jax_tokens = [jax_greedy(config, params, p, args.max_new, args.cache) for p in r["prompts"]]
    del params
    r["tokens"]["jax"] = jax_tokens[0]
    r["agreement"] = {}
    for name, path in paths.items():
        try:
            r["tokens"][name] = llm.greedy_tokens(path, args.prompt, args.max_new, lay, stop_tokens=[EOS])
            if len(modes) > 1:
                r["agreement"][name] = agreement_over_prompts(path, r["prompts"], jax_tokens, args, lay)
        except Exception as e:  # noqa: BLE001 -- a row of the table, not a crash of the run
            r["exports"][name]["failure"] = f"greedy_tokens: {type(e).__name__}: {e}"
    if len(modes) > 1:
        from llm_graph import census
        r["bound"] = {name: {k: v for k, v in census(path).items() if k in ("weight_bytes", "cache_bytes", "op_count")}
                      for name, path in paths.items()}
    r["latency"] = {}
    for threads in args.threads:
        print(f"LiteRT latencies, {threads} thread(s) ...", file=sys.stderr, flush=True)
        r["latency"][threads] = interleaved_latencies(paths, threads, args, lay)
    if not args.no_engine:
        engine_runs(r, paths, bundles, tokenizer, args, work)
    return r


def prompts(args, vocab: int) -> list[list[int]]:
    """``--prompt``, then ``--prompts`` - 1 more of its length: <bos> and random ids of a fixed seed."""
    import numpy as np
    rng = np.random.default_rng(SEED)
    extra = [[BOS, *(int(t) for t in rng.integers(3, vocab, len(args.prompt) - 1))] for _ in range(args.prompts - 1)]
    return [list(args.prompt), *extra]


def agreement_over_prompts(path: str, prompt_list: list, jax_tokens: list, args, lay) -> dict:
    """Over the prompts: leading greedy tokens equal to JAX's, and teacher-forced predictions equal."""
    from noxla import llm
    from tests import tiny_llama
    leading = forced = steps = 0
    for prompt, expected in zip(prompt_list, jax_tokens):
        greedy = llm.greedy_tokens(path, prompt, args.max_new, lay, stop_tokens=[EOS])
        same = [x == y for x, y in zip(greedy, expected)]
        leading += same.index(False) if False in same else len(same)
        predicted = tiny_llama.forced_tokens(path, prompt, expected, lay)
        forced += sum(a == b for a, b in zip(predicted, expected))
        steps += len(expected)
    return {"leading": leading, "forced": forced, "steps": steps}


def recorded(args, name: str, output: str, python: str, command: str, request: dict, work: str) -> tuple[dict, dict]:
    """``call_script``'s (reply, measured run), recorded beside ``output`` in --work; with --reuse, an
    earlier run's record of the same output instead, when that output is still there (the weights
    are those of the fixed seed, so only a changed exporter makes an export differ)."""
    record = os.path.join(args.work, name.replace(" ", "_") + ".export.json")
    reuse = args.reuse == "all" or (args.reuse == "litert-torch" and not name.startswith("noxla"))
    if reuse and os.path.exists(record) and os.path.exists(output):
        with open(record) as f:
            reply, measured = json.load(f)
        return reply, {**measured, "reused": True}
    reply, measured = call_script(python, command, request, work)
    if reply:
        with open(record, "w") as f:
            json.dump([reply, measured], f)
    return reply, measured


def anchor_exports(r: dict, python: str, modes: list, weights: str, tokenizer: str, paths: dict, bundles: dict,
                   args, work: str) -> None:
    """litert-torch's checkpoint of the weights, then its export_hf per quantization."""
    print("litert-torch checkpoint ...", file=sys.stderr, flush=True)
    hf_dir = os.path.join(work, "hf")
    ck, ck_run = recorded(args, "checkpoint", hf_dir, python, "checkpoint", {
        "config": r["config"], "weights": weights, "rms_norm_eps": RMS_NORM_EPS,
        "cache_length": args.cache, "bos": BOS, "eos": EOS, "output": hf_dir, "tokenizer": tokenizer,
        "prompt": args.prompt, "max_new": 0 if args.export_only else args.max_new}, work)
    if not ck:
        r["exports"]["litert-torch"] = ck_run
        return
    r["tokens"]["torch"] = ck["torch_tokens"] if not args.export_only else None
    for mode in modes:
        name = export_name("litert-torch", mode)
        print(f"{name} export ...", file=sys.stderr, flush=True)
        out_dir = os.path.join(work, name.replace(" ", "_").replace("-", "_"))
        request = {"checkpoint": hf_dir, "output": out_dir, "prefill": args.prefill, "cache_length": args.cache,
                   "bundle": not args.no_engine, "recipe": ANCHOR_RECIPES[mode]}
        reply, measured = recorded(args, name, out_dir, python, "export", request, work)
        r["exports"][name] = {**measured, **reply}
        tflite = os.path.join(out_dir, "model.tflite" if mode == "float32" else "model_quantized.tflite")
        if reply and os.path.exists(tflite):
            r["exports"][name]["size_mb"] = os.path.getsize(tflite) / 2**20
            paths[name] = tflite
        if os.path.exists(os.path.join(out_dir, "model.litertlm")):
            bundles[name] = os.path.join(out_dir, "model.litertlm")


def engine_runs(r: dict, paths: dict, bundles: dict, tokenizer: str, args, work: str) -> None:
    """LiteRT-LM's engine over every bundle, the memory bandwidth measured before and after."""
    from llm_graph import memory_bandwidth

    from noxla.writers.litertlm import bundle as litertlm_bundle
    llm_metadata = os.path.join(work, "llm_metadata.textproto")
    with open(llm_metadata, "w") as f:
        f.write(litertlm_bundle.metadata_textproto(BOS, [EOS], args.cache))
    for name, path in paths.items():
        if name.startswith("noxla"):
            bundles[name] = os.path.join(work, name.replace(" ", "_") + ".litertlm")
            litertlm_bundle.call("build", {"tflite": path, "metadata": llm_metadata, "tokenizer": tokenizer,
                                           "output": bundles[name]})
    bundles = {name: bundles[name] for name in paths if name in bundles}  # noxla's and litert-torch's alternate
    samples = [memory_bandwidth()] if len(r["modes"]) > 1 else []
    r["engine"] = {}
    for threads in args.threads:
        print(f"LiteRT-LM engine, {threads} thread(s) ...", file=sys.stderr, flush=True)
        r["engine"][threads] = engine_latencies(bundles, threads, args, work)
    if samples:
        samples.append(memory_bandwidth())
        r["bandwidth"] = {"read": max(x["read"] for x in samples), "copy": max(x["copy"] for x in samples),
                          "samples": len(samples)}
    for name in bundles:
        text = r["engine"][args.threads[0]].get(name, {}).get("text")
        if text is not None:
            r["tokens"][f"{name} in LiteRT-LM"] = [int(t) for t in re.findall(r"t(\d+)", text)]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=("tiny", "135m", "1b"), default="tiny")
    parser.add_argument("--cache", type=int, default=None, help="KV cache length (default 64 tiny, 256 otherwise)")
    parser.add_argument("--prefill", type=int, default=16)
    parser.add_argument("--prompt", type=lambda s: [int(t) for t in s.split(",")], default=[BOS, 17, 42, 5, 9, 23, 11])
    parser.add_argument("--prompts", type=int, default=4,
                        help="with --quantize: agreement with JAX over --prompt and this many - 1 random prompts")
    parser.add_argument("--max-new", type=int, default=16)
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 4])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--engine-rounds", type=int, default=12,
                        help="rounds of LiteRT-LM's engine (each bundle generates once per round, alternating)")
    parser.add_argument("--batch-ms", type=float, default=50.0)
    parser.add_argument("--warmup-ms", type=float, default=500.0)
    parser.add_argument("--quantize", type=lambda s: [m for m in s.split(",") if m], default=[],
                        help="also export noxla quantized: a comma list of noxla.llm.quantize's modes (int8,int4)")
    parser.add_argument("--export-only", action="store_true", help="exports only: time, memory, size")
    parser.add_argument("--no-anchor", action="store_true", help="noxla alone (no litert-torch venv)")
    parser.add_argument("--no-engine", action="store_true", help="skip LiteRT-LM's engine")
    parser.add_argument("--venv-dir", default=os.path.expanduser("~/.cache/noxla-bench"))
    parser.add_argument("--work", help="keep the artifacts here (default: a fresh temporary directory)")
    parser.add_argument("--reuse", nargs="?", const="all", choices=("all", "litert-torch"),
                        help="take exports that an earlier run left in --work (its records of time and memory) "
                             "instead of exporting again: all of them, or litert-torch's only")
    parser.add_argument("--append", action="store_true", help="add the table to --out instead of replacing it")
    parser.add_argument("--out", default=os.path.join(REPO, "tools", "benchmark_results", "llm_benchmark.md"))
    args = parser.parse_args(argv)
    if args.cache is None:
        args.cache = 64 if args.config == "tiny" else 256
    from noxla.llm.quantize import QUANTIZER_MODES
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
