"""JAX's own primitive harnesses (``jax._src.internal_test_util.test_harnesses``, the suite jax2tf
was tested with) through noxla, strict, compared with JAX.

Each harness on CPU (5,483 in JAX 0.10) is a program and its seeded inputs. It is *refused by JAX*
when JAX cannot trace or run it; otherwise the up-front check for the target either rejects it, or
it runs in each of the target's runtimes and must match JAX. Where a decomposition is not unique
(eigen- and singular vectors, QR's signs, LU's pivots among equal candidates, eig's order,
cholesky's unspecified upper triangle, approx_top_k's ties) a result that differs from JAX's is
still right when it is a valid decomposition of the operand: ``gauge.py``'s checks, the ones JAX's
own jax2tf tests make (their ``custom_assert``s), decide it.

This module is the only place in the tests that imports JAX internals for the harnesses.

``python3 -m tests.jax_harnesses tf|tfgraph|tflite|tfjs [--sample N] [--seed S] [--group G,...]``
prints the counts and every crash and mismatch, running chunks of harnesses in worker processes
(LiteRT aborts the process on some models: an abort is recorded as a crash of that harness).
``tflite`` runs the .tflite the export writes (``noxla.export_tflite``): noxla's graph's TFLite writer
where it covers the program, else TF's path (NOXLA_TFLITE_GRAPH=0: TF's path always); ``tfjs`` the
TF.js model the export writes, from the graph where it records the program, else through TF. Each
outcome names which wrote it (``Outcome.writer``), and the counts say how many each wrote. The
``tflite`` target imports no TensorFlow itself: in an environment without it, an export that needs
TF's path is counted apart ("needs_tf": it raised ``TensorFlowMissing``), any other error is a crash.
A target with ``+fast`` (``tflite+fast``) runs noxla's default lowering, the one users get, with its
fused ops: a crash is a failure as in strict mode, and so is a mismatch on finite inputs; where an
input holds NaN or inf the fused ops may differ by design (``noxla limitations``), so such a
mismatch is counted apart ("nonfinite"), not as a failure.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from lowering_rules.core.jax_compat import primitive_test_harnesses
from tests import dtype_sweep

# Each CLI target: the up-front check's target and the runtimes its programs run in.
TARGETS = {
    "tf": ("tf", ("tf_eager",)),
    "tfgraph": ("tf", ("tf_graph",)),
    "tflite": ("tflite", ("tflite_export",)),   # the export's .tflite: the graph's writer, else TF's path
    "tfjs": ("tfjs", ("tfjs_wasm",)),
    # noxla.writers.tflite's file alone, on the harnesses it covers ("uncovered" counted apart).
    "tflitegraph": ("tflite", ("tflite_graph",)),
}


@functools.cache
def all_harnesses() -> dict:
    """Every harness JAX runs on CPU, by its full name."""
    test_harnesses = primitive_test_harnesses()
    found = {}
    for h in test_harnesses.all_harnesses:
        if h.filter("cpu"):
            assert h.fullname not in found, f"two harnesses named {h.fullname}"
            found[h.fullname] = h
    return found


def names(sample: int | None = None, seed: int = 0, groups: Sequence[str] = ()) -> list[str]:
    """Harness names (all, or those of ``groups``), or a seeded sample of ``sample`` of them."""
    chosen = [n for n, h in all_harnesses().items() if not groups or h.group_name in groups]
    if sample is not None and sample < len(chosen):
        picked = np.random.default_rng(seed).choice(len(chosen), size=sample, replace=False)
        chosen = [chosen[i] for i in sorted(picked)]
    return chosen


def stratified(size: int, seed: int, always: Sequence[str] = ()) -> list[str]:
    """A seeded sample of ``size`` harnesses that holds ``always`` and one of every group (then
    more of each group in turn, at random), so that every primitive is tried: a plain sample of
    5,483 is mostly scatter."""
    rng = np.random.default_rng(seed)
    by_group: dict[str, list[str]] = {}
    for n, h in all_harnesses().items():
        by_group.setdefault(h.group_name, []).append(n)
    queues = [list(rng.permutation(members)) for _, members in sorted(by_group.items())]
    chosen = [n for n in always if n in all_harnesses()]
    picked = set(chosen)
    while len(chosen) < size and any(queues):
        for queue in queues:
            while queue and queue[0] in picked:
                queue.pop(0)
            if queue and len(chosen) < size:
                picked.add(queue[0])
                chosen.append(queue.pop(0))
    order = {n: i for i, n in enumerate(all_harnesses())}
    return sorted(chosen, key=order.__getitem__)


@dataclasses.dataclass
class HarnessProgram:
    name: str
    group: str
    dtype: object
    params: dict
    fun: Callable
    args: tuple
    program: object        # noxla.front.tracing.Program
    expected: list         # JAX's outputs


def build(name: str) -> HarnessProgram | str:
    """The harness traced with its seeded inputs and JAX's outputs, or why JAX refuses it."""
    from noxla.front.tracing import trace
    from noxla.runtimes.verify import jax_outputs
    h = all_harnesses()[name]
    rng = np.random.RandomState(zlib.crc32(name.encode()))
    try:
        args = tuple(np.asarray(a) for a in h.dyn_args_maker(rng))
        program = trace(h.dyn_fun, args)
        # The arguments as JAX takes them (int64 and float64 as int32 and float32, without x64):
        # the exported models' inputs have those dtypes, and TF.js and TFLite take no others.
        args = tuple(a.astype(aval.dtype) if a.dtype != aval.dtype else a for a, aval in zip(args, program.in_avals))
        expected = jax_outputs(h.dyn_fun, args)
    except Exception as e:  # noqa: BLE001 - JAX cannot trace or run this harness here
        return f"JAX refuses: {type(e).__name__}: {dtype_sweep._first_line(e)}"
    return HarnessProgram(name, h.group_name, h.dtype, dict(h.params), h.dyn_fun, args, program, expected)


