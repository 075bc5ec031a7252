"""Unrolled or WHILE: what a static scan costs in LiteRT each way (issue 40, "loops by measured cost").

    python tools/loop_cost.py [--shapes 12x24,16x24,48x24,16x128] [--steps 50] [--rounds 15] [--out FILE]

noxla unrolls a scan whose steps x equations stay within ``lowering_rules.control_flow.UNROLL_BUDGET``
and writes a WHILE loop otherwise. For the zoo's LSTM classifier (tests/zoo.py: embedding, Flax's
OptimizedLSTMCell over the sequence, a dense head) at each LENGTHxHIDDEN, this exports both forms
(the budget forced up or to 0) and reports, per form, LiteRT's operators (main graph + bodies),
instructions per call at 1 thread counted by valgrind's callgrind (tools/llm_graph.py's count: the
machine's load does not move it) and, interleaved (tools/interleaving.py), the latency ratio
unrolled / WHILE at 1 thread. Each form's output is checked against JAX first.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tools"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DEFAULT_OUT = os.path.join(REPO, "tools", "benchmark_results", "loop_cost.md")


def lstm_classifier(length: int, hidden: int):
    """The zoo's LSTM classifier with ``hidden`` units over ``length`` tokens: (function, tokens)."""
    import flax.linen as nn
    import jax
    import numpy as np

    from tests import zoo

    class LSTMClassifier(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            x = nn.Embed(zoo.VOCAB, 16)(tokens)
            x = nn.RNN(nn.OptimizedLSTMCell(hidden))(x)
            return nn.Dense(4)(x[:, -1])

    tokens = np.random.default_rng(0).integers(0, zoo.VOCAB, (1, length)).astype(np.int32)
    params = LSTMClassifier().init(jax.random.PRNGKey(0), tokens)
    return (lambda t: LSTMClassifier().apply(params, t)), tokens


def export_both(fun, tokens, work: str, name: str) -> dict[str, str]:
    """``fun`` exported unrolled and as a WHILE loop: {form: path}."""
    import noxla
    from lowering_rules import control_flow
    paths, saved = {}, control_flow.UNROLL_BUDGET
    try:
        for form, budget in (("unrolled", 10**9), ("WHILE", 0)):
            control_flow.UNROLL_BUDGET = budget
            paths[form] = os.path.join(work, f"{name}_{form}.tflite")
            noxla.export_tflite(fun, tokens, path=paths[form])
    finally:
        control_flow.UNROLL_BUDGET = saved
    return paths


def litert_timer(path: str, tokens):
    """A batch timer (k runs -> ms per run) of ``path`` at 1 thread, and its output."""
    from ai_edge_litert.interpreter import Interpreter
    runner = Interpreter(model_path=path, num_threads=1).get_signature_runner("serving_default")
    (name,) = runner.get_input_details()
    out = runner(**{name: tokens})

    def timer(k: int) -> float:
        start = time.perf_counter()
        for _ in range(k):
            runner(**{name: tokens})
        return (time.perf_counter() - start) * 1e3 / k
    return timer, next(iter(out.values()))


def measure(length: int, hidden: int, work: str, steps: int, rounds: int) -> dict:
    import numpy as np
    from benchmark import tflite_op_counts
    from interleaving import interleaved
    from llm_graph import instructions_per_call
    fun, tokens = lstm_classifier(length, hidden)
    expected = np.asarray(fun(tokens))
    paths = export_both(fun, tokens, work, f"lstm_{length}x{hidden}")
    row, timers = {"shape": f"{length}x{hidden}"}, {}
    for form, path in paths.items():
        timers[form], out = litert_timer(path, tokens)
        error = float(np.max(np.abs(out - expected)))
        if error > 1e-4:
            raise AssertionError(f"{form} differs from JAX by {error}")
        main, bodies = tflite_op_counts(path)
        row[form] = {"ops": f"{main}+{bodies}" if bodies else str(main), "error": error,
                     "instructions": instructions_per_call(path, "serving_default", steps)}
    ms, ratios = interleaved(timers, rounds, batch_ms=20, warmup_ms=1000)
    row.update(ms=ms, ratio=ratios[("unrolled", "WHILE")])
    return row


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")


def report(rows: list[dict], command: str) -> str:
    from interleaving import checkout_version
    lines = ["# Unrolled or WHILE: a static scan's cost in LiteRT", "", f"Command: `{command}`", "",
             f"noxla at {checkout_version()}; {cpu_name()}, "
             f"{os.cpu_count()} cores, load average at the end {os.getloadavg()[0]:.1f}. LiteRT (ai-edge-litert, "
             "XNNPACK), 1 thread. Instructions per call: callgrind, (count of 1 + N calls - count of 1) / N. "
             "Latency: both forms interleaved, median ms per run and median per-round ratio.", "",
             "| LSTM length x hidden | ops unrolled | ops WHILE | instructions unrolled (M) | instructions WHILE (M) "
             "| instructions unrolled / WHILE | ms unrolled | ms WHILE | latency unrolled / WHILE |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        u, w = r["unrolled"], r["WHILE"]
        lines.append(f"| {r['shape']} | {u['ops']} | {w['ops']} | {u['instructions'] / 1e6:.3f} | "
                     f"{w['instructions'] / 1e6:.3f} | {u['instructions'] / w['instructions']:.2f} | "
                     f"{r['ms']['unrolled']:.4f} | {r['ms']['WHILE']:.4f} | {r['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="12x24,16x24,48x24,16x128")
    parser.add_argument("--steps", type=int, default=50, help="calls counted by callgrind")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="noxla-loop-cost-") as work:
        rows = []
        for shape in args.shapes.split(","):
            length, hidden = (int(v) for v in shape.split("x"))
            rows.append(measure(length, hidden, work, args.steps, args.rounds))
            print(rows[-1], flush=True)
    text = report(rows, "python tools/loop_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
