"""The dtype sweep's programs: every rule applied to every JAX dtype, built from the rule's own cases.

For a rule and a dtype, the sweep takes one of the rule's cases and re-types the case's data
arguments (those of the dtype the rule's primitive computes on in that case) to the swept dtype.
Index arguments, predicates and parameters stay as they are. A PRNG key dtype is reached by wrapping
uint32 key data (``jax.random.wrap_key_data``) inside the program, and key results are unwrapped,
since a program's inputs and outputs are plain arrays.

A combination is *valid* when JAX traces the re-typed program and the rule's primitive is applied
to the swept dtype in it; JAX itself refuses many combinations (``sin`` of an integer), and those are
not noxla's to support.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import zlib
from collections.abc import Callable, Sequence

import jax
import ml_dtypes
import numpy as np

from lowering_rules.core.cases import Case, default_tolerance
from noxla.front.tracing import Program, trace

# (name, dtype, needs x64). Key dtypes are named by their PRNG implementation.
_NUMERIC = (
    ("bool", np.bool_, False), ("int8", np.int8, False), ("int16", np.int16, False),
    ("int32", np.int32, False), ("int64", np.int64, True), ("uint8", np.uint8, False),
    ("uint16", np.uint16, False), ("uint32", np.uint32, False), ("uint64", np.uint64, True),
    ("float16", np.float16, False), ("bfloat16", ml_dtypes.bfloat16, False),
    ("float32", np.float32, False), ("float64", np.float64, True),
    ("complex64", np.complex64, False), ("complex128", np.complex128, True),
)
KEY_IMPLS = ("threefry2x32", "rbg")


@dataclasses.dataclass(frozen=True)
class SweepDtype:
    name: str
    dtype: object           # a numpy dtype, or the key implementation's name
    x64: bool = False

    @property
    def is_key(self) -> bool:
        return isinstance(self.dtype, str)

    def context(self):
        return jax.enable_x64(True) if self.x64 else contextlib.nullcontext()


SWEEP_DTYPES = tuple(SweepDtype(n, np.dtype(d), x64) for n, d, x64 in _NUMERIC) + tuple(
    SweepDtype(f"key<{impl}>", impl) for impl in KEY_IMPLS)


@dataclasses.dataclass
class SweepProgram:
    """One (rule, dtype) combination: the re-typed case, traced, and its inputs."""
    primitive: str
    dtype: SweepDtype
    case: Case
    fun: Callable
    args: tuple
    program: Program
    carried: bool = False   # its values of the swept dtype pass in and out as float32 (``carried_in_float32``)

    @property
    def key(self) -> tuple[str, str]:
        return self.primitive, self.dtype.name + ("@float32" if self.carried else "")


def _primitive_eqns(closed_jaxpr, name: str):
    from limitations.engine import iter_eqns
    return [e for e in iter_eqns(closed_jaxpr) if e.primitive.name == name]


def _data_dtype(eqn):
    """The dtype the primitive computes on: its first floating operand's, else its first non-bool
    operand's (a predicate or a mask is not data), else its first operand's, else its result's."""
    dtypes = [v.aval.dtype for v in eqn.invars if hasattr(v.aval, "dtype")]
    for pick in (lambda d: np.issubdtype(d, np.inexact), lambda d: d != np.bool_, lambda d: True):
        found = [d for d in dtypes if _plain(d) and pick(d)]
        if found:
            return np.dtype(found[0])
    outs = [v.aval.dtype for v in eqn.outvars if hasattr(v.aval, "dtype")]
    return np.dtype(outs[0]) if outs and _plain(outs[0]) else None


def _plain(dtype) -> bool:
    return not jax.dtypes.issubdtype(dtype, jax.dtypes.extended)


def _case_order(cases: Sequence[Case]):
    """Cases with generated float data first: a float operand re-types to every dtype, and literal
    edge-value arrays test edges, not dtypes."""
    from tests.differential import traced

    def rank(c):
        literal = any(not hasattr(a, "materialize") for a in c.args)
        if c.skip:  # the installed JAX cannot run it
            return None
        try:
            eqns = _primitive_eqns(traced(c)[0].closed_jaxpr, c.primitive)
        except Exception:  # noqa: BLE001 - a case that does not trace is no template
            return None
        if not eqns:
            return None
        data = _data_dtype(eqns[0])
        float_data = data is not None and np.issubdtype(data, np.floating)
        return (c.polymorphic_shapes is not None, not float_data, literal)

    ranked = [(rank(c), i, c) for i, c in enumerate(cases)]
    return [c for r, _, c in sorted((r, i, c) for r, i, c in ranked if r is not None)]