@dataclasses.dataclass
class Outcome:
    """One harness on one target: "matched", "rejected" (up front), "invalid" (JAX refuses);
    "crashed" (after the check passed) or "mismatched" are failures."""
    name: str
    target: str
    result: str
    detail: str = ""
    writer: str = ""   # "graph" (noxla's graph's writer) or "tf" (TF's path) for tflite and tfjs


def _ignore(what, members):
    pass


def _target(target: str) -> tuple[str, bool]:
    """A CLI target's base (a TARGETS key) and whether it runs the default (fast) lowering."""
    base, _, mode = target.partition("+")
    if base not in TARGETS or mode not in ("", "fast"):
        raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}, optionally with +fast")
    return base, mode == "fast"


def _all_finite(args) -> bool:
    return all(np.all(np.isfinite(a)) for a in args if np.issubdtype(np.asarray(a).dtype, np.inexact))


def run_harness(name: str, target: str, run, check, writer=None, event=_ignore,
                hp: HarnessProgram | str | None = None) -> Outcome:
    """``name`` on the CLI ``target``: ``check(program, runtime)`` gives the up-front report,
    ``run(runtime, fun, program, args)`` the runtime's outputs, ``writer(program)`` (if given) which
    writer wrote the program's file, once it ran; ``hp``: the harness already built."""
    from tests.gauge import mismatch
    base, fast = _target(target)
    _, runtimes = TARGETS[base]
    if hp is None:
        event("prepare", [name])
        hp = build(name)
    if isinstance(hp, str):
        return Outcome(name, target, "invalid", hp)
    event("check", [name])
    try:
        report = check(hp.program, runtimes[0])
    except Exception as e:  # noqa: BLE001 - the check must report, never raise
        return Outcome(name, target, "crashed", f"the check raised {type(e).__name__}: {dtype_sweep._first_line(e)}")
    if report is not None and not report.ok:
        return Outcome(name, target, "rejected", report.format())
    if "tflite_graph" in runtimes:
        from noxla.writers.tflite import Uncovered, graph_tflite_chunks
        try:
            graph_tflite_chunks(hp.program, strict=not fast)
        except Uncovered as e:
            return Outcome(name, target, "uncovered", str(e))
        except Exception as e:  # noqa: BLE001 - a crash of the writer after the check passed
            return Outcome(name, target, "crashed", f"the graph tflite writer raised {type(e).__name__}: {e}")
    problems = []
    for runtime in runtimes:
        event(runtime, [name])
        outs = dtype_sweep._run(run, runtime, hp.fun, hp.program, hp.args)
        if isinstance(outs, str):
            # Only where TensorFlow is not installed: the export said so, as it must, before writing.
            outs = outs.replace("crashed: TensorFlowMissing", "needs_tf: TensorFlowMissing", 1)
            problems.append(f"[{runtime}] {outs}")
            continue
        problem = mismatch(hp, outs)
        if problem:
            kind = "nonfinite" if fast and not _all_finite(hp.args) else "mismatched"
            problems.append(f"[{runtime}] {kind}: {problem}")
    wrote = writer(hp.program) if writer is not None else ""
    if not problems:
        return Outcome(name, target, "matched", writer=wrote)
    return Outcome(name, target, problems[0].split("] ", 1)[1].split(":")[0], "\n".join(problems), wrote)


