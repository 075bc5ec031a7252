"""The `noxla` command: export, check, limitations."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.resources
import os
import re
import sys
import tempfile
from typing import Callable, Sequence

import numpy as np

from noxla.llm import quantize as llm_quantize

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


class Progress:
    """The pipeline's ``on_step``: prints each step as it starts, then how long it took."""

    def __init__(self, out):
        self.out = out
        self.open = None  # the step whose start was printed and whose time was not

    def __call__(self, name: str, seconds: float | None) -> None:
        if seconds is None:
            print(f"[{name}] ...", end="", flush=True, file=self.out)
            self.open = name
        elif name == self.open:
            print(f" done in {seconds:.2f}s", file=self.out, flush=True)
            self.open = None
        else:  # a note with no start of its own (the graph tflite writer's reason to take TF's path)
            print(f"{chr(10) if self.open else ''}[{name}]", file=self.out, flush=True)


@contextlib.contextmanager
def own_output():
    """The command's output is its own: TF, XLA, absl and the converters write log lines from C++
    straight to file descriptors 1 and 2 (TF_CPP_MIN_LOG_LEVEL does not reach absl's early
    logging). Both descriptors point at a scratch file while the command runs; the command prints
    to the streams yielded, which keep the real ones. The scratch is replayed on stderr when the
    command fails with an unexpected exception (a noxla bug), where it may explain what went wrong."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    out = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    err = os.fdopen(os.dup(saved[1]), "w", buffering=1)
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 1)
        os.dup2(scratch.fileno(), 2)
        replay = False
        try:
            yield out, err
        except Exception:
            replay = True
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original in zip((1, 2), saved):
                os.dup2(original, fd)
                os.close(original)
            out.close()
            err.close()
            if replay:
                scratch.seek(0)
                sys.stderr.write(scratch.read().decode(errors="replace"))


def _function_and_inputs(args, out) -> tuple[Callable, list[InputSpec]]:
    if args.function is None:
        from noxla import example
        print(f"noxla: no MODULE:FUNCTION given; exporting the built-in example "
              f"noxla.example:mnist_cnn with --input {example.INPUT}", file=out)
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


def _representative_data(path: str | None):
    if path is None:
        return None
    import numpy as np
    with np.load(path) as arrays:  # np.savez names positional arrays arr_0, arr_1, ...
        return [arrays[k] for k in sorted(arrays.files, key=lambda k: (len(k), k))]


def cmd_export(args, out, err) -> int:
    from noxla.api import export

    fun, inputs = _function_and_inputs(args, out)
    if not (args.tflite or args.tfjs or args.saved_model):
        args.tflite = "model.tflite"
        print("noxla: no output given; writing --tflite model.tflite", file=out)
    progress = Progress(out)
    if args.shape_buckets:
        return _export_buckets(args, fun, inputs, progress, out)
    exported = export(fun, _example_args(inputs), tflite=args.tflite, tfjs=args.tfjs, saved_model=args.saved_model,
                      polymorphic_shapes=_polymorphic_shapes(args, inputs), allow_flex=args.allow_flex,
                      overwrite=args.force, strict=args.strict, quantize=args.quantize,
                      representative_data=_representative_data(args.representative_data),
                      tfjs_quantize=args.tfjs_quantize, tfjs_shard_bytes=args.tfjs_shard_bytes,
                      tflite_target=args.tflite_target, on_step=progress)
    errors = {}
    if not args.no_verify:
        from noxla.pipeline.preflight import run_step
        errors = run_step(progress, "verify", verify, fun, exported.program, inputs, exported.written, args.strict)
    if args.verify_browser and "tfjs" in exported.written:
        from noxla.pipeline.preflight import run_step
        from noxla.runtimes.demo import verify_in_browser
        browser = run_step(progress, "verify in Chromium", verify_in_browser, exported.written["tfjs"],
                           args.screenshot)
        errors.update(_browser_errors(browser))
    elif "tfjs" in exported.written:  # without the browser run, still say where the check rejects it
        from noxla.runtimes.demo import backend_rejections
        errors.update({f"tfjs ({backend})": _rejected(report)
                       for backend, report in backend_rejections(exported.program).items()})
    litertjs = {}
    if "tflite" in exported.written and (args.litertjs_page or args.verify_browser) and not args.quantize:
        litertjs = _litertjs(progress, args, fun, inputs, exported, errors)
    _summary(exported.program, {kind: getattr(args, kind) for kind in exported.written}, errors, out)
    for line in litertjs.get("lines", []):
        print(f"  {line}", file=out)
    return 0


def _export_buckets(args, fun, inputs, progress, out) -> int:
    """--shape-buckets: the .tflite with one signature per size, each run on LiteRT.js with --verify-browser."""
    from noxla.api import export_tflite
    from noxla.cli.shape_buckets import parse_buckets, verify_buckets
    from noxla.front.shape_buckets import bucket_signatures
    if args.tfjs or args.saved_model or args.quantize:
        raise SystemExit("noxla: --shape-buckets writes a .tflite only (no --tfjs, --saved-model or --quantize)")
    buckets, poly = parse_buckets(args.shape_buckets), _polymorphic_shapes(args, inputs)
    signatures = bucket_signatures(fun, _example_args(inputs), poly, buckets)
    path = export_tflite(fun, *_example_args(inputs), path=args.tflite, polymorphic_shapes=poly, shape_buckets=buckets,
                         target=args.tflite_target, overwrite=args.force, strict=args.strict, on_step=progress)
    print(f"wrote {path}: signatures {', '.join(signatures)}", file=out)
    if args.verify_browser:
        from noxla.pipeline.preflight import run_step
        for line in run_step(progress, "verify the buckets on LiteRT.js in Chromium", verify_buckets, path, fun,
                             signatures):
            print(f"  {line}", file=out)
    return 0


def _litertjs(progress, args, fun, inputs, exported, errors: dict) -> dict:
    """The .tflite's LiteRT.js page (``<stem>_litertjs/``) and, with --verify-browser, its run in
    Chromium: error rows go to ``errors``; latency and WebGPU's op placement come back as lines."""
    from noxla.pipeline.preflight import run_step
    from noxla.runtimes.litertjs_page import placement_text, verify_in_browser, write_page

    page = run_step(progress, "write LiteRT.js page", write_page, exported.written["tflite"], fun,
                    exported.program, _example_args(inputs))
    shown = os.path.relpath(page) if not os.path.relpath(page).startswith("..") else page
    lines = [f"LiteRT.js page: `noxla serve {shown}`"]
    if not args.verify_browser:
        return {"lines": lines}
    results = run_step(progress, "verify on LiteRT.js in Chromium", verify_in_browser, page,
                       args.screenshot if "tfjs" not in exported.written else None)
    if isinstance(results, str):
        errors["litertjs"] = results
        return {"lines": lines}
    for accelerator, r in results.items():
        errors[f"litertjs_{accelerator}"] = r.get("error") or _rejected(r.get("rejected")) or r["max_error"]
        if "ms" in r:
            lines.append(f"LiteRT.js {accelerator}: median {r['ms']:.2f} ms"
                         + (f"; {placement_text(r['placement'])}" if accelerator == "webgpu" else ""))
    return {"lines": lines}


