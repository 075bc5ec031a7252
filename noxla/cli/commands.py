"""The commands other than `noxla export`: `check` (the up-front report), `serve` (an export's
page on localhost), `limitations` (the generated table) and `llm-export` (``noxla.llm``)."""
from __future__ import annotations

import importlib.resources
import os

from noxla.cli.inputs import example_args, function_and_inputs, load_function, polymorphic_shapes
from noxla.cli.report import Progress


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


def cmd_check(args, out, err) -> int:
    from noxla.api import check
    fun, inputs = function_and_inputs(args, out)
    report = check(fun, *example_args(inputs), target=args.target,
                   polymorphic_shapes=polymorphic_shapes(args, inputs))
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
