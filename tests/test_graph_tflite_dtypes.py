"""Types the graph's TFLite writer carries through the LiteRT kernels that move or order them
(``model.GRAPH_WRITER_KINDS``), the forms JAX's harnesses gave it that it left ``Uncovered`` (and
exported through TF, whose converter writes the same builtins): each program is written from
noxla's graph, holds the builtin on that type, and equals JAX on LiteRT bit for bit."""
from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from noxla.front.tracing import trace
from noxla.runtimes import run_tflite
from noxla.writers.tflite.model import Graph, serialize
from tests.differential import graph_tflite_bytes

_U32 = np.array([[0, 1, 2 ** 32 - 1, 2 ** 31], [2 ** 31 - 1, 7, 2 ** 32 - 2, 5], [3, 2 ** 31 + 1, 0, 9]], np.uint32)
_I8 = np.array([[-128, 127, 0], [-1, 5, 100]], np.int8)
_U8 = np.array([[0, 255, 128], [1, 127, 200]], np.uint8)
_I16 = np.array([[-32768, 32767, 0, -1, 300], [-300, 1, 2, -2, 7]], np.int16)
_R6 = np.arange(24, dtype=np.int32).reshape(1, 2, 1, 3, 2, 2) - 11
# lax.gather of 3 batch axes and 4 offset axes (JAX's gather harness "3d batch dims"): its rule
# stacks rank-6 coordinates into rank-7 index vectors, gathers rank-7 slices and transposes them.
_GATHER_3D = lax.GatherDimensionNumbers(offset_dims=(1, 2, 3, 4), collapsed_slice_dims=(), start_index_map=(1, 2, 3))


def _scatter_max_dn():
    return lax.ScatterDimensionNumbers(update_window_dims=(0,), inserted_window_dims=(1,),
                                       scatter_dims_to_operand_dims=(1,))


# Name: (program, its inputs, the builtin and type its file must hold).
PROGRAMS = {
    "transpose_i8": (lambda x: x.T, (_I8,), ("TRANSPOSE", "INT8")),
    "transpose_u8": (lambda x: x.T, (_U8,), ("TRANSPOSE", "UINT8")),
    "concatenate_i8": (lambda x: jnp.concatenate([x, x[::-1]], axis=0), (_I8,), ("CONCATENATION", "INT8")),
    "concatenate_u8": (lambda x: jnp.concatenate([x, x[:, :1]], axis=1), (_U8,), ("CONCATENATION", "UINT8")),
    "rev_u8": (lambda x: lax.rev(x, (0,)), (_U8,), ("REVERSE_V2", "UINT8")),
    "rev_i16": (lambda x: lax.rev(x, (1,)), (_I16,), ("REVERSE_V2", "INT16")),
    "abs_i16_wraps": (jnp.abs, (_I16,), ("ABS", "INT16")),   # |-32768| wraps to -32768
    # The value a run-time input (as in JAX's harnesses); negative padding crops, interior spreads.
    "pad_u8_value": (lambda x, v: lax.pad(x, v, [(1, 2, 1), (-1, 3, 0)]), (_U8, np.uint8(250)), ("PADV2", "UINT8")),
    # uint32 max and min in int64 (lowering_rules.indexing, reductions): every word, 2^32 - 1 and
    # 2^31 among them, ordered as unsigned.
    "reduce_max_u32": (lambda x: jnp.max(x, axis=0), (_U32,), ("REDUCE_MAX", "INT64")),
    "reduce_min_u32": (lambda x: jnp.min(x, axis=1), (_U32,), ("REDUCE_MIN", "INT64")),
    # A reduction of two operands by its body (max of the uint32s from 3, min of the int32s from 0).
    "reduce_max_min_u32_i32": (
        lambda x, y: lax.reduce((x, y), (np.uint32(3), np.int32(0)),
                                lambda a, b: (lax.max(a[0], b[0]), lax.min(a[1], b[1])), (0,)),
        (_U32, np.array([[5, -2, 0, 7], [-9, 3, 2, 1], [0, 0, -1, 4]], np.int32)), ("PACK", "INT64")),
    "cummax_u32": (lambda x: lax.cummax(x, axis=0), (_U32,), ("CONCATENATION", "INT64")),
    "scatter_max_u32_repeated_indices": (
        lambda x, u: lax.scatter_max(x, np.array([[1], [1], [0]], np.int32), u, _scatter_max_dn()),
        (_U32, np.array([[2 ** 32 - 1, 4, 2 ** 31], [6, 2 ** 31, 1], [0, 2 ** 32 - 2, 8]], np.uint32)),
        ("SCATTER_ND", "INT64")),
    # Past rank 6: PACK and GATHER_ND of fewer axes, TRANSPOSE of merged axes, between RESHAPEs.
    "stack_rank7": (lambda a, b: jnp.stack([a, b, a], axis=3), (_R6, -_R6), ("PACK", "INT32")),
    "stack_rank7_bool": (lambda a, b: jnp.stack([a > b, a < 0], axis=6), (_R6, -_R6), ("CONCATENATION", "BOOL")),
    "gather_rank7": (
        lambda x, i: lax.gather(x, i, dimension_numbers=_GATHER_3D, slice_sizes=(10, 2, 2, 2)),
        (np.arange(10 ** 4, dtype=np.float32).reshape(10, 10, 10, 10),
         np.array([[[[0, 1, 0], [1, 0, 0], [0, 8, 3], [7, 0, 8]]]], np.int32)), ("GATHER_ND", "FLOAT32")),
}


def _typed_ops(data) -> collections.Counter:
    """(builtin, its output's type) of each operator in the file."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    return collections.Counter((names[codes[op.opcodeIndex]], types[g.tensors[op.outputs[0]].type])
                               for g in model.subgraphs for op in g.operators)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_written_from_the_graph_and_equal_to_jax(name):
    fun, args, typed_op = PROGRAMS[name]
    program = trace(fun, args)
    data = graph_tflite_bytes(program)   # Uncovered before these types were allowed
    assert typed_op in _typed_ops(data), _typed_ops(data)
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    expected = jax.tree_util.tree_leaves(jax.jit(fun)(*args))
    assert len(expected) == len(program.out_names)
    for out, want in zip(program.out_names, expected):
        assert outs[out].dtype == want.dtype
        np.testing.assert_array_equal(outs[out], np.asarray(want))


@pytest.mark.parametrize("rank", [2, 5, 6])
def test_int64_transpose_up_to_rank_6(rank):
    """LiteRT's TRANSPOSE of int64 (a uint32 scatter's max, in int64) at every rank its kernel
    takes, against numpy's transpose: values beyond int32 kept, the axes reversed and rotated."""
    shape = (2, 3, 1, 4, 2, 3)[:rank]
    x = (np.arange(np.prod(shape), dtype=np.int64) * 3_000_000_007 - 2 ** 40).reshape(shape)
    for perm in (tuple(range(rank))[::-1], tuple(range(1, rank)) + (0,)):
        graph = Graph(uint32_moves=True)
        t = graph.constant(x)
        t.data = None   # a run-time input
        graph.inputs, graph.in_names = [t], ["x"]
        out = graph.add("TRANSPOSE", [t, graph.int32(perm)], tuple(shape[a] for a in perm), np.int64)
        graph.outputs, graph.out_names = [out], ["y"]
        data = b"".join(bytes(c() if callable(c) else c) for c in serialize(graph))
        np.testing.assert_array_equal(run_tflite(data, {"x": x})["y"], np.transpose(x, perm))
