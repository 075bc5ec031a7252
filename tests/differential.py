"""The differential harness: run a case in JAX and in one runtime, and compare.

A runtime whose target the rule declares unsupported for the case must instead
reject it up front, through a declared limitation (never a missing rule or an
unknown parameter).

Two lowering modes. Strict mode (``strict=True``) must match JAX exactly, NaN and inf
included. The default mode may use fused ops that differ from JAX for NaN/inf operands where a
rule declares it (``Rule.fast``); it must match JAX exactly on finite inputs. So a default-mode
run of a case whose inputs hold NaN/inf and whose program applies such a rule (``FastVariant
.applies``) runs on the same inputs with NaN -> 0, +inf -> 1, -inf -> -1 and compares with JAX on
those; every other default-mode run uses the case's own inputs. Strict mode runs the cases of
rules with a fast variant and every case with NaN/inf inputs, where the case's program may take a
fast variant (tests/test_rules.py); for the others the two modes emit the same ops on the same inputs.
"""
from __future__ import annotations

import collections
import itertools
import os
import shutil
import weakref
from typing import Callable, Sequence

import jax
import numpy as np

import noxla
from limitations.engine import Report, check_jaxpr
from limitations.targets import BROWSER_RUNTIMES, RUNTIMES, Target
from lowering_rules import RULES
from lowering_rules.core.cases import ArgSpec, Case
from noxla.front.tracing import Program, trace
from noxla.pipeline import graph_path as graph
from noxla.pipeline.preflight import full_check
from noxla.runtimes import BROWSER_TOLERANCE, BrowserRunner, TfjsRunner, run_tflite
from noxla.runtimes.verify import jax_outputs
from tests.compare import assert_matches  # noqa: F401 - the suite imports it from here


def serving_function(*args, **kwargs):
    """TF's path's lowering (``noxla.pipeline.tf_path.serving_function``), imported when first
    needed: without TensorFlow installed the harness runs what noxla's graph writes, and a program
    that needs TF's path raises ``TensorFlowMissing`` (counted apart), not an ImportError here."""
    from noxla.errors import require_tensorflow
    require_tensorflow("TF's path (a program noxla's graph does not cover)")
    from noxla.pipeline.tf_path import serving_function as tf_serving_function
    return tf_serving_function(*args, **kwargs)


def tflite_bytes(*args, **kwargs):
    from noxla.pipeline.tf_tflite import tflite_bytes as tf_tflite_bytes
    return tf_tflite_bytes(*args, **kwargs)


def write_tfjs(*args, **kwargs):
    from noxla.pipeline.tf_tfjs import write_tfjs as tf_write_tfjs
    return tf_write_tfjs(*args, **kwargs)


def runtime_tolerance(runtime: str) -> float:
    """The float tolerance a runtime is held to at least: a browser backend's (see BROWSER_TOLERANCE)."""
    if runtime.startswith("litertjs_"):
        from noxla.runtimes.litertjs import TOLERANCE
        return TOLERANCE[runtime.split("_", 1)[1]]
    return BROWSER_TOLERANCE[runtime.split("_", 1)[1]] if runtime in BROWSER_RUNTIMES else 0.0


def _numpy(x) -> np.ndarray:
    # .numpy(): np.asarray fails on a bfloat16 scalar tensor ("__array__ not producing an array").
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


