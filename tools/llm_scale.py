"""Real-size keras-hub decoders (random weights) to a quantized .litertlm on this machine: peak memory
and time of the export, and LiteRT-LM generating with the bundle.

    nice -n 5 python3 tools/llm_scale.py --shapes gemma3_1b --quantize int4
    nice -n 5 python3 tools/llm_scale.py --shapes qwen3_0.6b --quantize int4
    python3 tools/llm_scale.py --shapes gemma3_tiny --quantize int4     # a quick run of the same path

Shapes: the keras-hub backbone config of the named preset (``gemma3_1b``: keras-hub's ``gemma3_1b``,
26 layers, five sliding-window layers to one global, QK norm; ``qwen3_0.6b``: ``qwen3_0.6b_en``),
checked against the parameter count keras-hub's preset metadata gives, so that a wrong config
cannot pass for the real shapes. Weights are keras-hub's own initialisers, float32 (the dtype
noxla.llm's cache contract computes in; the presets store bfloat16).

The export runs in a child process (imports, building the model, noxla.llm.export_litertlm), whose
wall time and peak RSS (``os.wait4``'s rusage) are reported with the phases it times itself; then
LiteRT-LM's engine (1 thread, greedy) runs the bundle in another child, ``--rounds`` times after a
warm-up: its prefill ms, decode ms/token (medians) and peak RSS. The machine is shared: latencies
are indicative only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from bench_anchor import peak_mb  # tools/ is this script's folder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tools"))

BOS, EOS = 1, 2
GEMMA3_1B = dict(vocabulary_size=262144, image_size=None, num_layers=26, num_query_heads=4, num_key_value_heads=1,
                 hidden_dim=1152, intermediate_dim=6912, head_dim=256, query_head_dim_normalize=True,
                 use_query_key_norm=True, use_post_ffw_norm=True, use_post_attention_norm=True,
                 use_sliding_window_attention=True, sliding_window_size=512, layer_norm_epsilon=1e-6)
# name -> (keras_hub.models class, config, the preset whose metadata's parameter count it must have)
SHAPES = {
    "gemma3_1b": ("Gemma3Backbone", GEMMA3_1B, "gemma3_1b"),
    "qwen3_0.6b": ("Qwen3Backbone", dict(vocabulary_size=151936, num_layers=28, num_query_heads=16,
                                         num_key_value_heads=8, head_dim=128, hidden_dim=1024, intermediate_dim=3072,
                                         rope_max_wavelength=1_000_000, layer_norm_epsilon=1e-6,
                                         tie_word_embeddings=True, sliding_window_size=None), "qwen3_0.6b_en"),
    # Gemma 3 1B's structure at a size that exports in seconds: interleaved sliding-window (6) and
    # global layers (7 layers: both kinds and the pattern's restart), QK norm, post-norms.
    "gemma3_tiny": ("Gemma3Backbone", {**GEMMA3_1B, "vocabulary_size": 96, "num_layers": 7, "hidden_dim": 32,
                                       "intermediate_dim": 64, "head_dim": 8, "sliding_window_size": 6}, None),
}


def backbone(shapes: str, layers: int | None = None):
    """The backbone of ``shapes`` with keras-hub's random weights, its size checked against the
    preset (``layers``: fewer layers, for a quicker look at where time and memory go)."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras_hub
    name, config, preset = SHAPES[shapes]
    model = getattr(keras_hub.models, name)(**{**config, "num_layers": layers or config["num_layers"]},
                                            dtype="float32")
    if preset is not None and layers is None:
        want = keras_hub.models.Backbone.presets[preset]["metadata"]["params"]
        if model.count_params() != want:
            raise SystemExit(f"{shapes}: {model.count_params()} parameters, keras-hub's {preset} has {want}")
    return model


def export_child(request: dict) -> dict:
    """The measured process: imports, the model built, noxla.llm.export_litertlm."""
    start = time.perf_counter()
    from noxla import llm
    from tests import tiny_llama
    imported = time.perf_counter()
    model = backbone(request["shapes"], request.get("layers"))
    built = time.perf_counter()
    built_peak = peak_mb()
    steps = []

    def on_step(name, seconds):
        # Each step of the export as it ends: its time, the RSS then and the peak so far (GB).
        if seconds is not None:
            steps.append((name, round(seconds, 2), round(_rss_gb(), 2),
                          round(peak_mb() / 1024, 2)))
            print(*steps[-1], file=sys.stderr, flush=True)
    params = model.count_params()
    tokenizer = tiny_llama.word_level_tokenizer(os.path.join(request["work"], "tokenizer.json"),
                                                SHAPES[request["shapes"]][1]["vocabulary_size"])
    llm.export_litertlm(model, request["output"], tokenizer=tokenizer, cache_length=request["cache_length"],
                        start_token=BOS, stop_tokens=[EOS], prefill_lengths=(request["prefill"],),
                        quantize=request["quantize"], overwrite=True, on_step=on_step)
    return {"params": params, "import_s": imported - start, "build_s": built - imported,
            "export_s": time.perf_counter() - built, "peak_mb_after_build": built_peak, "steps": steps,
            "peak_mb": peak_mb()}


