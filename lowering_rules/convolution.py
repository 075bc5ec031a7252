"""conv_general_dilated, with every parameter of JAX's semantics, through TF's plain convolutions.

The rule brings operands to channels-last (``[N, *spatial, C]`` and ``[*window, I, O]``),
turns batch groups into feature groups, applies lhs dilation (zeros between input elements: a
transposed convolution) and explicit padding itself (or lets the convolution pad where that is
TF's SAME), and is left with a VALID convolution with strides, rhs dilation and feature groups.
Float convolutions of up to 3 spatial dims use Conv2D / Conv3D / DepthwiseConv2dNative (1D runs
as 2D with a unit dim); integer ones, which TFLite and TF.js convolve only in floats, and 4+
spatial dims are summed tap by tap.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f16, f32, flax_linen, i8, i32
from lowering_rules.core.helpers import (
    axis_slice,
    compute_dtype,
    dilated_size,
    interior_pad,
    pad_or_crop,
    size_vector,
    symbolic_padding,
)
from lowering_rules.core.jax_compat import is_constant_dim
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import Limitation, register
from lowering_rules.core.vocabulary import ALL_TARGETS, Target, tfjs_webgpu_fails, webgpu_computes_wrong
from lowering_rules.patterns.fusion import FastVariant, zero_pad

# ----------------------------------------------------------------------------------------------
# The lowering


def _dilate_kernel_axis(w, w_dims, axis, factor):
    """Zeros between the kernel's taps along ``axis``, on a 3D view [before, taps, after] (the
    interior padding goes through one more axis, and TFLite's PAD stops at 5D)."""
    if factor == 1:
        return w, w_dims
    view = [_product(w_dims[:axis]), w_dims[axis], _product(w_dims[axis + 1:])]
    w = interior_pad(tf.reshape(w, size_vector(view)), view, 1, factor)
    w_dims = [*w_dims[:axis], dilated_size(w_dims[axis], factor), *w_dims[axis + 1:]]
    return tf.reshape(w, size_vector(w_dims)), w_dims


def _product(dims):
    total = 1
    for d in dims:
        total = total * d
    return total


