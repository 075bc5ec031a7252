"""TF gradients of converted functions are JAX's (``jax.grad``, computed by JAX in each test), in TF
eager, ``tf.function`` and a reloaded SavedModel, as jax2tf's ``with_gradient=True`` promised."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax import lax

import noxla
from noxla.errors import ShapeMismatchError

X = np.array([0.3, 1.7, -2.2, 0.5], np.float32)


@jax.custom_vjp
def _seven(x):
    return jnp.sin(x)


_seven.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (7.0 * g,))


@jax.custom_jvp
def _softplus(x):
    return jnp.log1p(jnp.exp(x))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), t * jax.nn.sigmoid(x)  # finite where exp(x) overflows


def _straight_through(x):
    return x + lax.stop_gradient(jnp.round(x) - x)


FUNCTIONS = {
    "custom_vjp": (lambda x: jnp.sum(_seven(x)), X),
    "custom_jvp_at_100": (lambda x: jnp.sum(_softplus(x)), np.array([100.0, 1.0, -3.0], np.float32)),
    "stop_gradient": (lambda x: jnp.sum(x * lax.stop_gradient(x)), X),
    "straight_through": (lambda x: jnp.sum(_straight_through(x) ** 2), X),
    "logaddexp_at_infinities": (lambda x: jnp.sum(jnp.logaddexp(x, x)),
                                np.array([np.inf, -np.inf, 1.0], np.float32)),
    "logaddexp_one_infinite": (lambda x: jnp.sum(jnp.logaddexp(x, 2.0 * x)),
                               np.array([np.inf, -np.inf, 0.5], np.float32)),
}


def tape_gradient(f_tf, *args):
    """d f_tf / d args by tf.GradientTape, args a pytree of arrays."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    leaves = [tf.convert_to_tensor(a) for a in leaves]
    with tf.GradientTape() as tape:
        tape.watch(leaves)
        y = f_tf(*jax.tree_util.tree_unflatten(tree, leaves))
    return jax.tree_util.tree_unflatten(tree, tape.gradient(y, leaves))


def graph_gradient(f_tf, *args):
    return tf.function(lambda *a: tape_gradient(f_tf, *a), autograph=False)(*args)


def saved_model_gradient(f_tf, *args, path):
    module = tf.Module()
    signature = jax.tree_util.tree_map(lambda a: tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)), args)
    module.f = tf.function(f_tf, autograph=False, input_signature=list(signature))
    tf.saved_model.save(module, str(path), options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    return tape_gradient(tf.saved_model.load(str(path)).f, *args)


def assert_matches(got, expected):
    jax.tree_util.tree_map(lambda g, e: np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5,
                                                                   atol=1e-6), got, expected)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_tape_gradient_is_jax_grad(name, mode):
    fun, x = FUNCTIONS[name]
    expected = jax.grad(fun)(x)
    got = (tape_gradient if mode == "eager" else graph_gradient)(noxla.convert(fun), x)[0]
    assert_matches(got, expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_reloaded_saved_model_gradient_is_jax_grad(name, tmp_path):
    fun, x = FUNCTIONS[name]
    assert_matches(saved_model_gradient(noxla.convert(fun), x, path=tmp_path / "sm")[0], jax.grad(fun)(x))


def _flax_loss():
    import flax.linen as nn

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(nn.relu(nn.Dense(8)(x)))
    model = Mlp()
    x = np.random.RandomState(0).randn(5, 3).astype(np.float32)
    params = model.init(jax.random.key(0), x)

    def loss(params, x):
        return jnp.mean((model.apply(params, x) - 1.0) ** 2)
    return loss, jax.tree_util.tree_map(np.asarray, params), x


@pytest.mark.slow  # Flax's init and apply take seconds to trace
@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_flax_model_loss_gradient_is_jax_grad(mode):
    loss, params, x = _flax_loss()
    got = (tape_gradient if mode == "eager" else graph_gradient)(noxla.convert(loss), params, x)
    assert_matches(got, jax.grad(loss, argnums=(0, 1))(params, x))


@pytest.mark.slow
def test_flax_model_fine_tunes_from_a_saved_model_with_variables(tmp_path):
    loss, params, x = _flax_loss()
    path = noxla.export_saved_model(loss, params, x, path=str(tmp_path / "sm"), variables="params",
                                    polymorphic_shapes=[None, "(b, 3)"])
    restored = tf.saved_model.load(path)
    assert [tuple(v.shape) for v in restored.parameters] == [a.shape for a in jax.tree_util.tree_leaves(params)]
    assert list(restored.signatures["serving_default"].structured_input_signature[1]) == ["x"]
    with tf.GradientTape() as tape:
        value = restored.serve(tf.constant(x[:3]))["output"]
    np.testing.assert_allclose(value.numpy(), loss(params, x[:3]), rtol=1e-5)
    grads = list(tape.gradient(value, list(restored.parameters)))
    assert_matches(grads, jax.tree_util.tree_leaves(jax.grad(loss)(params, x[:3])))
    # One optimizer step changes the weights the signature computes with.
    for var, g in zip(restored.parameters, grads):
        var.assign_sub(0.1 * g)
    stepped = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params, x[:3]))
    np.testing.assert_allclose(restored.signatures["serving_default"](x=tf.constant(x[:3]))["output"].numpy(),
                               loss(stepped, x[:3]), rtol=1e-5)


