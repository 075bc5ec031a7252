"""The `noxla` command: export, check, limitations."""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from typing import Callable, Sequence

import numpy as np

_DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i8": np.int8, "u8": np.uint8,
           "bool": np.bool_, "i64": np.int64, "f64": np.float64}
_INPUT = re.compile(r"^(?P<dtype>[a-z0-9]+)\[(?P<dims>[^\]]*)\]$")
SAMPLE_SIZE_OF_SYMBOLIC_DIM = 3


class InputSpec:
    """One `--input` such as ``f32[1,28,28,1]`` or ``f32[b,28,28,1]`` (``b`` symbolic)."""

    def __init__(self, text: str):
        match = _INPUT.match(text.replace(" ", ""))
        if not match or match["dtype"] not in _DTYPES:
            raise argparse.ArgumentTypeError(
                f"bad --input {text!r}: write DTYPE[DIMS], e.g. f32[1,28,28,1] or i32[b,16]; "
                f"dtypes: {', '.join(_DTYPES)}")
        self.text = text
        self.dtype = np.dtype(_DTYPES[match["dtype"]])
        self.dims = [d for d in match["dims"].split(",") if d]
        self.symbolic = any(not d.isdigit() for d in self.dims)

    def polymorphic_spec(self) -> str | None:
        return f"({', '.join(d if not d.isdigit() else '_' for d in self.dims)})" if self.symbolic else None

    def sample(self, rng: np.random.Generator, symbolic_size: int = SAMPLE_SIZE_OF_SYMBOLIC_DIM) -> np.ndarray:
        shape = tuple(int(d) if d.isdigit() else symbolic_size for d in self.dims)
        if self.dtype == np.bool_:
            return rng.random(shape) < 0.5
        if np.issubdtype(self.dtype, np.integer):
            return rng.integers(0, 10, size=shape).astype(self.dtype)
        return rng.standard_normal(shape).astype(self.dtype)


