"""bfloat16 and float16 inside a TF.js graph model (noxla/writers/tfjs/half_floats.py): carried in float32,
each result rounded with float arithmetic, against ml_dtypes and JAX op by op (``jax.disable_jit``:
JAX's jit keeps float32 between the ops of a fusion, which is not half-float arithmetic)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import noxla
from tests.test_tflite_bfloat16 import TOLERANCE, _cnn, _mlp, _model, _op_by_op, _same_bits

BF16, F16 = jnp.bfloat16, jnp.float16
BACKENDS = ("cpu", "wasm")


def _dense_float32() -> np.ndarray:
    """Float32 bit patterns at every rounding position either half float has: each of the 2^16
    high halves (every bfloat16, with its sign and exponent) with the low halves at and around
    bfloat16's tie; and for every float32 exponent from float16's subnormals to its overflow, every
    float16 mantissa with the low bits at and around float16's tie there (and zero, and all ones)."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    near_tie = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    bfloat16_edges = (high[:, None] | near_tie[None, :]).ravel()
    float16_edges = []
    for exponent in range(127 - 26, 127 + 18):
        dropped = min(23, 13 + max(0, (127 - 14) - exponent))  # float32 bits below float16's last one
        tie = 1 << (dropped - 1)
        low = np.array([0, 1, tie - 1, tie, tie + 1, (1 << dropped) - 1], np.uint32)
        mantissas = np.arange(1 << (23 - dropped), dtype=np.uint32) << dropped
        for sign in (0, 1 << 31):
            float16_edges.append((sign | (exponent << 23) | mantissas[:, None] | low[None, :]).ravel())
    return np.concatenate([bfloat16_edges, *float16_edges]).view(np.float32)


def _export(fun, args, tmp_path, name="m") -> str:
    path = str(tmp_path / name)
    noxla.export_tfjs(fun, *args, path=path)
    return path


def _run(tfjs_runner, path, inputs, backend) -> list[np.ndarray]:
    outs = tfjs_runner.run(path, inputs, backend)
    return [outs[k] for k in sorted(outs)]


def test_rounding_is_ml_dtypes_round_to_nearest_even_bit_for_bit(tmp_path, tfjs_runner):
    # Ties to even, overflow to infinity, the half floats' subnormals, -0.0, infinities and NaN, at
    # every exponent, on both Node backends (every float32 bit pattern: tools/half_float_rounding.py).
    x = np.concatenate([_dense_float32(), np.float32([np.inf, -np.inf, np.nan, -np.nan])])
    fun = lambda v: (v.astype(BF16).astype(jnp.float32), v.astype(F16).astype(jnp.float32))  # noqa: E731
    path = _export(fun, (x,), tmp_path)
    with np.errstate(over="ignore"):
        expected = [x.astype(ml_dtypes.bfloat16).astype(np.float32), x.astype(np.float16).astype(np.float32)]
    np.testing.assert_array_equal(np.asarray(jax.jit(fun)(x)[0]).view(np.uint32)[np.isfinite(x)],
                                  expected[0].view(np.uint32)[np.isfinite(x)])  # JAX rounds as ml_dtypes
    for backend in BACKENDS:
        for want, got in zip(expected, _run(tfjs_runner, path, {"v": x}, backend)):
            _same_bits(want, got)


@pytest.mark.parametrize("dtype", [BF16, F16], ids=["bf16", "f16"])
def test_each_arithmetic_result_is_rounded_as_half_float_arithmetic(dtype, tmp_path, tfjs_runner):
    # +, -, *, / and sqrt on half floats are float32's rounded once (24 >= 2 * 11 + 2): bit for bit.
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(4096).astype(dtype).astype(np.float32) * 8 for _ in range(2))

    def fun(x, y):
        a, b = x.astype(dtype), y.astype(dtype)
        return [r.astype(jnp.float32) for r in (a + b, a - b, a * b, a / b, jnp.sqrt(jnp.abs(a)), (a * b + a) / b,
                                                 a.astype(BF16 if dtype == F16 else F16))]

    path = _export(fun, (x, y), tmp_path)
    expected = _op_by_op(fun, x, y)
    for backend in BACKENDS:
        for want, got in zip(expected, _run(tfjs_runner, path, {"x": x, "y": y}, backend)):
            _same_bits(want, got)


