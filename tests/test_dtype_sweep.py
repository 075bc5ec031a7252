"""Every rule on every JAX dtype, in every runtime: it matches JAX or is rejected up front.

Generated from the registry (tests/dtype_sweep.py builds one program per rule and dtype from the
rule's own cases). Per chunk of rules and target, the check runs on each (rule, dtype) program (it
must report, never raise), and the programs it accepts run as ONE batched program per x64 mode, so a
target converts once per chunk. A crash after the check passed, or a result that differs from JAX,
fails the test with the rule, dtype and runtime.

The suite sweeps every rule in TF (eager and graph), and a representative subset in TFLite and
TF.js, in worker processes (LiteRT aborts the process on some models). The full TFLite and TF.js
sweeps take tens of minutes on 2 cores: `python3 -m tests.dtype_sweep tflite tfjs` (counts in
docs/testing.md).
"""
import pytest

from limitations.targets import Target
from lowering_rules import RULES
from tests.dtype_sweep import SWEEP_DTYPES, TARGET_RUNTIMES, rule_sweep, sweep_isolated, sweep_on

# Rules run in chunks: one batched program per chunk, not per rule.
CHUNK = 12
NAMES = sorted(RULES)
CHUNKS = [NAMES[i:i + CHUNK] for i in range(0, len(NAMES), CHUNK)]

# The TFLite and TF.js subset: rules whose narrow-integer, uint32 and half-float kernels the full
# sweeps found missing (and that now widen, carry bits, or declare the gap), one of each family
# (arithmetic, comparison, conversion, indexing, reduction, scan, selection, movement).
SUBSET = ("convert_element_type", "cumsum", "div", "eq", "gather", "reduce_max", "select_n", "sign", "sub",
          "transpose")


def _failures(outcomes, target: str) -> str:
    return "\n".join(f"{o.primitive} on {o.dtype} for {target}: {o.result}\n{o.detail}"
                     for o in outcomes if o.result not in ("matched", "rejected", "invalid"))


# Slow: 20-50 s a chunk, about 9 of the fast loop's 3 minutes on 2 cores (the full suite runs it).
@pytest.mark.slow
@pytest.mark.parametrize("names", CHUNKS, ids=lambda names: f"{names[0]}..{names[-1]}")
def test_dtype_sweep_tf(names, runtimes):
    outcomes = sweep_on([RULES[n] for n in names], Target.TF, TARGET_RUNTIMES["tf"], runtimes.run)
    failures = _failures(outcomes, Target.TF.label)
    assert not failures, failures


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tflite", "tfjs"])
def test_dtype_sweep_subset(target):
    outcomes = sweep_isolated(SUBSET, target, chunk=len(SUBSET))
    assert {o.primitive for o in outcomes} == set(SUBSET)
    tried = [o for o in outcomes if o.result != "invalid"]
    assert sum(o.result == "matched" for o in tried) >= 10, "the subset must run, not only be rejected"
    failures = _failures(outcomes, target)
    assert not failures, failures


@pytest.mark.slow
def test_a_worker_that_aborts_is_a_crash_of_that_combination(monkeypatch):
    # The worker aborts (as LiteRT does) while running sub on int16: first in the batch of every
    # dtype, then alone. The sweep records that one combination as crashed, and runs the rest.
    monkeypatch.setenv("NOXLA_SWEEP_ABORT_ON", "sub|int16")
    outcomes = {o.dtype: o for o in sweep_isolated(["sub"], "tf")}
    assert outcomes["int16"].result == "crashed" and "SIGABRT" in outcomes["int16"].detail
    assert {o.result for d, o in outcomes.items() if d != "int16"} <= {"matched", "rejected", "invalid"}
    assert outcomes["int8"].result == outcomes["float32"].result == "matched"


def test_sweep_covers_every_dtype_family():
    names = {sd.name for sd in SWEEP_DTYPES}
    assert {"bool", "int8", "uint64", "bfloat16", "float64", "complex128"} <= names
    assert any(sd.is_key for sd in SWEEP_DTYPES)


@pytest.mark.parametrize("name", ["sin", "add", "reshape"])
def test_sweep_builds_programs_on_the_swept_dtype(name):
    # A generator that silently fell back to float32 would prove nothing.
    programs = dict(zip((sd.name for sd in SWEEP_DTYPES), rule_sweep(RULES[name])))
    assert not isinstance(programs["bfloat16"], str) and not isinstance(programs["float16"], str)
    assert not isinstance(programs["float64"], str)
    assert isinstance(programs["key<threefry2x32>"], str) or name == "reshape"


def test_check_reports_key_arrays_instead_of_raising():
    import jax
    import numpy as np

    import noxla

    def sort_keys(raw):  # JAX sorts key arrays; noxla's sort takes numbers only
        return jax.random.key_data(jax.lax.sort(jax.random.wrap_key_data(raw)))

    for target in map(Target, TARGET_RUNTIMES):
        report = noxla.check(sort_keys, np.zeros((4, 2), np.uint32), target=target)
        assert not report.ok
        if target is Target.TFJS:  # no uint32 key data at all there: the target's own dtype table
            assert all(v.value == "uint32" for v in report.violations), report.format()
            continue
        found = [v for v in report.violations if v.primitive == "sort"]
        assert found and found[0].param == "dtype" and found[0].value == "key<fry>", report.format()
        assert "PRNG key" in found[0].reason and "key_data" in found[0].workaround