def _browser_errors(results) -> dict:
    """verify_in_browser's answer as summary rows: the max error per Chromium backend, or why not."""
    if isinstance(results, str):
        return {"chromium": results}
    return {f"chromium_{backend}": r.get("error") or _rejected(r.get("rejected")) or r["max_error"]
            for backend, r in results.items()}


def _rejected(report: str | None) -> str | None:
    """A backend noxla's check rejects (WebGL: whole 32-bit words): what the page said, one line per use."""
    if not report:
        return None
    uses = [line.strip()[2:] for line in report.splitlines() if line.strip().startswith("- ")]
    return "not run, rejected up front: " + "; ".join(uses)


def cmd_serve(args, out, err) -> int:
    from noxla.runtimes.demo import serve
    from noxla.runtimes.litertjs_page import MODEL, page_dir_for
    from noxla.runtimes.litertjs_page import serve as serve_litertjs
    if args.directory.endswith(".tflite"):  # its page, written by --litertjs-page
        args.directory = page_dir_for(args.directory)
    if os.path.exists(os.path.join(args.directory, MODEL)):
        serve = serve_litertjs
    try:
        serve(args.directory, port=args.port, ready=lambda url: print(f"serving {args.directory} at {url} "
                                                                     "(Ctrl-C stops)", file=out, flush=True))
    except KeyboardInterrupt:
        pass
    except FileNotFoundError as e:
        print(f"noxla: error: {e}", file=err)
        return 1
    return 0


def verify(fun, program, inputs: Sequence[InputSpec], written: dict, strict: bool = False) -> dict:
    from noxla.runtimes.verify import verify_artifacts
    rng = np.random.default_rng(0)
    return verify_artifacts(fun, program, [i.sample(rng) for i in inputs], written, strict=strict)


