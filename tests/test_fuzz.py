"""The property-based fuzzer (tests/fuzz.py) in the suite: a fixed seed and a small budget.

Each drawn program must match JAX in every runtime or be rejected up front by the check for that
runtime's target; the first crash after the check or silent mismatch fails the test with the
program. NOXLA_FUZZ_EXAMPLES scales the number of programs (a longer run: python3 -m tests.fuzz).
The TF gradients of converted programs are JAX's VJPs (tests/fuzz_grad.py's tape_gradient_matches).
"""
import os

import pytest

from tests import fuzz, fuzz_grad
from tests.differential import Runtimes


def _examples(default: int) -> int:
    return int(os.environ.get("NOXLA_FUZZ_EXAMPLES", default))


def _run(targets, examples: int, seed: int, tfjs_runner, tmp_path) -> fuzz.Tally:
    runtimes_to_run = fuzz.runtimes_for(targets)
    # Its own Runtimes: exports are cached by id(program), and these programs die with the test.
    runtimes = Runtimes(str(tmp_path), tfjs_runner if "tfjs" in targets else None)
    tally = fuzz.fuzz(runtimes_to_run, runtimes, fuzz.Tally(), max_examples=examples, seed=seed,
                      raise_failures=True)
    tried = sum(c["tried"] for c in tally.counts.values())
    ran = sum(c["matched"] + c["rejected"] for c in tally.counts.values())
    assert tried == examples and ran > 0, tally.table()
    return tally


def test_fuzz_tf_eager(tmp_path):
    # About 10 s: every primitive's programs in TF eager.
    _run(["tf"], _examples(8), seed=0, tfjs_runner=None, tmp_path=tmp_path)


@pytest.mark.slow
def test_fuzz_every_runtime(tfjs_runner, tmp_path):
    # About 45 s: the same kind of programs converted to TFLite and TF.js (cpu, wasm) too.
    _run(["tf", "tflite", "tfjs"], _examples(40), seed=1, tfjs_runner=tfjs_runner, tmp_path=tmp_path)


def test_tf_gradient_of_converted_programs():
    # About 2 s: noxla.convert's tf.GradientTape gradient (noxla/writers/tf/gradients.py) of drawn programs.
    assert fuzz_grad.tape_fuzz(_examples(6), seed=0) > 0


def test_a_run_stopped_by_an_error_does_not_pass(capsys):
    # An unknown family (a primitive's name, "div") raised a KeyError inside hypothesis's first draw; the
    # run printed the traceback, "0 failures" and exited 0, as if it had found nothing.
    assert fuzz.main(["--minutes", "0.01", "--targets", "tf", "--primitives", "div"]) == 2
    assert "stopped on the error" in capsys.readouterr().out


def test_tflite_runs_the_file_the_default_export_writes(tmp_path):
    # The fuzzer's tflite ran TF's path alone until session 26, not the graph's TFLite writer that a
    # default export takes: it now runs what noxla.export_tflite writes, and counts each writer.
    import numpy as np
    program = fuzz.Program("add", "x + 1", lambda x: x + 1.0, (np.arange(6, dtype=np.float32).reshape(2, 3),))
    tally = fuzz.Tally()
    assert fuzz.run_program(program, ["tflite"], Runtimes(str(tmp_path), None), tally) == []
    assert tally.counts["add"]["matched"] == 1
    assert tally.writers == {("tflite", "graph"): 1}


def _sqrt_min_le():
    # Found by the elementwise family on LiteRT: sqrt of a negative input is NaN, and the default
    # mode's MINIMUM (fusion.MINIMUM: a NaN operand may give the other operand) dropped it.
    import numpy as np
    from jax import lax
    return fuzz.Program("sqrt", "sqrt -> min -> le", lambda a, b: lax.le(lax.min(lax.sqrt(a), b), b),
                        (np.array([[[-1.0, 2.25, 0.5]]], np.float32), np.array([[[1.0]]], np.float32)))


def test_a_mismatch_a_declared_fast_variant_explains_is_counted_apart(tmp_path):
    # The inputs are finite, so the program ran in the default mode only, and the declared
    # difference of its fused min counted as a failure. It is counted and printed apart now,
    # since strict mode matches.
    tally = fuzz.Tally()
    assert fuzz.run_program(_sqrt_min_le(), ["tflite"], Runtimes(str(tmp_path), None), tally) == []
    assert tally.counts["sqrt"]["declared"] == 1 and tally.counts["sqrt"]["differed"] == 0, tally.table()
    assert "min got a NaN or inf operand" in str(tally.declared[0])
    assert "strict mode matches" in str(tally.declared[0])


def test_a_mismatch_strict_mode_shares_stays_a_failure(tmp_path, monkeypatch):
    # The same program, with a runtime that differs from JAX in both modes: nothing declared.
    import numpy as np
    monkeypatch.setattr(fuzz, "_run", lambda *args: [np.ones((1, 1, 3), bool)])
    tally = fuzz.Tally()
    failures = fuzz.run_program(_sqrt_min_le(), ["tflite"], Runtimes(str(tmp_path), None), tally)
    assert [f.outcome for f in failures] == ["differed"] and not tally.declared, tally.table()


