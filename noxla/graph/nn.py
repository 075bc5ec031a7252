"""``tf.nn`` and ``tf.linalg`` functions on the graph: convolutions, pooling, activations and
products, as the raw ops (and attributes) TF emits for them, shapes by TF's formulas."""
from __future__ import annotations

import numpy as np

from noxla.graph import ops
from noxla.graph.convert import convert_to_tensor
from noxla.graph.core import Tensor
from noxla.graph.dtypes import Uncovered
from noxla.graph.elementwise import binary, unary
from noxla.graph.structural import shape_arg, static_ints, transpose


def _four(value, what: str) -> list[int]:
    """A 2-D op's strides/dilations/ksize as TF expands them (NHWC): 1 or 2 values, or 4."""
    values = [1] if value is None else static_ints(value, what)
    if len(values) == 1:
        values = values * 2
    if len(values) == 2:
        return [1, *values, 1]
    if len(values) != 4:
        raise ValueError(f"{what} must have 1, 2 or 4 values")
    return values


def _padding(padding):
    """(padding attr, explicit_paddings, per-spatial-dim (before, after) or None)."""
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"padding {padding}")
        return padding.upper(), [], None
    pairs = [static_ints(p, "padding") for p in padding]
    if len(pairs) != 4 or pairs[0] != [0, 0] or pairs[3] != [0, 0]:
        raise Uncovered("explicit padding of the batch or channel dimension")
    return "EXPLICIT", [v for p in pairs for v in p], pairs[1:3]


def _spatial(size: int | None, k: int, stride: int, dilation: int, padding: str, pads) -> int | None:
    span = (k - 1) * dilation + 1
    if size is None:
        return None
    if padding == "SAME":
        return -(-size // stride)
    if padding == "VALID":
        return (size - span) // stride + 1 if size >= span else 0
    return (size + pads[0] + pads[1] - span) // stride + 1


def _check_nhwc(data_format) -> None:
    if data_format not in (None, "NHWC"):
        raise Uncovered(f"data_format {data_format}")


def _float(x: Tensor, op: str) -> None:
    if x.dtype.name not in ("float32", "float16", "float64"):
        raise Uncovered(f"{op} on {x.dtype.name}")


def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None) -> Tensor:
    _check_nhwc(data_format)
    x, w = convert_to_tensor(input), convert_to_tensor(filters)
    _float(x, "Conv2D")
    s, d = _four(strides, "strides"), _four(dilations, "dilations")
    pad, explicit, pairs = _padding(padding)
    n, h, wd, c = x.shape.dims
    kh, kw, cin, cout = w.shape.dims
    if c is not None and c % cin:
        raise ValueError(f"Conv2D: {c} input channels, filter takes {cin}")
    out = [n, _spatial(h, kh, s[1], d[1], pad, pairs and pairs[0]),
           _spatial(wd, kw, s[2], d[2], pad, pairs and pairs[1]), cout]
    attrs = {"T": ops.type_attr(x.dtype), "strides": ops.ints_attr(s), "use_cudnn_on_gpu": ops.bool_attr(True),
             "padding": ops.str_attr(pad), "explicit_paddings": ops.ints_attr(explicit),
             "data_format": ops.str_attr("NHWC"), "dilations": ops.ints_attr(d)}
    return ops.emit1("Conv2D", [x, w], attrs, x.dtype, out, None, name)


def depthwise_conv2d(input, filter, strides, padding, data_format=None, dilations=None, name=None) -> Tensor:
    _check_nhwc(data_format)
    x, w = convert_to_tensor(input), convert_to_tensor(filter)
    _float(x, "DepthwiseConv2dNative")
    s, d = static_ints(strides, "strides"), _four(dilations, "dilations")
    if len(s) != 4:
        raise ValueError("depthwise_conv2d strides must have 4 values")
    if d[0] != 1 or d[3] != 1 or d != [1, 1, 1, 1] and s != [1, 1, 1, 1]:
        raise ValueError("depthwise_conv2d dilates the height and width only, and only at unit strides")
    if not isinstance(padding, str):
        raise Uncovered("tf.nn.depthwise_conv2d with explicit padding")
    pad = padding.upper()
    n, h, wd, c = x.shape.dims
    kh, kw, cin, mult = w.shape.dims
    out = [n, _spatial(h, kh, s[1], d[1], pad, None), _spatial(wd, kw, s[2], d[2], pad, None), c * mult]
    # Dilated: one node with TF's `dilations` attribute, which TFLite's DEPTHWISE_CONV_2D and TF.js's
    # DepthwiseConv2dNative (cpu, wasm, webgl) read; TF's Python writes SpaceToBatchND around an
    # undilated one instead, as its CPU kernel takes no dilation (the TF writer replays it so).
    attrs = {"T": ops.type_attr(x.dtype), "strides": ops.ints_attr(s), "padding": ops.str_attr(pad),
             "explicit_paddings": ops.ints_attr([]), "data_format": ops.str_attr("NHWC"),
             "dilations": ops.ints_attr(d)}
    return ops.emit1("DepthwiseConv2dNative", [x, w], attrs, x.dtype, out, None, name)


