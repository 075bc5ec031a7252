"""Convolutions, products and pooling as TFLite's fused-kernel operators (NHWC, constant weights).

Each takes the layout JAX's NHWC/HWIO convolutions and ``x @ w`` products have, and gives the
operator a zero bias that ``fuse`` folds the following bias add and batch-norm scale into."""
from __future__ import annotations

import numpy as np

from noxla.direct_tflite.emit import Uncovered, emitter, full, out_type, permuted, reshape
from noxla.graph.tflite.model import SAME, VALID, Graph, same_pads


def window_padding(padding, sizes, windows, strides, dilations=(1, 1)) -> int | None:
    """VALID or SAME when ``padding`` (one (low, high) per spatial axis) is one of them, else None."""
    padding = [tuple(p) for p in padding]
    if all(p == (0, 0) for p in padding):
        return VALID
    if padding == [same_pads(*a) for a in zip(sizes, windows, strides, dilations)]:
        return SAME
    return None


@emitter("conv_general_dilated")
def _conv(graph: Graph, eqn, x, w, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
          feature_group_count, batch_group_count, precision=None, preferred_element_type=None):
    """A 2-D convolution, or a 1-D one as a 2-D one over a unit height (as the converter writes it),
    with the input moved to channels-last first if it is not."""
    lhs, rhs, out = (tuple(s) for s in (dimension_numbers.lhs_spec, dimension_numbers.rhs_spec,
                                        dimension_numbers.out_spec))
    n = len(window_strides)
    if (not w.is_constant or n not in (1, 2) or out != (0, n + 1, *range(1, n + 1)) or lhs[0] != 0
            or batch_group_count != 1 or x.dtype != np.float32):
        raise Uncovered("a convolution other than a 1-D or 2-D channels-last one of constant float32 weights")
    x = permuted(graph, full(graph, x, eqn.invars[0].aval.shape), (0, *lhs[2:], lhs[1]))
    data = np.transpose(np.asarray(w.data, np.float32), (*rhs[2:], rhs[1], rhs[0]))   # HWIO
    shape, dtype = out_type(eqn)
    if any(d != 1 for d in lhs_dilation):
        if n != 2 or feature_group_count != 1 or any(d != 1 for d in (*window_strides, *rhs_dilation)):
            raise Uncovered("an lhs-dilated convolution other than a 2-D transposed one")
        return _transposed_conv(graph, x, data, lhs_dilation, padding, shape)
    mode = window_padding(padding, x.shape[1:-1], data.shape[:-2], window_strides, rhs_dilation)
    if mode is None:
        if any(p < 0 for pair in padding for p in pair):
            raise Uncovered("a convolution that crops (negative padding)")
        pads = np.asarray([(0, 0), *padding, (0, 0)], np.int32)
        padded = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads))
        x, mode = graph.add("PAD", [x, graph.constant(pads)], padded, dtype), VALID
    if n == 1:
        x, data = reshape(graph, x, (x.shape[0], 1, *x.shape[1:])), data[None]
        # the converter's stride over the unit height is the width's (either moves nothing there)
        window_strides, rhs_dilation = (window_strides[0], *window_strides), (1, *rhs_dilation)
    kh, kw, cin, cout = data.shape
    options = dict(padding=mode, strideH=window_strides[0], strideW=window_strides[1],
                   dilationHFactor=rhs_dilation[0], dilationWFactor=rhs_dilation[1], fusedActivationFunction=0)
    bias = graph.constant(np.zeros(cout, np.float32))
    out4 = (shape[0], 1, *shape[1:]) if n == 1 else shape
    if feature_group_count == 1:
        kernel = graph.constant(np.ascontiguousarray(data.transpose(3, 0, 1, 2)))   # OHWI
        y = graph.add("CONV_2D", [x, kernel, bias], out4, dtype, **options)
    elif feature_group_count == x.shape[3] and cin == 1:
        kernel = graph.constant(np.ascontiguousarray(data.reshape(1, kh, kw, cout)))
        y = graph.add("DEPTHWISE_CONV_2D", [x, kernel, bias], out4, dtype,
                      depthMultiplier=cout // feature_group_count, **options)
    else:
        raise Uncovered("a grouped convolution that is not depthwise")
    return reshape(graph, y, shape)


def _transposed_conv(graph: Graph, x, data: np.ndarray, lhs_dilation, padding, shape):
    """A convolution of the input dilated by ``lhs_dilation`` (flax's ConvTranspose) as the TF
    path's rule writes it: TRANSPOSE_CONV of the spatially flipped kernel, SAME, strided by the
    dilation. It scatters each input element times the kernel, the dilated input padded by k - 1
    and convolved, cropped by k - 1 - lo before and k - 1 - hi after: SAME's crop where those are
    it (flax's SAME), else ``Uncovered`` (the rule crops a VALID one, a SLICE more). It skips the
    zeros of the dilated input, which only an inf or NaN tap would make differ from JAX."""
    kernel = data.shape[:2]
    for size, k, s, (lo, hi), m in zip(x.shape[1:3], kernel, lhs_dilation, padding, shape[1:3]):
        total = (size - 1) * s + k - m
        if -(-m // s) != size or total < 0 or (k - 1 - lo, k - 1 - hi) != (total // 2, total - total // 2):
            raise Uncovered("a transposed convolution cropped other than SAME")
    weights = np.ascontiguousarray(data[::-1, ::-1].transpose(3, 0, 1, 2))   # [out, kh, kw, in]
    # Kept as [input, weights, bias, output shape], as the other linear operators' passes read
    # them; ``serialize`` writes TFLite's order.
    return graph.add("TRANSPOSE_CONV", [x, graph.constant(weights), graph.constant(np.zeros(shape[-1], np.float32)),
                                        graph.constant(np.asarray(shape, np.int32))], shape, np.float32,
                     padding=SAME, strideH=lhs_dilation[0], strideW=lhs_dilation[1], fusedActivationFunction=0)


@emitter("dot_general")
def _dot_general(graph: Graph, eqn, x, w, *, dimension_numbers, precision=None, preferred_element_type=None):
    (lc, rc), (lb, rb) = dimension_numbers
    if x.dtype != np.float32 or w.dtype != np.float32 or np.dtype(eqn.outvars[0].aval.dtype) != np.float32:
        raise Uncovered("a product of other types than float32")
    x, w = (full(graph, t, v.aval.shape) for t, v in zip((x, w), eqn.invars))
    shape = out_type(eqn)[0]
    if w.is_constant and not lb and _projection(x.shape, w.shape, lc, rc):
        return _dense(graph, x, np.asarray(w.data, np.float32), lc, rc, shape)
    return _batch_matmul(graph, x, w, (lc, rc), (lb, rb), shape)


def _projection(x_shape, w_shape, lc, rc) -> bool:
    """Whether the product contracts the last axes of ``x`` with axes of ``w``, leaving each some free."""
    n = len(lc)
    return 0 < n < len(x_shape) and n < len(w_shape) and sorted(lc) == list(range(len(x_shape) - n, len(x_shape)))


def _dense(graph: Graph, x, data: np.ndarray, lc, rc, shape):
    """``x @ w`` over x's last axes as the TF path writes it (Flax's Dense and DenseGeneral): x's
    contracted axes joined into one (a ``RESHAPE``), a ``FULLY_CONNECTED`` of the weight as an
    [out, in] matrix, its output split into the product's free axes of ``w`` (a ``RESHAPE``)."""
    paired = [rc[i] for i in sorted(range(len(lc)), key=lambda i: lc[i])]   # w's axes in x's order
    free = [a for a in range(data.ndim) if a not in rc]
    k = int(np.prod([data.shape[a] for a in paired]))
    kernel = np.ascontiguousarray(np.transpose(data, (*paired, *free)).reshape(k, -1).T)
    kept = x.shape[:len(x.shape) - len(lc)]
    bias = graph.constant(np.zeros(kernel.shape[0], np.float32))
    y = graph.add("FULLY_CONNECTED", [reshape(graph, x, (*kept, k)), graph.constant(kernel), bias],
                  (*kept, kernel.shape[0]), np.float32, fusedActivationFunction=0, keepNumDims=True)
    return reshape(graph, y, shape)


def _batch_matmul(graph: Graph, x, y, contracting, batch, shape):
    """``x``'s and ``y``'s product over batch axes as a BATCH_MATMUL of [batch, rows, k] by
    [batch, k, columns]: x by y, or y by x and the result's last two axes swapped, whichever moves
    fewer elements (attention's probabilities times values read the probabilities as they are)."""
    (lc, rc), (lb, rb) = contracting, batch
    free = [[a for a in range(len(t.shape)) if a not in (*c, *b)] for t, c, b in ((x, lc, lb), (y, rc, rb))]
    if len(lc) != 1 or any(len(f) != 1 for f in free) or len(lb) + 2 > 4:
        raise Uncovered("a product other than one of matrices over batch axes")
    if lb and x.shape[lc[0]] == 1:   # the TF path's rule writes a broadcast multiply (lowering_rules/linalg.py)
        raise Uncovered("a product over batch axes of one element each")
    (lf,), (rf,) = free
    moved = lambda t, perm: 0 if t.is_constant or perm == sorted(perm) else int(np.prod(t.shape))  # noqa: E731
    straight = ((x, [*lb, lf, *lc]), (y, [*rb, *rc, rf]))
    swapped = ((y, [*rb, rf, *rc]), (x, [*lb, *lc, lf]))
    out_size = int(np.prod(shape))
    if sum(moved(*a) for a in swapped) + out_size < sum(moved(*a) for a in straight):
        (a, pa), (b, pb) = swapped
        rank = len(shape)
        product = graph.add("BATCH_MATMUL", [permuted(graph, a, pa), permuted(graph, b, pb)],
                            (*shape[:-2], shape[-1], shape[-2]), np.float32, adjX=False, adjY=False,
                            asymmetricQuantizeInputs=False)
        return permuted(graph, product, (*range(rank - 2), rank - 1, rank - 2))
    (a, pa), (b, pb) = straight
    return graph.add("BATCH_MATMUL", [permuted(graph, a, pa), permuted(graph, b, pb)], shape, np.float32,
                     adjX=False, adjY=False, asymmetricQuantizeInputs=False)


def _pool_window(graph: Graph, eqn, x, what: str, window_dimensions, window_strides, padding, base_dilation,
                 window_dilation):
    """``x`` made whole, when the window is a 2-D pool over an NHWC float32 tensor's H and W."""
    if (len(window_dimensions) != 4 or window_dimensions[0] != 1 or window_dimensions[3] != 1
            or window_strides[0] != 1 or window_strides[3] != 1 or tuple(padding[0]) != (0, 0)
            or tuple(padding[3]) != (0, 0) or any(d != 1 for d in (*base_dilation, *window_dilation))
            or x.dtype != np.float32):
        raise Uncovered(f"a {what} window other than a 2-D NHWC pool")
    return full(graph, x, eqn.invars[0].aval.shape)


def _pool(graph: Graph, kind: str, x, mode: int, shape, window_dimensions, window_strides):
    return graph.add(kind, [x], shape, np.float32, padding=mode, strideH=window_strides[1],
                     strideW=window_strides[2], filterHeight=window_dimensions[1], filterWidth=window_dimensions[2],
                     fusedActivationFunction=0)


@emitter("reduce_window_max")
def _max_pool(graph: Graph, eqn, x, *, window_dimensions, window_strides, padding, base_dilation,
              window_dilation):
    x = _pool_window(graph, eqn, x, "max", window_dimensions, window_strides, padding, base_dilation, window_dilation)
    mode = window_padding(padding[1:3], x.shape[1:3], window_dimensions[1:3], window_strides[1:3])
    if mode is None:
        raise Uncovered("a max pool padded other than SAME or VALID")
    return _pool(graph, "MAX_POOL_2D", x, mode, out_type(eqn)[0], window_dimensions, window_strides)


@emitter("reduce_window_sum")
def _sum_pool(graph: Graph, eqn, x, *, window_dimensions, window_strides, padding, base_dilation,
              window_dilation):
    """The window sum flax's avg_pool divides by the window size, as ``SUM_POOL_2D``, which only
    ``fuse`` writes (the sum and that division: an ``AVERAGE_POOL_2D``, as the TF path's rule takes
    the pair). Padded windows read the zero padding: a ``PAD`` first, as that rule writes it (SAME
    averaging would divide by the count of unpadded elements)."""
    x = _pool_window(graph, eqn, x, "sum", window_dimensions, window_strides, padding, base_dilation, window_dilation)
    pads = [tuple(p) for p in padding]
    if any(p < 0 for pair in pads for p in pair):
        raise Uncovered("a window sum that crops (negative padding)")
    if any(p != (0, 0) for p in pads):
        padded = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads))
        x = graph.add("PAD", [x, graph.constant(np.asarray(pads, np.int32))], padded, np.float32)
    return _pool(graph, "SUM_POOL_2D", x, VALID, out_type(eqn)[0], window_dimensions, window_strides)