@pytest.mark.slow
def test_exported_saved_model_carries_jax_gradient(tmp_path):
    fun, x = FUNCTIONS["straight_through"]
    restored = tf.saved_model.load(noxla.export_saved_model(fun, x, path=str(tmp_path / "sm")))
    xv = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xv)
        y = restored.signatures["serving_default"](x=xv)["output"]
    assert_matches(tape.gradient(y, xv), jax.grad(fun)(x))


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_second_order_gradient_is_jax_hessian_vector(mode):
    def fun(x):
        return jnp.sum(_softplus(x) * jnp.sin(x) ** 2)
    f_tf = noxla.convert(fun)

    def second(x):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = f_tf(x)
            g = tf.reduce_sum(inner.gradient(y, x))
        return outer.gradient(g, x)
    run = second if mode == "eager" else tf.function(second, autograph=False)
    assert_matches(run(tf.constant(X)), jax.grad(lambda x: jnp.sum(jax.grad(fun)(x)))(X))


def test_polymorphic_gradient_and_integer_inputs():
    def fun(x, n):
        return {"y": jnp.sum(jnp.sin(x) * n, axis=1), "count": n * 2}
    f_tf = tf.function(noxla.convert(fun, polymorphic_shapes=["(b, 3)", None]), autograph=False,
                       input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([], tf.int32)])
    x = np.random.RandomState(1).randn(4, 3).astype(np.float32)
    xv, n = tf.constant(x), tf.constant(3)
    with tf.GradientTape() as tape:
        tape.watch([xv, n])
        out = f_tf(xv, n)
        loss = tf.reduce_sum(out["y"] ** 2)
    got_x, got_n = tape.gradient(loss, [xv, n])
    assert got_n is None  # integers have no tangent (JAX's float0)
    assert_matches(got_x, jax.grad(lambda x: jnp.sum(fun(x, 3)["y"] ** 2))(x))


def test_with_gradient_false_refuses_a_gradient():
    f_tf = noxla.convert(jnp.sin, with_gradient=False)
    xv = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(xv)
        y = f_tf(xv)
    with pytest.raises(LookupError, match="with_gradient"):
        tape.gradient(y, xv)


def test_variables_passed_in_get_gradients():
    v = tf.Variable(X)
    fun, _ = FUNCTIONS["custom_vjp"]
    with tf.GradientTape() as tape:
        y = noxla.convert(fun)(v)
    assert_matches(tape.gradient(y, v), jax.grad(fun)(X))


def test_jax2tf_keywords_and_keyword_arguments():
    def fun(x, scale, *, shift):
        return x * scale + shift
    f_tf = noxla.convert(fun, enable_xla=False, native_serialization=False, with_gradient=True)
    expected = fun(X, 2.0, shift=1.0)
    np.testing.assert_allclose(f_tf(X, scale=np.float32(2.0), shift=np.float32(1.0)).numpy(), expected)
    np.testing.assert_allclose(f_tf(x=X, scale=np.float32(2.0), shift=np.float32(1.0)).numpy(), expected)
    with pytest.raises(TypeError, match="jax2tf.convert"):
        noxla.convert(fun, native_serialization=True)
    with pytest.raises(TypeError, match="jax2tf.convert"):
        noxla.convert(fun, native_serialization_platforms=("cpu",))


def test_polymorphic_constraints_are_passed_to_jax_export():
    def fun(x):
        return x[: x.shape[0] - 2]  # needs b >= 3: only the constraint makes the slice decidable
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(noxla.TracingError):
        noxla.convert(fun, polymorphic_shapes=["(b,)"])(x)
    f_tf = noxla.convert(fun, polymorphic_shapes=["(b,)"], polymorphic_constraints=["b >= 3"])
    np.testing.assert_array_equal(f_tf(x).numpy(), fun(x))


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_dimension_variable_zero_is_refused_as_jax_export_refuses_it(mode):
    def fun(x):
        return jnp.sum(x) + x.shape[0]
    spec = jax.export.symbolic_args_specs([jax.ShapeDtypeStruct((0,), np.float32)], ["(b,)"])
    with pytest.raises(ValueError, match=">= 1"):  # what JAX does with b = 0: jax.export refuses the call
        jax.export.export(jax.jit(fun))(*spec).call(np.zeros((0,), np.float32))
    f_tf = noxla.convert(fun, polymorphic_shapes=["(b,)"])
    if mode == "tf_function":
        f_tf = tf.function(f_tf, autograph=False, input_signature=[tf.TensorSpec([None], tf.float32)])
    np.testing.assert_allclose(f_tf(np.ones(3, np.float32)).numpy(), fun(np.ones(3, np.float32)))
    with pytest.raises((ShapeMismatchError, tf.errors.InvalidArgumentError), match="must be >= 1"):
        f_tf(np.zeros((0,), np.float32))


