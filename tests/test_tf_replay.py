"""``noxla.convert`` and SavedModels computed by replaying noxla's graph as TF ops (issue 41,
``noxla.writers.tf.forward``): the rules run once per traced program, into the graph; TF only writes it.
What the graph does not record (``call_tf``) is lowered live on TF, and says so; ``NOXLA_TF_REPLAY=0``
lowers everything live."""
from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax.experimental import jax2tf

import noxla
import noxla.front.lowering
import noxla.graph.lower
from noxla.writers.tf import forward

RNG = np.random.default_rng(0)
W1, B1 = RNG.normal(size=(4, 8)).astype(np.float32), RNG.normal(size=8).astype(np.float32)
W2 = RNG.normal(size=(8, 3)).astype(np.float32)


def mlp(x):
    return jnp.tanh(x @ W1 + B1) @ W2


def scope_ops(graph) -> list[str]:
    """The names of the ops ``forward`` replayed into ``graph`` (its name scope's)."""
    return [op.name for op in graph.get_operations() if op.name.startswith(forward.SCOPE + "/")]


@pytest.fixture
def lowerings(monkeypatch):
    """How often the rules ran, live on TF (``lower_program``) and into noxla's graph (``record_program``)."""
    counts = {"live": 0, "recorded": 0}

    def counting(module, key):
        original = module.lower_jaxpr

        def lower_jaxpr(*args, **kwargs):
            counts[key] += 1
            return original(*args, **kwargs)
        monkeypatch.setattr(module, "lower_jaxpr", lower_jaxpr)
    counting(noxla.front.lowering, "live")
    counting(noxla.graph.lower, "recorded")
    return counts


def test_a_converted_function_in_tf_function_is_the_replayed_graph():
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    fun = tf.function(noxla.convert(mlp), autograph=False)
    concrete = fun.get_concrete_function(tf.TensorSpec((2, 4), tf.float32))
    names = scope_ops(concrete.graph)
    assert any(name.endswith("MatMul") for name in names) and any("Tanh" in name for name in names), names
    np.testing.assert_allclose(concrete(tf.constant(x)).numpy(), mlp(x), rtol=1e-5, atol=1e-5)


def test_an_eager_call_runs_the_rules_once(lowerings):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    f_tf = noxla.convert(mlp)
    np.testing.assert_allclose(f_tf(x).numpy(), mlp(x), rtol=1e-5, atol=1e-5)
    assert lowerings == {"live": 0, "recorded": 1}
    for _ in range(3):
        x = RNG.normal(size=(2, 4)).astype(np.float32)
        np.testing.assert_allclose(f_tf(x).numpy(), mlp(x), rtol=1e-5, atol=1e-5)
    assert lowerings == {"live": 0, "recorded": 1}  # the same tf.function, called


def test_eager_gradients_are_jax_and_replayed(lowerings):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    f_tf = noxla.convert(lambda x: jnp.sum(mlp(x) ** 2))
    for _ in range(2):
        xv = tf.Variable(x)
        with tf.GradientTape() as tape:
            y = f_tf(xv)
        np.testing.assert_allclose(tape.gradient(y, xv).numpy(), jax.grad(lambda x: jnp.sum(mlp(x) ** 2))(x),
                                   rtol=1e-4, atol=1e-5)
    assert lowerings == {"live": 0, "recorded": 2}  # the primal and its VJP, each once


def test_call_tf_is_lowered_live_and_says_why(caplog, lowerings):
    def fun(x):
        return jnp.sin(jax2tf.call_tf(tf.math.cos)(x)) * 2
    x = np.linspace(-2, 2, 6, dtype=np.float32)
    with caplog.at_level(logging.DEBUG, logger=forward.__name__):
        f_tf = noxla.convert(fun)
        eager = f_tf(x).numpy()
        graph = tf.function(f_tf, autograph=False).get_concrete_function(tf.TensorSpec((6,), tf.float32))
    np.testing.assert_allclose(eager, np.sin(np.cos(x)) * 2, rtol=1e-6)
    np.testing.assert_allclose(graph(tf.constant(x)).numpy(), np.sin(np.cos(x)) * 2, rtol=1e-6)
    assert not scope_ops(graph.graph) and lowerings["live"] == 2
    assert any("lowered live" in r.getMessage() and "tf.config" in r.getMessage() for r in caplog.records)


