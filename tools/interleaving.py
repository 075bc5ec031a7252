"""Timing paths side by side (tools/benchmark.py's latency columns, tools/browser_benchmark.py): the
paths' batch timers in interleaved rounds, so that a slow spell on a shared machine hits every path."""
from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable


def interleaved(timers: dict[str, Callable[[int], float]], rounds: int, batch_ms: float,
                warmup_ms: float) -> tuple[dict, dict]:
    """Per path, the median ms per run; per (path, other path), the median per-round ratio.

    First a warm-up of warmup_ms: V8 tiers TF.js's wasm kernels and JS up over the first seconds
    (a model's wasm latency halves twice meanwhile), so earlier runs would favour whichever path
    ran last. Then each round times one batch of k runs of every path, in the order of the dict on
    even rounds and reversed on odd ones. k is the same for all paths: enough runs that the fastest
    path's batch lasts batch_ms, estimated from the last warm-up batch."""
    per_run_ms = {p: max(t(1), 1e-4) for p, t in timers.items()}
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        k = max(1, min(10000, round(batch_ms / min(per_run_ms.values()))))
        per_run_ms = {p: max(t(k), 1e-5) for p, t in timers.items()}
    k = max(1, min(10000, round(batch_ms / min(per_run_ms.values()))))
    per_run: dict[str, list[float]] = {p: [] for p in timers}
    order = list(timers)
    for r in range(rounds):
        for p in (order if r % 2 == 0 else order[::-1]):
            per_run[p].append(timers[p](k))
    ms = {p: statistics.median(v) for p, v in per_run.items()}
    ratios = {(a, b): statistics.median(x / y for x, y in zip(per_run[a], per_run[b]))
              for a in timers for b in timers if a != b}
    return ms, ratios


def interleaved_both_ways(makers: dict[str, Callable[[], Callable[[int], float]]], rounds: int, batch_ms: float,
                          warmup_ms: float) -> tuple[dict, dict]:
    """`interleaved` over timers made (``makers``: path -> a function making its timer) in the given
    order for half the rounds and in the reverse order for the other half; per path the mean of the
    halves' medians, per pair the geometric mean of their ratios. Which LiteRT interpreter is made
    first matters: copies of one BERT-base .tflite, side by side under load 4-5, measured the first
    made 1.02x the last at 1 thread and 1.15-1.2x at 4 (tools/benchmark_results/real_size.md), and
    noxla's is made first. Each half's timers are dropped before the next are made."""
    import gc
    halves = []
    for order in (list(makers), list(makers)[::-1]):
        made = {p: makers[p]() for p in order}
        halves.append(interleaved({p: made[p] for p in makers}, max(1, (rounds + 1) // 2), batch_ms, warmup_ms))
        del made
        gc.collect()
    ms = {p: statistics.mean(h[0][p] for h in halves) for p in makers}
    ratios = {k: (halves[0][1][k] * halves[1][1][k]) ** 0.5 for k in halves[0][1]}
    return ms, ratios


def checkout_version() -> str:
    """The measured checkout's commit (with "+ uncommitted changes" when its tracked files differ),
    for a report's first line."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args):
        proc = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False)
        return proc.stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "an unknown commit"
    return commit + (" + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")
