"""What an export settles before it converts anything, without TensorFlow: the options, the output
paths, the trace, and the program checked against every target it is exported for; and how every
output is written (beside its path, renamed into place once whole).

Declarations and dtypes need no TF (``lowering_rules.lazy_tensorflow``): ``noxla.check`` and an
export that the check refuses never import it (2 s and 450 MB). TF.js's targets add the op-list
backstop, which lowers the program to read the ops the TF.js converter would get, and imports it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import shutil
import tempfile
import time
from typing import Callable, Iterator, Mapping, Sequence

from limitations.engine import Report, check_jaxpr
from lowering_rules.vocabulary import Target
from noxla import quantize as quantization
from noxla.errors import ExportError, UnsupportedError
from noxla.tfjs_writer import DEFAULT_SHARD_BYTES  # noqa: F401  (part of this module's API)
from noxla.tracing import Program, trace

# ``on_step(name, None)`` when a step starts, ``on_step(name, seconds)`` when it has finished.
OnStep = Callable[[str, "float | None"], None]


# Where each output of ``noxla.export.export`` runs (a .tflite's is its ``tflite_target``).
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
    declarations pass (by default ``noxla.tfjs_ops.TFJS_BACKSTOP`` for TF.js's targets)."""
    target = Target.parse(target)
    if backstop is None and target.within((Target.TFJS,)):
        from noxla.tfjs_ops import TFJS_BACKSTOP
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


@dataclasses.dataclass(frozen=True)
class Cleared:
    """A program traced and checked for ``targets`` ({output kind: target}), its int8 ``samples``."""
    program: Program
    targets: Mapping[str, Target]
    samples: Callable | None


def preflight(fun: Callable, example_args: Sequence, wanted: Mapping[str, str], *, overwrite: bool = False,
              polymorphic_shapes=None, polymorphic_constraints: Sequence[str] = (), allow_flex: bool = False,
              quantize: str | None = None, tfjs_quantize: str | None = None, representative_data=None,
              tflite_target: Target | str = Target.TFLITE, on_step: OnStep | None = None) -> Cleared:
    """The options and paths (``wanted``: {output kind: path}) checked before any work, so nothing is
    half-done when one is wrong; then the trace, and the declarations of every output's target (TF.js's
    op-list backstop is the exporter's, once it has the lowering the converter gets)."""
    if not wanted:
        raise ExportError("nothing to export: give a path for tflite, tfjs or saved_model")
    quantization.check_mode(quantize, quantization.TFLITE_MODES, "TFLite")
    quantization.check_mode(tfjs_quantize, quantization.TFJS_MODES, "TF.js")
    samples = quantization.representative_samples(quantize, representative_data, example_args)
    for path in wanted.values():
        ensure_writable(path, overwrite)
    targets = {kind: parse_tflite_target(tflite_target, allow_flex) if kind == "tflite" else OUTPUT_TARGETS[kind]
               for kind in wanted}
    program = run_step(on_step, "trace", trace, fun, tuple(example_args), polymorphic_shapes,
                       tuple(polymorphic_constraints))
    for target in targets.values():
        report = check_jaxpr(program.closed_jaxpr, target)
        if not report.ok:
            raise UnsupportedError(report)
    return Cleared(program, targets, samples)


# The export options ``preflight`` reads (``noxla.api.export`` hands it these of the pipeline's).
PREFLIGHT_OPTIONS = frozenset(inspect.signature(preflight).parameters) - {"fun", "example_args", "wanted"}


@dataclasses.dataclass(frozen=True)
class Exported:
    program: Program
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