def test_float0_output_is_a_bfloat16_zero_as_jax2tf_documents():
    grad = jax.grad(lambda x, y: jnp.sum(x * 2.0 + y), argnums=(0, 1), allow_int=True)
    y = np.ones(3, np.float32)
    expected = grad(np.int32(2), y)
    assert expected[0].dtype == jax.dtypes.float0
    got = noxla.convert(grad)(np.int32(2), y)
    assert got[0].dtype == tf.bfloat16 and got[0].shape == expected[0].shape and float(got[0]) == 0
    np.testing.assert_array_equal(got[1].numpy(), expected[1])
    for target in ("tflite", "tfjs"):  # neither has bfloat16: refused up front, with the reason
        report = noxla.check(grad, np.int32(2), y, target=target)
        assert not report.ok and "float0" in report.format()
    assert noxla.check(grad, np.int32(2), y, target="tf").ok


def test_python_float_is_float64_under_x64():
    fun = jnp.sin
    with jax.enable_x64(True):
        expected = fun(3.14)
        got = noxla.convert(fun)(3.14)
    assert got.dtype == tf.as_dtype(expected.dtype) == tf.float64
    assert noxla.convert(fun)(3.14).dtype == tf.as_dtype(fun(3.14).dtype) == tf.float32


@pytest.mark.slow
def test_saved_model_of_a_program_jax_cannot_differentiate_fails_only_when_asked(tmp_path):
    def fun(x):  # JAX has no reverse-mode derivative of a while_loop
        return lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 1.5, c[1] + 1), (x, 0))[0]
    with pytest.raises(ValueError, match="Reverse-mode"):
        jax.grad(lambda x: jnp.sum(fun(x)))(X)
    serve = tf.saved_model.load(noxla.export_saved_model(fun, X, path=str(tmp_path / "sm"))).signatures[
        "serving_default"]
    xv = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(xv)
        y = serve(x=xv)["output"]
    np.testing.assert_allclose(y.numpy(), fun(X), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="no JAX gradient"):
        tape.gradient(y, xv)


@pytest.mark.slow
def test_saved_model_without_gradient_refuses_one(tmp_path):
    fun, x = FUNCTIONS["custom_vjp"]
    path = noxla.export_saved_model(fun, x, path=str(tmp_path / "sm"), with_gradient=False)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    xv = tf.constant(x)
    np.testing.assert_allclose(serve(x=xv)["output"].numpy(), fun(x), rtol=1e-6)
    # A restored function builds its gradient as soon as a tape watches its call: TF refuses it there.
    with pytest.raises(LookupError, match="with_gradient"), tf.GradientTape() as tape:
        tape.watch(xv)
        tape.gradient(serve(x=xv)["output"], xv)


@pytest.mark.slow
def test_several_signature_saved_model_gradients_are_jax_grad(tmp_path):
    """Each signature of ``export_saved_model({key: (fun, args)})`` carries JAX's gradient, as the
    single-function SavedModel does: TF's gradients of the replayed ops would lose each custom rule
    and stop_gradient here (the custom_vjp case differed by 18.7 that way)."""
    def scaled(x, k):  # an integer input: no gradient for it
        return jnp.sum(_seven(x) * k.astype(x.dtype))
    k = np.array([1, 2, 3, 4], np.int32)
    signatures = {name: (fun, (x,)) for name, (fun, x) in FUNCTIONS.items()}
    signatures["with_integer"] = (scaled, (X, k))
    path = noxla.export_saved_model(signatures, path=str(tmp_path / "sm"))
    loaded = tf.saved_model.load(path)
    for key, (fun, args) in signatures.items():
        inputs = [tf.constant(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(inputs[0])
            y = loaded.signatures[key](**dict(zip(["x", "k"], inputs)))["output"]
        np.testing.assert_allclose(y.numpy(), fun(*args), rtol=1e-5, err_msg=key)
        assert_matches(tape.gradient(y, inputs[0]), jax.grad(fun)(*args))

    path = noxla.export_saved_model({"custom_vjp": signatures["custom_vjp"]}, path=str(tmp_path / "none"),
                                    with_gradient=False)
    serve = tf.saved_model.load(path).signatures["custom_vjp"]
    with pytest.raises(LookupError, match="with_gradient"), tf.GradientTape() as tape:
        xv = tf.constant(X)
        tape.watch(xv)
        tape.gradient(serve(x=xv)["output"], xv)
