"""Several signatures in one .tflite written by noxla's graph (``noxla.writers.tflite``), without
TensorFlow (issue 41): each signature's model is written from its recorded program as a lone
export's is, and the models are merged as TF's path merges its converted ones
(``noxla.writers.tflite.flatbuffer.merge.merged_model``: the weights the signatures share are stored once), then take
the variant's passes on the merged model (``Passes.merged``: for the default file TF's path's, such
as ``noxla.writers.tflite.flatbuffer.projections``' matrix-vector projections joined across signatures; none for
LiteRT.js's WebGPU, as on TF's path). Quantized (float16, dynamic_int8) by LiteRT's quantizer once
merged (``noxla.writers.tflite.quantize``), which stores a shared weight once too. Taken by default
(``noxla.pipeline.graph_path.covers_signatures``: not with NOXLA_TFLITE_GRAPH=0, TF's quantizer or a SavedModel)
where every signature is covered; otherwise nothing is written and TF's path
(``noxla.pipeline.tf_path.export_cleared_signatures``) exports all of them."""
from __future__ import annotations

from typing import Callable

from lowering_rules.core.vocabulary import Target
from noxla.graph.dtypes import Uncovered
from noxla.pipeline import graph_path as graph
from noxla.pipeline.preflight import ClearedSignatures, run_step, write_chunks
from noxla.writers.tf.weight_stubs import WeightStubs
from noxla.writers.tflite.flatbuffer import large as large_tflite
from noxla.writers.tflite.flatbuffer.merge import merged_model


def export_tflite(cleared: ClearedSignatures, rewrite: Callable | None = None,
                  why: list[str] | None = None) -> str | None:
    """The .tflite at ``cleared.options.tflite``, its signatures written by the graph; None (nothing
    written, and a step saying why, also appended to ``why``) where the graph's writer may not
    take the file or does not cover one of its signatures. ``rewrite(model, stubs)``: as
    ``noxla.pipeline.tf_path.export_signatures``' (``stubs``: the placeholders' ``WeightStubs``)."""
    from noxla.writers.tflite import VARIANTS, graph_tflite_model, variant
    options, on_step = cleared.options, cleared.options.on_step
    why = [] if why is None else why
    if options.quantize is not None and rewrite is not None:   # TF's path rewrites its quantized model
        why.append(f"quantize={options.quantize!r} with a rewrite of the merged model")
        return None
    if not graph.covers_signatures(options):
        reason = graph.why_tflite_needs_tensorflow(options)
        why.append(reason or "a SavedModel asked for")
        return None
    webgpu = cleared.targets.get("tflite") == Target.LITERTJS_WEBGPU
    # The signatures' large weights as placeholders, each made when written (or quantized by
    # ``rewrite``): one array read by every signature is held once, not copied per signature.
    stubs = WeightStubs()
    models = {}
    for key, program in cleared.programs.items():
        try:
            models[key] = run_step(on_step, f"lower+write {key} (graph tflite)", graph_tflite_model, program, stubs,
                                   strict=options.strict, webgpu=webgpu)
        except Uncovered as e:
            why.append(f"signature {key}: the graph tflite writer does not cover {e}")
            if on_step is not None:
                on_step(f"graph tflite writer: signature {key}: {e}; taking TensorFlow's path", 0.0)
            return None
    merged = run_step(on_step, "merge signatures", merged_model, models, stubs)
    del models
    for merged_pass in VARIANTS[variant(options.strict, webgpu)].merged():
        merged_pass(merged, stubs)
    if rewrite is not None:
        run_step(on_step, "rewrite", rewrite, merged, stubs)
    data = run_step(on_step, "serialize", large_tflite.serialized, merged, stubs=stubs)
    if options.quantize is not None:   # float16 or dynamic_int8 (int8 is refused up front: ``preflight_signatures``)
        from noxla.writers.tflite.quantize import quantized
        del merged
        data = [run_step(on_step, f"quantize {options.quantize} (LiteRT's quantizer)", quantized, data,
                         options.quantize, None)]
    return run_step(on_step, f"write {options.tflite}", write_chunks, data, options.tflite, options.overwrite)