def conv3d(input, filters, strides, padding, data_format="NDHWC", dilations=None, name=None) -> Tensor:
    if data_format not in (None, "NDHWC"):
        raise Uncovered(f"data_format {data_format}")
    x, w = convert_to_tensor(input), convert_to_tensor(filters)
    _float(x, "Conv3D")
    s = static_ints(strides, "strides")
    d = [1] * 5 if dilations is None else static_ints(dilations, "dilations")
    if len(s) != 5 or len(d) != 5 or not isinstance(padding, str) or padding.upper() not in ("SAME", "VALID"):
        raise Uncovered("tf.nn.conv3d with strides or dilations not of 5 values, or explicit padding")
    pad = padding.upper()
    n, *spatial, c = x.shape.dims
    *window, cin, cout = w.shape.dims
    if c is not None and c != cin:
        raise Uncovered("a grouped Conv3D")
    out = [n, *(_spatial(size, k, s[1 + a], d[1 + a], pad, None) for a, (size, k) in enumerate(zip(spatial, window))),
           cout]
    attrs = {"T": ops.type_attr(x.dtype), "strides": ops.ints_attr(s), "padding": ops.str_attr(pad),
             "data_format": ops.str_attr("NDHWC"), "dilations": ops.ints_attr(d)}
    return ops.emit1("Conv3D", [x, w], attrs, x.dtype, out, None, name)


def conv2d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NHWC", dilations=None,
                     name=None) -> Tensor:
    _check_nhwc(data_format)
    x, w = convert_to_tensor(input), convert_to_tensor(filters)
    _float(x, "Conv2DBackpropInput")
    s, d = _four(strides, "strides"), _four(dilations, "dilations")
    pad, explicit, pairs = _padding(padding)
    # A run-time output_shape (a batch of unknown size, packed with the other sizes) is read as TF's
    # shape inference reads it: the known sizes, None for the batch.
    sizes, out = shape_arg(output_shape, "conv2d_transpose's output_shape")
    if len(out) != 4 or None in out[1:]:
        raise Uncovered("conv2d_transpose to a run-time height, width or channel count")
    # The forward convolution of the output must give the input's size, as TF checks.
    kh, kw = w.shape.dims[:2]
    if [_spatial(out[1], kh, s[1], d[1], pad, pairs and pairs[0]),
            _spatial(out[2], kw, s[2], d[2], pad, pairs and pairs[1])] != list(x.shape.dims[1:3]):
        raise ValueError("conv2d_transpose: output_shape does not match the input")
    attrs = {"T": ops.type_attr(x.dtype), "strides": ops.ints_attr(s), "use_cudnn_on_gpu": ops.bool_attr(True),
             "padding": ops.str_attr(pad), "explicit_paddings": ops.ints_attr(explicit),
             "data_format": ops.str_attr("NHWC"), "dilations": ops.ints_attr(d)}
    return ops.emit1("Conv2DBackpropInput", [sizes, w, x], attrs, x.dtype, out, None, name)


def _pool(op: str, input, ksize, strides, padding, data_format, name) -> Tensor:
    _check_nhwc(data_format)
    x = convert_to_tensor(input)
    _float(x, op)
    k, s = _four(ksize, "ksize"), _four(strides, "strides")
    if not isinstance(padding, str) or k[0] != 1 or k[3] != 1 or s[0] != 1 or s[3] != 1:
        raise Uncovered(f"{op} with explicit padding or pooling over batch/channels")
    pad = padding.upper()
    n, h, w, c = x.shape.dims
    out = [n, _spatial(h, k[1], s[1], 1, pad, None), _spatial(w, k[2], s[2], 1, pad, None), c]
    attrs = {"T": ops.type_attr(x.dtype), "ksize": ops.ints_attr(k), "strides": ops.ints_attr(s),
             "padding": ops.str_attr(pad), "data_format": ops.str_attr("NHWC")}
    if op == "MaxPool":
        attrs["explicit_paddings"] = ops.ints_attr([])
    return ops.emit1(op, [x], attrs, x.dtype, out, None, name)


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    return _pool("MaxPool", input, ksize, strides, padding, data_format, name)


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None) -> Tensor:
    return _pool("AvgPool", input, ksize, strides, padding, data_format, name)


def bias_add(value, bias, data_format=None, name=None) -> Tensor:
    _check_nhwc(data_format)
    x = convert_to_tensor(value)
    b = convert_to_tensor(bias, dtype=x.dtype)
    if b.shape.rank != 1 or x.shape.dims[-1] != b.shape.dims[0]:
        raise ValueError("bias_add: the bias must be a vector of the last dimension's size")
    attrs = {"T": ops.type_attr(x.dtype), "data_format": ops.str_attr("NHWC")}
    return ops.emit1("BiasAdd", [x, b], attrs, x.dtype, x.shape.dims, lambda v, c: v + c, name)


