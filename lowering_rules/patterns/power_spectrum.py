"""A power spectrum multiplied by a constant matrix (a log-mel front end's mel projection), as
one DFT product, a square and one product with the matrix stacked twice.

JAX spells it rfft (inside jnp.fft's jit) -> real, imag -> square each -> add -> dot_general.
fft.py lowers the rfft as two products (the C and S parts); the dot_general rule looks back from
the mel product (``power_spectrum_product``) and multiplies the signal by [C|S] once instead.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f32
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.patterns import fusion
from lowering_rules.patterns.dft_matrices import on_last_axis, real_input_matrix

POWER_SPECTRUM = fusion.FastVariant(
    "a power spectrum real(rfft(x))^2 + imag(rfft(x))^2 multiplied by a constant matrix M (float32) "
    "becomes x @ [C|S] (a constant window on x folded into C and S), squared, @ [M; M]: the same sums "
    "in another order, except that sums JAX overflows to inf may stay finite and NaN/inf in x or the "
    "window may give other NaN/inf", lambda eqn: fusion.float32_out(eqn) and _product_shape(eqn.params, *eqn.avals_in))


def _product_shape(params, power, matrix) -> bool:
    """Whether a dot_general of avals ``power``, ``matrix`` has the pattern's shape: no batch
    dimensions, the left operand contracted on its last axis, the right one a matrix."""
    (lhs_contract, _), (lhs_batch, _) = params["dimension_numbers"]
    return not lhs_batch and len(matrix.shape) == 2 and tuple(lhs_contract) == (len(power.shape) - 1,)


def _squared_part(ctx, atom, part: str):
    """If ``atom`` is ``part(z) ** 2`` (integer_pow or a product with itself), z; else None."""
    eqn = fusion.producer(ctx, atom, "integer_pow", "mul")
    if eqn is None or eqn.params.get("y", 2) != 2 or (eqn.primitive.name == "mul"
                                                      and eqn.invars[0] is not eqn.invars[1]):
        return None
    eqn = fusion.producer(ctx, eqn.invars[0], part)
    return None if eqn is None else eqn.invars[0]


def _rfft_operand(ctx, atom):
    """If ``atom`` is a one-axis rfft (lax.fft, or jnp.fft's jit holding only that), its operand."""
    eqn = fusion.producer(ctx, atom, "fft", "jit")
    if eqn is not None and eqn.primitive.name == "jit":
        inner = eqn.params["jaxpr"].jaxpr
        if len(inner.eqns) != 1 or inner.eqns[0].invars[0] not in inner.invars:
            return None
        if inner.outvars[list(eqn.outvars).index(atom)] is not inner.eqns[0].outvars[0]:
            return None
        operand = eqn.invars[inner.invars.index(inner.eqns[0].invars[0])]
        eqn = inner.eqns[0]
    elif eqn is not None:
        operand = eqn.invars[0]
    if (eqn is None or eqn.primitive.name != "fft" or lax.FftType(eqn.params["fft_type"]) != lax.FftType.RFFT
            or len(eqn.params["fft_lengths"]) != 1 or not fusion.is_float32(operand.aval)):
        return None
    return operand


def power_spectrum_product(ctx):
    """dot_general(real(Z)^2 + imag(Z)^2, M) for Z = rfft(x) over its last axis contracted with a
    constant matrix M (a mel filterbank), as x @ [C|S] (one product for both parts; a constant
    window w in x = y * w is folded into it: y @ [w C | w S]), squared, @ [M; M] (the sum of the
    two squares done by the product itself): 3 ops instead of 6, two matmuls instead of three.
    None when not that, or in strict mode (see POWER_SPECTRUM)."""
    rhs_contract = ctx.eqn.params["dimension_numbers"][0][1]
    power, matrix = ctx.eqn.invars
    if (ctx.strict or not fusion.is_float32(ctx.eqn.outvars[0].aval)
            or not _product_shape(ctx.eqn.params, *ctx.avals_in) or not ctx.is_constant(matrix)):
        return None
    add = fusion.producer(ctx, power, "add")
    if add is None:
        return None
    a, b = add.invars
    spectra = {_squared_part(ctx, a, "real"), _squared_part(ctx, b, "imag")}
    if len(spectra) != 1:
        spectra = {_squared_part(ctx, b, "real"), _squared_part(ctx, a, "imag")}
    spectrum = spectra.pop() if len(spectra) == 1 else None
    signal = None if spectrum is None else _rfft_operand(ctx, spectrum)
    if signal is None:
        return None
    n = signal.aval.shape[-1]
    dft = tf.constant(real_input_matrix(n, np.float32))
    window = fusion.producer(ctx, signal, "mul")
    for data, scale in ([] if window is None else (window.invars, window.invars[::-1])):
        w = fusion.channel_constant(ctx, scale, n) if data.aval.shape == signal.aval.shape else None
        if w is not None:
            signal, dft = data, tf.reshape(w, [n, 1]) * dft
            break
    stacked = tf.concat([ctx.value(matrix)] * 2, axis=rhs_contract[0])
    if rhs_contract[0] == 1:
        stacked = tf.transpose(stacked)
    dims = [ctx.dim(d) for d in signal.aval.shape]
    parts = on_last_axis(ctx.value(signal), dims, dft)
    return on_last_axis(parts * parts, dims, stacked)

_MEL = np.abs(np.random.default_rng(0).normal(size=(9, 5))).astype(np.float32)
_HANN = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(16) / 16)).astype(np.float32)


def _power(x):
    z = jnp.fft.rfft(x)
    return jnp.real(z) ** 2 + jnp.imag(z) ** 2


POWER_SPECTRUM_CASES = [
    # A log-mel front end's frames -> Hann window -> power spectrum -> mel projection.
    case("rfft_power_mel", lambda x: _power(x * _HANN) @ _MEL, f32(2, 3, 16)),
    # Squares spelled as products, the imaginary part first, M contracted on its second axis.
    case("rfft_power_mel_transposed", lambda x: lax.dot_general(
        (lambda z: jnp.imag(z) * jnp.imag(z) + jnp.real(z) * jnp.real(z))(jnp.fft.rfft(x)), _MEL.T,
        (((1,), (1,)), ((), ()))), f32(4, 16)),
]
