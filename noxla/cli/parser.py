"""The `noxla` command's arguments: one subparser per command, each naming the function that runs it."""
from __future__ import annotations

import argparse

from noxla.cli.commands import cmd_check, cmd_limitations, cmd_llm_export, cmd_serve
from noxla.cli.export import cmd_export
from noxla.cli.inputs import InputSpec
from noxla.llm import quantize as llm_quantize


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
                       choices=["tf", "tflite", "tflite_flex", "tfjs", "tfjs_webgl", "tfjs_webgpu", "litertjs",
                                "litertjs_webgpu"],
                       help="tfjs_webgl (or tfjs-webgl): TF.js on its WebGL backend, TF.js's limits and WebGL's own; "
                            "tfjs_webgpu: on its WebGPU backend; "
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
        + [f"{', '.join(llm_quantize.EXPORT_MODES)}: as `noxla export --quantize` (by LiteRT's quantizer, "
           "or by TF's converter on TF's path)"]))
    llm_export.add_argument("--force", action="store_true", help="replace existing outputs")
    llm_export.set_defaults(run=cmd_llm_export)

    limitations = sub.add_parser("limitations", help="print the generated limitations table")
    limitations.set_defaults(run=cmd_limitations)
    return parser