def test_noxla_tf_replay_0_lowers_live(monkeypatch, lowerings):
    monkeypatch.setenv(forward.ENV, "0")
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    f_tf = noxla.convert(mlp)
    for _ in range(2):
        np.testing.assert_allclose(f_tf(x).numpy(), mlp(x), rtol=1e-5, atol=1e-5)
    concrete = tf.function(f_tf, autograph=False).get_concrete_function(tf.TensorSpec((2, 4), tf.float32))
    assert not scope_ops(concrete.graph)
    assert lowerings == {"live": 3, "recorded": 0}


def test_polymorphic_saved_model_through_the_replay_matches_jax_at_two_sizes(tmp_path):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    path = noxla.export_saved_model(mlp, x, path=str(tmp_path / "sm"), polymorphic_shapes=["(b, 4)"])
    with open(f"{path}/saved_model.pb", "rb") as f:
        assert f"{forward.SCOPE}/".encode() in f.read()
    restored = tf.saved_model.load(path)
    serve = restored.signatures["serving_default"]
    for batch in (1, 5):
        xb = RNG.normal(size=(batch, 4)).astype(np.float32)
        (out,) = serve(tf.constant(xb)).values()
        np.testing.assert_allclose(out.numpy(), mlp(xb), rtol=1e-5, atol=1e-5)
        xv = tf.Variable(xb)
        with tf.GradientTape() as tape:
            (out,) = restored.serve(xv).values()
            loss = tf.reduce_sum(out ** 2)
        np.testing.assert_allclose(tape.gradient(loss, xv).numpy(),
                                   jax.grad(lambda x: jnp.sum(mlp(x) ** 2))(xb), rtol=1e-4, atol=1e-5)