def _native_conv(x, w, w_dims, strides, dilations, depthwise: bool, mode: str = "VALID"):
    """A Conv2D/Conv3D/DepthwiseConv2dNative on channels-last operands (``mode``: VALID, or SAME
    where JAX's padding is TF's SAME, which TF.js runs without a Pad of its own).

    Only features every TF CPU kernel has: without oneDNN (TF turns it on only on some x86 CPUs,
    e.g. not on AMD EPYC without AVX-512), Conv3D takes no dilation and DepthwiseConv2dNative
    neither dilation nor unequal strides."""
    dilated = any(d > 1 for d in dilations)
    if dilated and (any(s > 1 for s in strides) or len(strides) == 3):
        # TF.js convolutions take strides or dilations, not both, and Conv3D none: dilate the
        # kernel with zeros (TFLite's SPACE_TO_BATCH_ND, the other way, stops at 4D).
        for a, d in enumerate(dilations):
            w, w_dims = _dilate_kernel_axis(w, w_dims, a, d)
        dilations, dilated = [1] * len(dilations), False
    if depthwise and strides[0] != strides[1]:
        # Convolve at the strides' gcd (equal), then keep every (stride / gcd)-th output.
        step = np.gcd(*strides)
        y = _native_conv(x, w, w_dims, [step, step], dilations, True)
        for a, s in enumerate(strides):
            y = axis_slice(y, 4, 1 + a, 0, None, s // step)
        return y
    if depthwise:
        # Dilation through space-to-batch (TF's own way; the TFLite converter folds it back into
        # one dilated DEPTHWISE_CONV_2D when shapes are static).
        return tf.nn.depthwise_conv2d(x, w, [1, *strides, 1], mode,
                                      dilations=dilations if dilated else None)
    conv = tf.nn.conv2d if len(strides) == 2 else tf.nn.conv3d
    return conv(x, w, strides=[1, *strides, 1], padding=mode, dilations=[1, *dilations, 1])


def _tap_by_tap_conv(x, w, w_dims, strides, dilations, out_spatial):
    """sum over window taps of (strided input slice) . (kernel tap): any rank, any dtype."""
    rank = len(strides) + 2
    total = None
    for tap in itertools.product(*(range(k) for k in w_dims[:-2])):
        patch = x
        for a, (t, s, d, m) in enumerate(zip(tap, strides, dilations, out_spatial)):
            patch = axis_slice(patch, rank, 1 + a, t * d, t * d + (m - 1) * s + 1, s)
        term = tf.reduce_sum(tf.expand_dims(patch, -1) * w[tap], axis=-2)
        total = term if total is None else total + term
    return total


def _grouped_conv(x, w, x_dims, w_dims, groups, strides, dilations, out_spatial, tap_by_tap, mode="VALID"):
    in_per_group, out_features = w_dims[-2], w_dims[-1]
    if tap_by_tap:
        conv = lambda xg, wg, wg_dims: _tap_by_tap_conv(xg, wg, wg_dims, strides, dilations, out_spatial)
    else:
        conv = lambda xg, wg, wg_dims: _native_conv(xg, wg, wg_dims, strides, dilations, False, mode)
    if groups == 1:
        return conv(x, w, w_dims)
    if not tap_by_tap and in_per_group == 1 and len(strides) == 2:
        # One input channel per group: a depthwise convolution whose channel multiplier is the
        # group's output count (output channel c * M + m is exactly JAX's group-major order).
        multiplier = out_features // groups
        filt = tf.reshape(w, size_vector([*w_dims[:-2], groups, multiplier]))
        return _native_conv(x, filt, [*w_dims[:-2], groups, multiplier], strides, dilations, True, mode)
    group_dims = [*w_dims[:-1], out_features // groups]
    outs = [conv(xg, wg, group_dims)
            for xg, wg in zip(tf.split(x, groups, axis=-1), tf.split(w, groups, axis=-1))]
    return tf.concat(outs, axis=-1)


def _same_transpose_pads(n: int, k: int, s: int, m: int):
    """(before, after) crop TF's SAME transposed convolution takes from the full output when it
    makes ``m`` outputs from ``n`` inputs, or None when SAME cannot make that size."""
    total = (n - 1) * s + k - m
    if -(-m // s) != n or total < 0:
        return None
    return total // 2, total - total // 2


def _transposed_conv(ctx, x, w, x_dims, w_dims, lhs_dilation, padding):
    """An lhs-dilated convolution (stride 1, no rhs dilation, one group, 1 or 2 spatial dims) as
    Conv2DBackpropInput (TFLite TRANSPOSE_CONV, TF.js conv2dTranspose), else None.

    The transposed convolution with the spatially flipped kernel scatters each input element
    times the kernel: its full output (n - 1) * s + k per axis is the dilated input padded by
    k - 1 on both sides, convolved. JAX's padding (lo, hi) then crops (or pads) k - 1 - lo before
    and k - 1 - hi after; TF's SAME padding is that crop in the common cases (flax's SAME), else
    VALID and an explicit crop. LiteRT.js's WebGPU delegate takes SAME's uneven crop (a 3x3 kernel
    at stride 2: 0 before, 1 after) from the wrong side (tests/test_emitted_forms.py, off by 1.2
    relative), so for it an uneven crop is VALID and explicit too. It skips the zeros the dilated
    input would multiply: only an inf/NaN kernel tap can make that differ from JAX (0 * inf)."""
    sizes = [x_dims[1:-1], w_dims[:-2]]
    one_d = len(lhs_dilation) == 1
    if one_d:  # 1D as 2D over a unit height
        x, w = tf.expand_dims(x, 1), tf.expand_dims(w, 0)
        sizes = [[1, *sizes[0]], [1, *sizes[1]]]
        lhs_dilation, padding = (1, *lhs_dilation), [(0, 0), *padding]
    if not all(isinstance(d, (int, np.integer)) for d in (*sizes[0], *sizes[1])):
        return None
    axes = list(zip(*sizes, lhs_dilation, padding))
    outs = [(n - 1) * s + 1 + lo + hi - k + 1 for n, k, s, (lo, hi) in axes]
    crops = [(k - 1 - lo, k - 1 - hi) for n, k, s, (lo, hi) in axes]
    same = [_same_transpose_pads(n, k, s, m) for (n, k, s, _), m in zip(axes, outs)]
    if same == crops and not (ctx.lowering_for.webgpu and any(a != b for a, b in crops)):
        mode, full, rest = "SAME", outs, [(0, 0)] * 2
    else:
        mode, rest = "VALID", crops
        full = [(n - 1) * s + k for n, k, s, _ in axes]
    filters = tf.transpose(tf.reverse(w, [0, 1]), [0, 1, 3, 2])  # [kh, kw, out, in]
    y = tf.nn.conv2d_transpose(x, filters, size_vector([x_dims[0], *full, w_dims[-1]]),
                               [1, *lhs_dilation, 1], mode)
    y = pad_or_crop(y, [(0, 0), *((-a, -b) for a, b in rest), (0, 0)])
    return tf.squeeze(y, 1) if one_d else y


def _is_tf_same(x_dims, w_dims, strides, dilations, padding) -> bool:
    """Whether JAX's explicit padding is what TF's SAME pads (static sizes only), on axes whose
    windows reach the input's end: where a stride longer than the window steps past it (a 1x3
    kernel at stride 2 over 8 rows), TF.js's wasm SAME convolution wrote zeros (found by
    tests/fuzz.py), so such a convolution is VALID over its explicit padding."""
    for n, k, s, d, pads in zip(x_dims[1:-1], w_dims[:-2], strides, dilations, padding):
        if not isinstance(n, (int, np.integer)) or not isinstance(k, (int, np.integer)):
            return False
        total = (-(-n // s) - 1) * s + (k - 1) * d + 1 - n
        if total < 0 or tuple(pads) != (total // 2, total - total // 2):
            return False
    return True


def _single_windows_unstrided(x_dims, w_dims, out_spatial, strides, padding, lhs_dilation, rhs_dilation):
    """(strides, padding) with stride 1 on each static axis that has one output position, its input
    cropped to the window's reach: the same window. TF's CPU Conv2D and Conv3D (oneDNN) compute
    garbage for some strided axes with one output (found by tests/fuzz.py: a 3x3 kernel at stride 3
    over 4 columns, one input channel, batch 2; of the strided Conv2Ds and Conv3Ds measured over small
    shapes, 90 of 6,804 and 765 of 48,600 were wrong, all of one input channel, none once unstrided;
    Conv3Ds of 2 or 3 channels 0 of 1,920, DepthwiseConv2dNative 0 of 1,152)."""
    strides, padding = list(strides), [tuple(p) for p in padding]
    for a, (n, k, out) in enumerate(zip(x_dims[1:-1], w_dims[:-2], out_spatial)):
        lo, hi = padding[a]
        if strides[a] > 1 and all(isinstance(v, (int, np.integer)) for v in (n, k, out, lo, hi)) and out == 1:
            strides[a] = 1
            padding[a] = (lo, (k - 1) * rhs_dilation[a] + 1 - dilated_size(n, lhs_dilation[a]) - lo)
    return strides, padding


def transposes(params, out_dtype) -> bool:
    """Whether the default lowering runs this convolution as a transposed convolution."""
    p = params
    return (jnp.issubdtype(np.dtype(out_dtype), jnp.floating)
            and any(d > 1 for d in p["lhs_dilation"]) and len(p["window_strides"]) in (1, 2)
            and all(d == 1 for d in (*p["window_strides"], *p["rhs_dilation"]))
            and p["feature_group_count"] == 1 and p["batch_group_count"] == 1)


def _batch_groups_to_features(x, x_dims, groups):
    """[B*n, *S, C] -> [n, *S, B*C]: batch group g (the g-th block of the batch) becomes
    feature group g, which then meets the g-th block of output features as in JAX."""
    nsp = len(x_dims) - 2
    n = x_dims[0] // groups
    x = tf.reshape(x, size_vector([groups, n, *x_dims[1:]]))
    x = tf.transpose(x, [1, *range(2, nsp + 2), 0, nsp + 2])
    dims = [n, *x_dims[1:-1], groups * x_dims[-1]]
    return tf.reshape(x, size_vector(dims)), dims


def _fold_zero_pad(ctx, lhs_spec, lhs_dilation, padding):
    """(input, its aval, the convolution's padding plus the pad's) when the input is a zero pad of
    its spatial axes only (Keras's ZeroPadding2D before a VALID convolution): the padding then
    reaches the convolution, which takes it as TF's SAME where it is that (no Pad op left) and pads
    explicitly otherwise, as it would anyway. Exact in both modes (fusion.zero_pad). Not under lhs
    dilation, which would spread the pad's zeros too."""
    hit = zero_pad(ctx, ctx.eqn.invars[0])
    if hit is None or any(d != 1 for d in lhs_dilation):
        return None
    data, pads = hit
    if pads[lhs_spec[0]] != (0, 0) or pads[lhs_spec[1]] != (0, 0):
        return None
    merged = [(lo + pads[axis][0], hi + pads[axis][1]) for axis, (lo, hi) in zip(lhs_spec[2:], padding)]
    return ctx.value(data), data.aval, merged


def lower_conv_general_dilated(ctx, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                               dimension_numbers, feature_group_count, batch_group_count, precision=None,
                               preferred_element_type=None):
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    lhs_aval, rhs_aval = ctx.avals_in
    folded = _fold_zero_pad(ctx, lhs_spec, lhs_dilation, padding)
    if folded is not None:
        lhs, lhs_aval, padding = folded
    out_aval = ctx.aval_out
    nsp = len(window_strides)
    contraction = [lhs_aval.shape[lhs_spec[1]], *(rhs_aval.shape[i] for i in rhs_spec[2:])]
    if 0 in out_aval.shape or 0 in contraction:  # nothing to compute, or empty sums
        return tf.zeros(ctx.out_shape(), ctx.out_dtype)

    # Half floats are convolved in float32 (TFLite's CONV_2D has no float16 kernel, and XLA
    # accumulates them in float32 too); narrow integers and booleans in int32, which wraps like them.
    compute = compute_dtype(out_aval.dtype, bools=True)
    if compute.is_unsigned:  # products and sums wrap the same in the signed type TF's kernels have
        compute = tf.int64 if compute.size == 8 else tf.int32
    lhs_perm = [lhs_spec[0], *lhs_spec[2:], lhs_spec[1]]
    rhs_perm = [*rhs_spec[2:], rhs_spec[1], rhs_spec[0]]
    x = tf.transpose(tf.cast(lhs, compute), lhs_perm)
    w = tf.transpose(tf.cast(rhs, compute), rhs_perm)
    x_dims = [ctx.dim(lhs_aval.shape[i]) for i in lhs_perm]
    w_dims = [ctx.dim(rhs_aval.shape[i]) for i in rhs_perm]
    out_spatial = [ctx.dim(out_aval.shape[i]) for i in out_spec[2:]]

    groups = feature_group_count
    if batch_group_count > 1:
        x, x_dims = _batch_groups_to_features(x, x_dims, batch_group_count)
        groups = batch_group_count
    if not ctx.strict and transposes(ctx.eqn.params, out_aval.dtype):
        y = _transposed_conv(ctx, x, w, x_dims, w_dims, lhs_dilation, padding)
        if y is not None:
            return tf.cast(tf.transpose(y, np.argsort([out_spec[0], *out_spec[2:], out_spec[1]])), ctx.out_dtype)
    tap_by_tap = compute.is_integer or nsp > 3
    # Only a Conv2D/Conv3D of one input channel (per group) is at risk; not a depthwise one (2D, or
    # 1D run as 2D), whose kernel was right and whose unequal strides would run at their gcd.
    if w_dims[-2] == 1 and not tap_by_tap and (groups == 1 or nsp == 3):
        window_strides, padding = _single_windows_unstrided(x_dims, w_dims, out_spatial, window_strides, padding,
                                                           lhs_dilation, rhs_dilation)
    # SAME in the convolution itself (TF.js would run the Pad separately; TFLite folds either);
    # not where unequal depthwise strides run at their gcd, whose SAME pads differently.
    mode = "SAME" if (not tap_by_tap and all(f == 1 for f in lhs_dilation) and any(p != (0, 0) for p in padding)
                      and (groups == 1 or len(set(window_strides)) == 1)
                      and _is_tf_same(x_dims, w_dims, window_strides, rhs_dilation, padding)) else "VALID"
    for a, factor in enumerate(lhs_dilation):
        x = interior_pad(x, x_dims, 1 + a, factor)
        x_dims[1 + a] = dilated_size(x_dims[1 + a], factor)
    if mode == "VALID":
        x = pad_or_crop(x, [(0, 0), *padding, (0, 0)])
        x_dims = [x_dims[0], *(n + lo + hi for n, (lo, hi) in zip(x_dims[1:-1], padding)), x_dims[-1]]

    strides, dilations = list(window_strides), list(rhs_dilation)
    if nsp == 1:  # 1D runs as 2D over a unit height, whose stride is free: equal to the width's
        x, w = tf.expand_dims(x, 1), tf.expand_dims(w, 0)
        x_dims, w_dims = [x_dims[0], 1, *x_dims[1:]], [1, *w_dims]
        strides, dilations, out_spatial = [*strides, *strides], [1, *dilations], [1, *out_spatial]
    y = _grouped_conv(x, w, x_dims, w_dims, groups, strides, dilations, out_spatial, tap_by_tap, mode)
    if nsp == 1:
        y = tf.squeeze(y, 1)
    # y is [N, *spatial, O]; put each axis where out_spec wants it.
    y = tf.transpose(y, np.argsort([out_spec[0], *out_spec[2:], out_spec[1]]))
    return tf.cast(y, ctx.out_dtype)


# ----------------------------------------------------------------------------------------------
# Cases

NHWC = ("NHWC", "HWIO", "NHWC")


def conv(window_strides=None, padding="VALID", dimension_numbers=None, **params):
    def fun(x, k):
        strides = window_strides or (1,) * (x.ndim - 2)
        return lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=dimension_numbers,
                                        **params)
    return fun


def kernel_grad(forward):
    """JAX's weight gradient: a convolution of the input with the output cotangent."""
    return lambda x, k, ct: jax.vjp(lambda k: forward(x, k), k)[1](ct)[0]


def input_grad(forward):
    """JAX's input gradient: a transposed convolution of the cotangent with the flipped kernel."""
    return lambda x, k, ct: jax.vjp(lambda x: forward(x, k), x)[1](ct)[0]


def flax_conv_transpose(x, k):
    module = flax_linen().ConvTranspose(features=k.shape[-1], kernel_size=k.shape[:2], strides=(2, 2),
                              padding="SAME", use_bias=False)
    return module.apply({"params": {"kernel": k}}, x)


def flax_conv(x, k):
    module = flax_linen().Conv(features=k.shape[-1], kernel_size=k.shape[:2], strides=(2, 1), padding="SAME",
                     use_bias=False)
    return module.apply({"params": {"kernel": k}}, x)


CONV_CASES = [
    case("flax_nhwc_same", flax_conv, f32(2, 7, 6, 3), f32(3, 3, 3, 4)),
    case("nchw_oihw", conv(), f32(2, 3, 6, 5), f32(4, 3, 3, 2)),
    case("nhwc_hwio_strides", conv((2, 3), "SAME", NHWC), f32(1, 9, 10, 2), f32(3, 2, 2, 5)),
    case("layout_chwn_ihwo_hwnc", conv((1, 2), "VALID", ("CHWN", "IHWO", "HWNC")),
         f32(3, 6, 7, 2), f32(3, 2, 3, 4)),
    case("1d_nwc", conv((2,), [(1, 2)], ("NWC", "WIO", "NWC")), f32(2, 11, 3), f32(3, 3, 4)),
    case("1d_ncw_rhs_dilation", conv((1,), "SAME", rhs_dilation=(3,)), f32(1, 2, 12), f32(3, 2, 3)),
    case("3d_ndhwc", conv((1, 2, 1), "SAME", ("NDHWC", "DHWIO", "NDHWC")),
         f32(1, 5, 6, 4, 2), f32(2, 3, 2, 2, 3)),
    case("3d_ncdhw_rhs_dilation", conv((1, 1, 1), "VALID", rhs_dilation=(2, 1, 2)),
         f32(2, 2, 6, 5, 6), f32(3, 2, 2, 2, 2)),
    case("rhs_dilation", conv((1, 1), "SAME", NHWC, rhs_dilation=(2, 3)), f32(1, 8, 9, 2), f32(3, 2, 2, 3)),
    case("strides_with_rhs_dilation", conv((2, 2), "VALID", NHWC, rhs_dilation=(2, 2)),
         f32(2, 11, 10, 3), f32(3, 3, 3, 2)),
    case("lax_conv_transpose", lambda x, k: lax.conv_transpose(x, k, (2, 2), "SAME", dimension_numbers=NHWC),
         f32(1, 5, 4, 3), f32(3, 3, 3, 2)),
    case("flax_conv_transpose", flax_conv_transpose, f32(2, 4, 5, 2), f32(4, 3, 2, 3)),
    case("conv_transpose_1d_valid", lambda x, k: lax.conv_transpose(
        x, k, (3,), "VALID", dimension_numbers=("NWC", "WIO", "NWC")), f32(1, 5, 2), f32(4, 2, 3)),
    # Transposed convolutions whose padding is no TF SAME: VALID, then crops and pads beyond the kernel.
    case("transpose_padding_beyond_kernel", conv((1, 1), [(3, 0), (0, 4)], NHWC, lhs_dilation=(2, 3)),
         f32(1, 3, 4, 2), f32(2, 2, 2, 3)),
    case("transpose_negative_padding", conv((1, 1), [(-1, 1), (1, -2)], NHWC, lhs_dilation=(2, 2)),
         f32(2, 4, 5, 3), f32(3, 3, 3, 2)),
    case("polymorphic_batch_transpose", lambda x, k: lax.conv_transpose(x, k, (2, 2), "SAME", dimension_numbers=NHWC),
         f32(3, 4, 3, 2), f32(3, 3, 2, 2), polymorphic_shapes=("(b, ...)", None)),
    case("lhs_and_rhs_dilation_strides", conv((2, 1), [(1, 0), (2, -1)], NHWC, lhs_dilation=(2, 3),
                                              rhs_dilation=(1, 2)), f32(1, 6, 5, 2), f32(2, 3, 2, 2)),
    case("asymmetric_padding", conv((1, 1), [(2, 0), (1, 3)], NHWC), f32(1, 5, 5, 2), f32(3, 2, 2, 2)),
    case("negative_padding", conv((1, 2), [(-1, 2), (0, -2)], NHWC), f32(2, 7, 8, 2), f32(2, 3, 2, 3)),
    # A crop past the (dilated) input reaches into the other side's padding, as in XLA (the fuzzer).
    case("crop_past_the_input", conv((1,), [(-2, 2)], ("NCH", "OIH", "NCH"), lhs_dilation=(2,)),
         f32(2, 1, 1), f32(2, 1, 1)),
    case("crop_past_the_input_2d", conv((3, 1), [(-1, 2), (-2, 4)], lhs_dilation=(1, 2), feature_group_count=2),
         f32(2, 2, 2, 1), f32(2, 1, 1, 1)),
    case("feature_groups_2", conv((1, 1), "SAME", NHWC, feature_group_count=2),
         f32(2, 6, 5, 4), f32(3, 3, 2, 6)),
    case("feature_groups_3_nchw_3d", conv((1, 1, 2), "VALID", feature_group_count=3),
         f32(1, 6, 4, 4, 5), f32(3, 2, 2, 2, 2)),
    case("depthwise", conv((1, 1), "SAME", NHWC, feature_group_count=3), f32(2, 6, 7, 3), f32(3, 3, 1, 6)),
    case("depthwise_strides_dilation", conv((2, 2), "VALID", NHWC, feature_group_count=4,
                                            rhs_dilation=(2, 2)), f32(1, 11, 12, 4), f32(3, 3, 1, 4)),
    case("depthwise_1d_strided", conv((2,), "SAME", ("NWC", "WIO", "NWC"), feature_group_count=2),
         f32(2, 9, 2), f32(3, 1, 4)),
    # Found by tests/fuzz.py: the stride steps past the one-row window, and TF.js's wasm SAME wrote zeros.
    case("stride_past_window", conv((2, 2), "SAME", NHWC), f32(1, 8, 8, 3), f32(1, 3, 3, 4)),
    case("depthwise_stride_past_window", conv((2, 2), "SAME", NHWC, feature_group_count=3),
         f32(1, 2, 8, 3), f32(1, 3, 1, 3)),
    # Found by tests/fuzz.py: one output column at stride 3, which TF's CPU Conv2D (oneDNN) computed
    # wrong (one input channel, batch 2), and the same in Conv3D and under TF's SAME.
    case("single_strided_window", conv((1, 3), [(0, -1), (1, 1)], lhs_dilation=(2, 1)),
         f32(2, 1, 5, 2), f32(2, 1, 3, 3)),
    case("single_strided_window_f16", conv((1, 3), [(0, -1), (1, 1)], lhs_dilation=(2, 1)),
         f16(2, 1, 5, 2), f16(2, 1, 3, 3)),
    case("single_strided_window_same", conv((1, 3), "SAME", NHWC), f32(2, 4, 2, 1), f32(3, 2, 1, 2)),
    case("single_strided_window_3d", conv((1, 1, 3), "VALID", ("NDHWC", "DHWIO", "NDHWC")),
         f32(1, 1, 3, 2, 1), f32(1, 1, 2, 1, 2)),
    case("batch_groups", conv((1, 1), "VALID", NHWC, batch_group_count=2), f32(4, 5, 5, 3), f32(2, 2, 3, 4)),
    # Features TF's CPU kernels have only with oneDNN (cases above too: 3d_ncdhw_rhs_dilation,
    # depthwise_1d_strided); the suite must pass either way (tests/test_cpu_independence.py).
    case("depthwise_rhs_dilation", conv((1, 1), "SAME", NHWC, feature_group_count=3, rhs_dilation=(2, 3)),
         f32(2, 9, 10, 3), f32(3, 3, 1, 6)),
    case("depthwise_unequal_strides", conv((2, 3), "VALID", NHWC, feature_group_count=2),
         f32(1, 9, 11, 2), f32(3, 2, 1, 2)),
    case("depthwise_1d_strided_dilated", conv((2,), "VALID", ("NWC", "WIO", "NWC"), feature_group_count=2,
                                              rhs_dilation=(2,)), f32(2, 12, 2), f32(3, 1, 2)),
    case("3d_strided_rhs_dilation", conv((2, 1, 1), "SAME", ("NDHWC", "DHWIO", "NDHWC"), rhs_dilation=(1, 2, 2)),
         f32(1, 6, 5, 6, 2), f32(2, 2, 2, 2, 3)),
    case("polymorphic_batch_depthwise_dilated", conv((1, 1), "VALID", NHWC, feature_group_count=2,
                                                     rhs_dilation=(2, 2)),
         f32(3, 8, 7, 2), f32(3, 3, 1, 2), polymorphic_shapes=("(b, ...)", None)),
    case("grad_kernel_of_grouped_conv", kernel_grad(conv((1, 1), "SAME", NHWC, feature_group_count=2)),
         f32(2, 6, 5, 4), f32(3, 3, 2, 4), f32(2, 6, 5, 4)),
    case("grad_kernel_of_strided_conv", kernel_grad(conv((2, 2), "SAME", NHWC)),
         f32(2, 8, 7, 3), f32(3, 3, 3, 2), f32(2, 4, 4, 2)),
    case("grad_input_of_strided_conv", input_grad(conv((2, 2), "SAME", NHWC)),
         f32(2, 8, 7, 3), f32(3, 3, 3, 2), f32(2, 4, 4, 2)),
    case("int32", conv((1, 2), "SAME", NHWC), i32(1, 5, 6, 2), i32(2, 2, 2, 3)),
    case("int32_3d_grouped", conv((2, 1, 1), "VALID", ("NDHWC", "DHWIO", "NDHWC"), feature_group_count=2),
         i32(2, 5, 3, 4, 4), i32(2, 2, 2, 2, 4)),
    case("int8_preferred_int32", conv((1,), "VALID", ("NWC", "WIO", "NWC"), preferred_element_type=jnp.int32),
         i8(2, 9, 3, low=-100, high=100), i8(3, 3, 2, low=-100, high=100)),
    case("f16", conv((1, 1), "SAME", NHWC), f16(1, 5, 5, 2), f16(3, 3, 2, 3)),
    case("f16_preferred_f32", conv((1, 1), "SAME", NHWC, preferred_element_type=jnp.float32),
         f16(1, 5, 5, 2), f16(3, 3, 2, 3)),
    case("4d_spatial", conv((1, 2, 1, 1), "VALID"), f32(1, 2, 3, 4, 3, 3), f32(2, 2, 2, 2, 1, 2)),
    case("unit_sizes", conv((1, 1), "VALID", NHWC), f32(1, 1, 1, 1), f32(1, 1, 1, 1)),
    case("polymorphic_batch", conv((2, 2), "SAME", NHWC, rhs_dilation=(1, 1)), f32(3, 7, 6, 2),
         f32(3, 3, 2, 4), polymorphic_shapes=("(b, ...)", None)),
    case("polymorphic_batch_transpose_grouped", conv((1, 1), [(1, 1), (2, 0)], NHWC, lhs_dilation=(2, 2),
                                                      feature_group_count=2),
         f32(3, 5, 4, 4), f32(3, 3, 2, 4), polymorphic_shapes=("(b, ...)", None)),
    # Found by tests/fuzz_poly.py: a symbolic length's output size is max(0, ...), which JAX's own
    # evaluator computes with lax.max (no TF tensor taken); noxla.front.shapes evaluates it with tf.maximum.
    case("symbolic_same_padding", conv((2,), "SAME", ("NWC", "WIO", "NWC")), f32(1, 9, 3), f32(3, 3, 4),
         polymorphic_shapes=("(1, t, 3)", None)),
    # A zero pad to a multiple of 8 (its amount symbolic) is not folded into the convolution's padding.
    case("symbolic_zero_pad", lambda x, k: conv((1,), "VALID", ("NWC", "WIO", "NWC"), rhs_dilation=(2,))(
        jnp.pad(x, ((0, 0), (0, (-x.shape[1]) % 8), (0, 0))), k), f32(1, 5, 3), f32(3, 3, 4),
         polymorphic_shapes=("(1, t, 3)", None)),
    # Found by tests/fuzz_poly.py: an integer convolution runs tap by tap, one per kernel position.
    case("symbolic_kernel", conv((1,), "VALID", ("NWC", "WIO", "NWC")), i32(1, 8, 3), i32(3, 3, 4),
         polymorphic_shapes=(None, "(k, 3, 4)")),
    case("symbolic_length_dilated", conv((1,), [(0, -1)], ("NWC", "WIO", "NWC"), rhs_dilation=(2,)),
         f32(2, 9, 3), f32(3, 3, 4), polymorphic_shapes=("(2, t, 3)", None)),
    # Found by tests/fuzz_poly.py: a slice of two symbolic sizes (see windows' two_symbolic_sizes).
    case("two_symbolic_sizes", conv((2, 3), ((-1, 0), (-2, 3)), NHWC, lhs_dilation=(2, 2), feature_group_count=2),
         f32(2, 5, 7, 6), f32(3, 2, 3, 4), polymorphic_shapes=("(2, b, c, 6)", None)),
]


def padded_conv(pads, value=0.0, window_strides=(1, 1), padding="VALID", dimension_numbers=NHWC, **params):
    """A convolution of lax.pad(x, value, pads) (pads: (lo, hi, interior) per axis of x)."""
    def fun(x, k):
        padded = lax.pad(x, np.asarray(value, x.dtype), pads)
        return lax.conv_general_dilated(padded, k, window_strides, padding, dimension_numbers=dimension_numbers,
                                        **params)
    return fun


def keras_zero_padded_conv(strides, groups=1):
    """Keras's ZeroPadding2D(correct_pad) then a VALID convolution (as keras.applications' MobileNets and
    EfficientNets do before strided depthwise convolutions): jnp.pad, whose pad sits inside a jit."""
    def fun(x, k):
        lo, hi = (k.shape[0] - 1) // 2 - (1 - x.shape[1] % 2), (k.shape[0] - 1) // 2
        padded = jnp.pad(x, ((0, 0), (max(lo, 0), hi), (max(lo, 0), hi), (0, 0)))
        return lax.conv_general_dilated(padded, k, strides, "VALID", dimension_numbers=NHWC,
                                        feature_group_count=groups)
    return fun


# Zero pads the convolution takes as its own padding (TF's SAME where that is it, no Pad op), and
# pads it must not take (another value, interior or negative padding, batch or feature axes).
ZERO_PAD_CASES = [
    case("keras_zero_pad_strided_depthwise", keras_zero_padded_conv((2, 2), groups=3), f32(1, 8, 8, 3),
         f32(3, 3, 1, 3)),
    case("keras_zero_pad_5x5_strided_depthwise", keras_zero_padded_conv((2, 2), groups=4), f32(2, 7, 7, 4),
         f32(5, 5, 1, 4)),
    case("zero_pad_nchw_same", padded_conv(((0, 0, 0), (0, 0, 0), (1, 2, 0), (1, 2, 0)), window_strides=(2, 2),
                                           dimension_numbers=None), f32(1, 3, 8, 8), f32(4, 3, 5, 5)),
    case("zero_pad_no_same", padded_conv(((0, 0, 0), (2, 0, 0), (0, 3, 0), (0, 0, 0))), f32(1, 5, 6, 2),
         f32(3, 3, 2, 3)),
    case("zero_pad_plus_conv_padding", padded_conv(((0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 0)),
                                                   padding=[(0, 1), (-1, 1)], rhs_dilation=(2, 1)),
         f32(2, 6, 7, 2), f32(2, 3, 2, 3)),
    case("zero_pad_polymorphic_batch", keras_zero_padded_conv((2, 2), groups=2), f32(3, 6, 6, 2),
         f32(3, 3, 1, 2), polymorphic_shapes=("(b, ...)", None)),
    case("minus_zero_pad", padded_conv(((0, 0, 0), (1, 1, 0), (1, 1, 0), (0, 0, 0)), value=-0.0),
         -np.zeros((1, 4, 4, 2), np.float32), f32(3, 3, 2, 2, low=0.5, high=1.0)),
    case("one_pad", padded_conv(((0, 0, 0), (1, 1, 0), (1, 1, 0), (0, 0, 0)), value=1.0), f32(1, 4, 4, 2),
         f32(3, 3, 2, 2)),
    case("interior_zero_pad", padded_conv(((0, 0, 0), (1, 1, 1), (0, 0, 0), (0, 0, 0))), f32(1, 4, 4, 2),
         f32(3, 3, 2, 2)),
    case("cropping_pad", padded_conv(((0, 0, 0), (-1, 2, 0), (1, 1, 0), (0, 0, 0))), f32(1, 5, 4, 2),
         f32(3, 3, 2, 2)),
    case("zero_pad_of_features", padded_conv(((0, 0, 0), (1, 1, 0), (1, 1, 0), (0, 1, 0))), f32(1, 4, 4, 2),
         f32(3, 3, 3, 2)),
    case("zero_pad_under_lhs_dilation", padded_conv(((0, 0, 0), (1, 1, 0), (1, 1, 0), (0, 0, 0)),
                                                    padding=[(0, 0), (1, 0)], lhs_dilation=(2, 2)),
         f32(1, 3, 3, 2), f32(3, 3, 2, 2)),
    case("zero_pad_also_read_elsewhere", lambda x, k: (lambda p: (lax.conv_general_dilated(
        p, k, (2, 2), "VALID", dimension_numbers=NHWC), p * 2.0))(jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))),
         f32(1, 6, 6, 2), f32(3, 3, 2, 3)),
]

CONV_LIMITATIONS = [
    Limitation(
        targets=(Target.TFLITE, Target.TFJS), param="dimension_numbers",
        condition="more than 3 spatial dimensions",
        reason="the operands are tensors of rank 6 or more, beyond TFLite's STRIDED_SLICE (5D) and "
               "TF.js wasm's broadcasting multiply",
        workaround="fold a spatial dimension into the batch (reshape) around a 3D convolution",
        when=lambda eqn: len(eqn.params["window_strides"]) > 3),
    symbolic_padding(),
    Limitation(
        ALL_TARGETS, param="shape", condition="the kernel has a symbolic size (a window or feature count)",
        reason="noxla lays out the kernel's taps and feature groups when it lowers, and TFLite's converter "
               "takes no convolution whose filter shape is unknown",
        workaround="give the kernel a static shape (None in polymorphic_shapes for the weights)",
        when=lambda eqn: not all(is_constant_dim(d) for d in eqn.avals_in[1].shape)),
]

TRANSPOSED = FastVariant(
    "an lhs-dilated float convolution (stride 1, 1-2 spatial dims, one group) runs as a transposed "
    "convolution (TRANSPOSE_CONV), which never multiplies the dilation's zeros: an inf/NaN kernel tap "
    "may give finite entries where JAX's 0 * inf or 0 * NaN gives NaN",
    lambda eqn: transposes(eqn.params, eqn.avals_out[0].dtype))

# Measured (conv_general_dilated:int32): the delegate's int32 GATHER of the integer lowering does not
# compile on LiteRT.js's WebGPU ("Unable to parse bc coord for BATCH axis"): the model fails to load.
_WEBGPU_INT_CONV = webgpu_computes_wrong("an integer convolution", "a model WebGPU cannot compile", "dtype",
                                         when=lambda eqn: eqn.dtype_in.kind in "iu")
# Measured (conv_general_dilated:int32_3d_grouped): wrong sums on TF.js's WebGPU; 2-D integer ones match.
_WEBGPU_INT_3D = tfjs_webgpu_fails("an integer convolution with 3 spatial dimensions", "sums wrong", "dtype",
                                   when=lambda eqn: eqn.dtype_in.kind in "iu" and len(eqn.avals_in[0].shape) == 5)
register(lax.conv_general_dilated_p, lower_conv_general_dilated, cases=CONV_CASES + ZERO_PAD_CASES,
         limitations=[*CONV_LIMITATIONS, _WEBGPU_INT_3D, _WEBGPU_INT_CONV], fast=TRANSPOSED)
