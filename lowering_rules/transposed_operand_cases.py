"""Cases of ``c - x.T`` and ``c / x.T``, which TF's TFLite converter ran as ``x.T - c`` and ``x.T / c``.

Found by tests/fuzz_grad.py: the converter moves a transpose behind a Sub or Div with a constant
operand and swaps the operands (LiteRT gave x.T - 5); noxla/writers/tflite/converter/transposes.py makes the move
itself. An array constant in a body is a loop-invariant operand, which the converter sinks into the
body and then moves as in the main graph (also in a nested loop's body, and down a chain).
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from lowering_rules.core.cases import case, i32


def _loop(body, steps: int = 3):
    return lambda x: lax.while_loop(lambda s: s[0] < steps, lambda s: (s[0] + 1, body(s[1])), (0, x))[1]


def _table(y):
    return jnp.arange(9).reshape(3, 3) - y.T


SUB = [
    case("constant_minus_transposed", lambda x: 5 - x.T, i32(3, 2)),
    case("constant_minus_transposed_chain", lambda x: jnp.array([[1], [2]]) - (x.T * 2 + 1), i32(3, 2)),
    case("constant_minus_transposed_in_loop", _loop(lambda y: 5 - y.T), i32(3, 3)),
    # At a polymorphic size the converter compares ?x3 with ?x3 as equal types and moves the same way.
    case("constant_minus_transposed_polymorphic", lambda x: 5 - x.T, i32(2, 3), polymorphic_shapes=("(b, 3)",)),
    case("constant_minus_transposed_in_loop_polymorphic", _loop(lambda y: 5 - y.T), i32(3, 3),
         polymorphic_shapes=("(b, b)",)),
    case("constant_array_minus_transposed_in_loop", _loop(_table), i32(3, 3)),
    case("constant_array_minus_transposed_in_nested_loop", _loop(_loop(_table, 2), 2), i32(3, 3)),
    case("constant_array_minus_transposed_chain_in_loop",
         _loop(lambda y: jnp.arange(9).reshape(3, 3) - (y.T * 2 + 1), 2), i32(3, 3)),
    # An unrolled scan: each step's transpose reads the last step's, moved before it.
    case("constant_minus_transposed_unrolled_scan",
         lambda x: lax.scan(lambda y, _: (_table(y), None), x, None, length=3)[0], i32(3, 3)),
]

# The int32 input keeps the programs off the direct .tflite writer, which has no such fault.
DIV = [
    case("constant_over_transposed", lambda x: 12.0 / x.astype(jnp.float32).T, i32(3, 2, low=1, high=9)),
    case("constant_over_transposed_in_loop", lambda x: _loop(lambda y: jnp.full((3, 3), 12.0) / y.T, 1)(
        x.astype(jnp.float32)), i32(3, 3, low=1, high=9)),
]
