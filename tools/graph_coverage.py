"""How much of the rules noxla's graph records (issue 41, stage 1): every rule case the TF target
accepts, recorded (``noxla.graph.lower``), replayed as real TF ops (``noxla.writers.tf.replay``) and
compared with JAX. With ``--tflite``: every rule case the TFLite target accepts, written by the
graph's TFLite writer (``noxla.writers.tflite``, default mode) and run on LiteRT against JAX. With
``--tfjs``: every rule case TF.js's declarations accept, written as the default TF.js export writes
it (``noxla.pipeline.graph_path.write_program_tfjs``) and run on TF.js's Node cpu backend against JAX.

    python tools/graph_coverage.py [--tflite | --tfjs] [SUBSTRING]

Prints covered cases / all cases, the cases recorded but not matching (must be none), and the
``tf`` names (or uses) most often left Uncovered. tests/test_graph.py asserts the same per case.
"""
from __future__ import annotations

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Cases that show a rule's declared difference from JAX in some target (tests/test_rules.py).
DECLARED_DIFFERENCES = {"top_k:signed_nans", "reduce_sum:f16_rounds_each_step"}


def replay_case(case):
    """"uncovered: <what>", "rejected" (by the TF check, or JAX cannot run it) or "matched";
    raises AssertionError when the replayed graph differs from JAX."""
    from lowering_rules.core.vocabulary import Target
    from noxla.graph.dtypes import Uncovered
    from noxla.graph.lower import record_program
    from noxla.pipeline.preflight import full_check
    from noxla.writers.tf.replay import replay_numpy
    from tests.differential import assert_matches, default_mode_inputs
    program, args, expected = default_mode_inputs(case)
    if isinstance(expected, Exception) or not full_check(program.closed_jaxpr, Target.TF).ok:
        return "rejected"
    try:
        recorded = record_program(program)
    except Uncovered as e:
        return f"uncovered: {e}"
    actual = replay_numpy(recorded.graph, recorded.inputs, recorded.outputs, args)
    assert_matches(expected, actual, program.out_names, case.atol, case.rtol, f"{case.id} [graph replayed in TF]")
    return "matched"


def tflite_case(case):
    """As ``replay_case``, for the graph's TFLite writer on LiteRT (what ``export_tflite`` gives in
    its default mode: the fast variants' inputs made finite)."""
    from lowering_rules.core.vocabulary import Target
    from noxla.graph.dtypes import Uncovered
    from noxla.pipeline.preflight import full_check
    from noxla.runtimes import run_tflite
    from noxla.writers.tflite import graph_tflite_chunks
    from tests.differential import assert_matches, default_mode_inputs
    program, args, expected = default_mode_inputs(case)
    if isinstance(expected, Exception) or not full_check(program.closed_jaxpr, Target.TFLITE).ok:
        return "rejected"
    try:
        data = b"".join(bytes(c) for c in graph_tflite_chunks(program))
    except Uncovered as e:
        return f"uncovered: {e}"
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol,
                   f"{case.id} [graph tflite]")
    return "matched"


_TFJS_RUNNER = []


def tfjs_case(case):
    """As ``replay_case``, for the graph's TF.js writer on TF.js's Node cpu backend (the default
    export's model: the tests' harness, ``tests.differential.Runtimes.graph_model``)."""
    import tempfile

    from limitations.engine import check_jaxpr
    from lowering_rules.core.vocabulary import Target
    from noxla.graph.dtypes import Uncovered
    from noxla.pipeline.graph_path import write_program_tfjs
    from noxla.runtimes import TfjsRunner
    from tests.differential import assert_matches, default_mode_inputs
    program, args, expected = default_mode_inputs(case)
    if isinstance(expected, Exception) or not check_jaxpr(program.closed_jaxpr, Target.TFJS).ok:
        return "rejected"
    with tempfile.TemporaryDirectory() as path:
        try:
            write_program_tfjs(program, path)
        except Uncovered as e:
            return f"uncovered: {e}"
        if not _TFJS_RUNNER:
            _TFJS_RUNNER.append(TfjsRunner())
        outs = _TFJS_RUNNER[0].run(path, dict(zip(program.in_names, args)), "cpu")
    assert_matches(expected, [outs[n] for n in program.out_names], program.out_names, case.atol, case.rtol,
                   f"{case.id} [graph tfjs_cpu]")
    return "matched"


def main() -> int:
    from lowering_rules import RULES
    argv = sys.argv[1:]
    tflite, tfjs = "--tflite" in argv, "--tfjs" in argv
    argv = [a for a in argv if a not in ("--tflite", "--tfjs")]
    pattern = argv[0] if argv else ""
    run_case = tflite_case if tflite else tfjs_case if tfjs else replay_case
    target = "TFLite" if tflite else "TF.js" if tfjs else "TF"
    cases = [c for rule in RULES.values() for c in rule.cases
             if not c.skip and pattern in c.id and c.id not in DECLARED_DIFFERENCES]
    outcomes, failures = collections.Counter(), []
    for case in cases:
        try:
            outcome = run_case(case)
        except Exception as e:  # noqa: BLE001  (reported below)
            outcome = "failed"
            failures.append(f"{case.id}: {type(e).__name__}: {str(e)[:300]}")
        outcomes["uncovered" if outcome.startswith("uncovered") else outcome] += 1
        if outcome.startswith("uncovered"):
            outcomes[outcome] += 1
    accepted = len(cases) - outcomes["rejected"]
    print(f"rule cases the {target} target accepts: {accepted}; "
          f"{'recorded' if target == 'TF' else 'written'} and equal to JAX: {outcomes['matched']} "
          f"({100 * outcomes['matched'] / max(accepted, 1):.1f}%); uncovered: {outcomes['uncovered']}; "
          f"failed: {len(failures)}")
    for failure in failures:
        print("FAILED", failure)
    print("most often uncovered:")
    for what, count in sorted(((k, v) for k, v in outcomes.items() if k.startswith("uncovered: ")),
                              key=lambda kv: -kv[1])[:20]:
        print(f"  {count:4d}  {what.removeprefix('uncovered: ')}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
