"""The graph TFLite writer's folds of what TF's converter and grappler fold (noxla.writers.tflite.folds,
noxla.writers.tflite.zero_state): fewer operators, and JAX's values, NaN and infinities included."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from noxla.front.tracing import trace
from noxla.runtimes import run_tflite
from tests.test_graph_tflite import _op_counts, graph_tflite_bytes

RNG = np.random.default_rng(0)
TABLE = RNG.standard_normal((10, 4)).astype(np.float32)
KERNEL = RNG.standard_normal((4, 12)).astype(np.float32)


def _written(fun, *args):
    program = trace(fun, args)
    data = graph_tflite_bytes(program)
    outs = run_tflite(data, dict(zip(program.in_names, args)))
    for got, want in zip([outs[n] for n in program.out_names], jax.tree_util.tree_leaves(jax.jit(fun)(*args))):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6, atol=1e-6)   # NaN where JAX's is
    return _op_counts(data)


def _first_step(x, kernel):
    """An LSTM cell's first step from a zero cell state: the forget gate times zeros."""
    f, i, g = jnp.split(x @ kernel, 3, axis=-1)
    return jax.nn.sigmoid(f) * jnp.zeros_like(f) + jax.nn.sigmoid(i) * jnp.tanh(g)


def test_forget_gate_times_the_zero_state_is_left_out_after_an_embedding():
    """Tokens out of range give NaN rows (the gather's fill): c is NaN there either way."""
    fun = lambda tokens: _first_step(jnp.take(TABLE, tokens, axis=0, mode="fill", fill_value=np.nan), KERNEL)  # noqa: E731
    ops = _written(fun, np.array([3, 12, 0], np.int32))
    assert ops["LOGISTIC"] == 1 and ops["MUL"] == 1, ops


def test_forget_gate_times_the_zero_state_stays_where_an_input_may_be_infinite():
    """inf - inf makes the forget gate NaN where the input gate is 1: JAX's c is NaN, i * g is not."""
    kernel = np.zeros((2, 3), np.float32)
    kernel[:, 0] = [1, -1]
    kernel[:, 1:] = 1
    ops = _written(lambda x: _first_step(x, kernel), np.array([[np.inf, np.inf], [1, 2]], np.float32))
    assert ops["LOGISTIC"] == 2, ops


def test_a_seeds_high_word_is_a_constant():
    """A key of each int32 seed: its high word (a select of zeros on a constant condition, cast and
    reshaped) is folded, as TF's converter folds it: no select on a constant condition, no operator of
    constants only."""
    fun = lambda seeds: jax.vmap(lambda s: jax.random.normal(jax.random.key(s), (3,)))(seeds)  # noqa: E731
    program = trace(fun, (np.array([7, -2], np.int32),))
    _written(fun, np.array([7, -2], np.int32))
    assert _foldable(graph_tflite_bytes(program)) == []


def _foldable(data) -> list:
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    graph = model.subgraphs[0]
    constant = [t.buffer != 0 and model.buffers[t.buffer].data is not None for t in graph.tensors]
    return [op.opcodeIndex for op in graph.operators if all(constant[i] for i in op.inputs if i >= 0)
            or model.operatorCodes[op.opcodeIndex].builtinCode == schema.BuiltinOperator.SELECT_V2
            and constant[op.inputs[0]]]


def test_projection_of_a_slice_reads_it_unflattened():
    """x[:, -1] @ w: FULLY_CONNECTED flattens the leading axes itself (no RESHAPE)."""
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    ops = _written(lambda x: x[:, -1] @ KERNEL, x)
    assert "RESHAPE" not in ops, ops


def test_one_comparison_with_equal_literals():
    ops = _written(lambda x: (x < 5.0) & (x * 2 > 1) | (x < 5.0 + 0 * 1), np.arange(8, dtype=np.float32))
    assert ops["LESS"] == 1, ops


def test_or_of_false_and_and_of_true_are_the_other_operand():
    """The strict relu's ``isnan(x) | isnan(0)`` (the recorder folds ``isnan(0)`` to false), and
    ``x | false``, ``x & true`` written out: no LOGICAL_OR or LOGICAL_AND left (grappler folds them
    on TF's path), NaN kept as JAX keeps it."""
    from noxla.writers.tflite import graph_tflite_chunks
    x = np.array([[np.nan, -1.0, 2.0], [np.inf, -np.inf, 0.0]], np.float32)
    for fun, strict in ((jax.nn.relu, True),
                        (lambda x: ((x > 0) | jnp.zeros(x.shape, bool)) & jnp.ones(x.shape, bool), False)):
        program = trace(fun, (x,))
        data = b"".join(bytes(c() if callable(c) else c) for c in graph_tflite_chunks(program, strict=strict))
        ops = _op_counts(data)
        assert not {"LOGICAL_OR", "LOGICAL_AND"} & set(ops), ops
        (got,) = run_tflite(data, {program.in_names[0]: x}).values()
        np.testing.assert_array_equal(got, np.asarray(jax.jit(fun)(x)))