def runner(target: str, scratch: str, tfjs=None):
    """(run, check, writer) for ``target`` in this process (``run_harness``'s arguments)."""
    base, fast = _target(target)
    if TARGETS[base][1] == ("tflite_export",):
        return _export_runner(scratch, strict=not fast)
    from limitations.targets import Target
    from noxla.pipeline.preflight import full_check
    from tests.differential import Runtimes
    runtimes = Runtimes(scratch, tfjs)

    def run(runtime, fun, program, args):
        return runtimes.run(runtime, fun, program, args, strict=not fast)

    def check(program, runtime):
        if TARGETS[base][0] == "tf":
            return full_check(program.closed_jaxpr, Target.TF)
        return runtimes.check(program, "tflite" if runtime == "tflite_graph" else runtime, strict=not fast)

    def writer(program):  # the model tfjs_model ran: the graph's (cached) where it records the program
        return "graph" if runtimes.graph_model(program, not fast) is not None else "tf"
    return run, check, writer if base == "tfjs" else None


def _export_runner(scratch: str, strict: bool):
    """(run, check, writer) for the .tflite ``noxla.export_tflite`` writes, as users get it. Imports
    no TensorFlow (nor does the check), so that it also runs where TensorFlow is not installed."""
    from limitations.targets import Target
    from noxla.pipeline.preflight import full_check
    from tests.default_tflite import DefaultTflite
    default = DefaultTflite(scratch)

    def run(runtime, fun, program, args):
        return default.run(fun, args, program, strict)

    def check(program, runtime):
        return full_check(program.closed_jaxpr, Target.TFLITE)
    return run, check, lambda program: default.writer


def _worker() -> int:
    """One worker: reads {"target", "items" (harness names), "solo", "skip"} on stdin and prints a
    JSON line per event before each step that could kill it, then {"outcomes": [...]}
    (``dtype_sweep.isolated`` runs it)."""
    import json
    import sys
    import tempfile

    from noxla.runtimes import TfjsRunner

    request = json.loads(sys.stdin.read())
    target = request["target"]

    def event(what, members):
        sys.stdout.write(json.dumps({"event": what, "members": list(members)}) + "\n")
        sys.stdout.flush()

    targets = target.split(",")  # every target of the run, so that each harness is built once
    tfjs = TfjsRunner() if any(_target(t)[0] == "tfjs" for t in targets) else None
    try:
        scratch = tempfile.mkdtemp(dir=request["scratch"])
        runners = {t: runner(t, scratch, tfjs) for t in targets}
        outcomes = []
        for n in request["items"]:
            if n in request["skip"]:
                outcomes += [Outcome(n, t, "crashed", request["skip"][n]) for t in targets]
                continue
            event("prepare", [n])
            hp = build(n)
            outcomes += [run_harness(n, t, *runners[t], event=event, hp=hp) for t in targets]
    finally:
        if tfjs is not None:
            tfjs.close()
    sys.stdout.write(json.dumps({"outcomes": [dataclasses.asdict(o) for o in outcomes]}) + "\n")
    sys.stdout.flush()
    return 0


def run_isolated(items: Sequence[str], target: str, *, chunk: int = 200, log=None, on_chunk=None,
                 timeout: float = 1200.0) -> list[Outcome]:
    """``run_harness`` on each of ``items``, chunks of them in worker processes; ``on_chunk`` gets
    each chunk's outcomes as it ends."""
    def chunk_done(outcomes):
        if on_chunk:
            on_chunk([Outcome(**o) for o in outcomes])
    return [Outcome(**o) for o in dtype_sweep.isolated("tests.jax_harnesses", target, items, chunk=chunk, log=log,
                                                       on_chunk=chunk_done, timeout=timeout)]


