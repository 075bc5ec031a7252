"""What an export settles before it converts anything, without TensorFlow: the options, the output
paths, the trace, and the program checked against every target it is exported for; and how every
output is written (beside its path, renamed into place once whole).

Declarations and dtypes need no TF (``lowering_rules.core.lazy_tensorflow``): ``noxla.check`` and an
export that the check refuses never import it (2 s and 450 MB). TF.js's targets add the op-list
backstop, which records the program in noxla's graph to read the ops the TF.js writer would write
(TF's lowering only where the graph does not record it: ``noxla.writers.tfjs.ops``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
from typing import Callable, Iterator, Mapping, Sequence

from limitations.engine import Report, check_jaxpr
from lowering_rules.core.vocabulary import Target
from noxla.errors import ExportError, UnsupportedError
from noxla.front.tracing import Program, trace
from noxla.writers import quantize as quantization
from noxla.writers.tfjs import DEFAULT_SHARD_BYTES  # noqa: F401  (part of this module's API)

# ``on_step(name, None)`` when a step starts, ``on_step(name, seconds)`` when it has finished.
OnStep = Callable[[str, "float | None"], None]


# Where each output of ``noxla.pipeline.tf_path.export`` runs (a .tflite's is its ``tflite_target``).
OUTPUT_TARGETS = {"tfjs": Target.TFJS, "saved_model": Target.TF}


def run_step(on_step: OnStep | None, name: str, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` reported to ``on_step`` as the step ``name``."""
    if on_step is None:
        return fn(*args, **kwargs)
    on_step(name, None)
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    on_step(name, time.perf_counter() - start)
    return result


def full_check(closed_jaxpr, target: Target | str, backstop=None) -> Report:
    """Every violation for ``target``; ``backstop``: the TF.js op-list backstop to run once the
    declarations pass (by default ``noxla.writers.tfjs.ops.TFJS_BACKSTOP`` for TF.js's targets)."""
    target = Target.parse(target)
    if backstop is None and target.within((Target.TFJS,)):
        from noxla.writers.tfjs.ops import TFJS_BACKSTOP
        backstop = TFJS_BACKSTOP
    return check_jaxpr(closed_jaxpr, target, tf_ops=backstop)


def require_supported(program: Program, target: Target | str, backstop=None) -> None:
    report = full_check(program.closed_jaxpr, target, backstop)
    if not report.ok:
        raise UnsupportedError(report)


def ensure_writable(path: str, overwrite: bool) -> str:
    """The absolute path, after refusing to replace an existing output unless asked to."""
    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path) and not overwrite:
        raise ExportError(f"{path} already exists; pass overwrite=True (CLI: --force) to replace it")
    return path


def parse_tflite_target(target: Target | str, allow_flex: bool) -> Target:
    target = Target.parse(target)
    if target not in (Target.TFLITE, Target.LITERTJS, Target.LITERTJS_WEBGPU):
        raise ExportError(f"a .tflite runs on tflite, litertjs or litertjs-webgpu, not {target.value}")
    if allow_flex:
        if target != Target.TFLITE:
            raise ExportError("LiteRT.js runs builtin ops only: allow_flex is for LiteRT (target tflite)")
        return Target.TFLITE_FLEX
    return target


# The outputs an export may write, in the order it writes them.
OUTPUT_KINDS = ("tflite", "tfjs", "saved_model")


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """Everything an export is asked for, made once from the public API's keyword arguments (an
    unknown keyword is a TypeError here) and handed down whole: the preflight, the graph writers, the
    TF pipeline and the several-signature export read its fields; nobody renames or filters them.

    Outputs: ``tflite``, ``tfjs``, ``saved_model`` (paths; at least one). ``tflite_target``: where
    the .tflite runs ("tflite", "litertjs", "litertjs-webgpu"; with ``allow_flex``, LiteRT's Flex).
    ``strict``: JAX's NaN/inf semantics exactly (``noxla.api.convert``). ``quantize`` (.tflite;
    "int8" calibrates on ``representative_data``), ``tfjs_quantize`` and ``tfjs_shard_bytes`` (TF.js
    weight storage), ``demo_page`` (beside a TF.js model), ``saved_model_variables`` and
    ``saved_model_gradient`` (``noxla.pipeline.tf_path.export``), ``overwrite``, ``on_step`` (progress)."""
    tflite: str | None = None
    tfjs: str | None = None
    saved_model: str | None = None
    polymorphic_shapes: object = None
    polymorphic_constraints: Sequence[str] = ()
    allow_flex: bool = False
    overwrite: bool = False
    strict: bool = False
    quantize: str | None = None
    tfjs_quantize: str | None = None
    tfjs_shard_bytes: int = DEFAULT_SHARD_BYTES
    representative_data: object = None
    demo_page: bool = True
    saved_model_variables: object = None
    saved_model_gradient: bool = True
    tflite_target: Target | str = Target.TFLITE
    on_step: OnStep | None = None

    @property
    def wanted(self) -> dict[str, str]:
        """{output kind: path} of the outputs asked for."""
        return {kind: getattr(self, kind) for kind in OUTPUT_KINDS if getattr(self, kind) is not None}

    def targets(self) -> dict[str, Target]:
        """{output kind: the target it runs on} (a .tflite's is ``tflite_target``, checked here)."""
        return {kind: parse_tflite_target(self.tflite_target, self.allow_flex) if kind == "tflite"
                else OUTPUT_TARGETS[kind] for kind in self.wanted}