def test_loops_and_conditionals_round_in_their_bodies(tmp_path, tfjs_runner):
    from jax import lax
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64) * 4).astype(np.float16).astype(np.float32)

    def fun(x):
        a, h = x.astype(BF16), x.astype(F16)
        looped = lax.fori_loop(0, 4, lambda i, c: c * a / (c + 3) + lax.convert_element_type(i, BF16), a)
        tested = lax.cond(x[0] > 0, lambda v: v * v + a, lambda v: v / (a + 5), looped)
        halves = lax.fori_loop(0, 3, lambda i, c: c * h + h / 7, h)
        return looped.astype(jnp.float32), tested.astype(jnp.float32), halves.astype(jnp.float32)

    path = _export(fun, (x,), tmp_path)
    expected = _op_by_op(fun, x)
    for backend in BACKENDS:
        for want, got in zip(expected, _run(tfjs_runner, path, {"x": x}, backend)):
            _same_bits(want, got)


@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_flax_bfloat16_model_on_tfjs(make, tmp_path, tfjs_runner):
    # Float32 parameters and outputs, bfloat16 compute (flax's dtype=): a model trained on TPUs.
    from noxla.runtimes.verify import relative_error
    fun, x = _model(make)
    report = noxla.check(fun, x, target="tfjs")
    assert report.ok, report.format()
    path = _export(fun, (x,), tmp_path)
    expected = _op_by_op(fun, x)[0]
    for backend in BACKENDS:
        actual, = _run(tfjs_runner, path, {"x": x}, backend)
        assert relative_error(expected, actual) <= TOLERANCE, backend
        assert not (actual.view(np.uint32) & 0xFFFF).any(), backend  # every output a bfloat16 value


def test_float16_program_on_tfjs(tmp_path, tfjs_runner):
    # A float16 layer: matmul, bias, gelu, layer norm and softmax, with float32 in and out.
    from noxla.runtimes.verify import relative_error
    rng = np.random.default_rng(4)
    w, b = rng.standard_normal((16, 32)).astype(np.float16) / 4, rng.standard_normal(32).astype(np.float16)
    x = rng.standard_normal((8, 16)).astype(np.float32)

    def fun(x):
        h = jax.nn.gelu(x.astype(F16) @ w + b)
        h = (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + F16(1e-3))
        return jax.nn.softmax(h).astype(jnp.float32)

    path = _export(fun, (x,), tmp_path)
    expected = _op_by_op(fun, x)[0]
    for backend in BACKENDS:
        actual, = _run(tfjs_runner, path, {"x": x}, backend)
        assert relative_error(expected, actual) <= 2 ** -9, backend  # float16's own tolerance (JAX tests: 1e-3)
        assert np.array_equal(actual.astype(np.float16).astype(np.float32), actual), backend


@pytest.mark.parametrize("dtype", [BF16, F16], ids=["bf16", "f16"])
def test_half_float_inputs_outputs_and_bits_stay_refused_for_tfjs(dtype):
    x = np.ones(3, dtype)
    report = noxla.check(lambda x: x * 2, x, target="tfjs")
    assert {v.primitive for v in report.violations} == {"(program input)", "(program output)"}, report.format()
    inside = noxla.check(lambda x: (x.astype(dtype) * 2).astype(jnp.float32), x.astype(np.float32), target="tfjs")
    assert inside.ok, inside.format()
    # Bits of a half float (here two in a float32 and back) have no float arithmetic form: refused.
    for fun, x in ((lambda x: jax.lax.bitcast_convert_type(x, dtype).astype(jnp.float32), np.ones(3, np.float32)),
                   (lambda x: jax.lax.bitcast_convert_type(x.astype(dtype).reshape(-1, 2), jnp.float32),
                    np.ones(4, np.float32))):
        bits = noxla.check(fun, x, target="tfjs")
        assert [v.primitive for v in bits.violations] == ["bitcast_convert_type"], bits.format()