def load_function(ref: str) -> Callable:
    """``package.module:function`` (``module`` looked up from the current directory too)."""
    if ":" not in ref:
        raise SystemExit(f"noxla: expected MODULE:FUNCTION, got {ref!r}")
    module_name, _, attr = ref.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise SystemExit(f"noxla: cannot import {module_name!r}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SystemExit(f"noxla: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


class Steps:
    """Prints each step as it starts and how long it took."""

    def __init__(self, out=sys.stdout):
        self.out = out

    def __call__(self, name: str, fn: Callable, *args, **kwargs):
        print(f"[{name}] ...", end="", flush=True, file=self.out)
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        print(f" done in {time.perf_counter() - start:.2f}s", file=self.out, flush=True)
        return result


def _function_and_inputs(args) -> tuple[Callable, list[InputSpec]]:
    if args.function is None:
        from noxla import example
        print(f"noxla: no MODULE:FUNCTION given; exporting the built-in example "
              f"noxla.example:mnist_cnn with --input {example.INPUT}")
        return example.mnist_cnn, args.input or [InputSpec(example.INPUT)]
    if not args.input:
        raise SystemExit("noxla: give one --input per positional argument, e.g. --input f32[1,28,28,1]")
    return load_function(args.function), args.input


def _polymorphic_shapes(args, inputs: Sequence[InputSpec]):
    if args.polymorphic:
        if len(args.polymorphic) != len(inputs):
            raise SystemExit("noxla: give one --polymorphic per --input (use _ for a static argument)")
        return [None if p == "_" else p for p in args.polymorphic]
    specs = [i.polymorphic_spec() for i in inputs]
    return specs if any(specs) else None


def _example_args(inputs: Sequence[InputSpec]):
    import jax
    return [jax.ShapeDtypeStruct(tuple(int(d) if d.isdigit() else 1 for d in i.dims), i.dtype) for i in inputs]


def cmd_export(args) -> int:
    from limitations.targets import Target
    from noxla import export as ex
    from noxla.api import require_supported
    from noxla.tracing import trace

    fun, inputs = _function_and_inputs(args)
    if not (args.tflite or args.tfjs or args.saved_model):
        args.tflite = "model.tflite"
        print("noxla: no output given; writing --tflite model.tflite")
    for path in (args.tflite, args.tfjs, args.saved_model):
        if path:  # before any work, so nothing is half-done when one output is in the way
            ex.ensure_writable(path, args.force)
    poly = _polymorphic_shapes(args, inputs)
    step = Steps()
    program = step("trace", trace, fun, _example_args(inputs), poly)
    targets = [t for t, wanted in ((Target.TF, args.saved_model),
                                   (Target.TFLITE_FLEX if args.allow_flex else Target.TFLITE, args.tflite),
                                   (Target.TFJS, args.tfjs)) if wanted]
    for target in targets:
        require_supported(program, target)
    concrete = step("lower", ex.serving_function, program, strict=args.strict)
    written = {}
    if args.tflite:  # converting and writing are separate steps here; the other converters write
        data = step("convert tflite", ex.tflite_bytes, concrete, args.allow_flex, args.quantize)
        step(f"write {args.tflite}", _write_bytes, data, args.tflite, args.force)
        written["tflite"] = args.tflite
    write_tfjs = lambda concrete, path: ex.write_tfjs(concrete, path, args.tfjs_quantize, args.tfjs_shard_bytes)
    for kind, path, writer in (("tfjs", args.tfjs, write_tfjs), ("saved_model", args.saved_model,
                                                                 ex.write_saved_model)):
        if path:
            lowered = concrete
            if kind == "tfjs" and ex.uses_uint32(program):  # TF.js carries uint32 as int32 bits
                lowered = step("lower for TF.js", ex.serving_function, program, uint32_as_int32=True)
            step(f"convert+write {kind} {path}", _write_with, writer, lowered, path, args.force)
            written[kind] = path
    errors = {} if args.no_verify else step("verify", verify, fun, program, inputs, written, args.strict)
    _summary(program, written, errors)
    return 0


def _write_bytes(data: bytes, path: str, force: bool) -> None:
    from noxla.export import atomic_output
    with atomic_output(path, force) as scratch, open(scratch, "wb") as f:
        f.write(data)


def _write_with(writer, concrete, path: str, force: bool) -> None:
    from noxla.export import atomic_output
    with atomic_output(path, force) as scratch:
        writer(concrete, scratch)


def verify(fun, program, inputs: Sequence[InputSpec], written: dict, strict: bool = False) -> dict:
    from noxla.verify import verify_artifacts
    rng = np.random.default_rng(0)
    return verify_artifacts(fun, program, [i.sample(rng) for i in inputs], written, strict=strict)


def _summary(program, written: dict, errors: dict) -> None:
    from noxla.runtimes import tflite_op_names
    print("\nsummary")
    print(f"  inputs:  {', '.join(f'{n}: {a.str_short()}' for n, a in zip(program.in_names, program.in_avals))}")
    print(f"  outputs: {', '.join(f'{n}: {a.str_short()}' for n, a in zip(program.out_names, program.out_avals))}")
    print(f"  jaxpr equations: {sum(1 for _ in _eqns(program))}")
    for kind, path in written.items():
        size = _size(path)
        line = f"  {kind:12s} {path}  {size / 1024:.1f} KiB"
        if kind == "tflite":
            ops = tflite_op_names(path)
            line += f"  {len(ops)} ops ({', '.join(sorted(set(ops)))})"
        print(line)
    for runtime, err in errors.items():
        shown = err if isinstance(err, str) else f"{err:.2e} (relative to output scale)"
        print(f"  max error vs JAX on random inputs [{runtime}]: {shown}")


def _eqns(program):
    from limitations.engine import iter_eqns
    return iter_eqns(program.closed_jaxpr)


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def cmd_check(args) -> int:
    from noxla.api import check
    fun, inputs = _function_and_inputs(args)
    report = check(fun, *_example_args(inputs), target=args.target,
                   polymorphic_shapes=_polymorphic_shapes(args, inputs))
    print(report.format())
    return 0 if report.ok else 1


def cmd_limitations(args) -> int:
    from limitations.table import render
    print(render())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="noxla", description="Lower JAX programs to plain TF ops "
                                     "(no XLA) for TFLite builtins, TF.js and SavedModel.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add_program_args(p):
        p.add_argument("function", nargs="?", metavar="MODULE:FUNCTION",
                       help="the JAX function to convert (default: the built-in example CNN)")
        p.add_argument("--input", action="append", type=InputSpec, metavar="DTYPE[DIMS]",
                       help="one per positional argument, e.g. f32[1,28,28,1], i32[b,16] (b symbolic)")
        p.add_argument("--polymorphic", action="append", metavar="SPEC",
                       help="jax2tf-style polymorphic shape per input, e.g. 'b, ...' (overrides names in --input)")

    export = sub.add_parser("export", help="export to .tflite, TF.js and/or SavedModel, then verify against JAX")
    add_program_args(export)
    export.add_argument("--tflite", metavar="FILE")
    export.add_argument("--tfjs", metavar="DIR")
    export.add_argument("--saved-model", metavar="DIR")
    export.add_argument("--allow-flex", action="store_true", help="allow SELECT_TF_OPS (Flex) in the .tflite")
    export.add_argument("--quantize", choices=["float16", "dynamic_int8"],
                        help="quantized .tflite: float16 or int8 weights")
    export.add_argument("--tfjs-quantize", choices=["uint8", "uint16", "float16"],
                        help="store the TF.js weights quantized (dequantized when loaded)")
    export.add_argument("--tfjs-shard-bytes", type=int, default=4 * 1024 * 1024, metavar="BYTES",
                        help="largest TF.js weight file (default 4 MiB)")
    export.add_argument("--force", action="store_true", help="replace existing outputs")
    export.add_argument("--no-verify", action="store_true", help="skip running the outputs against JAX")
    export.add_argument("--strict", action="store_true",
                        help="keep JAX's NaN/inf semantics exactly (more ops); by default fused ops such as "
                             "MaxPool and Softmax may treat NaN/inf differently (see `noxla limitations`)")
    export.set_defaults(run=cmd_export)

    check = sub.add_parser("check", help="report every use the target cannot run (exit 1 if any)")
    add_program_args(check)
    check.add_argument("--target", default="tflite", choices=["tf", "tflite", "tflite_flex", "tfjs"])
    check.set_defaults(run=cmd_check)

    limitations = sub.add_parser("limitations", help="print the generated limitations table")
    limitations.set_defaults(run=cmd_limitations)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # TF's C++ start-up chatter (CUDA plugin registration on a CPU machine) is noise to a CLI user.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = build_parser().parse_args(argv)
    from noxla.errors import NoxlaError
    try:
        return args.run(args)
    except NoxlaError as e:
        print(f"noxla: error: {e}" if not str(e).startswith("noxla") else str(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
