"""A .tflite written from noxla's graph, without TensorFlow (issue 41, stage 2): the program recorded
as TF ops by the rules (``noxla.graph.lower``), legalized into LiteRT builtins (``legalize``), fused
as TF's converter fuses them (``fuse``), and serialized (``model``). An op or form not covered
raises ``Uncovered``: the export takes another path. See docs/graph.md ("TFLite writer").

The .tflite variants differ only in the lowering recorded and the passes below (``VARIANTS``):
a rule does not know which writer reads its ops, and no pass reads a target's flag."""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from noxla.front.lowering_variants import needs_tflite_lowering
from noxla.front.tracing import Program
from noxla.graph.dtypes import Uncovered
from noxla.graph.lower import Recorded, record_program

# control_flow and the legalize_* modules register their legalizers when imported.
from noxla.writers.tflite import (  # noqa: F401
    control_flow,
    empty,
    fuse,
    legalize_integers,
    legalize_math,
    legalize_more,
    legalize_nn,
    legalize_scans,
    legalize_shapes,
    passes,
)
from noxla.writers.tflite.bfloat16 import carried_bfloat16
from noxla.writers.tflite.decline import what_the_tf_path_does_better
from noxla.writers.tflite.legalize import legalize
from noxla.writers.tflite.model import model_of, serialize
from noxla.writers.tflite.outputs import copy_passthrough_outputs

__all__ = ["VARIANTS", "Passes", "Uncovered", "graph_tflite_chunks", "graph_tflite_model", "tflite_chunks_of",
           "tflite_model_of", "variant"]


def _merged_passes() -> tuple:
    """TF's path's passes on its merged signatures (``finish_tflite``), on every subgraph at once:
    the writer leaves to them what they remove (``passes_follow``). Reshape pairs and caches read by
    BATCH_MATMUL until neither finds more (reading a squeezed cache grows the scores by a unit axis,
    where the graph's mask, not reshaped as the converter does, then pairs the reshapes around the
    softmax); transpose pairs; matrix-vector projections joined across signatures."""
    from noxla.writers.tflite.flatbuffer.projections import join_matrix_vector_projections
    from noxla.writers.tflite.flatbuffer.reshapes import (
        fold_transpose_pairs,
        read_caches_in_batch_matmul,
        remove_reshape_pairs,
    )

    def reshapes(model, stubs=None) -> None:
        while remove_reshape_pairs(model) + read_caches_in_batch_matmul(model):
            pass

    def transposes(model, stubs=None) -> None:
        fold_transpose_pairs(model)
    # Each pass takes the model and the ``WeightStubs`` whose placeholders it may hold: the joined
    # projections stack the weights they stand for.
    return reshapes, transposes, join_matrix_vector_projections


@dataclasses.dataclass(frozen=True)
class Passes:
    """One variant's passes: ``fusions`` and then ``simplify`` to a fixed point (in the main graph
    and each While/If body), ``finish`` once after the fusions; ``flatbuffer``: TF's path's passes on
    each converted file, run here on the serialized model (``ModelT``): a function giving them in
    order (their modules are imported only for a file that takes them); ``merged``: TF's path's
    passes on the model several signatures are merged into (``noxla.pipeline.graph_signatures``), in the
    same form, and on a lone file that ``decline.py`` finds TF's path's passes write smaller
    (``decline``: they run on it; without, the variant's ``flatbuffer`` passes run on every file).
    """
    fusions: tuple
    finish: tuple
    simplify: tuple
    decline: bool = True
    flatbuffer: Callable[[], tuple] | None = None
    merged: Callable[[], tuple] = _merged_passes


def _without(passes_: tuple, left_out: frozenset) -> tuple:
    """``passes_`` but ``left_out``, each replaced by its part that changes no value where it has
    one (``fuse.EXACT_PART``)."""
    return tuple(fuse.EXACT_PART[p] if p in left_out else p for p in passes_
                 if p not in left_out or p in fuse.EXACT_PART)


