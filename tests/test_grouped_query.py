"""Grouped-query attention's repeated keys and values (``lowering_rules.patterns.grouped_query``): read
unrepeated where the repeat feeds a batched product and nothing else, so the .tflite holds no
BROADCAST_TO (LiteRT's reference kernel: half of a keras-hub decode step's time), and kept where
something else reads the repeat. Values against JAX are the dot_general cases' (tests/test_rules.py)."""
from __future__ import annotations

import collections

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import noxla
from lowering_rules.linalg import GQA_SCORES, GQA_VALUES
from noxla.runtimes import tflite_op_names


def scores(q, k):
    return lax.dot_general(q, jnp.repeat(k, 3, axis=2), GQA_SCORES)


def values_transposed(v, p):
    return jnp.transpose(lax.dot_general(jnp.repeat(v, 3, axis=2), p, GQA_VALUES), (3, 0, 4, 1, 2))


def repeat_read_twice(q, k):
    repeated = jnp.repeat(k, 3, axis=2)
    return lax.dot_general(q, repeated, GQA_SCORES), repeated.sum()


CASES = {  # function, argument shapes, whether the repeat is gone
    "scores": (scores, [(1, 1, 6, 1, 8), (1, 16, 2, 8)], True),
    "values_transposed": (values_transposed, [(1, 16, 2, 8), (1, 1, 6, 1, 16)], True),
    "repeat_read_twice": (repeat_read_twice, [(1, 1, 6, 1, 8), (1, 16, 2, 8)], False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_repeated_kv_heads_are_read_unrepeated(name, tmp_path):
    from ai_edge_litert.interpreter import Interpreter
    f, shapes, gone = CASES[name]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    path = str(noxla.export_tflite(f, *args, path=str(tmp_path / "m.tflite")))
    ops = collections.Counter(tflite_op_names(path))
    assert (ops["BROADCAST_TO"] + ops["TILE"] == 0) is gone, ops
    runner = Interpreter(model_path=path).get_signature_runner()
    got = runner(**dict(zip(f.__code__.co_varnames, args)))
    want = f(*args)
    for key, value in zip(sorted(got), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(got[key], np.asarray(value), rtol=1e-5, atol=1e-5)