def _summary(program, written: dict, errors: dict, out) -> None:
    from noxla.runtimes import tflite_op_names
    print("\nsummary", file=out)
    print(f"  inputs:  {', '.join(f'{n}: {a.str_short()}' for n, a in zip(program.in_names, program.in_avals))}",
          file=out)
    print(f"  outputs: {', '.join(f'{n}: {a.str_short()}' for n, a in zip(program.out_names, program.out_avals))}",
          file=out)
    print(f"  jaxpr equations: {sum(1 for _ in _eqns(program))}", file=out)
    for kind, path in written.items():
        size = _size(path)
        line = f"  {kind:12s} {path}  {size / 1024:.1f} KiB"
        if kind == "tflite":
            ops = tflite_op_names(path)
            line += f"  {len(ops)} ops ({', '.join(sorted(set(ops)))})"
        print(line, file=out)
    for runtime, error in errors.items():
        shown = error if isinstance(error, str) else f"{error:.2e} (relative to output scale)"
        print(f"  max error vs JAX on random inputs [{runtime}]: {shown}", file=out)


def _eqns(program):
    from limitations.engine import iter_eqns
    return iter_eqns(program.closed_jaxpr)


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def cmd_check(args, out, err) -> int:
    from noxla.api import check
    fun, inputs = _function_and_inputs(args, out)
    report = check(fun, *_example_args(inputs), target=args.target,
                   polymorphic_shapes=_polymorphic_shapes(args, inputs))
    print(report.format(), file=out)
    return 0 if report.ok else 1


def cmd_limitations(args, out, err) -> int:
    # The table generated from the registry and shipped with the package (a test keeps it
    # fresh): printing it costs nothing, re-tracing every case would cost a minute.
    print(importlib.resources.files("limitations").joinpath("LIMITATIONS.md").read_text(), end="", file=out)
    return 0


