"""Every rule's declared cases, in every runtime, against JAX."""
import pytest

from limitations.targets import BROWSER_RUNTIMES, RUNTIMES
from lowering_rules import RULES
from tests.differential import (
    applies_fast_variant,
    contains_primitive,
    grouped_cases,
    has_nonfinite_args,
    run_case,
    traced_program,
)

CASES = [c for rule in RULES.values() for c in rule.cases]


def _strict_differs(case) -> bool:
    """Whether strict mode can run the case differently from the default mode: its program applies a
    fast variant somewhere. Elsewhere both modes emit the same ops and run the same inputs
    (tests/differential.py: default_mode_inputs), so a strict run would repeat the default one."""
    try:
        return applies_fast_variant(traced_program(case))
    except Exception:  # noqa: BLE001  (test_case reports the tracing error; keep the case here too)
        return True


# Strict mode where it can differ from the default: the cases of rules with a fast variant, and
# every case with NaN/inf inputs (the default mode runs those on finite inputs when a fast
# variant could see them), whose programs may take a fast variant (about a third of them).
STRICT_CASES = [c for c in CASES if not c.skip and (RULES[c.primitive].fast is not None or has_nonfinite_args(c))
                and _strict_differs(c)]
# The fast loop's runtime: TF eager. tf.function (tf_graph) runs in the full suite; in the fast loop
# it took 40% of the time for what TFLite and TF.js, converted from the same graphs, also check.
FAST_RUNTIMES = ("tf_eager",)
# In Chromium's WebGL, the first case of every rule: each primitive's kernels compile into
# fragment shaders and compute in float textures at least once. Chromium's cpu and wasm backends
# are the kernels the tfjs_cpu/tfjs_wasm runtimes run in Node, and WebGPU is an extra (it
# runs the zoo models, tests/test_zoo.py).
BROWSER_CASES = [rule.cases[0] for rule in RULES.values() if rule.cases]
BROWSER_CASE_RUNTIMES = ("chromium_webgl",)
# Chromium's WebGL runs the cases its check accepts for TF.js on WebGL (Target.TFJS_WEBGL); the rules
# that compute on whole 32-bit words there (mulhi, clz, shifts, rng_bit_generator) are rejected up front
# by their declared WebGL limitations, which tests/test_limitations.py proves necessary in WebGL.


def _runtime_params():
    # TFLite and TF.js conversions dominate the suite's time; the fast loop (-m "not slow")
    # keeps the TF runtimes, the full suite runs all of them.
    return [pytest.param(r, marks=() if r in FAST_RUNTIMES else pytest.mark.slow) for r in RUNTIMES
            if r not in BROWSER_RUNTIMES]


# Cases that show a rule's declared difference from JAX (Rule.differs) on the targets it names: there
# they must mismatch JAX (so a lowering that starts to match, or fails otherwise, shows up).
SHOW_DIFFERENCE = {"top_k:signed_nans", "reduce_sum:f16_rounds_each_step"}


@pytest.mark.parametrize("runtime", _runtime_params())
@pytest.mark.parametrize("case", grouped_cases(CASES))
def test_case(case, runtime, runtimes):
    if case.id in SHOW_DIFFERENCE and any(RUNTIMES[runtime].within(targets)
                                          for targets, _ in RULES[case.primitive].differs):
        try:
            outcome = run_case(case, runtime, runtimes)
        except AssertionError as e:
            assert "not equal" in str(e).lower(), e
            return
        # A target that rejects the case up front (TF.js has no float16) has nothing to show.
        assert outcome == "rejected", f"{case.id} matched JAX on {runtime}: its declared difference is gone"
        return
    run_case(case, runtime, runtimes)


@pytest.mark.parametrize("runtime", _runtime_params())
@pytest.mark.parametrize("case", grouped_cases(STRICT_CASES))
def test_case_strict(case, runtime, runtimes):
    run_case(case, runtime, runtimes, strict=True)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", BROWSER_CASE_RUNTIMES)
@pytest.mark.parametrize("case", BROWSER_CASES, ids=lambda c: c.id)
def test_case_in_chromium(case, runtime, runtimes):
    run_case(case, runtime, runtimes)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_exercises_its_primitive(case):
    program = traced_program(case)
    assert contains_primitive(program, case.primitive), (
        f"case {case.id} never applies {case.primitive}; it would test another rule")


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_has_cases(name):
    assert RULES[name].cases, f"rule {name} has no differential case"