class Runtimes:
    """Runs a traced program in each runtime; exports are cached per program."""

    def __init__(self, scratch_dir: str, tfjs: TfjsRunner | None, browser: Callable[[], BrowserRunner] | None = None,
                 shared_dir: str | None = None):
        self.scratch_dir = scratch_dir
        # Exports keyed by case id, shared by the test processes of one session: a case's Node and
        # Chromium runs convert it once (the TF.js conversion costs far more than the runs).
        self.shared_dir = shared_dir
        self.tfjs = tfjs
        self._browser = browser  # started on first use: most tests never need Chromium
        self._tfjs_dirs: dict[object, str] = {}
        # By id(program), with the program's weak reference: a program freed since (a harness
        # worker builds one per harness) leaves its id to a new one, which must not get its model.
        self._tfjs_models: dict[tuple, tuple] = {}
        self._graph_models: dict[tuple, tuple] = {}
        self._serial = itertools.count()
        # A case's TF.js runtimes run one after another: the last few lowerings are all that is reused.
        self._tfjs_lowerings: collections.OrderedDict = collections.OrderedDict()

    @property
    def browser(self) -> BrowserRunner:
        return self._browser()

    def require(self, runtime: str) -> None:
        """Skip (with the reason) a browser backend that this Chromium does not offer; only WebGPU may be
        missing, since the others are part of every Chromium."""
        if runtime in BROWSER_RUNTIMES:
            backend = runtime.split("_", 1)[1]
            if backend == "webgpu" and backend not in self.browser.backends():
                import pytest
                pytest.skip(f"this Chromium offers no WebGPU adapter (offers {self.browser.backends()})")

    def run(self, runtime: str, fun: Callable, program: Program, args: Sequence[np.ndarray],
            polymorphic_shapes=None, strict: bool = False, key: str | None = None) -> list[np.ndarray]:
        if runtime == "tf_eager":
            out = noxla.convert(fun, polymorphic_shapes=polymorphic_shapes, strict=strict)(*args)
            return [_numpy(x) for x in jax.tree_util.tree_leaves(out)]
        if runtime == "tf_graph":
            import tensorflow as tf

            from noxla.pipeline.tf_path import input_signature
            graph_fn = tf.function(noxla.convert(fun, polymorphic_shapes=polymorphic_shapes, strict=strict),
                                   input_signature=input_signature(program), autograph=False)
            return [_numpy(x) for x in jax.tree_util.tree_leaves(graph_fn(*args))]
        named = dict(zip(program.in_names, args))
        if runtime == "tflite":
            outs = run_tflite(tflite_bytes(serving_function(program, strict=strict, tflite=True)), named)
            return [outs[n] for n in program.out_names]
        if runtime == "tflite_graph":  # noxla.writers.tflite's file (raises Uncovered where it has none)
            outs = run_tflite(graph_tflite_bytes(program), named)
            return [outs[n] for n in program.out_names]
        if runtime in ("tfjs_cpu", "tfjs_wasm"):
            outs = self.tfjs.run(self.tfjs_model(program, strict, key), named, backend=runtime.split("_")[1])
            return [outs[n] for n in program.out_names]
        if runtime in BROWSER_RUNTIMES:
            outs = self.browser.run(self.tfjs_model(program, strict, key), named, backend=runtime.split("_", 1)[1])
            return [outs[n] for n in program.out_names]
        raise ValueError(f"unknown runtime {runtime}")

    def tfjs_lowering(self, program: Program, strict: bool = False):
        """The lowering a TF.js export of ``program`` converts, made once: the up-front check's op-list
        backstop reads it (``check``) instead of lowering the program a second time."""
        key = (id(program), strict)
        if not _holds(self._tfjs_lowerings, key, program):
            self._tfjs_lowerings[key] = (weakref.ref(program),
                                         serving_function(program, strict=strict, uint32_as_int32=True))
            while len(self._tfjs_lowerings) > 4:
                self._tfjs_lowerings.popitem(last=False)
        return self._tfjs_lowerings[key][1]

    def check(self, program: Program, runtime: str, strict: bool = False, key: str | None = None) -> Report | None:
        """The up-front check for ``runtime``'s target; None when a shared TF.js export of ``key``
        exists, since it is written only after the same (deterministic) check passed for TF.js."""
        target = RUNTIMES[runtime]
        if not target.within((Target.TFJS,)):
            return full_check(program.closed_jaxpr, target)
        declared = check_jaxpr(program.closed_jaxpr, target)
        if not declared.ok or self.graph_model(program, strict) is not None:
            return declared  # the graph's writer checked its ops against TF.js's list: no backstop
        if key is not None and self.shared_dir is not None and os.path.exists(
                os.path.join(self._shared_path(key, strict), "model.json")):
            # TF.js on WebGL adds declarations only (its own and TF.js's): no lowering to read.
            return None if target is Target.TFJS else check_jaxpr(program.closed_jaxpr, target)
        from noxla.errors import tensorflow_installed
        if not tensorflow_installed():  # the backstop reads noxla's graph's ops; TF's path's export then
            return full_check(program.closed_jaxpr, target)  # says it needs TensorFlow (needs_tf)
        from noxla.writers.tfjs.ops import backstop_reading  # TF's path's op list (imports TF)
        backstop = backstop_reading(program.closed_jaxpr, lambda: self.tfjs_lowering(program, strict))
        return full_check(program.closed_jaxpr, target, backstop)

    def _shared_path(self, key: str, strict: bool) -> str:
        key = f"{key}{'.strict' if strict else ''}"
        return os.path.join(self.shared_dir, "".join(c if c.isalnum() or c in "-_." else "_" for c in key))

    def tfjs_model(self, program: Program, strict: bool = False, key: str | None = None) -> str:
        from_graph = self.graph_model(program, strict)
        if from_graph is not None:
            return from_graph
        if key is not None and self.shared_dir is not None:
            path = self._shared_path(key, strict)
            if not os.path.exists(os.path.join(path, "model.json")):
                scratch = os.path.join(self.scratch_dir, f"tfjs_shared_{len(self._tfjs_dirs)}")
                self._tfjs_dirs[scratch] = scratch
                write_tfjs(self.tfjs_lowering(program, strict), scratch)
                try:
                    os.rename(scratch, path)  # atomic; another process may have won the race
                except OSError:
                    pass
            return path
        cache_key = (id(program), strict)
        if not _holds(self._tfjs_models, cache_key, program):
            path = os.path.join(self.scratch_dir, f"tfjs_model_{next(self._serial)}")
            write_tfjs(self.tfjs_lowering(program, strict), path)
            self._tfjs_models[cache_key] = (weakref.ref(program), path)
        return self._tfjs_models[cache_key][1]

    def graph_model(self, program: Program, strict: bool = False) -> str | None:
        """The TF.js model the default export writes from noxla's graph (``noxla.graph``), written once;
        None where the graph does not cover the program (or is disabled) and TF's path writes it."""
        if not graph.enabled():
            return None
        key = (id(program), strict)
        if not _holds(self._graph_models, key, program):
            path = os.path.join(self.scratch_dir, f"graph_model_{next(self._serial)}")
            try:
                graph.write_program_tfjs(program, path, strict)
            except graph.Uncovered:
                shutil.rmtree(path, ignore_errors=True)
                path = None
            self._graph_models[key] = (weakref.ref(program), path)
        return self._graph_models[key][1]


