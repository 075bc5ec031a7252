"""The fuzzer's run in child processes, so that a native library aborting one neither ends the run
nor loses its counts.

JAX 0.12.1's XLA aborts the whole process on some valid convolutions (a failed CHECK in its
algebraic simplifier: negative padding with lhs dilation, found by the fuzzer's first run on that
JAX), and a LiteRT or TF kernel can abort too. ``python3 -m tests.fuzz`` therefore supervises: a
child runs ``tests.fuzz --in-process --state FILE`` from the seed, saving its counts and the step
it is in before every step (``Tally.at``). When a child dies on a signal, the program it was running
is counted, as "invalid" where JAX itself aborted computing the reference (no runtime can be held to
a value JAX cannot compute) or as "crashed" where a runtime's check or run aborted (a finding, with
the program), and the run goes on in a new child from the next seed until its minutes are up.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time


def supervise(args) -> int:
    from tests.fuzz import Tally, report, runtimes_for

    runtimes_to_run = runtimes_for([t for t in args.targets.split(",") if t])
    tally = Tally()
    start = time.monotonic()
    deadline = start + args.minutes * 60
    seeds, aborted_in_jax, stopped = [], [], False
    with tempfile.TemporaryDirectory() as scratch:
        state_path = os.path.join(scratch, "state.json")
        while not seeds or deadline - time.monotonic() > 1:
            seed = args.seed + len(seeds)
            seeds.append(seed)
            if os.path.exists(state_path):
                os.remove(state_path)
            left = max(deadline - time.monotonic(), 0.0)
            child = subprocess.run([sys.executable, "-m", "tests.fuzz", "--in-process", "--state", state_path,
                                    "--minutes", f"{left / 60:.5f}", "--seed", str(seed),
                                    "--targets", args.targets, "--primitives", args.primitives])
            state = _load(state_path)
            if state is not None:
                tally.absorb(state)
            if child.returncode >= 0:
                stopped = child.returncode == 2
                break
            aborted_in_jax += _count_abort(tally, state, _signal_name(child.returncode), seed)
    report(tally, args, runtimes_to_run, time.monotonic() - start, stopped, seeds=", ".join(map(str, seeds)))
    if aborted_in_jax:
        print(f"\nJAX itself aborted the process computing the reference of {len(aborted_in_jax)} program(s) "
              "(counted as invalid; the run went on from the next seed):")
        for line in aborted_in_jax:
            print(f"  {line}")
    return 2 if stopped else 1 if tally.failures else 0


def _count_abort(tally, state: dict | None, how: str, seed: int) -> list[str]:
    """Count the program a child died in; returns its line where JAX's reference aborted."""
    current = None if state is None else state["current"]
    if current is None:
        tally.failures.append(f"[crashed outside any program] seed {seed}: the fuzzer's process died ({how})")
        return []
    primitive, program, step = current
    if step == "jax":
        tally.counts[primitive]["invalid"] += 1
        tally.rejections[f"JAX aborted the process ({how})"] += 1
        return [f"seed {seed}: {program}"]
    tally.counts[primitive]["crashed"] += 1
    tally.failures.append(f"[crashed in {step}] {program}\n    the process died ({how}) in its check or run")
    return []


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"exit status {returncode}"


def _load(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)
