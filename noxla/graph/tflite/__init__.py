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

from noxla.graph.dtypes import Uncovered
from noxla.graph.lower import Recorded, record_program

# control_flow and the legalize_* modules register their legalizers when imported.
from noxla.graph.tflite import (  # noqa: F401
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
from noxla.graph.tflite.decline import decline_what_the_tf_path_does_better, reshapes_the_tf_path_removes
from noxla.graph.tflite.legalize import legalize
from noxla.graph.tflite.model import serialize
from noxla.graph.tflite.outputs import copy_passthrough_outputs
from noxla.lowering_variants import needs_tflite_lowering
from noxla.tracing import Program

__all__ = ["VARIANTS", "Passes", "Uncovered", "graph_tflite_chunks", "tflite_chunks_of", "variant"]


@dataclasses.dataclass(frozen=True)
class Passes:
    """One variant's passes: ``fusions`` and then ``simplify`` to a fixed point (in the main graph
    and each While/If body), ``finish`` once after the fusions; ``decline``: graphs TF's path's own
    flatbuffer passes write smaller are left to it (``decline``); ``flatbuffer``: those passes run
    here instead, on the serialized model (``ModelT``): a function giving them in order (their
    modules are imported only for a file that takes them)."""
    fusions: tuple
    finish: tuple
    simplify: tuple
    decline: bool = True
    flatbuffer: Callable[[], tuple] | None = None


def _without(passes_: tuple, left_out: frozenset) -> tuple:
    """``passes_`` but ``left_out``, each replaced by its part that changes no value where it has
    one (``fuse.EXACT_PART``)."""
    return tuple(fuse.EXACT_PART[p] if p in left_out else p for p in passes_
                 if p not in left_out or p in fuse.EXACT_PART)


def _webgpu_flatbuffer_passes() -> tuple:
    """TF's path's passes on the converted file for LiteRT.js's WebGPU delegate, in its order
    (``noxla.export.finish_tflite`` with ``webgpu``): reshape and transpose pairs removed, constant
    operands given a unit batch, NOT_EQUAL of floats as LOGICAL_NOT of EQUAL, activations taken out
    of TRANSPOSE_CONV. Not its squeezes read by BATCH_MATMUL nor its joined projections (it makes
    neither for WebGPU)."""
    from noxla.tflite_reshapes import fold_transpose_pairs, remove_reshape_pairs
    from noxla.webgpu_constants import constants_with_unit_batch
    from noxla.webgpu_tflite import not_equal_as_negated_equal, unfuse_transpose_conv_activations
    return (remove_reshape_pairs, fold_transpose_pairs, constants_with_unit_batch, not_equal_as_negated_equal,
            unfuse_transpose_conv_activations)


# strict: IEEE-exact lowerings (recorded with ``strict``), and no pass that changes a value against
# the IEEE arithmetic of the operators it replaces for some input (``fuse.CHANGES_VALUES``,
# ``passes.CHANGES_VALUES``). WebGPU: the lowering for LiteRT.js's WebGPU delegate, no LOG_SOFTMAX
# (the delegate has no kernel for it), and TF's path's WebGPU flatbuffer passes after serializing.
_EXACT = fuse.CHANGES_VALUES | passes.CHANGES_VALUES
_NO_WEBGPU_KERNEL = frozenset({fuse.log_softmax})
VARIANTS = {
    "default": Passes(fuse.FUSIONS, fuse.FINISH, passes.SIMPLIFY),
    "strict": Passes(_without(fuse.FUSIONS, _EXACT), _without(fuse.FINISH, _EXACT),
                     _without(passes.SIMPLIFY, _EXACT)),
    "webgpu": Passes(_without(fuse.FUSIONS, _NO_WEBGPU_KERNEL), fuse.FINISH, passes.SIMPLIFY, decline=False,
                     flatbuffer=_webgpu_flatbuffer_passes),
    "strict_webgpu": Passes(_without(fuse.FUSIONS, _EXACT | _NO_WEBGPU_KERNEL), _without(fuse.FINISH, _EXACT),
                            _without(passes.SIMPLIFY, _EXACT), decline=False, flatbuffer=_webgpu_flatbuffer_passes),
}


def variant(strict: bool = False, webgpu: bool = False) -> str:
    return "strict_webgpu" if strict and webgpu else "strict" if strict else "webgpu" if webgpu else "default"


def tflite_chunks_of(recorded: Recorded, passes_follow: bool = False, variant_name: str = "default") -> list:
    """The .tflite of a recorded program, as chunks for ``noxla.large_tflite``'s writer, with
    ``VARIANTS[variant_name]``'s passes. ``passes_follow``: TF's path's flatbuffer passes run on the
    result (see ``decline``)."""
    chosen = VARIANTS[variant_name]
    graph = legalize(recorded)
    found: list = []   # what TF's path's reshape passes would remove, per graph (main, bodies)
    run = functools.partial(_passes, chosen=chosen, passes_follow=passes_follow or not chosen.decline, found=found)
    run(graph)
    control_flow.optimize(graph, run)   # the same passes in each While/If body
    copy_passthrough_outputs(graph)
    chunks = serialize(graph)
    rewrites = (chosen.flatbuffer() if chosen.flatbuffer else ()) + (_reshape_passes() if any(found) else ())
    return _flatbuffer_passes(chunks, rewrites) if rewrites else chunks


def _passes(graph, chosen: Passes, passes_follow: bool, found: list) -> None:
    graph.prune()   # what only a folded empty tensor read (``empty``, ``legalize_more``)
    fuse.fuse(graph, chosen.fusions, chosen.finish)
    passes.simplify(graph, chosen.simplify)
    if not passes_follow:
        found.append(reshapes_the_tf_path_removes(graph))
    decline_what_the_tf_path_does_better(graph, passes_follow, reshapes_follow=True)


def _reshape_passes() -> tuple:
    """TF's path's reshape passes on a lone model (``noxla.export.finish_tflite``), run on a file
    that holds what they remove (reading and writing the flatbuffer again costs a copy of it)."""
    from noxla.tflite_reshapes import fold_transpose_pairs, read_caches_in_batch_matmul, remove_reshape_pairs
    return (remove_reshape_pairs, read_caches_in_batch_matmul, fold_transpose_pairs)


def _flatbuffer_passes(chunks: list, rewrites: tuple) -> list:
    """``rewrites`` on the model ``chunks`` hold (the writer covers files below 2 GB: one bytes object)."""
    from noxla import large_tflite
    from noxla.tflite_schema import read_model
    model = read_model(b"".join(bytes(c() if callable(c) else c) for c in chunks))
    for rewrite in rewrites:
        rewrite(model)
    return large_tflite.serialized(model)


def graph_tflite_chunks(program: Program, passes_follow: bool = False, strict: bool = False,
                        webgpu: bool = False, converter_lowering: bool | None = None) -> list:
    """``program`` recorded and written: ``strict``, its IEEE-exact lowerings; ``webgpu``, for
    LiteRT.js's WebGPU delegate; ``converter_lowering`` (``LoweringFor.tflite_converter``), the
    lowering TF's path hands its TFLite converter (every signature of several), by default where the
    program needs it (``needs_tflite_lowering``), as TF's path lowers a lone one. Symbolic sizes as
    the converter writes a tf.function's None sizes (``legalize_shapes``)."""
    if webgpu and passes_follow:   # the merge of several signatures runs the default file's passes
        raise Uncovered("several signatures for LiteRT.js's WebGPU")
    if converter_lowering is None:   # strict: its sums and divisions as written (no MEAN, as before)
        converter_lowering = strict or needs_tflite_lowering(program)
    recorded = record_program(program, strict, tflite_converter=converter_lowering, webgpu=webgpu)
    return tflite_chunks_of(recorded, passes_follow, variant(strict, webgpu))