CHROMIUM_BACKENDS = ("webgl", "wasm", "cpu", "webgpu")


def chromium(browser_runner, backend: str) -> BrowserRunner:
    """The session's Chromium (the ``browser_runner`` fixture) for TF.js's ``backend``: a skip, with
    the reason, where it offers no WebGPU adapter; the other backends are part of every Chromium."""
    browser = browser_runner()
    if backend == "webgpu" and backend not in browser.backends():
        import pytest
        pytest.skip(f"this Chromium offers no WebGPU adapter (offers {browser.backends()})")
    assert backend in browser.backends(), browser.backends()
    return browser


def graph_tflite_bytes(program: Program) -> bytes:
    from noxla.writers.tflite import graph_tflite_chunks
    return b"".join(bytes(c() if callable(c) else c) for c in graph_tflite_chunks(program))


def _holds(cache, key, program) -> bool:
    """Whether ``cache[key]`` (a (weak reference, value) pair keyed by id) was made for ``program``."""
    return key in cache and cache[key][0]() is program


_TRACED: dict[str, tuple] = {}


_PROGRAMS: dict[str, Program] = {}


def traced_program(case: Case, args: Sequence[np.ndarray] | None = None) -> Program:
    """The case's program alone (no JAX run), traced once. A case that cannot run under the
    installed JAX (``case.skip``) skips the test asking for it, with the case's reason."""
    if case.skip:
        import pytest
        pytest.skip(f"{case.id}: {case.skip}")
    if case.id not in _PROGRAMS:
        _PROGRAMS[case.id] = trace(case.fun, tuple(case.concrete_args()) if args is None else tuple(args),
                                   case.polymorphic_shapes)
    return _PROGRAMS[case.id]