def cmd_llm_export(args, out, err) -> int:
    from noxla import llm
    if not args.tflite and not args.litertlm:
        raise SystemExit("noxla llm-export: give --tflite and/or --litertlm")
    if args.litertlm and args.tokenizer is None:
        raise SystemExit("noxla llm-export: --litertlm needs --tokenizer")
    loaded = load_function(args.decoder)()
    # (step, params, layout), (nnx_module, layout) or a keras-hub model (with --cache-length).
    if isinstance(loaded, tuple) and len(loaded) in (2, 3):
        model, params, layout = loaded[0], loaded[1:-1], loaded[-1]
    else:
        model, params, layout = loaded, (), None
    common = dict(layout=layout, cache_length=args.cache_length, prefill_lengths=args.prefill or (8,),
                  quantize=args.quantize, overwrite=args.force, on_step=Progress(out))
    if args.tflite:
        print(f"wrote {llm.export_tflite(model, *params, args.tflite, **common)}", file=out)
    if args.litertlm:
        path = llm.export_litertlm(model, *params, args.litertlm, tokenizer=args.tokenizer,
                                   start_token=args.start_token, stop_tokens=args.stop_token or None, **common)
        print(f"wrote {path}", file=out)
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
    export.add_argument("--quantize", choices=["float16", "dynamic_int8", "int8"],
                        help="quantized .tflite: float16 or int8 weights, or int8 weights and activations "
                             "(int8: calibrated on --representative-data)")
    export.add_argument("--representative-data", metavar="NPZ",
                        help="for --quantize int8: an .npz with one array per input (in order), each with a "
                             "leading axis of samples")
    export.add_argument("--tfjs-quantize", choices=["uint8", "uint16", "float16"],
                        help="store the TF.js weights quantized (dequantized when loaded)")
    export.add_argument("--tfjs-shard-bytes", type=int, default=4 * 1024 * 1024, metavar="BYTES",
                        help="largest TF.js weight file (default 4 MiB)")
    export.add_argument("--force", action="store_true", help="replace existing outputs")
    export.add_argument("--no-verify", action="store_true", help="skip running the outputs against JAX")
    export.add_argument("--verify-browser", action="store_true",
                        help="also run the TF.js export's demo page in headless Chromium (webgl, wasm, cpu), and "
                             "the .tflite on LiteRT.js there (wasm, WebGPU)")
    export.add_argument("--litertjs-page", action="store_true",
                        help="write the .tflite's LiteRT.js page (wasm and WebGPU, error vs JAX, op placement) "
                             "in <stem>_litertjs/ for `noxla serve`; --verify-browser writes and runs it")
    export.add_argument("--tflite-target", default="tflite", type=lambda name: name.lower().replace("-", "_"),
                        choices=["tflite", "litertjs", "litertjs_webgpu"],
                        help="where the .tflite runs: tflite (LiteRT, default), litertjs (LiteRT.js: checked for "
                             "its tensor dtypes and static shapes), litertjs-webgpu (also lowered with exact "
                             "alternatives to the ops LiteRT.js's WebGPU delegate leaves on wasm; see "
                             "`noxla limitations`)")
    export.add_argument("--shape-buckets", action="append", metavar="VAR=SIZES",
                        help="with --polymorphic: one .tflite signature per size instead of dynamic dimensions "
                             "(LiteRT.js runs static shapes only), e.g. b=1,8,32 gives b1, b8, b32; "
                             "--verify-browser runs each on LiteRT.js")
    export.add_argument("--screenshot", metavar="PNG",
                        help="with --verify-browser: save the WebGL page's screenshot (the LiteRT.js page's "
                             "without --tfjs)")
    export.add_argument("--strict", action="store_true",
                        help="keep JAX's NaN/inf semantics exactly (more ops); by default fused ops such as "
                             "MaxPool and Softmax may treat NaN/inf differently (see `noxla limitations`)")
    export.set_defaults(run=cmd_export)

    check = sub.add_parser("check", help="report every use the target cannot run (exit 1 if any)")
    add_program_args(check)
    check.add_argument("--target", default="tflite", type=lambda name: name.lower().replace("-", "_"),
                       choices=["tf", "tflite", "tflite_flex", "tfjs", "tfjs_webgl", "litertjs", "litertjs_webgpu"],
                       help="tfjs_webgl (or tfjs-webgl): TF.js on its WebGL backend, TF.js's limits and WebGL's own; "
                            "litertjs: the .tflite on LiteRT.js (tensor dtypes, static shapes); litertjs_webgpu: "
                            "on its WebGPU accelerator too")
    check.set_defaults(run=cmd_check)

    serve = sub.add_parser("serve", help="serve an export's demo page (index.html) and TF.js or LiteRT.js on localhost")
    serve.add_argument("directory", metavar="DIR", help="a directory written by `noxla export --tfjs DIR`, or a "
                       ".tflite (or its <stem>_litertjs/ page) written with --litertjs-page")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=cmd_serve)

    llm_export = sub.add_parser("llm-export", help="export a JAX decode step (noxla.llm's form) to the .tflite "
                                "and/or .litertlm that LiteRT-LM runs")
    llm_export.add_argument("decoder", metavar="MODULE:FUNCTION",
                            help="returns (step, params, noxla.llm.CacheLayout), (Flax NNX module, CacheLayout) "
                            "or a keras-hub causal LM or backbone (JAX backend, with --cache-length); see noxla.llm")
    llm_export.add_argument("--cache-length", type=int, metavar="C", help="KV cache positions, for a keras model")
    llm_export.add_argument("--tflite", metavar="FILE")
    llm_export.add_argument("--litertlm", metavar="FILE", help="also needs --tokenizer, and --start-token and "
                            "--stop-token unless a keras-hub model's preprocessor has them")
    llm_export.add_argument("--tokenizer", metavar="FILE", help="a HF tokenizer.json or a SentencePiece model")
    llm_export.add_argument("--start-token", type=int)
    llm_export.add_argument("--stop-token", type=int, action="append", default=[])
    llm_export.add_argument("--prefill", type=int, action="append", metavar="N",
                            help="a prefill_N signature (repeatable; default 8)")
    llm_export.add_argument("--quantize", choices=llm_quantize.MODES, help="; ".join(
        [f"{m}: {what} (LiteRT's quantizer, recipe {recipe})"
         for m, (recipe, what) in llm_quantize.QUANTIZER_MODES.items()]
        + [f"{', '.join(llm_quantize.CONVERTER_MODES)}: the TFLite converter's modes"]))
    llm_export.add_argument("--force", action="store_true", help="replace existing outputs")
    llm_export.set_defaults(run=cmd_llm_export)

    limitations = sub.add_parser("limitations", help="print the generated limitations table")
    limitations.set_defaults(run=cmd_limitations)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # TF's C++ start-up chatter (CUDA plugin registration on a CPU machine) is noise to a CLI user;
    # what this setting does not silence, own_output keeps off the terminal.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = build_parser().parse_args(argv)
    if args.command == "limitations":  # no TF, nothing to silence
        return args.run(args, sys.stdout, sys.stderr)
    with own_output() as (out, err):
        _quiet_python_logging()
        from noxla.errors import NoxlaError
        try:
            return args.run(args, out, err)
        except NoxlaError as e:
            print(f"noxla: error: {e}" if not str(e).startswith("noxla") else str(e), file=err)
            return 1


def _quiet_python_logging() -> None:
    """absl's and TF's Python loggers write to stderr, which is scratch now; they also buffer."""
    import logging
    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)


if __name__ == "__main__":
    sys.exit(main())