def _webgpu_flatbuffer_passes() -> tuple:
    """TF's path's passes on the converted file for LiteRT.js's WebGPU delegate, in its order
    (``noxla.pipeline.tf_tflite_finish.finish_tflite`` with ``webgpu``): reshape and transpose pairs
    removed, a wide int32 scalar constant filled to the result's shape, PADs, CUMSUMs and REVERSEs in
    forms it computes right (webgpu_layouts), constant operands given a unit batch, NOT_EQUAL of
    floats as LOGICAL_NOT of EQUAL, an int32 difference from a constant vector as a sum, activations
    taken out of TRANSPOSE_CONV, a tensor read twice by one operator copied. Not its squeezes read by
    BATCH_MATMUL nor its joined projections (it makes neither for WebGPU)."""
    from noxla.writers.tflite.flatbuffer.reshapes import fold_transpose_pairs, remove_reshape_pairs
    from noxla.writers.tflite.flatbuffer.webgpu import (
        distinct_operands,
        integer_differences_from_constants,
        not_equal_as_negated_equal,
        unfuse_transpose_conv_activations,
        wide_integer_scalars,
    )
    from noxla.writers.tflite.flatbuffer.webgpu_constants import constants_with_unit_batch
    from noxla.writers.tflite.flatbuffer.webgpu_layouts import pads_sums_and_reverses
    return (remove_reshape_pairs, fold_transpose_pairs, wide_integer_scalars, pads_sums_and_reverses,
            constants_with_unit_batch, not_equal_as_negated_equal, integer_differences_from_constants,
            unfuse_transpose_conv_activations, distinct_operands)


# strict: IEEE-exact lowerings (recorded with ``strict``), and no pass that changes a value against
# the IEEE arithmetic of the operators it replaces for some input (``fuse.CHANGES_VALUES``,
# ``passes.CHANGES_VALUES``). WebGPU: the lowering for LiteRT.js's WebGPU delegate, no LOG_SOFTMAX
# (the delegate has no kernel for it), and TF's path's WebGPU flatbuffer passes after serializing,
# each signature's (its merge runs none of the default's: WebGPU's BATCH_MATMUL is not known to
# broadcast batch axes of unequal rank, and TF's path joins no projections for it).
_EXACT = fuse.CHANGES_VALUES | passes.CHANGES_VALUES
_NO_WEBGPU_KERNEL = frozenset({fuse.log_softmax})
VARIANTS = {
    "default": Passes(fuse.FUSIONS, fuse.FINISH, passes.SIMPLIFY),
    "strict": Passes(_without(fuse.FUSIONS, _EXACT), _without(fuse.FINISH, _EXACT),
                     _without(passes.SIMPLIFY, _EXACT)),
    "webgpu": Passes(_without(fuse.FUSIONS, _NO_WEBGPU_KERNEL), fuse.FINISH, passes.SIMPLIFY, decline=False,
                     flatbuffer=_webgpu_flatbuffer_passes, merged=tuple),
    "strict_webgpu": Passes(_without(fuse.FUSIONS, _EXACT | _NO_WEBGPU_KERNEL), _without(fuse.FINISH, _EXACT),
                            _without(passes.SIMPLIFY, _EXACT), decline=False, flatbuffer=_webgpu_flatbuffer_passes,
                            merged=tuple),
}


def variant(strict: bool = False, webgpu: bool = False) -> str:
    return "strict_webgpu" if strict and webgpu else "strict" if strict else "webgpu" if webgpu else "default"


def tflite_chunks_of(recorded: Recorded, passes_follow: bool = False, variant_name: str = "default") -> list:
    """The .tflite of a recorded program, as chunks for ``noxla.writers.tflite.flatbuffer.large``'s writer, with
    ``VARIANTS[variant_name]``'s passes. ``passes_follow``: TF's path's flatbuffer passes run on the
    result (see ``decline``)."""
    chosen = VARIANTS[variant_name]
    graph, declined = _written_graph(recorded, chosen, passes_follow)
    chunks = serialize(graph)
    rewrites = (() if chosen.flatbuffer is None else chosen.flatbuffer()) + (chosen.merged() if declined else ())
    if not rewrites:
        return chunks
    from noxla.writers.tflite.flatbuffer import large as large_tflite
    return large_tflite.serialized(_read_back(chunks, rewrites))


