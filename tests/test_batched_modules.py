"""Modules as Equinox and Flax users write them, batched the way they batch them: an unbatched layer
under ``jax.vmap`` (Equinox's Linear, GRUCell, LSTMCell with a length mask, scanned over time), a loop
whose stop differs per example under ``vmap``, and Flax's linen RNN. Each is checked for every target,
then run in TF, LiteRT, LiteRT.js (wasm) and TF.js (Node cpu, wasm) against JAX.

JAX's batching rules write forms unbatched programs rarely hold (a product against a transposed
weight, a batched loop predicate); TF.js's wasm backend once computed the first wrong, silently.
"""
from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from limitations.engine import check_jaxpr
from limitations.targets import RUNTIMES
from lowering_rules.core.vocabulary import Target
from noxla.front.tracing import trace
from noxla.runtimes.verify import jax_outputs
from tests.differential import assert_matches

RUNTIMES_RUN = ("tf_eager", "tflite", "tfjs_cpu", "tfjs_wasm")
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def _linear(out_features, in_features, seed=0):
    return eqx.nn.Linear(in_features, out_features, key=jax.random.PRNGKey(seed))


def vmapped_linear(shape, batch):
    layer = _linear(*shape)
    x = np.random.RandomState(1).standard_normal((batch, shape[1])).astype(np.float32)
    return jax.vmap(layer), (x,)


def gru_over_time():
    cell = eqx.nn.GRUCell(5, 8, key=jax.random.PRNGKey(2))

    def run(xs):  # xs: [batch, time, features]
        def one(sequence):
            def step(h, x):
                h = cell(x, h)
                return h, h
            return jax.lax.scan(step, jnp.zeros(8), sequence)[1]
        return jax.vmap(one)(xs)
    return run, (np.random.RandomState(3).standard_normal((3, 6, 5)).astype(np.float32),)


def lstm_with_length_mask():
    cell = eqx.nn.LSTMCell(4, 6, key=jax.random.PRNGKey(4))

    def run(xs, lengths):  # the state stops changing past each sequence's length
        def one(sequence, length):
            def step(carry, tx):
                t, x = tx
                new = cell(x, carry)
                keep = t < length
                return jax.tree_util.tree_map(lambda n, o: jnp.where(keep, n, o), new, carry), None
            state = (jnp.zeros(6), jnp.zeros(6))
            return jax.lax.scan(step, state, (jnp.arange(sequence.shape[0]), sequence))[0][0]
        return jax.vmap(one)(xs, lengths)
    xs = np.random.RandomState(5).standard_normal((3, 7, 4)).astype(np.float32)
    return run, (xs, np.array([7, 2, 4], np.int32))


def doubling_until_past_ten():
    """The batched while: each example doubles until it passes 10 and counts its steps."""
    def one(x):
        return jax.lax.while_loop(lambda c: c[0] <= 10.0, lambda c: (c[0] * 2.0, c[1] + 1), (x, 0))
    return jax.vmap(one), (np.array([0.5, 3.0, 11.0, 7.0], np.float32),)


def flax_lstm():
    nn = pytest.importorskip("flax.linen", reason="Flax's RNN is what this program is written with")
    model = nn.RNN(nn.OptimizedLSTMCell(6))
    x = np.random.RandomState(6).standard_normal((2, 5, 3)).astype(np.float32)
    params = model.init(jax.random.PRNGKey(7), x)
    return functools.partial(model.apply, params), (x,)


# Equinox's Linear under vmap at the shapes TF.js's wasm backend got wrong (W out x in, batch).
PROGRAMS = {
    **{f"eqx_linear_{o}x{i}_batch{b}": functools.partial(vmapped_linear, (o, i), b)
       for o, i, b in ((10, 256, 2), (16, 8, 2), (48, 16, 2), (4, 16, 3))},
    "eqx_gru_over_time": gru_over_time,
    "eqx_lstm_length_mask": lstm_with_length_mask,
    "vmapped_while": doubling_until_past_ten,
    "flax_linen_lstm": flax_lstm,
}


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(name):
        if name not in cache:
            fun, args = PROGRAMS[name]()
            cache[name] = (fun, args, trace(fun, args), jax_outputs(fun, args))
        return cache[name]
    return get


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_batched_module_is_accepted_for_every_target(name, built):
    _, _, program, _ = built(name)
    for target in (Target.TF, Target.TFLITE, Target.TFJS, Target.LITERTJS):
        report = check_jaxpr(program.closed_jaxpr, target)
        assert report.ok, f"{target}: {report.format()}"


@pytest.mark.parametrize("runtime", ["tf_eager"] + [pytest.param(r, marks=pytest.mark.slow) for r in RUNTIMES_RUN[1:]])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_batched_module_matches_jax(name, runtime, built, runtimes):
    fun, args, program, expected = built(name)
    assert check_jaxpr(program.closed_jaxpr, RUNTIMES[runtime]).ok
    actual = runtimes.run(runtime, fun, program, args)
    assert_matches(expected, actual, program.out_names, where=f"{name} [{runtime}]", **TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_batched_module_matches_jax_on_litertjs_wasm(name, built):
    from tests.litertjs_harness import run_program
    _, args, program, expected = built(name)
    actual = run_program(program, args, "wasm")
    assert_matches(expected, actual, program.out_names, where=f"{name} [litertjs_wasm]", **TOLERANCE)
