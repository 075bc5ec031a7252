"""The LLM decode step exported with and without one of noxla's rewrites, side by side in one run.

    nice -n 10 python3 tools/lowering_ab.py --config 135m --switch rope
    python3 tools/lowering_ab.py --config 135m --switch projections --engine-rounds 30

tests/tiny_llama.py's decoder (tools/llm_benchmark.py's configs and seed) through noxla.llm, once
as noxla exports it ("on") and once with the switched rewrite left out ("off"): ``rope``, the
lowering_rules.patterns.rope rules; ``projections``, noxla.writers.tflite.flatbuffer.projections (a decode step's
projections of one input joined). Per export: ops of the decode signature; whether the two files' logits and caches
are the same bits; the logits against JAX's; then decode and prefill latency in LiteRT's signature
runners, the exports' timers interleaved round by round in both orders of making them
(tools/interleaving.interleaved_both_ways), at each thread count: the machine is shared, so the
ratio holds where absolute numbers do not. A copy of the "off" file runs beside them: its ratio to
the "off" file is the run's noise. ``--engine-rounds`` also bundles the three files and runs
LiteRT-LM's engine on them, alternating within each round (tools/llm_bench_anchor.py's engine).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tools"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@contextlib.contextmanager
def switched_off(switch: str):
    """noxla with ``switch`` left out, for the ``with`` block."""
    import noxla.pipeline.tf_path
    from lowering_rules.patterns import rope
    if switch == "rope":
        names, module = ("halves_rotation", "rotate_half", "pairs_rotation"), rope
    else:
        names, module = ("join_matrix_vector_projections",), noxla.pipeline.tf_path
    saved = {name: getattr(module, name) for name in names}
    for name in names:
        setattr(module, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def export(config, params, lay, path: str, switch: str | None, prefill: int) -> str:
    """Export as noxla does, or with ``switch`` left out."""
    from noxla import llm
    from tests import tiny_llama
    with switched_off(switch) if switch else contextlib.nullcontext():
        return llm.export_tflite(lambda p, *a: tiny_llama.step(config, p, *a), params, path, layout=lay,
                                 prefill_lengths=(prefill,), overwrite=True)


def signature_ops(path: str, key: str) -> list[str]:
    """The builtin op names of one signature's subgraph (runtimes.tflite_op_names reads the first only)."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    with open(path, "rb") as f:
        model = schema.Model.GetRootAs(f.read(), 0)
    names = {code: name for name, code in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    for i in range(model.SignatureDefsLength()):
        signature = model.SignatureDefs(i)
        if signature.SignatureKey().decode() == key:
            graph = model.Subgraphs(signature.SubgraphIndex())
            ops = [codes[graph.Operators(j).OpcodeIndex()] for j in range(graph.OperatorsLength())]
            # Codes past 127 live in BuiltinCode; the deprecated byte holds 127 for them.
            return [names[max(c.BuiltinCode(), c.DeprecatedBuiltinCode())] for c in ops]
    raise KeyError(key)


def decode_outputs(path: str, feed: dict) -> dict:
    from ai_edge_litert.interpreter import Interpreter
    return Interpreter(model_path=path).get_signature_runner("decode")(**feed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=("tiny", "135m", "1b"), default="tiny")
    parser.add_argument("--switch", choices=("rope", "projections"), default="rope")
    parser.add_argument("--engine-rounds", type=int, default=0,
                        help="rounds of LiteRT-LM's engine on the bundled exports (0: none)")
    parser.add_argument("--max-new", type=int, default=16)
    parser.add_argument("--cache", type=int, default=256)
    parser.add_argument("--prefill", type=int, default=16)
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 4])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch-ms", type=float, default=50.0)
    parser.add_argument("--warmup-ms", type=float, default=500.0)
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="lowering_ab_")  # three exports and bundles: GBs at 135M's shapes
    try:
        return compare(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(args, work: str) -> int:
    import jax
    import llm_benchmark as lb
    import numpy as np
    from interleaving import interleaved_both_ways

    from noxla import llm
    from tests import tiny_llama
    config = lb.configs()[args.config]
    params = tiny_llama.init_params(config, seed=lb.SEED)
    lay = lb.layout(config, args.cache)
    paths = {name: export(config, params, lay, os.path.join(work, f"{name}.tflite"),
                          None if name == "on" else args.switch, args.prefill)
             for name in ("on", "off")}
    for name, path in paths.items():
        ops, prefill_ops = signature_ops(path, "decode"), signature_ops(path, f"prefill_{args.prefill}")
        print(f"{name}: decode {len(ops)} ops, prefill_{args.prefill} {len(prefill_ops)} ops; "
              f"decode {sorted(collections.Counter(ops).items())}")
    rng = np.random.default_rng(0)
    pos = np.array([args.prefill], np.int32)
    cache = [tuple((0.5 * rng.standard_normal(x.shape)).astype(np.float32) for x in pair) for pair in lay.empty()]
    feed = {"tokens": np.array([[7]], np.int32), "input_pos": pos, "mask": llm.causal_mask(pos, args.cache),
            **dict(zip(llm.cache_names(lay), (x for pair in cache for x in pair)))}
    outs = {name: decode_outputs(path, feed) for name, path in paths.items()}
    paths["off copy"] = os.path.join(work, "off_copy.tflite")
    shutil.copyfile(paths["off"], paths["off copy"])
    same = all(np.array_equal(outs["on"][k].view(np.uint32), outs["off"][k].view(np.uint32)) for k in outs["off"])
    want, _ = jax.jit(lambda *a: tiny_llama.step(config, *a))(params, feed["tokens"], pos, feed["mask"], cache)
    print(f"decode outputs of the two files the same bits: {same}; logits max |diff| vs JAX: "
          + ", ".join(f"{n} {float(np.abs(o['logits'] - np.asarray(want)).max()):.3g}" for n, o in outs.items()))
    for threads in args.threads:
        for signature in ("decode", f"prefill_{args.prefill}"):
            makers = {name: (lambda p=path, s=signature, n=threads: lb.signature_timers(
                p, n, args.prefill, args.cache, lay)[s]) for name, path in paths.items()}
            ms, ratios = interleaved_both_ways(makers, args.rounds, args.batch_ms, args.warmup_ms)
            print(f"{threads} thread(s) {signature}: on {ms['on']:.3f} ms, off {ms['off']:.3f} ms, "
                  f"on/off {ratios[('on', 'off')]:.3f}, off copy/off {ratios[('off copy', 'off')]:.3f}")
    if args.engine_rounds:
        engine_rounds(paths, config, args, work)
    return 0


def engine_rounds(paths: dict, config, args, work: str) -> None:
    """The three files bundled and run in LiteRT-LM's engine: decode ms per token, and the median
    (quartiles) of the per-round ratios on/off and off copy/off."""
    import statistics

    import llm_benchmark as lb

    from noxla.writers.litertlm import bundle as litertlm_bundle
    from tests import tiny_llama
    tokenizer, metadata = os.path.join(work, "tokenizer.json"), os.path.join(work, "llm_metadata.textproto")
    tiny_llama.word_level_tokenizer(tokenizer, config.vocab)
    with open(metadata, "w") as f:
        f.write(litertlm_bundle.metadata_textproto(lb.BOS, [lb.EOS], args.cache))
    bundles = {name: os.path.join(work, name.replace(" ", "_") + ".litertlm") for name in paths}
    for name, path in paths.items():
        litertlm_bundle.call("build", {"tflite": path, "metadata": metadata, "tokenizer": tokenizer,
                                       "output": bundles[name]})
    prompt = " ".join(f"t{t}" for t in [1, 17, 42, 5, 9, 23, 11][1:])  # llm_benchmark's prompt after <bos>
    for threads in args.threads:
        request = {"models": bundles, "threads": threads, "max_num_tokens": args.cache, "prompt": prompt,
                   "max_output_tokens": args.max_new, "rounds": args.engine_rounds}
        reply, run = lb.call_script(litertlm_bundle.engine_python(), "engine", request, work)
        if not reply:
            print(f"{threads} thread(s) LiteRT-LM: failed: {run.get('failure', 'no reply')}")
            continue
        same_text = len({reply[name]["text"] for name in bundles}) == 1
        parts = []
        for name in ("on", "off copy"):
            ratios = lb.round_ratios(reply, name, "off")
            low, high = statistics.quantiles(ratios, n=4)[::2]
            parts.append(f"{name}/off {statistics.median(ratios):.3f} (quartiles {low:.3f} to {high:.3f})")
        print(f"{threads} thread(s) LiteRT-LM decode: on {reply['on']['decode_ms_per_token']:.2f} ms/token, "
              f"off {reply['off']['decode_ms_per_token']:.2f}; " + ", ".join(parts) + f"; same text: {same_text}")


if __name__ == "__main__":
    sys.exit(main())