def test_a_graph_input_of_more_static_sizes_than_its_polymorphic_shape_is_replayed():
    # TF infers static sizes where the recorded graph holds run-time ones (n): the replay keeps TF's.
    fun = tf.function(noxla.convert(lambda x: jnp.tanh(x).reshape((-1,)) * 2, polymorphic_shapes=["(b, n)"]),
                      autograph=False, input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    concrete = fun.get_concrete_function()
    assert scope_ops(concrete.graph) and concrete.structured_outputs.shape.as_list() == [None]
    for batch in (1, 3):
        x = RNG.normal(size=(batch, 4)).astype(np.float32)
        np.testing.assert_allclose(fun(x).numpy(), np.tanh(x).reshape(-1) * 2, rtol=1e-6)


def test_complex_values_in_and_out_are_replayed(lowerings):
    def fun(x, z):
        return jax.lax.complex(x, 2 * x) * z, jnp.abs(z) + x
    x = RNG.normal(size=3).astype(np.float32)
    z = (RNG.normal(size=3) + 1j * RNG.normal(size=3)).astype(np.complex64)
    f_tf = noxla.convert(fun)
    for run in (f_tf, tf.function(f_tf, autograph=False)):
        for got, expected in zip(run(x, z), fun(x, z)):
            assert got.dtype == tf.as_dtype(expected.dtype)
            np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert lowerings == {"live": 0, "recorded": 1}


def test_float0_and_uint32_outputs_are_replayed(lowerings):
    grad = jax.grad(lambda n, y: jnp.sum(y * 2.0 + n), argnums=(0, 1), allow_int=True)
    zero, dy = noxla.convert(grad)(np.int32(2), np.ones(3, np.float32))
    assert zero.dtype == tf.bfloat16 and zero.shape == () and float(zero) == 0
    np.testing.assert_array_equal(dy.numpy(), [2, 2, 2])

    def hashed(x):  # uint32 products wrap: computed in 16-bit limbs, leaving the program as words
        return (x * jnp.uint32(2654435761)) >> 3
    x = np.array([1, 7, 2**31 + 5, 2**32 - 1], np.uint32)
    got = noxla.convert(hashed)(x)
    assert got.dtype == tf.uint32
    np.testing.assert_array_equal(got.numpy(), hashed(x))
    assert lowerings == {"live": 0, "recorded": 2}


def test_where_tf_infers_fewer_static_sizes_than_recorded_convert_gives_it_the_recorded_ones():
    """TF's shape inference does not see through every op the recorder folds (in a loop body, a KV
    cache's static batch of 1 came out of a SelectV2 as unknown: tests/test_llm.py's generation loop,
    ReplayMismatch before). The recording's oracle (``exact``) refuses that; what convert computes
    takes the recorded sizes (JAX's), so the ops after it are inferred as recorded. A size TF knows
    otherwise is still refused."""
    from noxla.graph import api, ops
    from noxla.graph.core import Graph
    from noxla.writers.tf.replay import ReplayMismatch, replay_function

    f32 = api.recorder().float32

    def program(recorded_shape):
        graph = Graph()
        x = graph.add("Placeholder", [], {"dtype": ops.type_attr(f32)}, [(f32, (None, 3))], name="x").output(0)
        y = graph.add("Identity", [x], {"T": ops.type_attr(f32)}, [(f32, recorded_shape)], name="y").output(0)
        z = graph.add("Neg", [y], {"T": ops.type_attr(f32)}, [(f32, recorded_shape)], name="z").output(0)
        return graph, [x], [z]
    graph, inputs, outputs = program((1, 3))
    with pytest.raises(ReplayMismatch, match=r"TF infers float32 \[None, 3\], recorded float32 \[1, 3\]"):
        replay_function(graph, inputs, outputs).get_concrete_function()
    concrete = replay_function(graph, inputs, outputs, exact=False).get_concrete_function()
    assert concrete.structured_outputs[0].shape.as_list() == [1, 3]
    np.testing.assert_array_equal(concrete(tf.ones((1, 3)))[0].numpy(), -np.ones((1, 3), np.float32))
    graph, inputs, outputs = program((1, 4))
    with pytest.raises(ReplayMismatch):
        replay_function(graph, inputs, outputs, exact=False).get_concrete_function()


# A weight of WEIGHT_BYTES and more (64 KiB) is captured, not written into each graph as a Const.
BIG = RNG.normal(size=(256, 128)).astype(np.float32)   # 128 KiB


def big_layer(x):
    return jnp.tanh(x @ BIG)


def large_consts(graph) -> list[str]:
    return [op.name for op in graph.get_operations()
            if op.type == "Const" and op.outputs[0].shape.num_elements() * 4 >= BIG.nbytes // 2]


def captured_weights(concrete) -> list:
    return [t for t in concrete.captured_inputs if tuple(t.shape) == BIG.shape]


def test_weights_are_captured_once_across_input_shapes_and_the_vjp():
    """One eager tensor per weight, captured by every trace of a converted function (two input
    shapes, the VJP's), instead of a 128 KiB Const in each graph and its function definitions."""
    fun = tf.function(noxla.convert(big_layer), autograph=False)
    concretes = [fun.get_concrete_function(tf.TensorSpec((n, 256), tf.float32)) for n in (1, 3)]
    for concrete in concretes:
        assert not large_consts(concrete.graph), large_consts(concrete.graph)
    held = [captured_weights(c) for c in concretes]
    assert [len(h) for h in held] == [1, 1] and held[0][0] is held[1][0]
    np.testing.assert_array_equal(held[0][0].numpy(), BIG)
    x = tf.Variable(np.random.default_rng(1).normal(size=(3, 256)).astype(np.float32))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(fun(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(),  # sums of 128 products: float32 rounding
                               jax.grad(lambda x: jnp.sum(big_layer(x)))(x.numpy()), rtol=1e-4, atol=1e-4)
    eager = noxla.convert(big_layer)
    np.testing.assert_allclose(eager(x.numpy()).numpy(), big_layer(x.numpy()), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("several", [False, True], ids=["one signature", "two signatures"])
def test_a_saved_model_stores_a_weight_once(tmp_path, several):
    """The weight is stored once in the SavedModel: once per function before (a single-function
    SavedModel held it twice), as a variable (TF's saver streams variables, and copies captured
    tensors into its protocol buffer), not trainable (a constant to JAX); each signature replayed."""
    import os
    x = np.random.default_rng(2).normal(size=(2, 256)).astype(np.float32)

    def doubled(x):
        return big_layer(x) * 2
    if several:
        path = noxla.export_saved_model({"one": (big_layer, (x,)), "two": (doubled, (x,))}, path=str(tmp_path / "sm"))
    else:
        path = noxla.export_saved_model(big_layer, x, path=str(tmp_path / "sm"))
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    assert size < 1.5 * BIG.nbytes, size
    loaded = tf.saved_model.load(path)
    assert [v.shape for v in loaded.weights] == [BIG.shape] and not loaded.weights[0].trainable
    np.testing.assert_array_equal(loaded.weights[0].numpy(), BIG)
    keys = ["one", "two"] if several else ["serving_default"]
    for key, fun in zip(keys, [big_layer, doubled]):
        signature = loaded.signatures[key]
        graph_def = signature.graph.as_graph_def()
        nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
        assert any(n.name.startswith(forward.SCOPE + "/") for n in nodes), key  # replayed
        (out,) = signature(x=tf.constant(x)).values()
        np.testing.assert_allclose(out.numpy(), fun(x), rtol=1e-4, atol=1e-4)  # sums of 256 products
