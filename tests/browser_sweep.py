"""Every rule case on every browser runtime, as users export it: the long differential net the suite
samples (tests/test_rules.py runs each rule's first case on WebGL, tests/test_litertjs.py every
16th rule's on LiteRT.js).

Per case (default mode, tests/differential.py's inputs): ``noxla.export_tflite(target="litertjs")``
run on LiteRT.js wasm, ``target="litertjs-webgpu"`` on LiteRT.js WebGPU, and one
``noxla.export_tfjs`` run in headless Chromium on TF.js's cpu, wasm, webgl and webgpu backends. Each
run is rejected up front (the export's check), or matches JAX, or is a failure: crashed after the
check, or differed. Counted apart, as the README declares them: a difference TF.js's WebGL or WebGPU
makes where the case's integers pass 2^24 (they hold int32 in float32), and one a GPU backend makes
where the case's inputs or JAX's outputs hold NaN or infinities; and a difference the case's rule
declares for the runtime's target (``Rule.differs``).

    python3 -m tests.browser_sweep [--runtimes litertjs_wasm,chromium_webgpu] [--rules div,rem]
        [--cases add:i32_wide_literal,...] [--json out]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
import traceback

import numpy as np

LITERTJS = {"litertjs_wasm": ("wasm", "litertjs"), "litertjs_webgpu": ("webgpu", "litertjs-webgpu")}
CHROMIUM = ("chromium_cpu", "chromium_wasm", "chromium_webgl", "chromium_webgpu")
RUNTIMES = (*LITERTJS, *CHROMIUM)
FLOAT32_INTS = ("chromium_webgl", "chromium_webgpu")  # int32 held in float32 textures/buffers
# GPU shaders need not keep IEEE NaN and infinities (WGSL lets an implementation assume none occur;
# TF.js's WebGL divides a / a as 1): JAX's non-finite results are not promised there (README).
GPUS = ("chromium_webgl", "chromium_webgpu", "litertjs_webgpu")
OUTCOMES = ("rejected", "matched", "crashed", "differed", "declared", "beyond 2^24", "non-finite")


def _beyond_float32(arrays) -> bool:
    return any(np.issubdtype(np.asarray(a).dtype, np.integer) and np.asarray(a).size
               and np.max(np.abs(np.asarray(a).astype(np.int64))) > 2 ** 24 for a in arrays)


def _non_finite(arrays) -> bool:
    import jax.numpy as jnp
    return any(jnp.issubdtype(np.asarray(a).dtype, jnp.inexact)
               and not np.all(np.isfinite(np.asarray(a).astype(np.complex128))) for a in arrays)


def _declared_difference(case, runtime: str) -> bool:
    """Whether the case's rule declares a difference from JAX (``Rule.differs``) on the runtime's target."""
    from limitations.targets import RUNTIMES as TARGETS
    from lowering_rules import RULES
    from lowering_rules.core.vocabulary import Target
    target = {"litertjs_wasm": Target.LITERTJS, "litertjs_webgpu": Target.LITERTJS_WEBGPU}.get(runtime)
    target = target or TARGETS[runtime]
    return any(target.within(targets) for targets, _ in RULES[case.primitive].differs)


class Sweep:
    def __init__(self, scratch: str, runtimes: tuple[str, ...]):
        self.scratch, self.runtimes = scratch, runtimes
        self.counts = {r: collections.Counter() for r in runtimes}
        self.failures: list[dict] = []
        self._litertjs = self._chromium = None

    def litertjs(self):
        if self._litertjs is None:
            from noxla.runtimes.litertjs import LiteRtJsRunner
            self._litertjs = LiteRtJsRunner()
        return self._litertjs

    def chromium(self):
        if self._chromium is None:
            from noxla.runtimes import BrowserRunner
            self._chromium = BrowserRunner()
        return self._chromium

    def close(self) -> None:
        for runner in (self._litertjs, self._chromium):
            if runner is not None:
                runner.close()

    def case(self, case) -> None:
        from noxla.errors import UnsupportedError
        from tests.differential import default_mode_inputs
        program, args, expected = default_mode_inputs(case)
        named = dict(zip(program.in_names, args))
        tfjs: dict = {}  # the case's one TF.js export (its directory or its error), for every backend
        for runtime in self.runtimes:
            try:
                model = self._export(case, program, args, runtime, tfjs)
            except UnsupportedError:
                self.counts[runtime]["rejected"] += 1
                continue
            except Exception as e:  # noqa: BLE001
                self._fail(case, runtime, "crashed", f"export: {type(e).__name__}: {e}")
                continue
            if isinstance(expected, Exception):
                self._fail(case, runtime, "crashed", f"JAX cannot run it, and the check passed: {expected!r}")
                continue
            try:
                if runtime in LITERTJS:
                    outs = self.litertjs().run(model, named, LITERTJS[runtime][0])
                else:
                    outs = self.chromium().run(model, named, backend=runtime.split("_", 1)[1])
                actual = [outs[n] for n in program.out_names]
            except Exception as e:  # noqa: BLE001
                self._fail(case, runtime, "crashed", f"run: {type(e).__name__}: {e}")
                continue
            self._compare(case, runtime, program, args, expected, actual)

    def _export(self, case, program, args, runtime: str, tfjs: dict) -> str:
        """The file ``runtime`` runs, exported as users export it (the export's check first)."""
        import noxla
        from noxla.errors import UnsupportedError
        from noxla.pipeline.preflight import full_check
        if runtime in LITERTJS:
            path = os.path.join(self.scratch, f"{runtime}.tflite")
            return noxla.export_tflite(case.fun, *args, path=path, target=LITERTJS[runtime][1], overwrite=True,
                                       polymorphic_shapes=case.polymorphic_shapes)
        if not tfjs:
            try:
                tfjs["dir"] = noxla.export_tfjs(case.fun, *args, path=os.path.join(self.scratch, "tfjs"),
                                                overwrite=True, polymorphic_shapes=case.polymorphic_shapes)
            except Exception as e:  # noqa: BLE001 - every TF.js backend reports it
                tfjs["error"] = e
        if "error" in tfjs:
            raise tfjs["error"]
        backend = {"chromium_webgl": "webgl", "chromium_webgpu": "webgpu"}.get(runtime)
        if backend and not full_check(program.closed_jaxpr, f"tfjs-{backend}").ok:
            raise UnsupportedError(f"rejected for TF.js on {backend}")  # its own declarations, beyond TF.js's
        return tfjs["dir"]

    def _compare(self, case, runtime, program, args, expected, actual) -> None:
        from tests.differential import assert_matches, runtime_tolerance
        try:
            assert_matches(expected, actual, program.out_names, case.atol, case.rtol, f"{case.id} [{runtime}]",
                           floor=runtime_tolerance(runtime))
        except AssertionError as e:
            if _declared_difference(case, runtime):
                self.counts[runtime]["declared"] += 1
                return
            if runtime in FLOAT32_INTS and _beyond_float32((*args, *expected)):
                self.counts[runtime]["beyond 2^24"] += 1
                return
            if runtime in GPUS and _non_finite((*args, *expected)):
                self.counts[runtime]["non-finite"] += 1
                return
            self._fail(case, runtime, "differed", str(e))
            return
        self.counts[runtime]["matched"] += 1

    def _fail(self, case, runtime: str, outcome: str, message: str) -> None:
        self.counts[runtime][outcome] += 1
        self.failures.append({"case": case.id, "runtime": runtime, "outcome": outcome, "message": message[:1500]})
        print(f"  {outcome}: {case.id} [{runtime}] {message[:300]}", flush=True)

    def table(self) -> str:
        rows = [f"| runtime | {' | '.join(OUTCOMES)} |", f"|---|{'---|' * len(OUTCOMES)}"]
        rows += [f"| {r} | {' | '.join(str(self.counts[r][o]) for o in OUTCOMES)} |" for r in self.runtimes]
        return "\n".join(rows)


def cases(rules: list[str], ids: list[str]) -> list:
    from lowering_rules import RULES
    chosen = rules or sorted({i.split(":")[0] for i in ids}) or sorted(RULES)
    return [c for name in chosen for c in RULES[name].cases if not c.skip and (not ids or c.id in ids)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help=f"any of {', '.join(RUNTIMES)}")
    parser.add_argument("--rules", default="", help="comma-separated rule names; default: all")
    parser.add_argument("--cases", default="", help="comma-separated case ids (rule:name); default: all")
    parser.add_argument("--json", help="write the counts and failures here")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    runtimes = tuple(r for r in args.runtimes.split(",") if r)
    unknown = set(runtimes) - set(RUNTIMES)
    if unknown:
        parser.error(f"unknown runtimes {sorted(unknown)}")
    chosen = cases([r for r in args.rules.split(",") if r], [c for c in args.cases.split(",") if c])
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="noxla-sweep-") as scratch:
        sweep = Sweep(scratch, runtimes)
        try:
            for i, case in enumerate(chosen):
                try:
                    sweep.case(case)
                except Exception as e:  # noqa: BLE001 - tracing or JAX itself: the case, not a runtime
                    traceback.print_exc()
                    sweep.failures.append({"case": case.id, "runtime": "-", "outcome": "case failed",
                                           "message": f"{type(e).__name__}: {e}"[:1500]})
                if i % 50 == 49:
                    print(f"{i + 1}/{len(chosen)} cases, {time.monotonic() - start:.0f} s", flush=True)
        finally:
            sweep.close()
    print(f"\n{len(chosen)} rule cases, {time.monotonic() - start:.0f} s\n\n{sweep.table()}\n\n"
          f"{len(sweep.failures)} failures")
    for f in sweep.failures:
        print(f"- {f['case']} [{f['runtime']}] {f['outcome']}: {f['message'][:600]}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"counts": {r: dict(c) for r, c in sweep.counts.items()}, "failures": sweep.failures}, out,
                      indent=1)
    return 1 if sweep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
