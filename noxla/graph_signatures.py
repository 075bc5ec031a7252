"""Several signatures in one .tflite written by noxla's graph (``noxla.graph.tflite``), without
TensorFlow (issue 41): each signature's model is written from its recorded program as a lone
export's is, and the models are merged as TF's path merges its converted ones
(``noxla.tflite_merge.merged_model``: the weights the signatures share are stored once;
``noxla.tflite_projections``: matrix-vector projections joined across signatures). Taken by default
(``noxla.graph.covers_signatures``: not with NOXLA_TFLITE_GRAPH=0, strict, TF's quantizer or a
SavedModel) where every signature is covered; otherwise nothing is written and TF's path
(``noxla.export.export_cleared_signatures``) exports all of them."""
from __future__ import annotations

from typing import Callable

from lowering_rules.vocabulary import Target
from noxla import graph, large_tflite
from noxla.graph.dtypes import Uncovered
from noxla.preflight import ClearedSignatures, run_step, write_chunks
from noxla.tflite_merge import merged_model
from noxla.tflite_projections import join_matrix_vector_projections
from noxla.tflite_reshapes import fold_transpose_pairs, read_caches_in_batch_matmul, remove_reshape_pairs
from noxla.weight_stubs import WeightStubs


def export_tflite(cleared: ClearedSignatures, rewrite: Callable | None = None,
                  why: list[str] | None = None) -> str | None:
    """The .tflite at ``cleared.options.tflite``, its signatures written by the graph; None (nothing
    written, and a step saying why, also appended to ``why``) where the graph's writer may not
    take the file or does not cover one of its signatures. ``rewrite(model, stubs)``: as
    ``noxla.export.export_signatures``' (``stubs`` None)."""
    from noxla.graph.tflite import graph_tflite_model
    options, on_step = cleared.options, cleared.options.on_step
    why = [] if why is None else why
    if options.quantize is not None:  # LiteRT's quantizer takes a lone signature's file (noxla.tflite_quantize)
        why.append(f"quantize={options.quantize!r} with several signatures (TF's converter)")
        return None
    if not graph.covers_signatures(options):
        reason = graph.why_tflite_needs_tensorflow(options)
        why.append(reason or "a SavedModel asked for")
        return None
    # The signatures' large weights as placeholders, each made when written (or quantized by
    # ``rewrite``): one array read by every signature is held once, not copied per signature.
    stubs = WeightStubs()
    models = {}
    for key, program in cleared.programs.items():
        try:
            models[key] = run_step(on_step, f"lower+write {key} (graph tflite)", graph_tflite_model, program, stubs,
                                   strict=options.strict,
                                   webgpu=cleared.targets.get("tflite") == Target.LITERTJS_WEBGPU)
        except Uncovered as e:
            why.append(f"signature {key}: the graph tflite writer does not cover {e}")
            if on_step is not None:
                on_step(f"graph tflite writer: signature {key}: {e}; taking TensorFlow's path", 0.0)
            return None
    merged = run_step(on_step, "merge signatures", merged_model, models, stubs)
    del models
    # TF's path's passes on its converted signatures (``finish_tflite``), on every subgraph at once:
    # the writer leaves to them what they remove (``passes_follow``).
    # Until neither finds more: reading a squeezed cache grows the scores by a unit axis, where the
    # graph's mask (not reshaped, as the converter does) then pairs the reshapes around the softmax.
    while remove_reshape_pairs(merged) + read_caches_in_batch_matmul(merged):
        pass
    fold_transpose_pairs(merged)
    join_matrix_vector_projections(merged, stubs)
    if rewrite is not None:
        run_step(on_step, "rewrite", rewrite, merged, stubs)
    data = run_step(on_step, "serialize", large_tflite.serialized, merged, stubs=stubs)
    return run_step(on_step, f"write {options.tflite}", write_chunks, data, options.tflite, options.overwrite)
