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
import zlib
from collections.abc import Callable, Sequence

import jax
import ml_dtypes
import numpy as np

from lowering_rules.cases import Case, default_tolerance
from noxla.tracing import Program, trace

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
    key = (sp.primitive, sp.dtype.name)
    if key not in _EXPECTED:
        from noxla.verify import jax_outputs
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
                        _EXPECTED[(member.primitive, member.dtype.name)] = jax_outputs(member.fun, member.args)
                    except Exception as e:  # noqa: BLE001 - JAX traces it but cannot run it
                        _EXPECTED[(member.primitive, member.dtype.name)] = f"JAX cannot run it: {_first_line(e)}"
                    continue
                n = len(member.program.out_avals)
                _EXPECTED[(member.primitive, member.dtype.name)], flat = flat[:n], flat[n:]
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


def sweep_on(rules, target, runtimes_for_target: Sequence[str], run) -> list[Outcome]:
    """Every dtype of each rule on ``target``: the check on each (rule, dtype) program (it must
    report, never raise), then the accepted ones run together as one batched program per x64 mode
    and runtime, so each target converts once per batch. A batch that crashes is split in halves
    until the crashing programs are found; mismatches are compared program by program.

    ``run(runtime, fun, program, args)`` runs a traced program in a runtime.
    """
    from limitations.engine import check_jaxpr
    outcomes, accepted = [], []
    for rule in rules:
        for sd, sp in zip(SWEEP_DTYPES, rule_sweep(rule)):
            if isinstance(sp, str):
                outcomes.append(Outcome(rule.primitive, sd.name, target.value, "invalid", sp))
                continue
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
        with group[0].dtype.context():
            for runtime in runtimes_for_target:
                for sp, problem in _run_members(group, runtime, run):
                    problems[id(sp)].append(f"[{runtime}] {problem}")
        for sp in group:
            found = problems[id(sp)]
            result = found[0].split("] ", 1)[1].split(":")[0] if found else "matched"
            outcomes.append(Outcome(sp.primitive, sp.dtype.name, target.value, result, "\n".join(found)))
    return outcomes


def _run_members(members: Sequence[SweepProgram], runtime: str, run) -> list[tuple[SweepProgram, str]]:
    """(member, problem) for each member that crashes or differs from JAX in ``runtime``."""
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
        return _run_members(members[:half], runtime, run) + _run_members(members[half:], runtime, run)
    found, start = [], 0
    for sp in members:
        expected = _expected(sp)
        problem = _mismatch(sp, expected, outs[start:start + len(expected)])
        start += len(expected)
        if problem:
            found.append((sp, problem))
    return found


_KEEP: list = []


def main(argv=None) -> int:
    """``python3 -m tests.dtype_sweep [tf|tflite|tfjs ...]``: the sweep's counts per target."""
    import argparse
    import collections
    import tempfile
    import time

    import lowering_rules
    from limitations.targets import Target
    from noxla.runtimes import TfjsRunner
    from tests.differential import Runtimes

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("targets", nargs="*", default=["tf"])
    args = parser.parse_args(argv)
    runs = {"tf": ("tf_eager", "tf_graph"), "tflite": ("tflite",), "tfjs": ("tfjs_cpu", "tfjs_wasm")}
    rules = [lowering_rules.RULES[n] for n in sorted(lowering_rules.RULES)]
    bad = 0
    for name in args.targets:
        start = time.time()
        runtimes = Runtimes(tempfile.mkdtemp(), TfjsRunner() if name == "tfjs" else None)
        outcomes = sweep_on(rules, Target(name), runs[name], runtimes.run)
        counts = collections.Counter(o.result for o in outcomes)
        tried = sum(n for r, n in counts.items() if r != "invalid")
        print(f"{name}: {len(outcomes)} (rule, dtype) combinations, {counts['invalid']} refused by JAX; "
              f"tried {tried}: matched {counts['matched']}, rejected up front {counts['rejected']}, "
              f"crashed after the check {counts['crashed']}, differed silently {counts['mismatched']} "
              f"({time.time() - start:.0f} s)")
        for o in outcomes:
            if o.result in ("crashed", "mismatched"):
                bad += 1
                print(f"  {o.primitive} on {o.dtype}: {o.detail.splitlines()[0] if o.detail else o.result}")
        if runtimes.tfjs:
            runtimes.tfjs.close()
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
