"""The LLM decode step exported with and without lowering_rules.rope, side by side in one run.

    nice -n 10 python3 tools/rope_ab.py --config 135m

tests/tiny_llama.py's decoder (tools/llm_benchmark.py's configs and seed) through noxla.llm, once
as noxla lowers it and once with the rope rules switched off. Per export: ops of the decode
signature; whether the two files' logits and caches are the same bits; the logits against JAX's;
then decode and prefill latency in LiteRT's signature runners, the exports' timers interleaved
round by round in both orders of making them (tools/interleaving.interleaved_both_ways), at each
thread count: the machine is shared, so the ratio holds where absolute numbers do not. A copy of
the plain file runs beside them: its ratio to the plain file is the run's noise.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tools"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def export(config, params, lay, path: str, rope_on: bool, prefill: int) -> str:
    from lowering_rules import rope
    from noxla import llm
    from tests import tiny_llama
    saved = rope.halves_rotation, rope.rotate_half, rope.pairs_rotation
    if not rope_on:
        rope.halves_rotation = rope.rotate_half = rope.pairs_rotation = lambda ctx: None
    try:
        return llm.export_tflite(lambda p, *a: tiny_llama.step(config, p, *a), params, path, layout=lay,
                                 prefill_lengths=(prefill,), overwrite=True)
    finally:
        rope.halves_rotation, rope.rotate_half, rope.pairs_rotation = saved


def signature_ops(path: str, key: str) -> list[str]:
    """The builtin op names of one signature's subgraph (runtimes.tflite_op_names reads the first only)."""
    from tensorflow.lite.python import schema_py_generated as schema
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
    parser.add_argument("--cache", type=int, default=256)
    parser.add_argument("--prefill", type=int, default=16)
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 4])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch-ms", type=float, default=50.0)
    parser.add_argument("--warmup-ms", type=float, default=500.0)
    args = parser.parse_args(argv)
    import jax
    import llm_benchmark as lb
    import numpy as np
    from interleaving import interleaved_both_ways

    from noxla import llm
    from tests import tiny_llama
    config = lb.configs()[args.config]
    params = tiny_llama.init_params(config, seed=lb.SEED)
    lay = lb.layout(config, args.cache)
    work = tempfile.mkdtemp(prefix="rope_ab_")
    paths = {name: export(config, params, lay, os.path.join(work, f"{name}.tflite"), name == "rope", args.prefill)
             for name in ("rope", "plain")}
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
    paths["plain copy"] = os.path.join(work, "plain_copy.tflite")
    shutil.copyfile(paths["plain"], paths["plain copy"])
    same = all(np.array_equal(outs["rope"][k].view(np.uint32), outs["plain"][k].view(np.uint32)) for k in outs["plain"])
    want, _ = jax.jit(lambda *a: tiny_llama.step(config, *a))(params, feed["tokens"], pos, feed["mask"], cache)
    print(f"decode outputs of the two files the same bits: {same}; logits max |diff| vs JAX: "
          + ", ".join(f"{n} {float(np.abs(o['logits'] - np.asarray(want)).max()):.3g}" for n, o in outs.items()))
    for threads in args.threads:
        for signature in ("decode", f"prefill_{args.prefill}"):
            makers = {name: (lambda p=path, s=signature, n=threads: lb.signature_timers(
                p, n, args.prefill, args.cache, lay)[s]) for name, path in paths.items()}
            ms, ratios = interleaved_both_ways(makers, args.rounds, args.batch_ms, args.warmup_ms)
            print(f"{threads} thread(s) {signature}: rope {ms['rope']:.3f} ms, plain {ms['plain']:.3f} ms, "
                  f"rope/plain {ratios[('rope', 'plain')]:.3f}, plain copy/plain {ratios[('plain copy', 'plain')]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
