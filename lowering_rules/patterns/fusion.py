"""Recognising multi-equation patterns that TFLite and TF.js run as one fused op.

JAX spells a softmax, an average pool or a relu6 as several primitives. A rule for the pattern's
last equation looks back through ``ctx.producer`` at the equations that made its operands and,
when they form the pattern, emits the fused TF op on the pattern's input instead. The producers'
own ops are then unused (the converters drop them). Patterns are only used outside strict mode:
each rule that uses one declares, as a ``FastVariant``, where the fused op may differ from JAX
(only ever for NaN/inf inputs; for finite inputs it computes the same values).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lowering_rules.core.cases import case, f32
from lowering_rules.core.jax_compat import core, is_constant_dim, open_jaxpr
from lowering_rules.core.lazy_tensorflow import tf
from lowering_rules.core.registry import FastVariant


def float32_out(eqn) -> bool:
    return np.dtype(eqn.avals_out[0].dtype) == np.float32


def float_in(eqn) -> bool:
    return np.issubdtype(np.dtype(eqn.avals_in[0].dtype), np.floating)


MAXIMUM = FastVariant("a NaN operand may give the other operand, not NaN (float32: Relu, Maximum)", float32_out)
MINIMUM = FastVariant("a NaN operand may give the other operand, not NaN (float32: Relu6, Minimum)", float32_out)
REDUCE_MAX = FastVariant("a NaN among the reduced elements may be ignored (floats)", float_in)
SOFTMAX = FastVariant("jax.nn.softmax's spelling becomes Softmax (float32): a row holding NaN or inf "
                      "may give other NaN/0/1 entries than JAX's", float32_out)
LOG_SOFTMAX = FastVariant("jax.nn.log_softmax's spelling becomes LogSoftmax (float32): a row holding NaN "
                          "or inf may give other NaN/inf entries than JAX's", float32_out)
MAX_POOL = FastVariant("MaxPool (float32, [N, (H,) W, C] windows, VALID or SAME padding): a NaN in a window "
                       "may be ignored, a window of -inf gives the lowest finite float",
                       lambda eqn: pool_plan(eqn.params, eqn.avals_in[0].shape, eqn.avals_in[0].dtype,
                                             "max") is not None)


def literal(atom):
    """The scalar value of a literal operand, else None."""
    if isinstance(atom, core.Literal) and np.ndim(atom.val) == 0:
        return np.asarray(atom.val).item()
    return None


def producer(ctx, atom, *primitives: str):
    """The equation that made ``atom`` in the enclosing jaxpr, if it applies one of ``primitives``."""
    eqn = ctx.producer(atom)
    if eqn is None or (primitives and eqn.primitive.name not in primitives):
        return None
    return eqn


def is_float32(aval) -> bool:
    return np.dtype(aval.dtype) == np.float32


# --------------------------------------------------------------------------- softmax

def _non_unit(shape) -> list:
    return [d for d in shape if d != 1]


def _unit_axes_only(eqn) -> bool:
    """A broadcast, reshape or transpose that only adds, drops or moves size-1 axes (the elements
    stay in order: nnx's attention moves a unit axis around its softmax)."""
    shape_in = eqn.invars[0].aval.shape
    if eqn.primitive.name == "transpose":
        moved = [p for p in eqn.params["permutation"] if shape_in[p] != 1]
        return moved == sorted(moved)
    return _non_unit(shape_in) == _non_unit(eqn.outvars[0].aval.shape)


def through_views(ctx, atom):
    """Follows stop_gradient and unit-axis broadcasts/reshapes/transposes back to the array they show."""
    while True:
        eqn = producer(ctx, atom, "stop_gradient", "broadcast_in_dim", "reshape", "transpose")
        if eqn is None or (eqn.primitive.name != "stop_gradient" and not _unit_axes_only(eqn)):
            return atom
        atom = eqn.invars[0]


def _keepdims_shape(x, axis: int) -> tuple:
    return tuple(1 if a == axis else d for a, d in enumerate(x.aval.shape))


def reduced_column(ctx, atom, primitive: str, keepdims: bool = True):
    """If ``atom`` is ``primitive(x, axes=(axis,))`` shown as x's keepdims column (seen through
    unit-axis views; ``keepdims=False``: in any unit-axis view), (x, axis); else None."""
    eqn = producer(ctx, through_views(ctx, atom), primitive)
    if eqn is None or len(eqn.params["axes"]) != 1:
        return None
    x, axis = eqn.invars[0], int(eqn.params["axes"][0])
    if keepdims and tuple(atom.aval.shape) != _keepdims_shape(x, axis):
        return None
    return x, axis


def _row_max(ctx, atom):
    """If ``atom`` shows ``max(x, axis)`` in a unit-axis view (with jax.nn's max(-inf, .) guard
    for empty rows), (x, axis)."""
    column = through_views(ctx, atom)
    guard = producer(ctx, column, "max")
    if guard is not None and -np.inf in [literal(a) for a in guard.invars]:
        column = guard.invars[1] if literal(guard.invars[0]) == -np.inf else guard.invars[0]
    return reduced_column(ctx, column, "reduce_max", keepdims=False)


def _view_axis(view_shape, shape, axis: int):
    """The axis of a unit-axis view (``view_shape``) of an array of ``shape`` where the array's
    non-unit ``axis`` lies, else None."""
    if shape[axis] == 1:
        return None
    position = sum(1 for d in shape[:axis] if d != 1)
    return [a for a, d in enumerate(view_shape) if d != 1][position]


def shifted_logits(ctx, atom):
    """If ``atom`` is ``x - max(x, axis)`` (JAX's stabilised logits; x and the max column maybe
    in unit-axis views of the reduced array), (x, axis) with axis in x's shape; else None."""
    sub = producer(ctx, atom, "sub")
    if sub is None or sub.outvars[0].aval.shape != sub.invars[0].aval.shape:
        return None
    hit = _row_max(ctx, sub.invars[1])
    data = sub.invars[0]
    if hit is None or through_views(ctx, data) is not through_views(ctx, hit[0]):
        return None
    axis = _view_axis(data.aval.shape, hit[0].aval.shape, hit[1])
    if axis is None or tuple(sub.invars[1].aval.shape) != _keepdims_shape(data, axis):
        return None
    return data, axis


def softmax_input(ctx, numerator, denominator):
    """``numerator / denominator`` is ``softmax(x, axis)`` as jax.nn spells it: (x, axis), else None."""
    exp = producer(ctx, numerator, "exp")
    column = reduced_column(ctx, denominator, "reduce_sum")
    if exp is None or column is None or column[0] is not numerator:
        return None
    hit = shifted_logits(ctx, exp.invars[0])
    return hit if hit is not None and hit[1] == column[1] else None


def log_softmax_input(ctx, shifted, log_sum):
    """``shifted - log_sum`` is ``log_softmax(x, axis)`` as jax.nn spells it: (x, axis), else None."""
    log = producer(ctx, through_views(ctx, log_sum), "log")
    if log is None:
        return None
    column = reduced_column(ctx, log.invars[0], "reduce_sum")
    exp = column and producer(ctx, column[0], "exp")
    if exp is None or exp.invars[0] is not shifted:
        return None
    if tuple(log_sum.aval.shape) != _keepdims_shape(shifted, column[1]):
        return None
    hit = shifted_logits(ctx, shifted)
    return hit if hit is not None and hit[1] == column[1] else None


def softmax(ctx):
    """tf.nn.softmax for ``div`` when it ends jax.nn.softmax's spelling (float32), else None."""
    if ctx.strict or not is_float32(ctx.aval_out):
        return None
    hit = softmax_input(ctx, *ctx.eqn.invars)
    return None if hit is None else tf.nn.softmax(ctx.value(hit[0]), axis=hit[1])


def log_softmax(ctx):
    """tf.nn.log_softmax for ``sub`` when it ends jax.nn.log_softmax's spelling, else None. LiteRT.js's
    WebGPU delegate has no LOG_SOFTMAX: lowered for it, the same value as JAX spells it, x - max -
    log(sum(exp(x - max))), in six ops it runs (JAX's own primitives would add NaN handling)."""
    if ctx.strict or not is_float32(ctx.aval_out):
        return None
    hit = log_softmax_input(ctx, *ctx.eqn.invars)
    if hit is None:
        return None
    x, axis = ctx.value(hit[0]), hit[1]
    if not ctx.lowering_for.webgpu:
        return tf.nn.log_softmax(x, axis=axis)
    shifted = x - tf.reduce_max(x, axis=axis, keepdims=True)
    # The sum reduced without keepdims and expanded after the LOG: the converter folds the
    # keepdims spelling back into LOG_SOFTMAX.
    return shifted - tf.expand_dims(tf.math.log(tf.reduce_sum(tf.exp(shifted), axis=axis)), axis)


# --------------------------------------------------------------------------- pooling

def _same_pads(n: int, window: int, stride: int) -> tuple[int, int]:
    """TF's SAME padding of one axis (what flax's padding="SAME" also computes)."""
    out = -(-n // stride)
    total = max((out - 1) * stride + window - n, 0)
    return total // 2, total - total // 2


def pool_plan(eqn_params, in_shape, dtype, kind: str):
    """How a reduce_window over [N, (H,) W, C] becomes TF's MaxPool/AvgPool: (ksize, strides,
    padding, explicit pads), or None. ``kind`` "max" needs VALID or TF's SAME padding (TF pads
    with -inf and no window lies wholly in padding); "avg" takes any padding (zeros, padded
    explicitly, then a VALID average times the window size is the window sum)."""
    window, strides = eqn_params["window_dimensions"], eqn_params["window_strides"]
    padding = eqn_params["padding"]
    rank = len(window)
    if (np.dtype(dtype) != np.float32 or rank not in (3, 4)
            or any(d != 1 for d in (*eqn_params["base_dilation"], *eqn_params["window_dilation"]))
            or window[0] != 1 or window[-1] != 1 or strides[0] != 1 or strides[-1] != 1
            or padding[0] != (0, 0) or padding[-1] != (0, 0)):
        return None
    spatial = range(1, rank - 1)
    if any(not isinstance(in_shape[a], int) for a in spatial) or any(lo < 0 or hi < 0 for lo, hi in padding):
        return None
    pads = [tuple(padding[a]) for a in spatial]
    if all(p == (0, 0) for p in pads):
        mode = "VALID"
    elif all(p == _same_pads(in_shape[a], window[a], strides[a]) for a, p in zip(spatial, pads)):
        mode = "SAME"
    elif kind == "avg":
        mode = "EXPLICIT"
    else:
        return None
    return [window[a] for a in spatial], [strides[a] for a in spatial], mode, pads


def pool(x, plan, kind: str):
    """MaxPool (TFLite MAX_POOL_2D) or the window sum through AvgPool (AVERAGE_POOL_2D), of
    x: [N, (H,) W, C] float32. For "avg" the result is the window average over the padded input:
    the window sum divided by the window size (TF's SAME average would divide by the valid count)."""
    ksize, strides, mode, pads = plan
    one_d = len(ksize) == 1
    if one_d:  # 1D pools run as 2D over a unit height
        x, ksize, strides, pads = tf.expand_dims(x, 1), [1, *ksize], [1, *strides], [(0, 0), *pads]
    if kind == "max":
        y = tf.nn.max_pool2d(x, ksize, strides, mode)
    else:
        if mode != "VALID":
            x = tf.pad(x, [(0, 0), *pads, (0, 0)])
        y = tf.nn.avg_pool2d(x, ksize, strides, "VALID")
    return tf.squeeze(y, 1) if one_d else y


def avg_pool(ctx):
    """AvgPool for ``div`` of a float32 window sum by its window size (flax's avg_pool), else None.

    Not a fast variant: the average of a window is the same for NaN/inf inputs."""
    numerator, denominator = ctx.eqn.invars
    window_sum = producer(ctx, numerator, "reduce_window_sum")
    if window_sum is None or literal(denominator) is None:
        return None
    params = window_sum.params
    shape = window_sum.invars[0].aval.shape
    plan = pool_plan(params, shape, window_sum.invars[0].aval.dtype, "avg")
    if plan is None or literal(denominator) != float(np.prod(params["window_dimensions"])):
        return None
    return pool(ctx.value(window_sum.invars[0]), plan, "avg")


# --------------------------------------------------------------------------- gelu

def _by_literal(ctx, atom, primitive: str, value: float):
    """If ``atom`` is ``primitive(c, other)`` or ``primitive(other, c)`` for the float32 literal
    c == value, other; else None."""
    eqn = producer(ctx, atom, primitive)
    if eqn is None:
        return None
    target = float(np.float32(value))
    for c, other in (eqn.invars, eqn.invars[::-1]):
        if literal(c) == target:
            return other
    return None


def gelu(ctx):
    """tf.nn.gelu(approximate=True) for the ``mul`` ending jax.nn.gelu's tanh approximation
    x * (0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))) (float32; TFLite GELU), else None."""
    if ctx.strict or not is_float32(ctx.aval_out):
        return None
    for x, half in (ctx.eqn.invars, ctx.eqn.invars[::-1]):
        tanh = _by_literal(ctx, _by_literal(ctx, half, "mul", 0.5), "add", 1.0)
        inner = producer(ctx, tanh, "tanh") if tanh is not None else None
        sum_ = _by_literal(ctx, inner.invars[0], "mul", np.sqrt(2 / np.pi)) if inner is not None else None
        add = producer(ctx, sum_, "add") if sum_ is not None else None
        if add is None or x not in add.invars or x.aval.shape != ctx.aval_out.shape:
            continue
        cube = producer(ctx, _by_literal(ctx, add.invars[1] if add.invars[0] is x else add.invars[0],
                                         "mul", 0.044715), "integer_pow")
        if cube is not None and cube.invars[0] is x and cube.params["y"] == 3:
            return tf.nn.gelu(ctx.value(x), approximate=True)
    return None


GELU = FastVariant("jax.nn.gelu's tanh approximation becomes Gelu (float32): -inf gives 0 (JAX: NaN), and "
                   "NaN/inf elsewhere may differ", float32_out)

GELU_CASES = [
    case("gelu_tanh", jax.nn.gelu, f32(3, 5, low=-6, high=6)),
    case("gelu_edges", jax.nn.gelu, np.array([0.0, -0.0, 1e-30, 10.0, -10.0, 3e38, np.inf, -np.inf, np.nan],
                                             np.float32)),
    # 0.5 * (1 + tanh(...)) times another array than the one inside: not a gelu, not fused.
    case("gelu_of_other_array", lambda x, y: y * (0.5 * (1.0 + jnp.tanh(
        np.float32(np.sqrt(2 / np.pi)) * (x + 0.044715 * x ** 3)))), f32(4), f32(4)),
]


# --------------------------------------------------------------------------- scaled products

def scaled_product(ctx):
    """``dot_general(a, b) / c`` for a float32 literal c that is a power of two (attention's scores
    divided by sqrt(head size) for a head size of 4^n: 64 gives 8) as ``dot_general(a / c, b)``, c
    dividing the operand with fewer elements; else None. Whisper-tiny's encoder divides 6 x 1500 x
    1500 scores per layer where its queries are 1500 x 384, 23x fewer; no converter moves the
    scale. Dividing by a power of two only moves the exponent, so each product and sum is the same
    number scaled, unless a value leaves the normal range (SCALED_PRODUCT); not in strict mode.
    The product must have no other reader, else it would be computed twice."""
    numerator, denominator = ctx.eqn.invars
    c = literal(denominator)
    if ctx.strict or c is None or not is_float32(ctx.aval_out) or not (np.isfinite(c) and c > 0):
        return None
    if np.frexp(np.float32(c))[0] != 0.5 or ctx.uses(numerator) != 1:
        return None
    dot = producer(ctx, numerator, "dot_general")
    if dot is None or not all(is_float32(v.aval) for v in dot.invars):
        return None
    sizes = [np.prod(v.aval.shape) if all(type(d) is int for d in v.aval.shape) else None for v in dot.invars]
    if None in sizes or min(sizes) >= np.prod(ctx.aval_out.shape):
        return None
    small = int(np.argmin(sizes))
    operands = [ctx.value(v) for v in dot.invars]
    operands[small] = tf.math.multiply(operands[small], np.float32(1 / c))  # exact: 1 / 2^k is a float32
    return ctx.lower_again(dot, operands)


SCALED_PRODUCT_DIFFERS = ("a float32 dot_general divided by a power of two is computed from the smaller operand "
                          "so divided: a product or partial sum beyond the normal float32 range (subnormal or "
                          "overflowing before the division) may differ")
# div's fast lowerings: Softmax, and the scaled product.
SOFTMAX_OR_SCALED_PRODUCT = FastVariant(f"{SOFTMAX.differs}; {SCALED_PRODUCT_DIFFERS}", float32_out)

SCALED_PRODUCT_CASES = [
    # Attention scores of 40 tokens over 2 heads of size 16, divided by sqrt(16): the queries take the 1 / 4.
    case("scaled_attention_scores", lambda q, k: jnp.einsum("thd,shd->hts", q, k) / np.float32(4.0),
         f32(40, 2, 16), f32(40, 2, 16)),
    # Not a power of two, or the product read twice, or the product no larger: divided as it is.
    case("scores_by_non_power_of_two", lambda q, k: jnp.einsum("thd,shd->hts", q, k) / np.float32(3.0),
         f32(12, 2, 8), f32(12, 2, 8)),
    case("scores_read_twice", lambda q, k: (lambda s: (s / np.float32(8.0), s))(jnp.einsum("td,sd->ts", q, k)),
         f32(12, 8), f32(12, 8)),
    case("inner_product_halved", lambda a, b: jnp.dot(a, b) / np.float32(2.0), f32(6), f32(6)),
]


# --------------------------------------------------------------------------- mean

def mean(ctx):
    """tf.reduce_mean for ``div`` of a float32 reduce_sum (maybe in a unit-axis view) by its element
    count, as jnp.mean spells it: TFLite MEAN, one op for two. Both modes: the same quotient of the
    same sum (rounding aside), NaN and inf included. In the .tflite's own lowering (an LLM's, see
    ctx.lowering_for.tflite_converter) it stays a SUM and a division, reducing with keep_dims: LiteRT-LM ran
    SmolLM-135M's decode step 0.88x as long with its 61 RMSNorm MEANs so (MEAN over the last
    axis: slow there, whatever the reason); a .tflite sharing the TF graph keeps MEAN."""
    numerator, denominator = ctx.eqn.invars
    total = producer(ctx, through_views(ctx, numerator), "reduce_sum")
    if total is None or not is_float32(ctx.aval_out) or not is_float32(total.invars[0].aval):
        return None
    shape, axes = total.invars[0].aval.shape, total.params["axes"]
    if not axes or any(not isinstance(shape[a], int) for a in axes):
        return None
    count = int(np.prod([shape[a] for a in axes]))
    if count == 0 or literal(denominator) != float(count) or ctx.avals_in[1].shape != ():
        return None
    # jnp.mean(keepdims=True) puts the reduced axes back: MEAN keeps them itself, where a Reshape
    # after it was one more op per RMSNorm.
    keepdims = tuple(numerator.aval.shape) == tuple(1 if a in axes else d for a, d in enumerate(shape))
    tflite = ctx.lowering_for.tflite_converter
    result = (tf.reduce_sum if tflite else tf.reduce_mean)(ctx.value(total.invars[0]),
                                                           axis=[int(a) for a in axes], keepdims=keepdims)
    if tflite:
        result = tf.math.divide(result, np.float32(count))
    if not keepdims and tuple(numerator.aval.shape) != tuple(total.outvars[0].aval.shape):
        result = tf.reshape(result, ctx.out_shape())
    return result


MEAN_CASES = [
    case("mean", lambda x: jnp.mean(x, axis=1), f32(3, 4)),
    case("mean_all_axes_keepdims", lambda x: jnp.mean(x, axis=(0, 2), keepdims=True), f32(2, 3, 4)),
    case("mean_square_rms", lambda x: jnp.mean(jnp.square(x), axis=-1, keepdims=True), f32(2, 3, 5)),
    case("sum_over_other_count", lambda x: jnp.sum(x, axis=1) / 3.0, f32(3, 4)),
    # Beside a cache write the .tflite is lowered on its own (ctx.lowering_for.tflite_converter): SUM and a division.
    case("rms_beside_cache_write", lambda x, c: (jnp.mean(x * x, axis=-1, keepdims=True),
                                                 lax.dynamic_update_slice(c, x, (1, 0))), f32(2, 5), f32(4, 5)),
]


# --------------------------------------------------------------------------- positivity

def nonnegative(ctx, atom) -> bool:
    """Whether ``atom`` is >= 0 (or NaN) whatever the inputs, from the equations that made it:
    max with a literal >= 0, squares and even powers, and sums, views and positive scalings of those."""
    value = literal(atom)
    if value is not None:
        return value >= 0
    eqn = producer(ctx, through_views(ctx, atom))
    if eqn is None:
        return False
    name, args = eqn.primitive.name, eqn.invars
    if name == "max":
        return any(literal(a) is not None and literal(a) >= 0 for a in args)
    if name == "square" or (name == "integer_pow" and eqn.params["y"] % 2 == 0):
        return True
    if name == "pow":  # keras's x ** 2: pow with an even integer literal
        y = literal(args[1])
        return isinstance(y, int) and y % 2 == 0
    if name == "mul" and args[0] is args[1]:
        return True
    if name in ("reduce_sum", "add"):
        return all(nonnegative(ctx, a) for a in args)
    if name in ("mul", "div"):
        return nonnegative(ctx, args[0]) and literal(args[1]) is not None and literal(args[1]) > 0
    return False


def positive(ctx, atom) -> bool:
    """Whether ``atom`` is > 0 (or NaN) whatever the inputs: a nonnegative value plus a literal > 0
    (a norm's variance + epsilon)."""
    eqn = producer(ctx, atom, "add")
    if eqn is None:
        return False
    for a, b in (eqn.invars, eqn.invars[::-1]):
        if literal(b) is not None and literal(b) > 0 and nonnegative(ctx, a):
            return True
    return False


# --------------------------------------------------------------------------- activations

def maximum(ctx, x, y):
    """max of float32 operands without JAX's NaN propagation: relu for max(x, 0) (RELU, and TF.js
    fuses Relu into a preceding conv/matmul), plain Maximum otherwise. None in strict mode."""
    if ctx.strict or not is_float32(ctx.aval_out):
        return None
    bounds = [literal(a) for a in ctx.eqn.invars]
    shapes = [a.shape for a in ctx.avals_in]
    if bounds[1] == 0 and shapes[0] == ctx.aval_out.shape:
        return tf.nn.relu(x)
    if bounds[0] == 0 and shapes[1] == ctx.aval_out.shape:
        return tf.nn.relu(y)
    return tf.math.maximum(x, y)


def minimum(ctx, x, y):
    """min of float32 operands without NaN propagation: relu6 for min(max(z, 0), 6) (RELU6)."""
    if ctx.strict or not is_float32(ctx.aval_out):
        return None
    for lo, bound in ((0, 1), (1, 0)):
        relu = producer(ctx, ctx.eqn.invars[lo], "max")
        if literal(ctx.eqn.invars[bound]) == 6 and relu is not None and ctx.avals_in[lo].shape == ctx.aval_out.shape:
            zero = [literal(a) for a in relu.invars]
            if zero[1] == 0 and relu.invars[0].aval.shape == ctx.aval_out.shape:
                return tf.nn.relu6(ctx.value(relu.invars[0]))
    return tf.math.minimum(x, y)


# --------------------------------------------------------------------------- cases
# The pattern cases sit with the patterns; the div and sub rules register them.

def _not_own_max(x, y):
    """exp(x - max(y)) / sum: a softmax spelling whose shift is another array's max (not fused)."""
    e = jnp.exp(x - jnp.max(y, axis=1, keepdims=True))
    return e / jnp.sum(e, axis=1, keepdims=True)


def _shift_by_transposed_max(x):
    """exp(x.T - max(x, axis=0)) / sum: x.T's rows shifted by x's column maxima, which vary along
    each row (x.T swaps non-unit axes, so it is no view of x): not a softmax, not fused."""
    e = jnp.exp(x.T - jnp.max(x, axis=0, keepdims=True))
    return e / jnp.sum(e, axis=1, keepdims=True)


_SOFTMAX_EDGES = np.array([[np.inf, 1.0, 2.0], [-np.inf, -np.inf, -np.inf], [np.nan, 1.0, 0.0],
                           [-np.inf, 0.0, 3.0], [1e30, -1e30, 0.0]], np.float32)

SOFTMAX_CASES = [
    case("softmax", jax.nn.softmax, f32(3, 5)),
    case("softmax_axis0_3d", lambda x: jax.nn.softmax(x, axis=0), f32(4, 3, 2)),
    case("softmax_attention_rows", lambda x: jax.nn.softmax(x * 4.0, axis=-1), f32(2, 2, 5, 5)),
    case("softmax_edges", jax.nn.softmax, _SOFTMAX_EDGES),
    case("softmax_shift_of_other_array", _not_own_max, f32(3, 4), f32(3, 4)),
    # nnx's attention: the softmax's logits and max column behind transposes of a unit axis.
    case("softmax_behind_unit_transposes", jax.vmap(jax.nn.softmax, in_axes=3, out_axes=0), f32(1, 2, 3, 1, 5)),
    case("softmax_shift_by_transposed_max", _shift_by_transposed_max, f32(4, 4)),
    case("softmax_polymorphic", jax.nn.softmax, f32(3, 4), polymorphic_shapes=("(b, 4)",)),
]

LOG_SOFTMAX_CASES = [
    case("log_softmax", jax.nn.log_softmax, f32(3, 5)),
    case("log_softmax_axis1_3d", lambda x: jax.nn.log_softmax(x, axis=1), f32(2, 6, 3)),
    case("log_softmax_edges", jax.nn.log_softmax, _SOFTMAX_EDGES),
    case("log_softmax_polymorphic", jax.nn.log_softmax, f32(3, 4), polymorphic_shapes=("(b, 4)",)),
]


# --------------------------------------------------------------------------- bias

def bias_add(ctx, x, y):
    """BiasAdd for ``x + b`` where b is a vector shown as [1, ..., 1, C] (a dense or conv bias): the
    same sums, in the form the TF.js converter fuses into _FusedConv2D / _FusedMatMul and TFLite
    into CONV_2D / FULLY_CONNECTED. Both modes (no NaN/inf difference). None when not that."""
    out = ctx.aval_out
    if not is_float32(out) or len(out.shape) < 2:
        return None
    for data, bias in ((0, 1), (1, 0)):
        value = (x, y)[data]
        view = producer(ctx, ctx.eqn.invars[bias], "reshape", "broadcast_in_dim")
        if view is None or ctx.avals_in[data].shape != out.shape:
            continue
        vector = view.invars[0]
        shape = tuple(ctx.avals_in[bias].shape)
        if (len(vector.aval.shape) == 1 and shape == (1,) * (len(out.shape) - 1) + (out.shape[-1],)
                and vector.aval.shape[0] == out.shape[-1] and is_float32(vector.aval)):
            return tf.nn.bias_add(value, ctx.value(vector))
    return None


def channel_constant(ctx, atom, channels: int):
    """A constant shown as [1, ..., 1, C] (a per-channel parameter), as a [C] tensor; else None."""
    shape = tuple(atom.aval.shape)
    if (not is_float32(atom.aval) or not shape or shape[-1] != channels or any(d != 1 for d in shape[:-1])
            or not ctx.is_constant(atom)):
        return None
    return tf.reshape(ctx.value(atom), [channels])


def batch_norm(ctx, x, y):
    """BiasAdd(z * scale, bias - mean * scale) for ``(z - mean) * scale + bias`` with per-channel
    constants (an inference BatchNorm after a convolution or dense layer): the TF.js converter then
    folds the scale into the convolution's weights and fuses the rest (_FusedConv2D), as TFLite's
    converter does. Default mode only: the same value up to rounding (declared with BATCH_NORM)."""
    out = ctx.aval_out
    if ctx.strict or not is_float32(out) or len(out.shape) < 2 or not isinstance(out.shape[-1], int):
        return None
    channels = out.shape[-1]
    for scaled, bias in (ctx.eqn.invars, ctx.eqn.invars[::-1]):
        mul = producer(ctx, scaled, "mul")
        b = channel_constant(ctx, bias, channels)
        if mul is None or b is None or tuple(scaled.aval.shape) != tuple(out.shape):
            continue
        for centred, scale in (mul.invars, mul.invars[::-1]):
            sub = producer(ctx, centred, "sub")
            k = channel_constant(ctx, scale, channels)
            if sub is None or k is None or tuple(sub.invars[0].aval.shape) != tuple(out.shape):
                continue
            m = channel_constant(ctx, sub.invars[1], channels)
            if m is not None:
                return tf.nn.bias_add(ctx.value(sub.invars[0]) * k, b - m * k)
    return None


BATCH_NORM = FastVariant("(z - mean) * scale + bias with per-channel constants (BatchNorm) is computed as "
                         "z * scale + (bias - mean * scale), folded into the convolution: rounding differs, "
                         "and an inf/NaN parameter may give other NaN/inf entries", float32_out)


def _conv_batch_norm(x, w, mean, scale, bias):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu((y - mean.reshape(1, 1, 1, -1)) * scale.reshape(1, 1, 1, -1) + bias.reshape(1, 1, 1, -1))


BATCH_NORM_CASES = [
    case("conv_batch_norm_relu", lambda x: _conv_batch_norm(
        x, np.linspace(-1, 1, 3 * 3 * 3 * 4, dtype=np.float32).reshape(3, 3, 3, 4),
        np.array([0.1, -0.2, 0.3, 0.0], np.float32), np.array([1.5, 0.5, -2.0, 1.0], np.float32),
        np.array([0.0, 1.0, -1.0, 0.5], np.float32)), f32(2, 5, 5, 3)),
    # The same spelling with a mean that is a program input, not a constant: not folded.
    case("batch_norm_of_input_mean", lambda z, m: (z - m.reshape(1, -1)) * np.array([[1.5, 0.5, -2.0, 1.0]], np.float32)
         + np.array([[0.0, 1.0, -1.0, 0.5]], np.float32), f32(3, 4), f32(4)),
]


def _dense(x, w, b):
    return jnp.dot(x, w) + b.reshape(1, -1)


BIAS_ADD_CASES = [
    case("dense_bias", _dense, f32(3, 4), f32(4, 5), f32(5)),
    case("conv_bias_relu", lambda x, w, b: jax.nn.relu(lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b.reshape(1, 1, 1, -1)),
        f32(2, 5, 5, 3), f32(3, 3, 3, 4), f32(4)),
    case("bias_first", lambda x, b: b.reshape(1, 1, -1) + x, f32(2, 3, 4), f32(4)),
    case("not_a_bias_row", lambda x, b: x + b.reshape(-1, 1), f32(4, 4), f32(4)),
]


# --------------------------------------------------------------------------- zero pads

_CALLS = ("jit", "pjit", "closed_call")


def _call_body(eqn):
    body = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    return open_jaxpr(body)


class _Trail:
    """Where an atom comes from, followed across one call boundary: jnp.pad wraps its ``pad`` in a
    ``jit`` (whose body the interpreter lowers in a scope of its own), so a rule at the caller's
    level sees the call, not the pad. ``made`` maps a body's variables to their equations and
    ``outer`` its inputs to the caller's atoms (both empty at the caller's own level)."""

    def __init__(self, ctx, made=None, outer=None):
        self.ctx, self.made, self.outer = ctx, made or {}, outer or {}

    def producer(self, atom):
        """(equation that made ``atom``, the trail inside which its operands live), or (None, None)."""
        if isinstance(atom, core.Literal):
            return None, None
        if atom in self.outer:
            return _Trail(self.ctx).producer(self.outer[atom])
        if self.made:
            return self.made.get(atom), self
        eqn = self.ctx.producer(atom)
        if eqn is None or eqn.primitive.name not in _CALLS:
            return eqn, self
        body = _call_body(eqn)
        if body is None or body.constvars:
            return None, None
        inner = {v: e for e in body.eqns for v in e.outvars}
        out = body.outvars[list(eqn.outvars).index(atom)]
        return inner.get(out), _Trail(self.ctx, inner, dict(zip(body.invars, eqn.invars)))

    def scalar(self, atom):
        """The value of a scalar literal, maybe behind convert_element_type (jnp.pad's int 0 made
        float inside its jit), as a NumPy scalar of the atom's dtype; else None."""
        if isinstance(atom, core.Literal):
            return np.asarray(atom.val, atom.aval.dtype) if np.ndim(atom.val) == 0 else None
        if atom in self.outer:
            return _Trail(self.ctx).scalar(self.outer[atom])
        eqn, trail = self.producer(atom)
        if eqn is None or eqn.primitive.name != "convert_element_type":
            return None
        value = trail.scalar(eqn.invars[0])
        return None if value is None else value.astype(atom.aval.dtype)

    def caller_atom(self, atom):
        """``atom`` as a variable of the caller's jaxpr (whose TF value the rule can read), else None."""
        if not self.made:
            return atom
        return None if isinstance(atom, core.Literal) else self.outer.get(atom)


def zero_pad(ctx, atom):
    """If ``atom`` is ``lax.pad(x, +0.0)`` (maybe inside jnp.pad's jit) with no interior padding and
    no cropping, (x as an atom of the rule's jaxpr, [(lo, hi)] per axis); else None. Float only.

    A convolution (or pool) that reads zeros there can take them as its own padding: JAX's
    convolution of the padded array is by definition its convolution with that much more padding,
    the same products and sums. -0.0 is no such zero (a window of -0.0 products sums to -0.0, a
    window holding the convolution's +0.0 padding to +0.0)."""
    if not np.issubdtype(np.dtype(atom.aval.dtype), np.floating):
        return None
    eqn, trail = _Trail(ctx).producer(atom)
    if eqn is None or eqn.primitive.name != "pad":
        return None
    value = trail.scalar(eqn.invars[1])
    data = trail.caller_atom(eqn.invars[0])
    config = eqn.params["padding_config"]
    if (value is None or value != 0 or np.signbit(value) or data is None
            or not all(is_constant_dim(v) for entry in config for v in entry)  # a polymorphic amount
            or any(interior != 0 or lo < 0 or hi < 0 for lo, hi, interior in config)):
        return None
    return data, [(int(lo), int(hi)) for lo, hi, _ in config]
