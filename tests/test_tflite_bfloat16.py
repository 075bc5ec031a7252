"""bfloat16 inside a .tflite (noxla/writers/tflite/converter/bfloat16.py): carried in float32, each result rounded to
bfloat16 with integer builtins, against JAX op by op (``jax.disable_jit``: JAX's jit keeps float32
between the ops of a fusion, which is not bfloat16 arithmetic)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import noxla
from noxla.front.tracing import trace
from noxla.pipeline.tf_path import serving_function
from noxla.pipeline.tf_tflite import tflite_bytes
from noxla.runtimes import run_tflite

BF16 = jnp.bfloat16


def _bits(*patterns) -> np.ndarray:
    return np.array(patterns, np.uint32).view(np.float32)


# float32 values at bfloat16's rounding edges, with what JAX rounds each to.
EDGES = np.concatenate([
    np.float32([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -(1 + 2 ** -8), -(1 + 3 * 2 ** -8),
                0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.3895314e38, 3.4e38, np.finfo(np.float32).max,
                -np.finfo(np.float32).max]),
    _bits(0x7F7F0000,   # the largest bfloat16
          0x7F7F7FFF,   # just below the tie above it: stays
          0x7F7F8000,   # the tie between it and infinity (its last bit is odd): infinity
          0x7F800001,   # a NaN whose payload is only in the low 16 bits (truncating would make it infinity)
          0xFFC00001,   # a negative quiet NaN with low bits
          0x00000001,   # the smallest float32 subnormal: 0
          0x80000001,   # its negative: -0
          0x00008000,   # a subnormal tie, to even (0)
          0x00018000,   # a subnormal tie, to even (up)
          0x007FFFFF,   # the largest subnormal: the smallest normal
          0x00800000,   # the smallest normal
          0x807F8001),  # a negative subnormal above a tie
])


def _tflite(fun, *args) -> list[np.ndarray]:
    program = trace(fun, args)
    outs = run_tflite(tflite_bytes(serving_function(program, tflite=True)), dict(zip(program.in_names, args)))
    return [outs[name] for name in program.out_names]


def _op_by_op(fun, *args) -> list[np.ndarray]:
    with jax.disable_jit():
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(fun(*args))]


def _same_bits(expected: np.ndarray, actual: np.ndarray) -> None:
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan)
    np.testing.assert_array_equal(actual[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def test_rounding_to_bfloat16_at_the_edges_is_jaxs_bit_for_bit():
    # Ties to even, -0.0, infinities, NaN (kept, of either sign), overflow to infinity, the largest
    # bfloat16, and subnormals (LiteRT does not flush them: the rounding is integer arithmetic).
    fun = lambda v: v.astype(BF16).astype(jnp.float32)  # noqa: E731
    expected = np.asarray(jax.jit(fun)(EDGES))
    np.testing.assert_array_equal(expected[np.isfinite(EDGES)], EDGES[np.isfinite(EDGES)].astype(ml_dtypes.bfloat16)
                                  .astype(np.float32))  # the table above says what it means
    _same_bits(expected, _tflite(fun, EDGES)[0])


def test_each_arithmetic_result_is_rounded_as_bfloat16_arithmetic():
    # +, -, *, / and sqrt on bfloat16 values are float32's rounded once (24 >= 2 * 8 + 2): bit for bit.
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(4096).astype(ml_dtypes.bfloat16).astype(np.float32) * 8 for _ in range(2))

    def fun(x, y):
        a, b = x.astype(BF16), y.astype(BF16)
        return [r.astype(jnp.float32) for r in (a + b, a - b, a * b, a / b, jnp.sqrt(jnp.abs(a)), (a * b + a) / b)]

    for expected, actual in zip(_op_by_op(fun, x, y), _tflite(fun, x, y)):
        _same_bits(expected, actual)


def test_integer_and_float16_casts_to_bfloat16():
    ints = np.array([0, 1, -7, 255, 257, 2 ** 24 + 2 ** 16 + 1, -(2 ** 31), 2 ** 31 - 1, 12345678], np.int32)
    halves = np.float16([1.0, 1 + 2 ** -8, 65504, -65504, 6e-8, 1 + 3 * 2 ** -8])
    # jnp.asarray: a NumPy array's own astype is ml_dtypes' conversion, which rounds an int32 to bfloat16
    # once; JAX's goes through float32 (2^24 + 2^16 + 1 becomes 2^24, not 2^24 + 2^17), as TFLite's does.
    fun = lambda i, h: (jnp.asarray(i).astype(BF16).astype(jnp.float32),  # noqa: E731
                        jnp.asarray(h).astype(BF16).astype(jnp.float32), jnp.asarray(h).astype(BF16).astype(jnp.int32))
    for expected, actual in zip(_op_by_op(fun, ints, halves), _tflite(fun, ints, halves)):
        np.testing.assert_array_equal(actual, expected)


def _mlp():
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(64, dtype=BF16)(x))
            x = nn.LayerNorm(dtype=BF16)(x)
            return nn.softmax(nn.Dense(10, dtype=BF16)(x)).astype(jnp.float32)

    x = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    return MLP(), x


def _cnn():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.avg_pool(nn.relu(nn.Conv(8, (3, 3), dtype=BF16)(x)), (2, 2), (2, 2))
            x = nn.max_pool(nn.gelu(nn.Conv(8, (3, 3), dtype=BF16)(x)), (2, 2), (2, 2))
            x = nn.Dense(32, dtype=BF16)(x.reshape(x.shape[0], -1))
            x = jnp.tanh(nn.BatchNorm(use_running_average=True, dtype=BF16)(x))
            return nn.log_softmax(nn.Dense(10, dtype=BF16)(x)).astype(jnp.float32)

    x = np.random.default_rng(2).standard_normal((2, 16, 16, 3)).astype(np.float32)
    return CNN(), x


# Float32 sums in another order (XNNPACK's, XLA's) and other float32 tanh/exp kernels may round a
# few bfloat16 results the other way (one unit in bfloat16's last place, 2^-8 relative), which the
# next layers carry. Measured (relative_error, LiteRT and LiteRT.js wasm alike): MLP 0 (every output
# bit-equal), CNN 0.0056 (19 of 20 outputs bit-equal); JAX's jit differs from op by op by 0.0019
# and 0.0028 on them.
TOLERANCE = 2 ** -7


def _model(make):
    module, x = make()
    variables = module.init(jax.random.key(0), x)
    return (lambda x: module.apply(variables, x)), x


@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_flax_bfloat16_model_exports_and_matches_jax_op_by_op(make, tmp_path):
    from noxla.runtimes.verify import relative_error
    fun, x = _model(make)
    for target in ("tflite", "litertjs", "tfjs"):  # TF.js: tests/test_tfjs_half_floats.py
        assert noxla.check(fun, x, target=target).ok, noxla.check(fun, x, target=target).format()
    path = tmp_path / "m.tflite"
    noxla.export_tflite(fun, x, path=str(path))
    actual = run_tflite(str(path), {"x": x})["output"]
    expected = _op_by_op(fun, x)[0]
    assert relative_error(expected, actual) <= TOLERANCE
    # Every output is a bfloat16 value (the models end in a cast of one): nothing kept float32's bits.
    assert not (actual.view(np.uint32) & 0xFFFF).any()


@pytest.mark.slow
@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_flax_bfloat16_model_on_litertjs_wasm(make, tmp_path):
    from noxla.runtimes.verify import relative_error
    from tests.litertjs_harness import runner
    fun, x = _model(make)
    path = tmp_path / "m.tflite"
    noxla.export_tflite(fun, x, path=str(path), target="litertjs")
    actual = runner().run(str(path), {"x": x}, "wasm")["output"]
    assert relative_error(_op_by_op(fun, x)[0], actual) <= TOLERANCE
    assert not (actual.view(np.uint32) & 0xFFFF).any()
    int8_path = str(tmp_path / "int8.tflite")
    noxla.export_tflite(fun, x, path=int8_path, target="litertjs", quantize="int8", representative_data=[(x,)])
    assert relative_error(_op_by_op(fun, x)[0], runner().run(int8_path, {"x": x}, "wasm")["output"]) <= INT8_BOUND
    edges = lambda v: v.astype(BF16).astype(jnp.float32)  # noqa: E731
    edges_path = str(tmp_path / "edges.tflite")
    noxla.export_tflite(edges, EDGES, path=edges_path, target="litertjs")
    _same_bits(np.asarray(jax.jit(edges)(EDGES)), runner().run(edges_path, {"v": EDGES}, "wasm")["output"])


# int8 converts the function itself (its calibration runs it), without the bfloat16 pass: TF 2.21's
# converter writes BFLOAT16 tensors and CASTs around its int8 kernels, which LiteRT 2.3 and LiteRT.js
# wasm run. Measured (relative error to JAX op by op): MLP 0.0068, CNN 0.0056 in both, int8's own error.
INT8_BOUND = 0.1  # tests/test_quantize.py's bound for int8


@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_int8_export_of_a_bfloat16_model_runs_within_int8s_bound(make, tmp_path):
    from noxla.runtimes.verify import relative_error
    fun, x = _model(make)
    path = str(tmp_path / "m.tflite")
    noxla.export_tflite(fun, x, path=path, quantize="int8", representative_data=[(x,)])
    assert relative_error(_op_by_op(fun, x)[0], run_tflite(path, {"x": x})["output"]) <= INT8_BOUND


@pytest.mark.slow
@pytest.mark.parametrize("make", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_flax_bfloat16_model_on_litertjs_webgpu(make, tmp_path):
    # The .tflite exported for LiteRT.js's WebGPU delegate: the same errors as wasm (measured: MLP 0,
    # CNN 0.0056), and the rounding's edges bit for bit.
    from noxla.runtimes.verify import relative_error
    from tests.litertjs_harness import runner
    fun, x = _model(make)
    path = str(tmp_path / "m.tflite")
    noxla.export_tflite(fun, x, path=path, target="litertjs-webgpu")
    actual = runner().run(path, {"x": x}, "webgpu")["output"]
    assert relative_error(_op_by_op(fun, x)[0], actual) <= TOLERANCE
    assert not (actual.view(np.uint32) & 0xFFFF).any()
    edges = lambda v: v.astype(BF16).astype(jnp.float32)  # noqa: E731
    edges_path = str(tmp_path / "edges.tflite")
    noxla.export_tflite(edges, EDGES, path=edges_path, target="litertjs-webgpu")
    _same_bits(np.asarray(jax.jit(edges)(EDGES)), runner().run(edges_path, {"v": EDGES}, "webgpu")["output"])


def test_bfloat16_inputs_and_outputs_stay_refused_for_tflite():
    x = np.ones(3, ml_dtypes.bfloat16)
    report = noxla.check(lambda x: x * 2, x, target="tflite")
    assert {v.primitive for v in report.violations} == {"(program input)", "(program output)"}, report.format()
    assert noxla.check(lambda x: (x.astype(BF16) * 2).astype(jnp.float32), x.astype(np.float32), target="tflite").ok


def test_loops_and_conditionals_round_in_their_bodies():
    # Their bodies are functions in the GraphDef's library: rewritten and rounded there too.
    from jax import lax
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64) * 4).astype(ml_dtypes.bfloat16).astype(np.float32)

    def fun(x):
        a = x.astype(BF16)
        looped = lax.fori_loop(0, 4, lambda i, c: c * a / (c + 3) + lax.convert_element_type(i, BF16), a)
        tested = lax.cond(x[0] > 0, lambda v: v * v + a, lambda v: v / (a + 5), looped)
        return looped.astype(jnp.float32), tested.astype(jnp.float32)

    for expected, actual in zip(_op_by_op(fun, x), _tflite(fun, x)):
        _same_bits(expected, actual)