def retype(value: np.ndarray, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """``value`` in ``dtype``: floats keep their values, integers get small values of the right
    sign, bools a mix, complex numbers an imaginary part."""
    value = np.asarray(value)
    if np.issubdtype(value.dtype, np.inexact):
        value = np.nan_to_num(value.real, nan=0.0, posinf=3.0, neginf=-3.0)
    if dtype == np.bool_:
        return value > (0 if value.dtype != np.bool_ else False)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        v = np.round(value.astype(np.float64) * (1 if np.issubdtype(value.dtype, np.integer) else 3))
        if np.issubdtype(dtype, np.unsignedinteger):
            v = np.abs(v)
        return np.clip(v, max(info.min, -100), min(info.max, 100)).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        imag = rng.uniform(-1, 1, size=value.shape)
        return (value.astype(np.float64) + 1j * imag).astype(dtype)
    return value.astype(dtype)


def _key_data(impl: str, shape, rng: np.random.Generator) -> np.ndarray:
    words = jax.random.key_data(jax.random.key(0, impl=impl)).shape
    return rng.integers(0, 2 ** 32, size=(*shape, *words), dtype=np.uint64).astype(np.uint32)


def _unwrap_keys(tree):
    return jax.tree_util.tree_map(
        lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x, tree)


def _retyped(case: Case, sd: SweepDtype) -> tuple[Callable, tuple] | None:
    from tests.differential import traced
    program, args, _ = traced(case)
    eqns = _primitive_eqns(program.closed_jaxpr, case.primitive)
    data = _data_dtype(eqns[0]) if eqns else None
    if data is None:
        return None
    positions = [i for i, a in enumerate(args) if np.asarray(a).dtype == data]
    if not positions:
        return None
    rng = np.random.default_rng(zlib.crc32(f"{case.id}:{sd.name}".encode()))
    new_args = list(args)
    if sd.is_key:
        for i in positions:
            new_args[i] = _key_data(sd.dtype, np.shape(args[i]), rng)

        def fun(*xs):
            xs = [jax.random.wrap_key_data(x, impl=sd.dtype) if i in positions else x for i, x in enumerate(xs)]
            return _unwrap_keys(case.fun(*xs))
    else:
        for i in positions:
            new_args[i] = retype(args[i], sd.dtype, rng)
        fun = case.fun
    return fun, tuple(new_args)


def _applies_to(program: Program, primitive: str, sd: SweepDtype) -> bool:
    for eqn in _primitive_eqns(program.closed_jaxpr, primitive):
        for v in (*eqn.invars, *eqn.outvars):
            dtype = getattr(v.aval, "dtype", None)
            if dtype is None:
                continue
            if sd.is_key:
                if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
                    return True
            elif _plain(dtype) and np.dtype(dtype) == sd.dtype:
                return True
    return False


def sweep_program(rule, sd: SweepDtype) -> SweepProgram | str:
    """The (rule, dtype) program, or why there is none (JAX refuses the dtype for this primitive)."""
    why = "the rule has no case to re-type"
    for case in _case_order(rule.cases):
        made = _retyped(case, sd)
        if made is None:
            continue
        fun, args = made
        with sd.context():
            try:
                program = trace(fun, args)
            except Exception as e:  # noqa: BLE001 - JAX refuses this dtype here
                why = f"JAX refuses: {str(e).splitlines()[0][:160]}"
                continue
        if _applies_to(program, rule.primitive, sd):
            return SweepProgram(rule.primitive, sd, case, fun, args, program)
        why = f"no case applies {rule.primitive} to {sd.name}"
    return why


def carried_in_float32(sp: SweepProgram) -> SweepProgram:
    """``sp`` with its inputs and outputs of the swept dtype passed as float32 and cast inside the
    program (both casts exact for half floats): for a target that computes the dtype inside a
    program but takes none in or out (a .tflite's bfloat16), so that the rule itself is tried."""
    dtype = sp.dtype.dtype
    positions = {i for i, a in enumerate(sp.args) if np.asarray(a).dtype == dtype}

    def fun(*xs):
        xs = [x.astype(dtype) if i in positions else x for i, x in enumerate(xs)]
        return jax.tree_util.tree_map(lambda y: y.astype(np.float32) if y.dtype == dtype else y, sp.fun(*xs))

    args = tuple(np.asarray(a, np.float32) if i in positions else a for i, a in enumerate(sp.args))
    with sp.dtype.context():
        program = trace(fun, args)
    return dataclasses.replace(sp, fun=fun, args=args, program=program, carried=True)


def _swept(sd: SweepDtype) -> bool:
    """Whether ``--dtypes`` (passed on to the workers as NOXLA_SWEEP_DTYPES) leaves ``sd`` in."""
    import os
    wanted = os.environ.get("NOXLA_SWEEP_DTYPES")
    return not wanted or sd.name in wanted.split(",")


def _carries(target, sd: SweepDtype) -> bool:
    from lowering_rules.core.dtype_support import boundary_lacks, target_has
    return not sd.is_key and target_has(target, sd.name) and boundary_lacks(target, sd.name) is not None


# --------------------------------------------------------------------------- running a rule's sweep

# Comparing with JAX: half-precision results agree within a few units of their last place (JAX's
# CPU kernels and TF's may round intermediate sums differently); the rest as the case says.
def tolerance(sp: SweepProgram) -> tuple[float | None, float | None]:
    if sp.dtype.name not in ("float16", "bfloat16"):
        return sp.case.atol, sp.case.rtol
    atol, rtol = default_tolerance(sp.dtype.dtype)
    return max(atol, sp.case.atol or 0.0), max(rtol, sp.case.rtol or 0.0)


@dataclasses.dataclass
class Outcome:
    """One (rule, dtype, target): "matched", "rejected" (up front), or "invalid" (JAX refuses);
    "crashed" or "mismatched" are failures."""
    primitive: str
    dtype: str
    target: str
    result: str
    detail: str = ""


_PROGRAMS: dict[tuple[str, str], SweepProgram | str] = {}
_PROGRAMS_OF: dict[str, list[SweepProgram]] = {}  # each rule's valid programs


def rule_sweep(rule) -> list[SweepProgram | str]:
    """The rule's program for every sweep dtype (or why none), built once per process."""
    out = []
    for sd in SWEEP_DTYPES:
        key = (rule.primitive, sd.name)
        if key not in _PROGRAMS:
            _PROGRAMS[key] = sweep_program(rule, sd)
        out.append(_PROGRAMS[key])
    _PROGRAMS_OF[rule.primitive] = [p for p in out if not isinstance(p, str)]
    return out


def _batched(sweeps: Sequence[SweepProgram]) -> tuple[Callable, tuple]:
    """One program computing every swept dtype's case: one conversion per rule and target."""
    sizes = [len(s.args) for s in sweeps]

    def fun(*flat):
        outs, start = [], 0
        for s, n in zip(sweeps, sizes):
            outs.append(s.fun(*flat[start:start + n]))
            start += n
        return tuple(outs)

    fun.__name__ = f"sweep_{sweeps[0].primitive}".replace("-", "_")
    return fun, tuple(a for s in sweeps for a in s.args)


_EXPECTED: dict[tuple[str, str], list[np.ndarray]] = {}


def _expected(sp: SweepProgram) -> list[np.ndarray] | str:
    """JAX's outputs, once per process: every valid dtype of the rule (per x64 mode) in one jit."""
    key = sp.key
    if key not in _EXPECTED:
        from noxla.runtimes.verify import jax_outputs
        rule_programs = [p for p in _PROGRAMS_OF.get(sp.primitive, ()) if p.dtype.x64 == sp.dtype.x64]
        group = rule_programs if sp in rule_programs else [sp]
        fun, args = _batched(group)
        with sp.dtype.context():
            try:
                flat = jax_outputs(fun, args)
            except Exception:  # noqa: BLE001 - one member JAX cannot run: compute each alone
                flat = None
            for member in group:
                if flat is None:
                    try:
                        _EXPECTED[member.key] = jax_outputs(member.fun, member.args)
                    except Exception as e:  # noqa: BLE001 - JAX traces it but cannot run it
                        _EXPECTED[member.key] = f"JAX cannot run it: {_first_line(e)}"
                    continue
                n = len(member.program.out_avals)
                _EXPECTED[member.key], flat = flat[:n], flat[n:]
    return _EXPECTED[key]


def _mismatch(sp: SweepProgram, expected, actual) -> str | None:
    from tests.differential import assert_matches
    atol, rtol = tolerance(sp)
    try:
        assert_matches(expected, actual, sp.program.out_names, atol, rtol, f"{sp.primitive}|{sp.dtype.name}")
    except AssertionError as e:
        return f"mismatched: {_first_lines(e)}"
    return None


def _run(run, runtime: str, fun, program, args) -> list | str:
    try:
        return list(run(runtime, fun, program, args))
    except Exception as e:  # noqa: BLE001 - a crash after the check passed
        return f"crashed: {type(e).__name__}: {_first_line(e)}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


def _first_lines(e: BaseException, n: int = 6) -> str:
    return " | ".join(line.strip() for line in str(e).strip().splitlines()[:n] if line.strip())[:600]


def _ignore(event: str, members: Sequence[tuple[str, str]]) -> None:
    pass


def sweep_on(rules, target, runtimes_for_target: Sequence[str], run, *, solo=frozenset(),
             skip: dict | None = None, event=_ignore) -> list[Outcome]:
    """Every dtype of each rule on ``target``: the check on each (rule, dtype) program (it must
    report, never raise), then the accepted ones run together as one batched program per x64 mode
    and runtime, so each target converts once per batch. A batch that crashes is split in halves
    until the crashing programs are found; mismatches are compared program by program.

    ``run(runtime, fun, program, args)`` runs a traced program in a runtime. For process isolation
    (``sweep_isolated``): ``event(what, [(primitive, dtype), ...])`` is called before each step that
    could kill the process; ``solo`` combinations run alone, unbatched; ``skip`` maps the
    combinations (``(primitive, "*")``: the whole rule) already known to kill the process to why.
    """
    from limitations.engine import check_jaxpr
    skip = skip or {}
    outcomes, accepted = [], []
    for rule in rules:
        if (rule.primitive, "*") in skip:
            outcomes.append(Outcome(rule.primitive, "*", target.value, "crashed", skip[(rule.primitive, "*")]))
            continue
        event("prepare", [(rule.primitive, "*")])
        for sd, sp in zip(SWEEP_DTYPES, rule_sweep(rule)):
            if not _swept(sd):
                continue
            if isinstance(sp, str):
                outcomes.append(Outcome(rule.primitive, sd.name, target.value, "invalid", sp))
                continue
            if (rule.primitive, sd.name) in skip:
                outcomes.append(Outcome(rule.primitive, sd.name, target.value, "crashed",
                                        skip[(rule.primitive, sd.name)]))
                continue
            event("check", [(rule.primitive, sd.name)])
            if _carries(target, sd):
                sp = carried_in_float32(sp)
            with sd.context():
                try:
                    report = check_jaxpr(sp.program.closed_jaxpr, target)
                except Exception as e:  # noqa: BLE001 - the check must report, never raise
                    outcomes.append(Outcome(rule.primitive, sd.name, target.value, "crashed",
                                            f"the check raised {type(e).__name__}: {_first_line(e)}"))
                    continue
            if not report.ok:
                outcomes.append(Outcome(rule.primitive, sd.name, target.value, "rejected", report.format()))
            elif isinstance(_expected(sp), str):
                outcomes.append(Outcome(rule.primitive, sd.name, target.value, "invalid", _expected(sp)))
            else:
                accepted.append(sp)
    for x64 in (False, True):
        group = [sp for sp in accepted if sp.dtype.x64 == x64]
        if not group:
            continue
        problems: dict[int, list[str]] = {id(sp): [] for sp in group}
        batched = [sp for sp in group if (sp.primitive, sp.dtype.name) not in solo]
        batches = ([batched] if batched else []) + [[sp] for sp in group if (sp.primitive, sp.dtype.name) in solo]
        with group[0].dtype.context():
            for runtime in runtimes_for_target:
                for batch in batches:
                    for sp, problem in _run_members(batch, runtime, run, event):
                        problems[id(sp)].append(f"[{runtime}] {problem}")
        for sp in group:
            found = problems[id(sp)]
            result = found[0].split("] ", 1)[1].split(":")[0] if found else "matched"
            outcomes.append(Outcome(sp.primitive, sp.dtype.name, target.value, result, "\n".join(found)))
    return outcomes


def _run_members(members: Sequence[SweepProgram], runtime: str, run,
                 event=_ignore) -> list[tuple[SweepProgram, str]]:
    """(member, problem) for each member that crashes or differs from JAX in ``runtime``."""
    event(runtime, [(sp.primitive, sp.dtype.name) for sp in members])
    if len(members) == 1:
        sp = members[0]
        fun, args, program = sp.fun, sp.args, sp.program
    else:
        fun, args = _batched(members)
        program = trace(fun, args)
        _KEEP.append(program)  # the TF.js export cache is keyed by the program's id
    outs = _run(run, runtime, fun, program, args)
    if isinstance(outs, str):
        if len(members) == 1:
            return [(members[0], outs)]
        half = len(members) // 2
        return _run_members(members[:half], runtime, run, event) + _run_members(members[half:], runtime, run, event)
    found, start = [], 0
    for sp in members:
        expected = _expected(sp)
        problem = _mismatch(sp, expected, outs[start:start + len(expected)])
        start += len(expected)
        if problem:
            found.append((sp, problem))
    return found


_KEEP: list = []


# --------------------------------------------------------------------------- process isolation

# The runtimes of each target the sweep runs in.
TARGET_RUNTIMES = {"tf": ("tf_eager", "tf_graph"), "tflite": ("tflite",), "tfjs": ("tfjs_cpu", "tfjs_wasm")}


def _key(pair) -> str:
    return f"{pair[0]}|{pair[1]}"


def _worker() -> int:
    """One worker: reads {"target", "items" (rule names), "solo", "skip"} on stdin, prints a JSON line per event
    (``{"event": what, "members": ["primitive|dtype", ...]}``) before each step that could kill it,
    then ``{"outcomes": [...]}``. LiteRT aborts the process on some models: the parent
    (``sweep_isolated``) learns from the last event which combination did it."""
    import json
    import os
    import sys
    import tempfile

    import lowering_rules
    from limitations.targets import Target
    from noxla.runtimes import TfjsRunner
    from tests.differential import Runtimes

    request = json.loads(sys.stdin.read())
    out = sys.stdout

    # Fault injection for the isolation's own test: abort while running this combination.
    abort_on = os.environ.get("NOXLA_SWEEP_ABORT_ON")

    def event(what, members):
        out.write(json.dumps({"event": what, "members": [_key(m) for m in members]}) + "\n")
        out.flush()
        if abort_on in {_key(m) for m in members} and what in TARGET_RUNTIMES[request["target"]]:
            os.abort()

    target = request["target"]
    tfjs = TfjsRunner() if target == "tfjs" else None
    try:
        runtimes = Runtimes(tempfile.mkdtemp(dir=request["scratch"]), tfjs)
        outcomes = sweep_on([lowering_rules.RULES[n] for n in request["items"]], Target(target),
                            TARGET_RUNTIMES[target], runtimes.run,
                            solo={tuple(k.split("|", 1)) for k in request["solo"]},
                            skip={tuple(k.split("|", 1)): why for k, why in request["skip"].items()}, event=event)
    finally:
        if tfjs is not None:
            tfjs.close()
    out.write(json.dumps({"outcomes": [dataclasses.asdict(o) for o in outcomes]}) + "\n")
    out.flush()
    return 0


# TF's and absl's start-up chatter on stderr; a fatal message (F...) or a Python error is kept.
_NOISE = re.compile(r"^([WIE]\d{4} |\d{4}-\d\d-\d\d .*\] |WARNING: All log messages)")


def _died(returncode: int | None, stderr_tail: str) -> str:
    import signal
    if returncode is None:
        how = "timed out"
    elif returncode < 0:
        how = f"was killed by {signal.Signals(-returncode).name}"
    else:
        how = f"exited with status {returncode}"
    return f"crashed: the worker process {how}" + (f" ({stderr_tail})" if stderr_tail else "")


def sweep_isolated(names: Sequence[str], target: str, *, chunk: int = 12, timeout: float = 1200.0,
                   log=None) -> list[Outcome]:
    """``sweep_on`` for the rules ``names`` on ``target``, each chunk of rules in a worker subprocess
    (``isolated``); a rule whose worker dies before its first step is a crash of the rule ("*")."""
    return [Outcome(**o) for o in isolated("tests.dtype_sweep", target, names, chunk=chunk, timeout=timeout,
                                           log=log, whole=lambda name: f"{name}|*")]


def isolated(module: str, target: str, items: Sequence[str], *, chunk: int, timeout: float = 1200.0,
             log=None, whole=lambda item: item, on_chunk=None) -> list[dict]:
    """Run ``python3 -m module --worker`` on each chunk of ``items`` (one worker at a time), and
    return the outcomes (dicts) the workers print. A worker reads {"target", "items", "solo",
    "skip", "scratch"} on stdin and prints events as ``_worker`` does, writing its files under
    "scratch", a folder this removes at the end even if a worker died. A worker that dies (LiteRT aborts on
    some models) is restarted on its chunk; the members it was running when it died then run
    alone, and one member that kills a worker alone is passed in ``skip`` with why, for the worker
    to record as its crash. A worker that dies before its first event has every item of its chunk
    skipped (``whole(item)`` is the skip key of an item as a whole). ``on_chunk(outcomes)`` is
    called as each chunk ends, so that a long run shows its failures before it ends."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    import time

    began = time.time()
    outcomes: list[dict] = []
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout these tests are in
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    with tempfile.TemporaryDirectory(prefix="noxla_workers_") as scratch:
        for start in range(0, len(items), chunk):
            members_of_chunk = list(items[start:start + chunk])
            solo: set[str] = set()
            skip: dict[str, str] = {}
            while True:
                request = json.dumps({"target": target, "items": members_of_chunk, "solo": sorted(solo), "skip": skip,
                                      "scratch": scratch})
                with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
                    proc = subprocess.Popen([sys.executable, "-m", module, "--worker"], stdin=subprocess.PIPE,
                                            stdout=stdout, stderr=stderr, env=env, text=True, cwd=root)
                    proc.stdin.write(request)
                    proc.stdin.close()
                    try:
                        returncode = proc.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                        returncode = None
                    stdout.seek(0)
                    lines = [json.loads(line) for line in stdout if line.startswith("{")]
                    stderr.seek(0)
                    tail = [ln.strip() for ln in stderr.read().splitlines() if ln.strip() and not _NOISE.match(ln)][-1:]
                done = [line["outcomes"] for line in lines if "outcomes" in line]
                first, last_item = members_of_chunk[0], members_of_chunk[-1]
                if done and returncode == 0:
                    outcomes.extend(done[0])
                    if on_chunk:
                        on_chunk(done[0])
                    if log:
                        log(f"  {first}..{last_item}: done ({time.time() - began:.0f} s)")
                    break
                events = [line for line in lines if "event" in line]
                why = _died(returncode, tail[0][:300] if tail else "")
                if not events:  # died before its first step: nothing to blame but the chunk
                    skip.update({whole(n): why for n in members_of_chunk})
                    continue
                last = events[-1]
                members = last["members"]
                if len(members) == 1 or (last["event"] not in ("prepare", "check") and set(members) <= solo):
                    for m in members:
                        skip[m] = f"{why} during {last['event']}"
                else:
                    solo.update(members)
                if log:
                    log(f"  worker for {first}..{last_item} died during {last['event']} of {members[:4]}: {why}")
    return outcomes


def main(argv=None) -> int:
    """``python3 -m tests.dtype_sweep [tf|tflite|tfjs ...] [--rules a,b] [--dtypes bfloat16]``: the sweep's
    counts per target."""
    import argparse
    import collections
    import time

    import lowering_rules

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("targets", nargs="*", default=["tf"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rules", default="", help="comma-separated primitive names (default: every rule)")
    parser.add_argument("--dtypes", default="", help="comma-separated dtype names (default: every dtype)")
    parser.add_argument("--chunk", type=int, default=12, help="rules per worker process")
    args = parser.parse_args(argv)
    if args.worker:
        return _worker()
    names = args.rules.split(",") if args.rules else sorted(lowering_rules.RULES)
    if args.dtypes:
        import os
        os.environ["NOXLA_SWEEP_DTYPES"] = args.dtypes  # the workers inherit it
    bad = 0
    for name in args.targets:
        start = time.time()
        outcomes = sweep_isolated(names, name, chunk=args.chunk, log=print)
        counts = collections.Counter(o.result for o in outcomes)
        tried = sum(n for r, n in counts.items() if r != "invalid")
        print(f"{name}: {len(outcomes)} (rule, dtype) combinations, {counts['invalid']} refused by JAX; "
              f"tried {tried}: matched {counts['matched']}, rejected up front {counts['rejected']}, "
              f"crashed after the check {counts['crashed']}, differed silently {counts['mismatched']} "
              f"({time.time() - start:.0f} s)", flush=True)
        for o in outcomes:
            if o.result in ("crashed", "mismatched"):
                bad += 1
                print(f"  {o.primitive} on {o.dtype}: {o.detail.splitlines()[0] if o.detail else o.result}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
