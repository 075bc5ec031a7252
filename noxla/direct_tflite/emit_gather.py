"""JAX's gather of whole slices at single indices along one axis (``jnp.take``, an embedding
lookup), as the TF path's rule writes it (``lowering_rules.indexing``): the index clamped into
range (``MAXIMUM``, ``MINIMUM``), one ``GATHER``, and for FILL_OR_DROP the slices whose index the
clamp moved (``EQUAL``) filled (``SELECT_V2``). ``jnp.take``'s wrap of negative indices comes
before it, as JAX's own comparison and select. Other forms of gather raise ``Uncovered``."""
from __future__ import annotations

import numpy as np
from jax import lax

from noxla.direct_tflite.emit import Uncovered, binary, emitter, full, out_type, permuted, reshape, select
from noxla.graph.tflite.model import Graph

_CLAMPED = {lax.GatherScatterMode.CLIP, lax.GatherScatterMode.PROMISE_IN_BOUNDS}   # XLA clamps both


@emitter("gather")
def _gather(graph: Graph, eqn, operand, indices, *, dimension_numbers, slice_sizes, unique_indices,
            indices_are_sorted, mode, fill_value=None):
    """``unique_indices`` and ``indices_are_sorted`` are hints: the result does not depend on them."""
    dn, table_shape = dimension_numbers, tuple(eqn.invars[0].aval.shape)
    axis = _taken_axis(dn, slice_sizes, table_shape)
    shape, dtype = out_type(eqn)
    filled = mode == lax.GatherScatterMode.FILL_OR_DROP
    if dtype not in (np.float32, np.int32) or indices.dtype != np.int32 or indices.is_constant:
        # constant indices: the converter folds their clamp and mask, which the writer would emit
        raise Uncovered(f"a gather of {dtype} at {'constant ' * indices.is_constant}{indices.dtype} indices")
    if not filled and mode not in _CLAMPED or filled and fill_value is None:
        raise Uncovered(f"a gather in mode {mode}")
    batch = tuple(eqn.invars[1].aval.shape[:-1])
    starts = reshape(graph, full(graph, indices, eqn.invars[1].aval.shape), batch)
    int32 = np.dtype(np.int32)
    lowest = binary(graph, "MAXIMUM", starts, graph.constant(np.int32(0)), int32)
    clamped = binary(graph, "MINIMUM", lowest, graph.constant(np.int32(table_shape[axis] - 1)), int32)
    table = full(graph, operand, table_shape)
    gathered_shape = table_shape[:axis] + batch + table_shape[axis + 1:]
    gathered = graph.add("GATHER", [table, clamped], gathered_shape, dtype, axis=axis, batchDims=0)
    gathered = permuted(graph, gathered, _output_order(dn.offset_dims, axis, len(table_shape), len(batch)))
    if not filled:
        return gathered
    in_bounds = graph.add("EQUAL", [clamped, starts], batch, np.bool_)
    in_bounds = reshape(graph, in_bounds, [1 if o in dn.offset_dims else n for o, n in enumerate(shape)])
    with np.errstate(invalid="ignore", over="ignore"):   # JAX's fill as NumPy casts it (a NaN int wraps)
        fill = graph.constant(np.asarray(fill_value).astype(dtype))
    return select(graph, in_bounds, gathered, fill, dtype)


def _taken_axis(dn, slice_sizes, table_shape) -> int:
    """The one axis the gather indexes, when it takes whole slices there at single indices."""
    axes = tuple(dn.start_index_map)
    if len(axes) != 1 or tuple(dn.collapsed_slice_dims) != axes or dn.operand_batching_dims \
            or any(s != (1 if d == axes[0] else n) for d, (s, n) in enumerate(zip(slice_sizes, table_shape))):
        raise Uncovered("a gather other than whole slices at single indices along one axis")
    return axes[0]


def _output_order(offset_dims, axis: int, rank: int, batch_rank: int) -> list:
    """Where each of the output's axes lies in GATHER's result (the table's axes before ``axis``,
    the batch's, the table's after): JAX puts the table's kept axes at ``offset_dims``."""
    kept = [d for d in range(rank) if d != axis]
    position = {("table", d): d if d < axis else d - 1 + batch_rank for d in kept}
    position.update({("batch", b): axis + b for b in range(batch_rank)})
    tables, batches = iter(kept), iter(range(batch_rank))
    return [position[("table", next(tables)) if o in offset_dims else ("batch", next(batches))]
            for o in range(rank - 1 + batch_rank)]
