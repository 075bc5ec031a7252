"""The examples of jax2tf's README, with ``jax2tf.convert`` replaced by ``noxla.convert`` and nothing
else changed: each runs and matches JAX (computed here), or is refused with a clear error."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax import lax
from jax.experimental import jax2tf

import noxla
from noxla.errors import ShapeMismatchError, TracingError


def f_jax(x):
    return jnp.sin(jnp.cos(x))


def test_basic_conversion_eager_graph_and_jit_compile():
    x = np.random.RandomState(0).rand(3, 4).astype(np.float32)
    f_tf = noxla.convert(f_jax)
    np.testing.assert_allclose(f_tf(x).numpy(), f_jax(x), rtol=1e-6)
    f_tf_graph = tf.function(f_tf, autograph=False)
    np.testing.assert_allclose(f_tf_graph(x).numpy(), f_jax(x), rtol=1e-6)
    np.testing.assert_allclose(tf.function(noxla.convert(f_jax), autograph=False, jit_compile=True)(x).numpy(),
                               f_jax(x), rtol=1e-6)


@pytest.mark.slow
def test_saved_model_scalar_and_warmed_up_shapes_with_custom_gradients(tmp_path):
    my_model = tf.Module()
    my_model.f = tf.function(noxla.convert(f_jax), input_signature=[tf.TensorSpec([], tf.float32)])
    tf.saved_model.save(my_model, str(tmp_path / "a"))
    restored_model = tf.saved_model.load(str(tmp_path / "a"))
    np.testing.assert_allclose(restored_model.f(tf.constant(0.5)).numpy(), f_jax(np.float32(0.5)), rtol=1e-6)

    my_model = tf.Module()
    my_model.f = tf.function(noxla.convert(f_jax), autograph=False)
    my_model.f(tf.ones([1, 28, 28]))  # a batch size of 1
    my_model.f(tf.ones([16, 28, 28]))  # a batch size of 16
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=True)
    tf.saved_model.save(my_model, str(tmp_path / "b"), options=options)
    restored = tf.saved_model.load(str(tmp_path / "b"))
    x = tf.fill([16, 28, 28], 0.25)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(restored.f(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(),
                               jax.grad(lambda x: jnp.sum(f_jax(x)))(np.full((16, 28, 28), 0.25, np.float32)),
                               rtol=1e-5)


def test_shape_polymorphic_conversion():
    x = np.random.RandomState(1).rand(3, 28, 28).astype(np.float32)
    f_tf = tf.function(noxla.convert(f_jax, polymorphic_shapes=["(b, 28, 28)"]), autograph=False)
    concrete = f_tf.get_concrete_function(tf.TensorSpec([None, 28, 28], tf.float32))
    np.testing.assert_allclose(concrete(tf.constant(x)).numpy(), f_jax(x), rtol=1e-6)
    f_tf = tf.function(noxla.convert(f_jax, polymorphic_shapes=["(b, d, d)"]), autograph=False)
    concrete = f_tf.get_concrete_function(tf.TensorSpec([None, None, None], tf.float32))
    np.testing.assert_allclose(concrete(tf.constant(x)).numpy(), f_jax(x), rtol=1e-6)


def test_image_mask_with_shared_dimension_variables():
    def image_mask_jax(images, mask):
        return images * mask
    images, mask = np.ones((1024, 28, 28), np.float32), np.random.RandomState(2).rand(28, 28).astype(np.float32)
    out = noxla.convert(image_mask_jax, polymorphic_shapes=["(b, w, w)", "(w, w)"])(images, mask)
    np.testing.assert_allclose(out.numpy(), image_mask_jax(images, mask))


def test_shape_errors_are_refused_as_in_jax2tf():
    four_ones = np.ones((4,), np.float32)
    with pytest.raises(TracingError, match="incompatible shapes for broadcasting"):
        noxla.convert(lambda x, y: x + y, polymorphic_shapes=["(v,)", "(4,)"])(four_ones, four_ones)
    with pytest.raises(TracingError, match="contracting dimensions"):
        noxla.convert(lambda x: jnp.matmul(x, x), polymorphic_shapes=["(v, 4)"])(np.ones((4, 4), np.float32))
    with pytest.raises(TracingError, match="divide evenly"):
        noxla.convert(lambda x: jnp.reshape(x, (2, -1)), polymorphic_shapes=["(b, ...)"])(np.ones((4, 5, 7)))



def test_dimension_comparison_as_jax_export_decides_it():
    # The README's era raised InconclusiveDimensionOperation; JAX now answers == on symbolic
    # dimensions (False unless always equal), and noxla follows whatever jax.export computes.
    def fun(x):
        return 0 if x.shape[0] + 1 == x.shape[1] else 1
    x = np.ones((3, 4), np.float32)
    spec = jax.export.symbolic_args_specs([jax.ShapeDtypeStruct(x.shape, x.dtype)], ["(a, b)"])
    expected = jax.export.export(jax.jit(fun))(*spec).call(x)
    assert int(noxla.convert(fun, polymorphic_shapes=["(a, b)"])(x)) == int(expected)


@pytest.mark.parametrize("fun, shapes, x", [
    (lambda x: jnp.reshape(x, (2, -1)), ["(b, ...)"], np.ones((4, 5, 6), np.float32)),
    (lambda x: jnp.reshape(x, (-1, x.shape[0])), ["(b1, b2, ...)"], np.ones((4, 5, 6), np.float32)),
    (lambda x: jnp.sum(x, axis=0) / x.shape[0], ["(v, _)"], np.arange(16, dtype=np.float32).reshape(4, 4)),
])
def test_shape_polymorphic_reshapes_and_dimension_values(fun, shapes, x):
    np.testing.assert_allclose(noxla.convert(fun, polymorphic_shapes=shapes)(x).numpy(), fun(x), rtol=1e-6)


def test_dtype_coverage_examples_match_jax():
    x = np.array([True])
    np.testing.assert_array_equal(noxla.convert(lambda x: lax.min(x, x))(x).numpy(), lax.min(x, x))
    u = np.array([5], dtype=np.uint32)
    np.testing.assert_array_equal(noxla.convert(lax.sign)(u).numpy(), lax.sign(u))
    np.testing.assert_array_equal(
        tf.function(noxla.convert(lax.sign), autograph=False, jit_compile=True)(u).numpy(), lax.sign(u))


def test_uncompileable_tf_around_a_compiled_converted_function():
    def entire_tf_fun(x):
        y = tf.strings.to_number(x)  # string parsing: not compileable with XLA
        z = tf.function(noxla.convert(f_jax), autograph=False, jit_compile=True)(y)
        return z * 2.0
    np.testing.assert_allclose(entire_tf_fun(tf.constant(["0.5", "1.5"])).numpy(),
                               2.0 * f_jax(np.array([0.5, 1.5], np.float32)), rtol=1e-6)


def test_integer_argument_gradient_is_a_bfloat16_zero():
    def f_jax(x):  # x: int32
        return x * 2.
    assert jax.grad(f_jax, allow_int=True)(2).dtype == jax.dtypes.float0
    out = noxla.convert(jax.grad(f_jax, allow_int=True))(2)
    assert out.dtype == tf.bfloat16 and out.shape == () and float(out) == 0


def test_64_bit_precision_without_x64():
    assert noxla.convert(jnp.sin)(3.14).dtype == tf.float32 == tf.as_dtype(jnp.sin(3.14).dtype)
    assert noxla.convert(jnp.sin)(np.float64(3.14)).dtype == tf.float32 == tf.as_dtype(jnp.sin(np.float64(3.14)).dtype)
    out = tf.function(noxla.convert(jnp.sin))(tf.Variable(3.14, dtype=tf.float64))
    assert out.dtype == tf.float32
    np.testing.assert_allclose(out.numpy(), jnp.sin(np.float32(3.14)), rtol=1e-6)


def test_64_bit_precision_with_x64():
    with jax.enable_x64(True):
        assert noxla.convert(jnp.sin)(3.14).dtype == tf.float64 == tf.as_dtype(jnp.sin(3.14).dtype)
        out = tf.function(noxla.convert(jnp.sin))(tf.Variable(3.14, dtype=tf.float64))
        assert out.dtype == tf.float64
        np.testing.assert_allclose(out.numpy(), jnp.sin(np.float64(3.14)), rtol=1e-12)
        assert tf.function(noxla.convert(jnp.sin))(tf.Variable(3.14)).dtype == tf.float32


def test_broken_dimension_assumptions_are_caught_eagerly_and_in_graphs():
    def f_jax(x):
        return 0 if x.shape[0] == 0 else 1
    x0 = np.array([], np.float32)
    assert f_jax(x0) == 0
    with pytest.raises(ShapeMismatchError, match="b must be >= 1"):
        noxla.convert(f_jax, polymorphic_shapes=["b"])(x0)
    # jax2tf missed this once traced to a graph; noxla's graph checks it (as jax.export does).
    f_tf = tf.function(noxla.convert(f_jax, polymorphic_shapes=["b"])).get_concrete_function(
        tf.TensorSpec([None], dtype=np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="b must be >= 1"):
        f_tf(x0)

    def f_jax(x):
        return 0 if x.shape[0] != x.shape[1] else 1
    x45 = np.ones((4, 5), dtype=np.float32)
    assert f_jax(x45) == 0
    with pytest.raises(ShapeMismatchError):
        noxla.convert(f_jax, polymorphic_shapes=["b, b"])(x45)
    f_tf = tf.function(noxla.convert(f_jax, polymorphic_shapes=["b, b"])).get_concrete_function(
        tf.TensorSpec([None, None], dtype=np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError):
        f_tf(x45)


def test_call_tf_cos_inside_jax_sin_with_tf_gradient():
    def cos_tf(x):
        return tf.math.cos(x)

    def cos_tf_sin_jax(x):
        return jax.numpy.sin(jax2tf.call_tf(cos_tf)(x))
    x = np.float32(1.)
    f_tf = noxla.convert(cos_tf_sin_jax)
    xv = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xv)
        y = f_tf(xv)
    np.testing.assert_allclose(y.numpy(), cos_tf_sin_jax(x), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(y, xv).numpy(), jax.grad(cos_tf_sin_jax)(x), rtol=1e-6)
    np.testing.assert_allclose(tf.function(f_tf, autograph=False)(xv).numpy(), jax.jit(cos_tf_sin_jax)(x),
                               rtol=1e-6)


def test_with_gradient_false_uses_prevent_gradient():
    f_tf = tf.function(noxla.convert(f_jax, with_gradient=False), autograph=False)
    ops = {op.type for op in f_tf.get_concrete_function(tf.TensorSpec([3], tf.float32)).graph.get_operations()}
    assert "PreventGradient" in ops
