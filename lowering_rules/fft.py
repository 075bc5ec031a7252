"""fft (FFT, IFFT, RFFT, IRFFT over the last 1 to 3 axes) as DFT matrix products on real pairs.

Each transformed axis is one matrix product with a constant DFT matrix: the (real, imaginary)
parts are concatenated along the axis and multiplied by the real block matrix
[[C, S], [-S, C]] of W = C + iS, so a complex transform is one real matmul per axis and output
part (the real and imaginary columns of the block matrix), and a real input (RFFT) multiplies
C and S directly. Only Reshape/Transpose/Concat/MatMul are emitted: every
target runs them, the audio pattern (frames -> window -> rfft -> |.|^2 -> mel -> log) has no
complex tensor anywhere, and TF.js's wasm backend (no FFT kernel) runs it too.

The targets' own FFT ops were measured against this (frames x n_fft float32, 100 frames, LiteRT
1 thread): TFLite RFFT2D 0.97 ms vs DFT matmul 0.62 ms at n=256, 1.90 ms vs 2.38 ms at n=512,
and RFFT2D only takes power-of-two lengths and returns complex64 (then REAL/IMAG). With no
way for a rule to see the target and no clear winner, one lowering serves all.
Cost: the matrix holds 4 n (n // 2 + 1) bytes per RFFT axis and 16 n^2 bytes per complex axis
(1 MB for an n=512 RFFT), and the work is O(n^2) per transformed vector.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.complex import _parts_of
from lowering_rules.core.cases import c64, case, f32
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import add_complex, lowering
from lowering_rules.patterns.dft_matrices import complex_matrix, on_last_axis, real_input_matrix, real_output_matrix
from lowering_rules.values.complex_values import ComplexPair, part_dtype


def _transform_axis(ctx, x, dims, axis: int, matrix_for, real_in: bool, real_out: bool):
    """One axis's DFT: move it last, multiply, move it back. Returns (value, new dims)."""
    rank = len(dims)
    perm = [d for d in range(rank) if d != axis] + [axis]
    inverse_perm = list(np.argsort(perm))
    moved = [dims[d] for d in perm]
    parts = [x] if real_in else [x.re, x.im]
    if axis != rank - 1:
        parts = [tf.transpose(p, perm) for p in parts]
    joined = parts[0] if real_in else tf.concat(parts, axis=-1)
    matrix = matrix_for(moved[-1])
    out_len = matrix.shape[1] if real_out else matrix.shape[1] // 2
    joined_dims = moved[:-1] + [matrix.shape[0]]
    # Complex outputs: one product per part (two FULLY_CONNECTED, not one and two slices).
    blocks = [matrix] if real_out else [matrix[:, :out_len], matrix[:, out_len:]]
    outs = [on_last_axis(joined, joined_dims, block) for block in blocks]
    if axis != rank - 1:
        outs = [tf.transpose(o, inverse_perm) for o in outs]
    new_dims = list(dims)
    new_dims[axis] = out_len
    return (outs[0] if real_out else ComplexPair(*outs)), new_dims


_CASES = [
    # The audio front-end pattern: power spectrum of real frames, no complex tensor in the graph.
    case("rfft_power", lambda x: jnp.abs(jnp.fft.rfft(x)) ** 2, f32(4, 64)),
    case("rfft_odd_length", _parts_of(jnp.fft.rfft), f32(3, 15)),
    case("rfft_n_pads", _parts_of(lambda x: jnp.fft.rfft(x, n=12)), f32(2, 9)),
    case("rfft2", _parts_of(jnp.fft.rfft2), f32(2, 6, 8)),
    case("rfftn_3_axes", _parts_of(lambda x: jnp.fft.rfftn(x, axes=(0, 1, 2))), f32(4, 5, 6)),
    case("fft_complex", _parts_of(lambda a, b: jnp.fft.fft(lax.complex(a, b))), f32(3, 16), f32(3, 16)),
    case("fft_real_input", _parts_of(jnp.fft.fft), f32(10)),
    case("ifft", _parts_of(lambda a, b: jnp.fft.ifft(lax.complex(a, b))), f32(2, 12), f32(2, 12)),
    case("fft2_middle_axes", _parts_of(lambda x: jnp.fft.fft2(x, axes=(0, 2))), f32(4, 3, 5)),
    case("ifftn_3_axes", _parts_of(lambda a, b: jnp.fft.ifftn(lax.complex(a, b))), f32(3, 4, 5), f32(3, 4, 5)),
    case("irfft_even", lambda a, b: jnp.fft.irfft(lax.complex(a, b), n=16), f32(3, 9), f32(3, 9)),
    case("irfft_odd", lambda a, b: jnp.fft.irfft(lax.complex(a, b), n=15), f32(3, 8), f32(3, 8)),
    case("irfft2", lambda a, b: jnp.fft.irfft2(lax.complex(a, b)), f32(6, 5), f32(6, 5)),
    case("rfft_irfft_roundtrip", lambda x: jnp.fft.irfft(jnp.fft.rfft(x) * 1j, n=20), f32(2, 20)),
    case("filter_in_frequency", lambda x, h: jnp.fft.irfft(jnp.fft.rfft(x) * jnp.fft.rfft(h), n=32),
         f32(2, 32), f32(32)),
    # Complex program inputs and outputs: TFLite takes (REAL/IMAG builtins) but cannot return them,
    # TF.js wasm has no complex tensors; both are rejected up front where they cannot run.
    case("complex_input", lambda z: jnp.abs(jnp.fft.ifft(z)), c64(2, 8)),
    case("complex_output", jnp.fft.fft, c64(8)),
    case("polymorphic_batch", lambda x: jnp.abs(jnp.fft.rfft(x)), f32(3, 16), polymorphic_shapes=("(b, 16)",)),
]


def lower_fft(ctx, x, *, fft_type, fft_lengths):
    fft_type = lax.FftType(fft_type)
    rank = len(ctx.avals_in[0].shape)
    dims = [ctx.dim(d) for d in ctx.avals_in[0].shape]
    axes = list(range(rank - len(fft_lengths), rank))
    dtype = part_dtype(ctx.avals_out[0].dtype) if fft_type != lax.FftType.IRFFT else ctx.avals_out[0].dtype
    complex_axis = lambda inverse: (lambda n: complex_matrix(n, inverse, dtype))
    if fft_type == lax.FftType.RFFT:
        # The last axis from real to its n // 2 + 1 frequencies, then complex DFTs over the others.
        x, dims = _transform_axis(ctx, x, dims, axes[-1], lambda n: real_input_matrix(n, dtype), True, False)
        axes = axes[:-1]
    last = None
    if fft_type == lax.FftType.IRFFT:
        # Inverse complex DFTs over the leading axes, then the last axis back to n real values.
        axes, last = axes[:-1], axes[-1]
    inverse = fft_type in (lax.FftType.IFFT, lax.FftType.IRFFT)
    for axis in axes:
        x, dims = _transform_axis(ctx, x, dims, axis, complex_axis(inverse), False, False)
    if last is not None:
        n = fft_lengths[-1]
        x, dims = _transform_axis(ctx, x, dims, last, lambda _: real_output_matrix(n, dtype), False, True)
    return x


lowering(lax.fft_p, cases=_CASES)(lower_fft)
add_complex(lax.fft_p, lower_fft)