@dataclasses.dataclass(frozen=True)
class Cleared:
    """A program traced and checked for ``targets`` ({output kind: target}), its int8 ``samples``,
    and the ``options`` it was cleared under."""
    program: Program
    targets: Mapping[str, Target]
    samples: Callable | None
    options: ExportOptions = ExportOptions()


@dataclasses.dataclass(frozen=True)
class ClearedSignatures:
    """Several signatures ({key: program}), each traced and checked for every output's target."""
    programs: Mapping[str, Program]
    targets: Mapping[str, Target]
    options: ExportOptions


def _settle(options: ExportOptions, example_args: Sequence = ()) -> tuple[dict, Callable | None]:
    """The options and paths checked before any work, so nothing is half-done when one is wrong:
    the outputs' targets and the int8 calibration samples."""
    if not options.wanted:
        raise ExportError("nothing to export: give a path for tflite, tfjs or saved_model")
    quantization.check_mode(options.quantize, quantization.TFLITE_MODES, "TFLite")
    quantization.check_mode(options.tfjs_quantize, quantization.TFJS_MODES, "TF.js")
    samples = quantization.representative_samples(options.quantize, options.representative_data, example_args)
    for path in options.wanted.values():
        ensure_writable(path, options.overwrite)
    return options.targets(), samples


def _check_all(program: Program, targets: Mapping[str, Target]) -> None:
    """The declarations of every output's target (TF.js's op-list backstop is the exporter's, once
    it has the lowering the converter gets)."""
    for target in dict.fromkeys(targets.values()):
        report = check_jaxpr(program.closed_jaxpr, target)
        if not report.ok:
            raise UnsupportedError(report)


def preflight(fun: Callable, example_args: Sequence, options: ExportOptions) -> Cleared:
    """The options and paths checked before any work, then the trace, and the declarations of every
    output's target: what every export runs first, without TensorFlow."""
    targets, samples = _settle(options, example_args)
    program = run_step(options.on_step, "trace", trace, fun, tuple(example_args), options.polymorphic_shapes,
                       tuple(options.polymorphic_constraints))
    _check_all(program, targets)
    return Cleared(program, targets, samples, options)


def preflight_signatures(signatures: Mapping, options: ExportOptions) -> ClearedSignatures:
    """``preflight`` for several signatures (``{key: (function, example_args)}``): the same options
    settled, then each signature traced once and checked for every output's target, all before
    anything is lowered or written."""
    if options.tfjs is not None and len(options.wanted) > 1:
        raise ExportError("several signatures go to one TF.js model alone (noxla's graph writes it), or to a "
                          ".tflite or a SavedModel")
    if options.quantize == "int8":
        raise ExportError("int8 calibration needs representative data per signature; export several "
                          "signatures unquantized, as float16 or as dynamic_int8")
    targets, _ = _settle(options)
    if not signatures:
        raise ExportError("no signatures to export: give {name: (function, example_args)}")
    programs = {}
    for key, entry in signatures.items():
        if not isinstance(key, str) or not key:
            raise ExportError(f"signature keys are non-empty strings, got {key!r}")
        try:
            fun, example_args = entry
        except (TypeError, ValueError):
            raise ExportError(f"signature {key!r}: give (function, example_args), got {entry!r}") from None
        programs[key] = run_step(options.on_step, f"trace {key}", trace, fun, tuple(example_args), None)
        _check_all(programs[key], targets)
    return ClearedSignatures(programs, targets, options)


@dataclasses.dataclass(frozen=True)
class Exported:
    program: Program          # of several signatures (``preflight_signatures``), the first one's
    written: dict[str, str]   # "tflite" / "tfjs" / "saved_model" -> absolute path


@contextlib.contextmanager
def atomic_output(path: str, overwrite: bool) -> Iterator[str]:
    """Yield a scratch path beside ``path``; move it into place only if the block succeeds."""
    path = ensure_writable(path, overwrite)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    scratch_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".noxla-tmp", dir=parent)
    scratch = os.path.join(scratch_dir, os.path.basename(path))
    try:
        yield scratch
        if os.path.isdir(path) and not os.path.islink(path):
            old = os.path.join(scratch_dir, "replaced")
            os.rename(path, old)
        os.replace(scratch, path)
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


def write_chunks(data: bytes | list, path: str, overwrite: bool) -> str:
    """``data``: the bytes, or a list of chunks (``large_tflite.serialized``) written one after
    another, a chunk being bytes or a function that makes them (a weight, made as it is written)."""
    with atomic_output(path, overwrite) as scratch, open(scratch, "wb") as f:
        for chunk in data if isinstance(data, list) else [data]:
            f.write(chunk() if callable(chunk) else chunk)
    return os.path.abspath(path)