def traced(case: Case) -> tuple[Program, tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The case's program, inputs and JAX outputs, computed once (keyed by id: cases may hold arrays)."""
    if case.id not in _TRACED:
        args = tuple(case.concrete_args())
        program = traced_program(case, args)
        try:
            expected = tuple(jax_outputs(case.fun, args))
        except Exception as e:  # noqa: BLE001  (a program JAX traces but cannot run: see run_case)
            expected = e
        _TRACED[case.id] = (program, args, expected)
    return _TRACED[case.id]


def assert_declared_rejection(report: Report, where: str) -> None:
    """A rejection is only acceptable when every violation comes from a declared limitation."""
    undeclared = [v for v in report.violations if not v.declared]
    assert not undeclared, f"{where}: rejected without a declared limitation:\n{report.format()}"
    text = report.format()
    for v in report.violations:
        assert v.primitive in text and v.target.label in text and v.source in text


def has_nonfinite_args(case: Case) -> bool:
    """Whether the case gives NaN or inf inputs (only literal arrays can: specs draw finite data)."""
    return any(not isinstance(a, ArgSpec) and np.issubdtype(np.asarray(a).dtype, np.inexact)
               and not np.all(np.isfinite(np.asarray(a))) for a in case.args)


def applies_fast_variant(program: Program) -> bool:
    """Whether some equation of the program may take a rule's fast (non-strict) lowering."""
    from limitations.engine import eqn_view, iter_eqns
    for eqn in iter_eqns(program.closed_jaxpr):
        rule = RULES.get(eqn.primitive.name)
        if rule is not None and rule.fast is not None and rule.fast.applies(eqn_view(eqn)):
            return True
    return False


def _finite(a: np.ndarray) -> np.ndarray:
    if not np.issubdtype(a.dtype, np.inexact):
        return a
    return np.nan_to_num(a, nan=0.0, posinf=1.0, neginf=-1.0).astype(a.dtype)


_FINITE: dict[str, tuple] = {}


def default_mode_inputs(case: Case) -> tuple[Program, tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """What a default-mode run compares: the case's own inputs, or (when NaN/inf inputs could reach
    a fast variant) the same inputs made finite, with JAX's outputs on those."""
    program, args, expected = traced(case)
    if not has_nonfinite_args(case) or not applies_fast_variant(program):
        return program, args, expected
    if case.id not in _FINITE:
        finite = tuple(_finite(np.asarray(a)) for a in args)
        _FINITE[case.id] = (program, finite, tuple(jax_outputs(case.fun, finite)))
    return _FINITE[case.id]


def grouped_cases(cases) -> list:
    import pytest
    # One xdist group per case (pyproject.toml: --dist loadgroup): every runtime of a case runs in
    # the worker that already traced it and computed JAX's outputs (an XLA compile per case, most
    # of a TF run's time), instead of once per worker.
    return [pytest.param(c, id=c.id, marks=pytest.mark.xdist_group(c.id)) for c in cases]


def run_case(case: Case, runtime: str, runtimes: Runtimes, strict: bool = False) -> str:
    """Run one case in one runtime, in strict or default mode (see the module docstring).
    Returns "passed" or "rejected" (declared, checked up front)."""
    program, args, expected = traced(case) if strict else default_mode_inputs(case)
    where = f"{case.id} [{runtime}{', strict' if strict else ''}]"
    report = runtimes.check(program, runtime, strict, key=case.id)
    if report is not None and not report.ok:
        assert_declared_rejection(report, where)
        return "rejected"
    if isinstance(expected, Exception):
        raise AssertionError(f"{where}: JAX cannot run this case ({expected!r}), so every target must "
                             "reject it up front, and this one did not")
    runtimes.require(runtime)
    actual = runtimes.run(runtime, case.fun, program, args, case.polymorphic_shapes, strict=strict, key=case.id)
    assert_matches(expected, actual, program.out_names, case.atol, case.rtol, where, floor=runtime_tolerance(runtime))
    return "passed"


def contains_primitive(program: Program, name: str) -> bool:
    from limitations.engine import iter_eqns
    return any(e.primitive.name == name for e in iter_eqns(program.closed_jaxpr))


__all__ = ["Runtimes", "run_case", "assert_matches", "jax_outputs", "traced", "contains_primitive",
           "has_nonfinite_args", "RUNTIMES", "Target"]


# Forcing a case past the up-front check, to find limitations a target does not need
# (tests/test_limitations.py). Flex has no runtime in RUNTIMES; it runs here as its own.
FORCED_RUNTIMES = {
    Target.TF: ("tf_eager", "tf_graph"),
    Target.TFLITE: ("tflite",),
    Target.TFLITE_FLEX: ("tflite_flex",),
    Target.TFJS: ("tfjs_cpu", "tfjs_wasm"),
    Target.TFJS_WEBGL: ("chromium_webgl",),
    Target.TFJS_WEBGPU: ("chromium_webgpu",),
    # LiteRT.js in headless Chromium (tests/litertjs_harness.py).
    Target.LITERTJS: ("litertjs_wasm",),
    Target.LITERTJS_WEBGPU: ("litertjs_webgpu",),
}


def run_unchecked(runtime: str, program: Program, args: Sequence[np.ndarray],
                  runtimes: Runtimes, key: str | None = None) -> list[np.ndarray]:
    """Lower, convert and run a traced program in one runtime without asking the check first."""
    if runtime == "tf_eager":
        from noxla.front.lowering import lower_program
        return [np.asarray(x) for x in lower_program(program, args)]
    if runtime == "tf_graph":
        outs = serving_function(program)(*args)
        return [np.asarray(outs[n]) for n in program.out_names]
    if runtime == "tflite_flex":
        outs = run_tflite(tflite_bytes(serving_function(program, tflite=True), allow_flex=True),
                          dict(zip(program.in_names, args)))
        return [outs[n] for n in program.out_names]
    if runtime.startswith("litertjs_"):
        from tests.litertjs_harness import run_program
        return run_program(program, args, runtime.split("_", 1)[1])
    return runtimes.run(runtime, None, program, args, key=key)


def _shared_export_key(case: Case, runtime: str, program: Program) -> str | None:
    """The case's shared TF.js export key when forcing it through a narrowed TF.js target (WebGL) may
    reuse the export its TF.js rule tests write; None for a case TF.js rejects, since a shared export
    stands for a passed TF.js check (Runtimes.check)."""
    target = RUNTIMES.get(runtime)
    if target is None or target is Target.TFJS or not target.within((Target.TFJS,)):
        return None
    return case.id if check_jaxpr(program.closed_jaxpr, Target.TFJS).ok else None


def forced_failure(case: Case, runtime: str, runtimes: Runtimes) -> str | None:
    """Why ``case`` fails when forced through ``runtime`` past the check; None when it matches JAX."""
    program, args, expected = traced(case)
    where = f"{case.id} [{runtime}, check bypassed]"
    try:
        actual = run_unchecked(runtime, program, args, runtimes, _shared_export_key(case, runtime, program))
        assert_matches(expected, actual, program.out_names, case.atol, case.rtol, where,
                       floor=runtime_tolerance(runtime))
    except Exception as e:  # noqa: BLE001 - any failure (conversion, runtime, mismatch) counts
        first = str(e).strip().splitlines()
        return f"{type(e).__name__}: {first[0] if first else ''}"
    return None
