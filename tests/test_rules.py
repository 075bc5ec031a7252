"""Every rule's declared cases, in every runtime, against JAX."""
import pytest

from limitations.targets import BROWSER_RUNTIMES, RUNTIMES
from lowering_rules import RULES
from tests.differential import contains_primitive, has_nonfinite_args, run_case, traced

CASES = [c for rule in RULES.values() for c in rule.cases]
# Strict mode where it can differ from the default: the cases of rules with a fast variant, and
# every case with NaN/inf inputs (the default mode runs those on finite inputs when a fast
# variant could see them). Elsewhere both modes emit the same ops.
STRICT_CASES = [c for c in CASES if RULES[c.primitive].fast is not None or has_nonfinite_args(c)]
FAST_RUNTIMES = ("tf_eager", "tf_graph")
# In Chromium's WebGL, the first case of every rule: each primitive's kernels compile into
# fragment shaders and compute in float textures at least once. Chromium's cpu and wasm backends
# are the kernels the tfjs_cpu/tfjs_wasm runtimes run in Node, and WebGPU is an extra (it
# runs the zoo models, tests/test_zoo.py).
BROWSER_CASES = [rule.cases[0] for rule in RULES.values() if rule.cases]
BROWSER_CASE_RUNTIMES = ("chromium_webgl",)
# Known WebGL failures (strict: a fix shows up as an unexpected pass). TF.js's WebGL backend keeps
# int32 tensors in float32 textures, exact only below 2**24: these rules' first cases take or return
# int32/uint32 words above 2**24, which WebGL rounds on upload and in its textures (the tests run
# every op in shaders, tests/conftest.py; the PRNG rules compute on 16-bit limbs,
# lowering_rules/limb_values.py, and their first cases draw samples from inputs below 2**24). The
# WebGL sub-target of the limitations engine should reject these up front; until it does, they are
# listed here. rng_bit_generator also computes on whole 32-bit words (its counters and Philox's
# products), so it is inexact on WebGL's GPU path even from small inputs.
WEBGL_INT32_BITS = {"mulhi", "shift_right_logical", "shift_left", "clz", "rng_bit_generator"}


def _browser_case_params():
    reason = "WebGL keeps int32 in float32 textures: int32 words above 2**24 are rounded"
    return [pytest.param(c, marks=pytest.mark.xfail(reason=reason, strict=True)
                         if c.primitive in WEBGL_INT32_BITS else (), id=c.id) for c in BROWSER_CASES]


def _runtime_params():
    # TFLite and TF.js conversions dominate the suite's time; the fast loop (-m "not slow")
    # keeps the TF runtimes, the full suite runs all of them.
    return [pytest.param(r, marks=() if r in FAST_RUNTIMES else pytest.mark.slow) for r in RUNTIMES
            if r not in BROWSER_RUNTIMES]


@pytest.mark.parametrize("runtime", _runtime_params())
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(case, runtime, runtimes):
    run_case(case, runtime, runtimes)


@pytest.mark.parametrize("runtime", _runtime_params())
@pytest.mark.parametrize("case", STRICT_CASES, ids=lambda c: c.id)
def test_case_strict(case, runtime, runtimes):
    run_case(case, runtime, runtimes, strict=True)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", BROWSER_CASE_RUNTIMES)
@pytest.mark.parametrize("case", _browser_case_params())
def test_case_in_chromium(case, runtime, runtimes):
    run_case(case, runtime, runtimes)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_exercises_its_primitive(case):
    program, _, _ = traced(case)
    assert contains_primitive(program, case.primitive), (
        f"case {case.id} never applies {case.primitive}; it would test another rule")


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_has_cases(name):
    assert RULES[name].cases, f"rule {name} has no differential case"