def _rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", choices=sorted(SHAPES), default="gemma3_tiny")
    parser.add_argument("--quantize", choices=["int4", "int8", "none"], default="int4")
    parser.add_argument("--cache-length", type=int, default=1024)
    parser.add_argument("--prefill", type=int, default=32, help="the prefill signature's length")
    parser.add_argument("--max-new", type=int, default=32, help="tokens LiteRT-LM decodes per round")
    parser.add_argument("--rounds", type=int, default=3, help="LiteRT-LM generations timed (after a warm-up)")
    parser.add_argument("--layers", type=int, help="fewer layers than the shapes' (no preset check)")
    parser.add_argument("--work", help="where the bundle is written (default: a temporary directory)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    from llm_benchmark import call_script

    from noxla.writers.litertlm import bundle as litertlm_bundle
    work = args.work or tempfile.mkdtemp(prefix="noxla-llm-scale-")
    os.makedirs(work, exist_ok=True)
    bundle = os.path.join(work, f"{args.shapes}-{args.quantize}.litertlm")
    request = {"shapes": args.shapes, "work": work, "output": bundle, "cache_length": args.cache_length,
               "prefill": args.prefill, "quantize": None if args.quantize == "none" else args.quantize,
               "layers": args.layers}
    print(f"exporting {args.shapes} ({args.quantize}) ...", file=sys.stderr, flush=True)
    exported, run = call_script(sys.executable, "scale-export", request, work, script=os.path.abspath(__file__))
    result = {"shapes": args.shapes, "quantize": args.quantize, "cache_length": args.cache_length,
              "prefill": args.prefill, "export": {**exported, **run}}
    if exported:
        result["bundle_mb"] = os.path.getsize(bundle) / 2**20
        print("LiteRT-LM ...", file=sys.stderr, flush=True)
        prompt = " ".join(f"t{t}" for t in (17, 42, 5, 9, 33, 8, 61, 70))
        engine, run = call_script(litertlm_bundle.engine_python(), "engine", {
            "models": {"noxla": bundle}, "threads": 1, "max_num_tokens": args.cache_length, "prompt": prompt,
            "max_output_tokens": args.max_new, "rounds": args.rounds}, work)
        result["engine"] = {**engine.get("noxla", {}), **run}
    print(json.dumps(result, indent=1, default=str))
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0 if exported and result["engine"].get("exit") == 0 else 1


def table(r: dict) -> str:
    e, g = r["export"], r.get("engine", {})

    def num(x, digits=3):
        return "—" if x is None else f"{x:.{digits}g}"
    return "\n".join([
        f"| {r['shapes']}, {r['quantize']}, cache {r['cache_length']}, prefill {r['prefill']} | |",
        "| --- | --- |",
        f"| parameters | {e.get('params', '—')} |",
        f"| export: wall s (imports, build, export) | {num(e.get('wall_s'))} ({num(e.get('import_s'), 2)}, "
        f"{num(e.get('build_s'), 2)}, {num(e.get('export_s'))}) |",
        f"| export: peak RSS GB (after building the model) | {num(e.get('peak_mb', 0) / 1024)} "
        f"({num(e.get('peak_mb_after_build', 0) / 1024)}) |",
        f"| .litertlm MB | {num(r.get('bundle_mb'), 4)} |",
        f"| LiteRT-LM, 1 thread: prefill ms, decode ms/token (indicative) | {num(g.get('prefill_ms'))}, "
        f"{num(g.get('decode_ms_per_token'))} |",
        f"| LiteRT-LM: peak RSS GB | {num(g.get('peak_mb', 0) / 1024)} |",
        f"| LiteRT-LM's greedy text | {g.get('text', g.get('failure', '—'))[:80]!r} |"])


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "scale-export":
        with open(sys.argv[2]) as f:
            request = json.load(f)
        reply = export_child(request)
        with open(sys.argv[3], "w") as f:
            json.dump(reply, f)
    else:
        sys.exit(main())
