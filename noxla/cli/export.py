"""`noxla export`: the program exported (``noxla.api.export``), verified against JAX on random
inputs (and in Chromium with --verify-browser), the .tflite's LiteRT.js page, the shape buckets'
signatures, then the summary (``noxla.cli.report``)."""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from noxla.cli.inputs import InputSpec, example_args, function_and_inputs, polymorphic_shapes, representative_data
from noxla.cli.report import Progress, browser_errors, rejected, summary


def cmd_export(args, out, err) -> int:
    from noxla.api import export

    fun, inputs = function_and_inputs(args, out)
    if not (args.tflite or args.tfjs or args.saved_model):
        args.tflite = "model.tflite"
        print("noxla: no output given; writing --tflite model.tflite", file=out)
    progress = Progress(out)
    if args.shape_buckets:
        return _export_buckets(args, fun, inputs, progress, out)
    exported = export(fun, example_args(inputs), tflite=args.tflite, tfjs=args.tfjs, saved_model=args.saved_model,
                      polymorphic_shapes=polymorphic_shapes(args, inputs), allow_flex=args.allow_flex,
                      overwrite=args.force, strict=args.strict, quantize=args.quantize,
                      representative_data=representative_data(args.representative_data),
                      tfjs_quantize=args.tfjs_quantize, tfjs_shard_bytes=args.tfjs_shard_bytes,
                      tflite_target=args.tflite_target, on_step=progress)
    errors = {}
    if not args.no_verify:
        from noxla.pipeline.preflight import run_step
        errors = run_step(progress, "verify", verify, fun, exported.program, inputs, exported.written)
    if args.verify_browser and "tfjs" in exported.written:
        from noxla.pipeline.preflight import run_step
        from noxla.runtimes.demo import verify_in_browser
        browser = run_step(progress, "verify in Chromium", verify_in_browser, exported.written["tfjs"],
                           args.screenshot)
        errors.update(browser_errors(browser))
    elif "tfjs" in exported.written:  # without the browser run, still say where the check rejects it
        from noxla.runtimes.demo import backend_rejections
        errors.update({f"tfjs ({backend})": rejected(report)
                       for backend, report in backend_rejections(exported.program).items()})
    litertjs = {}
    if "tflite" in exported.written and (args.litertjs_page or args.verify_browser) and not args.quantize:
        litertjs = _litertjs(progress, args, fun, inputs, exported, errors)
    summary(exported.program, {kind: getattr(args, kind) for kind in exported.written}, errors, out)
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
    buckets, poly = parse_buckets(args.shape_buckets), polymorphic_shapes(args, inputs)
    signatures = bucket_signatures(fun, example_args(inputs), poly, buckets)
    path = export_tflite(fun, *example_args(inputs), path=args.tflite, polymorphic_shapes=poly, shape_buckets=buckets,
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
                    exported.program, example_args(inputs))
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
        errors[f"litertjs_{accelerator}"] = r.get("error") or rejected(r.get("rejected")) or r["max_error"]
        if "ms" in r:
            lines.append(f"LiteRT.js {accelerator}: median {r['ms']:.2f} ms"
                         + (f"; {placement_text(r['placement'])}" if accelerator == "webgpu" else ""))
    return {"lines": lines}


def verify(fun, program, inputs: Sequence[InputSpec], written: dict) -> dict:
    from noxla.runtimes.verify import verify_artifacts
    rng = np.random.default_rng(0)
    return verify_artifacts(fun, program, [i.sample(rng) for i in inputs], written)