def _last_axis(op: str, logits, axis) -> Tensor:
    x = convert_to_tensor(logits)
    _float(x, op)
    rank = x.shape.rank
    if axis is not None and axis % rank != rank - 1:   # TF swaps the axis with the last and back
        perm = list(range(rank))
        perm[axis % rank], perm[-1] = perm[-1], perm[axis % rank]
        return transpose(_last_axis(op, transpose(x, perm), None), perm)
    return ops.emit1(op, [x], {"T": ops.type_attr(x.dtype)}, x.dtype, x.shape.dims, None, None)


def softmax(logits, axis=None, name=None) -> Tensor:
    return _last_axis("Softmax", logits, axis)


def log_softmax(logits, axis=None, name=None) -> Tensor:
    return _last_axis("LogSoftmax", logits, axis)


def leaky_relu(features, alpha=0.2, name=None) -> Tensor:
    x = convert_to_tensor(features)
    _float(x, "LeakyRelu")
    return ops.emit1("LeakyRelu", [x], {"T": ops.type_attr(x.dtype), "alpha": ops.float_attr(alpha)}, x.dtype,
                     x.shape.dims, None, name)


def gelu(features, approximate=False, name=None) -> Tensor:
    """TF's own formulas (nn_ops.gelu), op for op."""
    x = convert_to_tensor(features)
    _float(x, "gelu")
    def c(value):
        return convert_to_tensor(np.array(value, x.dtype.as_numpy_dtype))
    if approximate:
        inner = binary("AddV2", x, binary("Mul", c(0.044715), binary("Pow", x, 3)))
        half = binary("Mul", c(0.5), x)
        return binary("Mul", half, binary("AddV2", c(1.0), unary("Tanh", binary("Mul", c(0.7978845608028654), inner))))
    half = binary("Mul", c(0.5), x)
    scaled = binary("Mul", unary("Neg", x), c(0.7071067811865476))
    return binary("Mul", half, unary("Erfc", scaled))


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, a_is_sparse=False,
           b_is_sparse=False, output_type=None, grad_a=False, grad_b=False, name=None) -> Tensor:
    a, b = convert_to_tensor(a), convert_to_tensor(b, dtype=None)
    if a.dtype != b.dtype or output_type is not None or a_is_sparse or b_is_sparse:
        raise Uncovered("tf.linalg.matmul of mixed dtypes, output_type or sparse operands")
    if a.dtype.is_complex or a.dtype.is_bool:
        raise Uncovered(f"MatMul on {a.dtype.name}")
    ta, tb = transpose_a or adjoint_a, transpose_b or adjoint_b
    # A bfloat16 product is not folded: how TF's kernel accumulates is not the fold's (the writers
    # carry it as TF's path does: accumulated in float32, rounded once).
    fold = None if a.dtype.name == "bfloat16" else _matmul_fold(ta, tb)
    ad, bd = list(a.shape.dims), list(b.shape.dims)
    if len(ad) < 2 or len(bd) < 2:
        raise ValueError("matmul of a rank < 2 tensor")
    m, k = (ad[-1], ad[-2]) if ta else (ad[-2], ad[-1])
    k2, n = (bd[-1], bd[-2]) if tb else (bd[-2], bd[-1])
    if None not in (k, k2) and k != k2:
        raise ValueError(f"matmul: {ad} and {bd} do not contract")
    if len(ad) == 2 and len(bd) == 2:
        attrs = {"T": ops.type_attr(a.dtype), "transpose_a": ops.bool_attr(ta), "transpose_b": ops.bool_attr(tb),
                 "grad_a": ops.bool_attr(False), "grad_b": ops.bool_attr(False)}
        return ops.emit1("MatMul", [a, b], attrs, a.dtype, [m, n], fold, name)
    batch = list(ops.broadcast_shapes(ad[:-2], bd[:-2]))
    attrs = {"T": ops.type_attr(a.dtype), "adj_x": ops.bool_attr(ta), "adj_y": ops.bool_attr(tb),
             "grad_x": ops.bool_attr(False), "grad_y": ops.bool_attr(False)}
    return ops.emit1("BatchMatMulV2", [a, b], attrs, a.dtype, [*batch, m, n], fold, name)


def _matmul_fold(ta: bool, tb: bool):
    """A product of constants (grappler folds it too), floats only: integer products may wrap."""
    def fold(a, b):
        if a.dtype.kind != "f":
            return None
        return np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)
    return fold


def relu(features, name=None) -> Tensor:
    return unary("Relu", features, name)


def relu6(features, name=None) -> Tensor:
    return unary("Relu6", features, name)


def elu(features, name=None) -> Tensor:
    return unary("Elu", features, name)