def summary(target: str, outcomes: Sequence[Outcome]) -> str:
    import collections
    counts = collections.Counter(o.result for o in outcomes)
    return (f"{target}: {len(outcomes)} harnesses, refused by JAX {counts['invalid']}, rejected up front "
            f"{counts['rejected']}, matched {counts['matched']}, crashed after the check {counts['crashed']}, "
            f"differed silently {counts['mismatched']}"
            + (f", differed on NaN/inf inputs (fused ops, by design) {counts['nonfinite']}"
               if counts["nonfinite"] else "")
            + (f", not covered by the graph tflite writer {counts['uncovered']}" if counts["uncovered"] else "")
            + (f", needed TensorFlow (not installed: TensorFlowMissing) {counts['needs_tf']}"
               if counts["needs_tf"] else "")
            + _writers(outcomes))


def _writers(outcomes: Sequence[Outcome]) -> str:
    """Which writer wrote the files that ran, and how many of each matched."""
    import collections
    wrote = collections.Counter(o.writer for o in outcomes if o.writer)
    matched = collections.Counter(o.writer for o in outcomes if o.writer and o.result == "matched")
    if not wrote:
        return ""
    return (f"; written by noxla's graph {wrote['graph']} (matched {matched['graph']}), "
            f"by TF's path {wrote['tf']} (matched {matched['tf']})")


def main(argv=None) -> int:
    """``python3 -m tests.jax_harnesses tf|tfgraph|tflite|tfjs ... [--sample N] [--seed S]``: JAX's
    harnesses through noxla (strict) on each target, their counts, and every crash and mismatch.
    Exit status 1 if there is any."""
    import argparse
    import json
    import os
    import time

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("targets", nargs="*", default=["tf"],
                        help=f"any of {', '.join(TARGETS)}, each optionally with +fast (the default lowering)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sample", type=int, default=None, help="a seeded sample of N harnesses (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed")
    parser.add_argument("--group", default="", help="comma-separated harness groups (e.g. dot_general,eig)")
    parser.add_argument("--part", default="", help="K/N: the Kth of N contiguous parts of the chosen harnesses "
                        "(a long run split over processes)")
    parser.add_argument("--chunk", type=int, default=200, help="harnesses per worker process")
    parser.add_argument("--json", default="", help="write every outcome to this file (JSON lines)")
    parser.add_argument("--resume", action="store_true", help="skip the harnesses already in the --json file")
    parser.add_argument("--timeout", type=float, default=1200.0,
                        help="seconds a chunk may take before its worker counts as hung (raise it on a loaded machine)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.worker:
        return _worker()
    for t in args.targets:
        try:
            _target(t)
        except ValueError as e:
            parser.error(str(e))
    chosen = names(args.sample, args.seed, [g for g in args.group.split(",") if g])
    if args.part:
        k, n = (int(v) for v in args.part.split("/"))
        chosen = chosen[len(chosen) * (k - 1) // n:len(chosen) * k // n]
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as f:
            done = {json.loads(line)["name"] for line in f if line.strip()}
        chosen = [n for n in chosen if n not in done]
    bad = 0
    start = time.time()

    def on_chunk(outcomes):
        # Written as each chunk ends (the file is appended to), so that a run of hours shows its
        # failures, and keeps them, before it ends.
        for o in outcomes:
            if o.result in ("crashed", "mismatched") and not args.quiet:
                first = o.detail.splitlines()[0] if o.detail else ""
                print(f"  [{o.target}] {o.name}: {o.result}: {first}", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                for o in outcomes:
                    f.write(json.dumps(dataclasses.asdict(o)) + "\n")
    every = run_isolated(chosen, ",".join(args.targets), chunk=args.chunk, log=None if args.quiet else print,
                         on_chunk=on_chunk, timeout=args.timeout)
    print(f"{len(chosen)} harnesses on {', '.join(args.targets)} in {time.time() - start:.0f} s", flush=True)
    for target in args.targets:
        outcomes = [o for o in every if o.target == target]
        print(summary(target, outcomes), flush=True)
        for o in outcomes:
            if o.result in ("crashed", "mismatched"):
                bad += 1
                print(f"  {o.name}: {o.detail.splitlines()[0] if o.detail else o.result}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
