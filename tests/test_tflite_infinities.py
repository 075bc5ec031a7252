"""Infinities the TFLite converter would write as the largest finite float
(noxla/writers/tflite/converter/infinities.py), and int8 quantization, whose activations hold none
(noxla/writers/quantize.py: calibrated_int8)."""
import os
from unittest import mock

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import noxla
from noxla.errors import QuantizationError
from noxla.runtimes import run_tflite

# More elements than tflite_infinities computes at once (_MAX_FOLDED): such a value is checked apart.
LARGE = (1025, 1024)


def test_a_large_constant_infinity_stays_infinite(tmp_path):
    def fun(x):
        return jnp.arctanh(lax.integer_pow(x, 0))  # x ** 0 is a constant 1; atanh(1) = inf
    x = np.linspace(0.25, 0.75, np.prod(LARGE), dtype=np.float32).reshape(LARGE)
    expected = np.asarray(fun(x))
    assert np.isinf(expected).all()
    with open(noxla.export_tflite(fun, x, path=str(tmp_path / "m.tflite")), "rb") as f:
        got = run_tflite(f.read(), {"x": x})["output"]
    np.testing.assert_array_equal(got, expected)  # the converter's fold gave 3.4e38


def _int8(fun, x, samples, path):
    return noxla.export_tflite(fun, x, path=str(path), quantize="int8",
                               representative_data=lambda: [[s] for s in samples])


@pytest.mark.slow
def test_int8_keeps_the_operand_order_of_a_transposed_difference(tmp_path):
    # int8 took the converter's own entry point, without noxla's GraphDef passes: 5 - x.T ran as x.T - 5.
    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    fun = lambda x: 5.0 - x.T * 1.0  # noqa: E731
    with open(_int8(fun, x, [x * 0.5, x, x * 1.5], tmp_path / "m.tflite"), "rb") as f:
        got = run_tflite(f.read(), {"x": x})["output"]
    np.testing.assert_allclose(got, np.asarray(fun(x)), atol=0.1 * 6)  # int8 steps of range / 255


# int8 calibration data on which a value is infinite (also tests/test_tflite_quantize.py's).
INFINITE_CALIBRATIONS = pytest.mark.parametrize("fun, sample", [
    (lambda x: x * 2.0 + 1.0, np.array([[np.inf, 1.0, -1.0]], np.float32)),
    (lambda x: jnp.log(jnp.abs(x)) * 2.0, np.array([[0.0, 1.0, -1.0]], np.float32)),
], ids=["infinite_sample", "log_of_zero"])


@pytest.mark.slow
@INFINITE_CALIBRATIONS
def test_int8_calibration_on_an_infinite_value_is_refused(fun, sample, tmp_path):
    # TF's quantizer got an infinite scale and the process died (SIGSEGV) after "scale out of expressed
    # type range"; now the export raises, naming the value. (LiteRT's quantizer, the default where it
    # is installed, keeps such ops float instead: tests/test_tflite_quantize.py.)
    x = np.ones((1, 3), np.float32)
    with mock.patch.dict(os.environ, {"NOXLA_TFLITE_QUANTIZER": "tf"}), \
            pytest.raises(QuantizationError, match="infinite or NaN"):
        _int8(fun, x, [sample], tmp_path / "m.tflite")