def test_a_reference_that_differs_between_two_runs_is_no_reference(tmp_path, monkeypatch):
    # JAX 0.10.2's XLA gave 1e27 or NaN, run to run, for a grouped strided convolution with a negative
    # padding (noxla: 11.25, as JAX 0.12.1): counted invalid, not as noxla's difference.
    import itertools

    import numpy as np

    from noxla.runtimes import verify
    draws = itertools.count()
    monkeypatch.setattr(verify, "jax_outputs", lambda fun, args: [np.full((1, 1, 3), next(draws), np.float32)])
    tally = fuzz.Tally()
    assert fuzz.run_program(_sqrt_min_le(), ["tflite"], Runtimes(str(tmp_path), None), tally) == []
    assert tally.counts["sqrt"]["invalid"] == 1 and tally.counts["sqrt"]["differed"] == 0, tally.table()


def test_a_subnormal_tfjs_keeps_is_a_declared_difference():
    # Found by the elementwise family as nextafter -> log: nextafter(0, -1) is the smallest float32
    # subnormal, which JAX's CPU flushes to zero in log (-inf) and TF.js keeps (log of a negative: NaN).
    import numpy as np
    from jax import lax

    from noxla.front.tracing import trace
    from noxla.runtimes.verify import jax_outputs
    program = fuzz.Program("nextafter", "nextafter -> log", lambda a, b: lax.log(lax.nextafter(a, b)),
                           (np.zeros((4, 4, 1), np.float32), np.full((1, 4, 1), -1.0, np.float32)))
    traced = trace(program.fun, program.args)
    expected = tuple(jax_outputs(program.fun, program.args))
    operands = fuzz._Operands(program, traced)
    reason = fuzz.declared(program, traced, "tfjs_cpu", None, fuzz.Tally(), expected, operands)
    assert "log got a float32 subnormal operand" in reason, reason
    # Not in a runtime that flushes subnormals as JAX does (and no fast variant took a NaN or inf).
    assert fuzz.declared(program, traced, "tflite", None, fuzz.Tally(), expected, operands) == ""


def test_a_process_aborted_by_a_native_library_is_counted_and_the_run_goes_on(monkeypatch, capsys):
    # JAX 0.12.1's XLA aborted the fuzzer's process (a failed CHECK on a convolution): the whole run
    # ended with no report. The supervisor counts the program its child died in and starts a child
    # from the next seed: here the first child dies in JAX's reference, the second in LiteRT, the third ends.
    import subprocess

    import numpy as np

    from tests import fuzz_supervise
    program = fuzz.Program("conv_general_dilated", "lhs_dilation=(2,)", lambda x: x, (np.zeros(3, np.float32),))
    seeds, steps = [], iter(["jax", "tflite", None])

    def child(command, **_):
        seeds.append(int(command[command.index("--seed") + 1]))
        tally = fuzz.Tally()
        tally.state_path = command[command.index("--state") + 1]
        tally.counts["pad"]["tried"] += 1
        tally.counts["pad"]["matched"] += 1
        step = next(steps)
        if step is None:
            tally.at(None)
            return subprocess.CompletedProcess(command, 0)
        tally.counts[program.primitive]["tried"] += 1
        tally.at(program, step)
        return subprocess.CompletedProcess(command, -6)

    monkeypatch.setattr(fuzz_supervise.subprocess, "run", child)
    code = fuzz.main(["--minutes", "5", "--targets", "tflite", "--seed", "7"])
    out = capsys.readouterr().out
    assert seeds == [7, 8, 9] and code == 1, out
    conv = [line for line in out.splitlines() if line.startswith("conv_general_dilated")]
    assert conv[0].split()[1:] == ["2", "1", "0", "0", "1", "0", "0"], out   # tried, invalid, ..., crashed
    assert "[crashed in tflite] conv_general_dilated: lhs_dilation=(2,)" in out
    assert "the process died (SIGABRT)" in out
    assert "JAX itself aborted the process computing the reference of 1 program(s)" in out
    assert "pad" in out and "3         0         0         3" in out


def test_wide_integer_draws_reach_the_edges_and_past_float32():
    # What a runtime computing int32 through floats gets wrong (TF.js's wasm FloorDiv, its cpu Square)
    # is out of reach of the small draws; the wide ones cover the whole range and its edges.
    import numpy as np
    rng = np.random.RandomState(0)
    small, wide = fuzz.values(rng, (4000,), "int32"), fuzz.values(rng, (4000,), "int32", wide=True)
    assert np.abs(small).max() <= 8
    assert {-(2 ** 31), 2 ** 31 - 1, 2 ** 24 + 1} <= set(wide.tolist())
    assert (np.abs(wide.astype(np.int64)) > 2 ** 24).mean() > 0.5
    assert fuzz.values(rng, (100,), "uint8", wide=True).max() == 255


def test_the_clipped_batched_scatter_min_derivative_is_drawn_only_where_jax_computes_it():
    # JAX 0.10.2's jvp of this scatter_min is NaN for finite inputs (0.12.1's is finite): no reference.
    import jax
    import numpy as np
    from jax import lax
    dn = lax.ScatterDimensionNumbers(update_window_dims=(0,), inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=(1,), operand_batching_dims=(0,),
                                     scatter_indices_batching_dims=(0,))
    indices = np.array([[2], [5], [3], [-2]], np.int32)

    def fun(x, u):
        return lax.scatter_min(x, indices, u, dn, mode=lax.GatherScatterMode.CLIP)
    x, u = np.zeros((4, 4), np.float32), -np.ones((2, 4), np.float32)
    tangent = jax.jvp(fun, (x, u), (np.ones_like(x), np.ones_like(u)))[1]
    program = fuzz.Program("scatter_min", f"{dn} mode=CLIP unique_indices=False", fun, (x, u))
    assert fuzz_grad._drawable("scatter", program, "jvp") == bool(np.isfinite(tangent).all())