def tflite_model_of(recorded: Recorded, stubs, variant_name: str = "default"):
    """The unpacked .tflite (``ModelT``) of one of several signatures, whose merge runs TF's path's
    passes (``passes_follow``, ``Passes.merged``): its large weights ``stubs``' placeholders
    (``model.model_of``), so that the signatures hold no copies of them; a variant with passes on
    its own file (WebGPU) read back after them."""
    chosen = VARIANTS[variant_name]
    graph, _ = _written_graph(recorded, chosen, True)
    if chosen.flatbuffer is None:
        return model_of(graph, stubs)
    return _read_back(serialize(graph), chosen.flatbuffer())


def _written_graph(recorded: Recorded, chosen: Passes, passes_follow: bool) -> tuple:
    """The legalized graph after ``chosen``'s passes, and whether ``decline`` found it shorter on
    TF's path (its flatbuffer passes then run on the file, ``Passes.merged``)."""
    graph = legalize(carried_bfloat16(recorded))
    declined: list = []
    run = functools.partial(_passes, chosen=chosen, passes_follow=passes_follow or not chosen.decline,
                            declined=declined)
    run(graph)
    control_flow.optimize(graph, run)   # the same passes in each While/If body
    copy_passthrough_outputs(graph)
    return graph, bool(declined)


def _passes(graph, chosen: Passes, passes_follow: bool, declined: list) -> None:
    graph.prune()   # what only a folded empty tensor read (``empty``, ``legalize_more``)
    fuse.fuse(graph, chosen.fusions, chosen.finish)
    passes.simplify(graph, chosen.simplify)
    # TF's path's passes write it smaller: they run on the file (``Passes.merged``). Where they follow
    # anyway (``passes_follow``: on the merged signatures, as on TF's path), nothing is to decide.
    if not passes_follow and what_the_tf_path_does_better(graph) is not None:
        declined.append(graph)


def _read_back(chunks: list, rewrites: tuple):
    """The model ``chunks`` hold, read back whole (a file below 2 GB), after ``rewrites``."""
    from noxla.writers.tflite.flatbuffer import large as large_tflite
    from noxla.writers.tflite.flatbuffer.schema import read_model
    if sum(len(c) if isinstance(c, (bytes, memoryview)) else c.nbytes for c in chunks) > large_tflite.FLATBUFFER_LIMIT:
        raise Uncovered("a file past 2 GB whose flatbuffer passes read it back whole")
    model = read_model(b"".join(bytes(c) for c in chunks))
    for rewrite in rewrites:
        rewrite(model)
    return model


def graph_tflite_chunks(program: Program, passes_follow: bool = False, strict: bool = False,
                        webgpu: bool = False, converter_lowering: bool | None = None) -> list:
    """``program`` recorded and written: ``strict``, its IEEE-exact lowerings; ``webgpu``, for
    LiteRT.js's WebGPU delegate; ``converter_lowering`` (``LoweringFor.tflite_converter``), the
    lowering TF's path hands its TFLite converter (every signature of several), by default where the
    program needs it (``needs_tflite_lowering``), as TF's path lowers a lone one. Symbolic sizes as
    the converter writes a tf.function's None sizes (``legalize_shapes``)."""
    if converter_lowering is None:   # strict: its sums and divisions as written (no MEAN, as before)
        converter_lowering = strict or needs_tflite_lowering(program)
    recorded = record_program(program, strict, tflite_converter=converter_lowering, webgpu=webgpu)
    return tflite_chunks_of(recorded, passes_follow, variant(strict, webgpu))


def graph_tflite_model(program: Program, stubs, strict: bool = False, webgpu: bool = False):
    """One of several signatures recorded and written, unpacked (``tflite_model_of``), in the
    lowering TF's path hands its converter for several signatures."""
    recorded = record_program(program, strict, tflite_converter=True, webgpu=webgpu)
    return tflite_model_of(recorded, stubs, variant(strict, webgpu))
