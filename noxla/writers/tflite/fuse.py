"""The fusions TFLite's converter makes, as passes over the legalized graph.

Each pass matches operators by what they compute and rewrites them in place: a zero pad into the
convolution's SAME padding, a per-channel bias add or scale (batch norm) into the convolution's or
product's weights and bias, reductions kept at rank, a window average, JAX's softmax into
SOFTMAX, max(x, 0) and min(., 6) into RELU/RELU6 (fused into their producer when it has the
field), and MobileNetV3's x * relu6(x + 3) / 6 into HARD_SWISH. The fused operators compute what
the unfused ones do for every finite input up to rounding; ``CHANGES_VALUES`` names those that change
a value against the unfused operators' IEEE arithmetic for some input (a strict export leaves them
out: ``noxla.writers.tflite.VARIANTS``)."""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.model import SAME, VALID, Graph, Op, Tensor, View, same_pads

_LINEAR = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}
# A bias add after a TRANSPOSE_CONV is folded as after these (the converter does); scales are not.
_BIASED = _LINEAR | {"TRANSPOSE_CONV"}
_WITH_ACTIVATION = _BIASED | {"ADD", "SUB", "MUL", "DIV", "MAX_POOL_2D", "AVERAGE_POOL_2D"}
_ACTIVATIONS = {"RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
_REDUCERS = {"SUM", "MEAN", "REDUCE_MAX", "REDUCE_MIN"}


def fuse(graph: Graph, fusions: tuple, finish: tuple) -> None:
    """``fusions`` (of ``FUSIONS``) until none applies, then each of ``finish`` (of ``FINISH``) once
    (EXP, LOG and RSQRT are written where the rules emit them: the rules lowered them exactly). An
    output that is an input or a constant once simplified is the writer's to copy (``outputs``; a
    body's, ``control_flow``)."""
    changed = True
    while changed:  # a rewrite can open another's pattern (a mean's reshape after its division)
        changed = False
        for rewrite in fusions:
            while rewrite(graph):
                graph.prune()
                changed = True
    for rewrite in finish:
        rewrite(graph)


def _scalar(t: Tensor) -> float | None:
    return float(t.data.reshape(-1)[0]) if t.is_constant and t.data.size == 1 else None


def _with_scalar(op: Op) -> tuple[Tensor | None, float | None]:
    """A binary operator's run-time operand and its scalar constant one, in either order."""
    a, b = op.inputs
    if _scalar(b) is not None and not a.is_constant:
        return a, _scalar(b)
    if _scalar(a) is not None and not b.is_constant and op.kind not in {"SUB", "DIV"}:
        return b, _scalar(a)
    return None, None


def _float32(value: np.ndarray, old: np.ndarray) -> np.ndarray:
    """A folded weight or bias as float32: an array the fold just made as it is (not copied a second
    time), a copy where the fold left ``old`` unchanged (each constant keeps memory of its own:
    several signatures' writer stores one memory once, ``WeightStubs.hold``)."""
    return value.astype(np.float32, copy=value is old)


def _take_output(producer: Op, consumer: Op) -> None:
    """``producer`` now makes what ``consumer`` made (``consumer`` is left unread, pruned)."""
    producer.outputs, consumer.outputs = consumer.outputs, [Tensor(consumer.out.shape, consumer.out.dtype)]


def _pad_into_convolution(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        if op.kind not in {"CONV_2D", "DEPTHWISE_CONV_2D"} or op.options["padding"] != VALID:
            continue
        pad = view.producer(op.inputs[0], "PAD")
        if pad is None or not view.only_reader(op.inputs[0]) or not pad.inputs[1].is_constant:
            continue
        pads = [tuple(p) for p in pad.inputs[1].data.tolist()]
        x, kernel = pad.inputs[0], op.inputs[1].shape[1:3]
        strides = (op.options["strideH"], op.options["strideW"])
        dilations = (op.options["dilationHFactor"], op.options["dilationWFactor"])
        wanted = [same_pads(*a) for a in zip(x.shape[1:3], kernel, strides, dilations)]
        if pads[0] == (0, 0) and pads[3] == (0, 0) and pads[1:3] == wanted:
            op.inputs[0], op.options["padding"] = x, SAME
            return True
    return False


def _channel_vector(t: Tensor, channels: int) -> np.ndarray | None:
    """A constant that varies along the last axis only, as one value per channel."""
    if not t.is_constant or t.data.size not in (1, channels) or (t.data.size > 1 and t.shape[-1] != channels):
        return None
    return np.broadcast_to(t.data.reshape(-1).astype(np.float32), (channels,))


def _bias_into_linear(graph: Graph) -> bool:
    """``_affine_into_linear``'s adds alone: the kernel adds the bias to its sum of products
    (another order of one sum, whose order no kernel fixes); a scale rounds otherwise (each weight
    is scaled, not each sum)."""
    return _affine_into_linear(graph, frozenset({"ADD", "SUB"}))


def _affine_into_linear(graph: Graph, kinds: frozenset = frozenset({"ADD", "SUB", "MUL", "DIV"})) -> bool:
    """A per-channel add or scale after a convolution or product, into its bias and weights (a
    batch norm's offset, scale and shift folded in the order they come, before an activation is
    fused into the last: one pass, not one per kind)."""
    view = graph.view()
    for op in graph.ops:
        if op.kind not in kinds or op.options.get("fusedActivationFunction"):
            continue
        for i, (x, c) in enumerate((op.inputs, op.inputs[::-1])):
            linear = _linear_behind(view, x)
            if (linear is None or linear.options["fusedActivationFunction"] or op.out.shape != x.shape
                    or (i == 1 and op.kind in {"SUB", "DIV"}) or linear.kind not in _LINEAR and op.kind != "ADD"):
                continue
            vector = _channel_vector(c, x.shape[-1])
            if vector is None:
                continue
            kernel, bias = linear.inputs[1].data, linear.inputs[2].data
            if op.kind in {"ADD", "SUB"}:
                bias = bias + vector if op.kind == "ADD" else bias - vector
            else:
                scale = vector if op.kind == "MUL" else 1 / vector
                axis = 3 if linear.kind == "DEPTHWISE_CONV_2D" else 0
                kernel = kernel * np.expand_dims(scale, [a for a in range(kernel.ndim) if a != axis])
                bias = bias * scale
            linear.inputs[1:3] = [graph.constant(_float32(kernel, linear.inputs[1].data)),
                                  graph.constant(_float32(bias, linear.inputs[2].data))]
            graph.replace_uses(op.out, x)
            return True
    return False


def _linear_behind(view: View, x: Tensor) -> Op | None:
    """The convolution or product that makes ``x``, directly or through a reshape that keeps the
    channel axis (a 1-D convolution's), read by nothing else."""
    shaped = view.producer(x, "RESHAPE")
    made = shaped.inputs[0] if shaped is not None and view.only_reader(x) else x
    linear = view.producer(made, _BIASED)
    if linear is None or not view.only_reader(made) or not view.only_reader(x) or made.shape[-1] != x.shape[-1] \
            or not linear.inputs[1].is_constant:   # a filter computed at run time takes no bias or scale here
        return None
    return linear


def _reduction_of_ones(graph: Graph) -> bool:
    """A sum, mean, max or min over axes of size 1 moves nothing (at 32x32, MobileNetV3's last
    squeeze-excite averages a 1x1 map)."""
    for op in graph.ops:
        if op.kind in _REDUCERS and op.inputs[1].is_constant and op.out.shape == op.inputs[0].shape \
                and all(op.inputs[0].shape[a] == 1 for a in op.inputs[1].data.reshape(-1).tolist()):
            graph.replace_uses(op.out, op.inputs[0])
            return True
    return False


def _keep_reduced_dims(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        reduce = view.producer(op.inputs[0], _REDUCERS) if op.kind == "RESHAPE" else None
        if reduce is None or reduce.options["keepDims"] or not view.only_reader(op.inputs[0]):
            continue
        x, axes = reduce.inputs[0], [a % len(reduce.inputs[0].shape) for a in reduce.inputs[1].data.tolist()]
        if op.out.shape == tuple(1 if a in axes else s for a, s in enumerate(x.shape)):
            reduce.options["keepDims"] = True
            _take_output(reduce, op)
            return True
    return False


# A sum, and what it becomes divided by the count of what it sums.
# Not SUM / count as MEAN: the rules write jnp.mean as MEAN, but as SUM and a division in the
# lowering for the converter alone (an LLM's, lowering_rules/patterns/fusion.py's ``mean``: LiteRT-LM ran its
# RMSNorms' MEANs slower), which TF's path keeps a SUM.
_AVERAGES = {"SUM_POOL_2D": "AVERAGE_POOL_2D"}


def _count(total: Op) -> int:
    if total.kind == "SUM_POOL_2D":
        return total.options["filterHeight"] * total.options["filterWidth"]
    return int(np.prod([total.inputs[0].shape[a] for a in total.inputs[1].data.tolist()]))


def _mean(graph: Graph) -> bool:
    """A window sum / its window size as AVERAGE_POOL_2D (flax's avg_pool)."""
    view = graph.view()
    for op in graph.ops:
        total = view.producer(op.inputs[0], set(_AVERAGES)) if op.kind == "DIV" else None
        if total is None or not view.only_reader(op.inputs[0]) or op.options["fusedActivationFunction"]:
            continue
        count = _scalar(op.inputs[1])   # None: a count computed at run time (a polymorphic size's)
        if count is not None and count == _count(total) and op.out.shape == total.out.shape:
            total.kind = _AVERAGES[total.kind]
            _take_output(total, op)
            return True
    return False


def _axes(op: Op) -> list:
    """A reduction's axes, each counted from the front."""
    return [a % len(op.inputs[0].shape) for a in op.inputs[1].data.tolist()]


def _logits(view: View, shifted: Tensor) -> Tensor | None:
    """x where ``shifted`` is x - max(x) over the last axis (JAX's stabilised logits), else None."""
    diff = view.producer(shifted, "SUB")
    if diff is None or diff.options["fusedActivationFunction"]:
        return None
    x, shift = diff.inputs
    top = _strip(view, shift)
    if top is None or top.kind != "REDUCE_MAX" or top.inputs[0] is not x or _axes(top) != [len(x.shape) - 1] \
            or shifted.shape != x.shape:
        return None
    return x


def _softmax(graph: Graph) -> bool:
    """exp(x - max(x)) / sum(exp(x - max(x))) over the last axis, JAX's softmax."""
    view = graph.view()
    for op in graph.ops:
        if op.kind != "DIV" or op.options["fusedActivationFunction"]:
            continue
        exp, total = view.producer(op.inputs[0], "EXP"), view.producer(op.inputs[1], "SUM")
        if exp is None or total is None or total.inputs[0] is not exp.out \
                or _axes(total) != [len(exp.out.shape) - 1] or len(view.read_by[exp.out.id]) != 2 \
                or not view.only_reader(exp.inputs[0]):
            continue
        x = _logits(view, exp.inputs[0])
        if x is not None and op.out.shape == x.shape:
            op.kind, op.inputs, op.options = "SOFTMAX", [x], {"beta": 1.0}
            return True
    return False


def log_softmax(graph: Graph) -> bool:
    """(x - max(x)) - log(sum(exp(x - max(x)))) over the last axis, JAX's log_softmax."""
    view = graph.view()
    for op in graph.ops:
        if op.kind != "SUB" or op.options["fusedActivationFunction"]:
            continue
        shifted, log_sum = op.inputs
        log = view.producer(log_sum, "LOG")
        total = view.producer(log.inputs[0], "SUM") if log is not None else None
        exp = view.producer(total.inputs[0], "EXP") if total is not None else None
        if exp is None or exp.inputs[0] is not shifted or _axes(total) != [len(shifted.shape) - 1] \
                or not all(view.only_reader(t) for t in (log_sum, log.inputs[0], exp.out)) \
                or len(view.read_by[shifted.id]) != 2:
            continue
        x = _logits(view, shifted)
        if x is not None and op.out.shape == x.shape:
            op.kind, op.inputs, op.options = "LOG_SOFTMAX", [x], {}
            return True
    return False


def _strip(view: View, t: Tensor) -> Op | None:
    """The operator behind ``t`` past reshapes and a max with -inf (JAX's guard for empty rows)."""
    op = view.made_by.get(t.id)
    while op is not None and (op.kind == "RESHAPE" or op.kind == "MAXIMUM" and _with_scalar(op)[1] == -np.inf):
        op = view.made_by.get((op.inputs[0] if op.kind == "RESHAPE" else _with_scalar(op)[0]).id)
    return op


def _relu(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        if op.kind not in {"MAXIMUM", "MINIMUM"} or op.out.dtype != np.float32:  # RELU takes floats only
            continue
        x, bound = _with_scalar(op)
        if op.kind == "MAXIMUM" and bound == 0 and op.out.shape == x.shape:
            op.kind, op.inputs, op.options = "RELU", [x], {}
            return True
        inner = view.producer(x, "RELU") if op.kind == "MINIMUM" and bound == 6 else None
        if inner is not None and view.only_reader(x) and op.out.shape == inner.out.shape:
            op.kind, op.inputs, op.options = "RELU6", inner.inputs, {}
            return True
    return False


def _hard_swish(graph: Graph) -> bool:
    """x * (relu6(x + 3) * (1/6)), or divided by 6, in either order of the products."""
    view = graph.view()
    for op in graph.ops:
        if op.kind != "MUL" or op.options["fusedActivationFunction"]:
            continue
        for x, gate in (op.inputs, op.inputs[::-1]):
            scaled = view.producer(gate, {"MUL", "DIV"})
            if scaled is None or not view.only_reader(gate):
                continue
            wanted = 1 / 6 if scaled.kind == "MUL" else 6
            relu6 = view.producer(scaled.inputs[0], "RELU6")
            if relu6 is None or not np.isclose(_scalar(scaled.inputs[1]) or 0, wanted, rtol=1e-6, atol=0):
                continue
            shifted = view.producer(relu6.inputs[0], "ADD")
            if shifted is not None and shifted.inputs[0] is x and _scalar(shifted.inputs[1]) == 3 \
                    and view.only_reader(relu6.inputs[0]) and view.only_reader(scaled.inputs[0]) \
                    and op.out.shape == x.shape:
                op.kind, op.inputs, op.options = "HARD_SWISH", [x], {}
                return True
    return False


def activation_into_producer(graph: Graph) -> bool:
    view = graph.view()
    for op in graph.ops:
        producer = view.producer(op.inputs[0], _WITH_ACTIVATION) if op.kind in _ACTIVATIONS else None
        if producer is None or producer.options["fusedActivationFunction"] or not view.only_reader(op.inputs[0]):
            continue
        producer.options["fusedActivationFunction"] = _ACTIVATIONS[op.kind]
        _take_output(producer, op)
        return True
    return False


def _identity_arithmetic(graph: Graph) -> bool:
    """x + 0, x - 0, x * 1 and x / 1 (a Rescaling without offset, a Normalization left at its
    defaults) are x."""
    for op in graph.ops:
        if op.kind not in {"ADD", "SUB", "MUL", "DIV"} or op.options.get("fusedActivationFunction"):
            continue
        x, c = op.inputs
        neutral = 0 if op.kind in {"ADD", "SUB"} else 1
        if c.is_constant and not x.is_constant and op.out.shape == x.shape and np.all(c.data == neutral):
            graph.replace_uses(op.out, x)
            return True
    return False


def _into_next_linear(graph: Graph) -> bool:
    """A constant scale or offset read only by a convolution or product (or only by products),
    folded into their weights and bias: a scalar scale into any (zero padding is still zero once
    scaled), a per-input-channel scale into CONV_2D and FULLY_CONNECTED, an offset into
    FULLY_CONNECTED (a LayerNorm's gain and offset before a projection, or before the query, key
    and value projections: ``fc(x * g + b, w, c)`` is ``fc(x, w * g, fc(b, w, c))``)."""
    view = graph.view()
    for op in graph.ops:
        readers = view.read_by.get(op.out.id, [])
        if op.kind not in {"MUL", "ADD", "SUB"} or op.options["fusedActivationFunction"] or not readers \
                or any(r is None or r.kind not in _LINEAR or r.inputs[0] is not op.out or not r.inputs[1].is_constant
                       for r in readers) \
                or len(readers) > 1 and any(r.kind != "FULLY_CONNECTED" for r in readers):
            continue
        x, c = op.inputs if op.inputs[1].is_constant or op.kind == "SUB" else op.inputs[::-1]
        if x.is_constant or not c.is_constant or op.out.shape != x.shape:
            continue
        vector = _channel_vector(c, x.shape[-1])
        if vector is None or readers[0].kind == "DEPTHWISE_CONV_2D" and c.data.size > 1 \
                or op.kind != "MUL" and readers[0].kind != "FULLY_CONNECTED" \
                or op.kind == "MUL" and any(_stored_elsewhere(graph, r.inputs[1], r) for r in readers):
            continue
        for linear in readers:
            kernel, bias = linear.inputs[1].data, linear.inputs[2].data
            if op.kind == "MUL":   # the input channel is the kernel's last axis (OHWI, [out, in])
                kernel = kernel * (vector if c.data.size > 1 else vector[0])
            else:
                bias = bias + _matvec(kernel, vector if op.kind == "ADD" else -vector)
            kernel, bias = (graph.constant(_float32(a, t.data)) for a, t in zip((kernel, bias), linear.inputs[1:3]))
            linear.inputs[:3] = [x, kernel, bias]
        return True
    return False


def _stored_elsewhere(graph: Graph, kernel: Tensor, linear: Op) -> bool:
    """Whether another operator reads a constant equal to ``kernel`` (a tied embedding: the logits'
    projection and the token GATHER read one matrix, stored once): scaling the kernel would store
    the matrix twice, as TF's path keeps such a norm's MUL (tests/test_llm.py)."""
    return any(t is not kernel and t is not None and t.is_constant and t.shape == kernel.shape
               and t.dtype == kernel.dtype and np.array_equal(t.data, kernel.data)
               for op in graph.ops if op is not linear for t in op.inputs)


def _operand(view: View, t: Tensor, kind: str, value: float) -> Tensor | None:
    """x where ``t`` is ``kind(x, value)`` (a scalar constant, either side) read by one operator."""
    op = view.producer(t, kind)
    if op is None or op.options.get("fusedActivationFunction") or not view.only_reader(t):
        return None
    x, c = _with_scalar(op)
    return x if c is not None and np.isclose(c, value, rtol=1e-6, atol=0) else None


def _gelu_forms(view: View, op: Op):
    """(x, the 1 + tanh(...) operand) of JAX's x * (0.5 * (1 + tanh(...))) or the rules' (0.5 * x) *
    (1 + tanh(...)) (TF's formula), for each order of ``op``'s operands."""
    for x, gate in (op.inputs, op.inputs[::-1]):
        half = _operand(view, gate, "MUL", 0.5)
        yield x, half and _operand(view, half, "ADD", 1.0)
        half_x = view.producer(x, "MUL") if view.only_reader(x) else None
        if half_x is not None and not half_x.options["fusedActivationFunction"] and _with_scalar(half_x)[1] == 0.5:
            yield _with_scalar(half_x)[0], _operand(view, gate, "ADD", 1.0)


def _gelu(graph: Graph) -> bool:
    """JAX's tanh-approximated GELU, x * (0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))))."""
    view = graph.view()
    for op in graph.ops:
        if op.kind != "MUL" or op.options["fusedActivationFunction"]:
            continue
        for x, inside in _gelu_forms(view, op):
            tanh = view.producer(inside, "TANH") if inside is not None and view.only_reader(inside) else None
            inner = tanh and _operand(view, tanh.inputs[0], "MUL", np.sqrt(2 / np.pi))
            total = view.producer(inner, "ADD") if inner is not None and view.only_reader(inner) else None
            if total is None or total.options["fusedActivationFunction"] or x not in total.inputs:
                continue
            cubed = _operand(view, total.inputs[1] if total.inputs[0] is x else total.inputs[0], "MUL", 0.044715)
            cube = view.producer(cubed, {"MUL", "POW"}) if cubed is not None and view.only_reader(cubed) else None
            if cube is not None and cube.kind == "POW":   # the rules' x ** 3 (TF's Pow)
                cubes = cube.inputs[0] is x and _scalar(cube.inputs[1]) == 3
            else:
                square = view.producer(cube.inputs[0], "MUL") if cube is not None and cube.inputs[1] is x else None
                cubes = square is not None and square.inputs == [x, x] and view.only_reader(cube.inputs[0]) \
                    and not cube.options["fusedActivationFunction"]
            if cubes and op.out.shape == x.shape:
                op.kind, op.inputs, op.options = "GELU", [x], {"approximate": True}
                return True
    return False


def _transposes_of_transposes(graph: Graph) -> bool:
    """A transpose of a transpose read by nothing else is one transpose, or none if it restores the
    order (a batched product's swapped result, then JAX's own transpose)."""
    view = graph.view()
    for op in graph.ops:
        inner = view.producer(op.inputs[0], "TRANSPOSE") if op.kind == "TRANSPOSE" else None
        if inner is None or not view.only_reader(op.inputs[0]) or not op.inputs[1].is_constant \
                or not inner.inputs[1].is_constant:
            continue
        first, then = inner.inputs[1].data.tolist(), op.inputs[1].data.tolist()
        combined = [first[a] for a in then]
        if combined == sorted(combined):
            graph.replace_uses(op.out, inner.inputs[0])
        else:
            op.inputs = [inner.inputs[0], graph.constant(np.asarray(combined, np.int32))]
        return True
    return False


def reshapes_of_reshapes(graph: Graph) -> bool:
    """A reshape of a reshape reads the first one's input, and is dropped if it restores its shape
    (a gather's index column, made by JAX's broadcast, read as a vector), as the converter folds them."""
    view = graph.view()
    for op in graph.ops:
        inner = view.producer(op.inputs[0], "RESHAPE") if op.kind == "RESHAPE" else None
        if inner is None:
            continue
        if op.out.shape == inner.inputs[0].shape:
            graph.replace_uses(op.out, inner.inputs[0])
        else:
            op.inputs = [inner.inputs[0], op.inputs[1]]
        return True
    return False


def _scale_before_product(graph: Graph) -> bool:
    """A batched product's scale by a power of two (attention's 1 / sqrt(64)) moved onto its
    smaller operand, as the TF path's rule does, before the reshapes and transposes that lead
    there, and folded into the projection that makes it if there is one: scaling by 2^k is exact,
    so the values are the same."""
    view = graph.view()
    for op in graph.ops:
        if op.kind not in {"MUL", "DIV"} or op.options["fusedActivationFunction"]:
            continue
        x, c = _with_scalar(op)
        product = view.producer(x, "BATCH_MATMUL") if c and np.isfinite(c) else None
        scale = (c if op.kind == "MUL" else 1 / c) if product is not None else 0.0
        if product is None or np.frexp(scale)[0] != 0.5 or not view.only_reader(x) or op.out.shape != x.shape:
            continue
        origins = [_before_moves(view, t, product) for t in product.inputs[:2]]
        if origins[0][0] is origins[1][0]:   # x by x's transpose: scaling x would scale both
            continue
        t, reader = min(origins, key=lambda o: int(np.prod(o[0].shape)))
        if int(np.prod(t.shape)) >= int(np.prod(x.shape)):
            continue
        linear = view.producer(t, "FULLY_CONNECTED")
        if linear is not None and view.only_reader(t) and not linear.options["fusedActivationFunction"]:
            linear.inputs[1:3] = [graph.constant((linear.inputs[1].data * scale).astype(np.float32, copy=False)),
                                  graph.constant((linear.inputs[2].data * scale).astype(np.float32, copy=False))]
        else:
            scaled = Tensor(t.shape, t.dtype)
            graph.ops.insert(graph.ops.index(reader), Op("MUL", [t, graph.constant(np.float32(scale))], [scaled],
                                                         {"fusedActivationFunction": 0}))
            reader.inputs = [scaled if i is t else i for i in reader.inputs]
        graph.replace_uses(op.out, x)
        return True
    return False


def _before_moves(view: View, t: Tensor, reader: Op) -> tuple[Tensor, Op]:
    """The tensor that reshapes and transposes read by nothing else made ``t`` (read by
    ``reader``) from, and the operator that reads it on the way to ``t``."""
    source = view.producer(t, {"RESHAPE", "TRANSPOSE"})
    while source is not None and view.only_reader(t):
        t, reader = source.inputs[0], source
        source = view.producer(t, {"RESHAPE", "TRANSPOSE"})
    return t, reader


def _matvec(kernel: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``kernel @ vector`` the same on every CPU: BLAS's order of sums and its use of FMA depend on
    the kernels it picks for the exporting CPU, which would make the file depend on it too. Here
    each product is exact in float64 and NumPy sums in a fixed order; the caller rounds once."""
    rows = 1 << 12   # a float64 copy of a few rows at a time, not of a vocabulary's projection
    return np.concatenate([np.sum(kernel[i:i + rows].astype(np.float64) * vector.astype(np.float64), axis=-1)
                           for i in range(0, len(kernel), rows)])


def common_operators(graph: Graph) -> bool:
    """Operators that compute the same thing from the same inputs, computed once (``x - mean``
    written twice in a LayerNorm; a bound checked twice against one literal: small constants are
    compared by value). Every one in a sweep after the first (a sweep per merge, each from the
    start, took BERT's export quadratic time): the same merges, since the pruned graph then holds
    no unread operator, a merged one is no other's first, and one reads only what comes before it."""
    if not first_common_operator(graph):
        return False
    graph.prune()   # as after one merge: no operator left unread is taken as a first below
    _merge_common_operators(graph, every=True)
    return True


def first_common_operator(graph: Graph) -> bool:
    """The first of ``common_operators``' merges (``folds.fold`` tries its folds again after each)."""
    return _merge_common_operators(graph, every=False)


def _merge_common_operators(graph: Graph, every: bool) -> bool:
    seen: dict = {}
    merged: dict = {}   # id of a merged operator's output -> its first's
    for op in graph.ops:
        if merged:
            op.inputs = [merged.get(id(t), t) for t in op.inputs]
        key = (op.kind, tuple(map(_identity, op.inputs)), repr(sorted(op.options.items())),
               tuple((t.shape, t.dtype.str) for t in op.outputs))   # CASTs of one tensor to two types differ
        first = seen.setdefault(key, op)
        if first is not op:
            if not every:
                for old, new in zip(op.outputs, first.outputs):
                    graph.replace_uses(old, new)
                return True
            merged.update((id(old), new) for old, new in zip(op.outputs, first.outputs))
    graph.outputs = [merged.get(id(t), t) for t in graph.outputs]
    return bool(merged)


def _identity(t: Tensor | None):
    """What an operand is for ``common_operators``: a small constant its value (each Const node is
    legalized into a tensor of its own: a decode step's cache writes compare one position with 0
    per layer), any other tensor itself."""
    if t is not None and t.is_constant and t.data.nbytes <= 64:
        return t.dtype.str, t.shape, t.data.tobytes()
    return id(t)


def _drop_zero_bias(graph: Graph) -> None:
    """A FULLY_CONNECTED's bias left at zero is left out, as the converter writes it."""
    for op in graph.ops:
        if op.kind == "FULLY_CONNECTED" and op.inputs[2] is not None and not np.any(op.inputs[2].data):
            op.inputs[2] = None


def _reciprocal_products(graph: Graph) -> None:
    """x / c as x * (1 / c) for a constant c, as the converter writes it and XLA computes it."""
    for op in graph.ops:
        if op.kind == "DIV" and op.inputs[1].is_constant and op.inputs[1].dtype.kind == "f":
            op.kind = "MUL"
            with np.errstate(over="ignore", divide="ignore"):   # inf, as XLA's reciprocal
                op.inputs[1] = graph.constant((1 / op.inputs[1].data).astype(op.inputs[1].dtype))


# The fusions, in the order they are tried, and the rewrites made once after them.
FUSIONS = (common_operators, _mean, _identity_arithmetic, _reduction_of_ones, _pad_into_convolution,
           _affine_into_linear, _into_next_linear, _keep_reduced_dims, _softmax, log_softmax,
           _relu, _hard_swish, activation_into_producer, _gelu, _transposes_of_transposes, reshapes_of_reshapes,
           _scale_before_product)
FINISH = (_drop_zero_bias, _reciprocal_products)
# Those that change a value against the unfused operators' IEEE arithmetic for some input: rounded
# otherwise (a scale or mean's division folded into weights or a kernel's own formula: MEAN, GELU,
# HARD_SWISH; an offset folded into the next product's bias), over- or underflowing
# elsewhere (a power-of-two scale moved before a product), another NaN, infinity or zero's sign
# (SOFTMAX and LOG_SOFTMAX of a row with inf, RELU of NaN, x + 0 of -0). The rest move or share
# values, add a bias inside the sum it follows (``EXACT_PART``'s ``_bias_into_linear``, as TF's
# converter does in strict mode too), or compute x / c as JAX does (``_reciprocal_products``: XLA divides by a
# constant as a product by its reciprocal, measured bit for bit, and x / 1e-39 is inf in JAX too).
CHANGES_VALUES = frozenset({_mean, _identity_arithmetic, _affine_into_linear, _into_next_linear, _softmax,
                            log_softmax, _relu, _hard_swish, _gelu, _scale_before_product})
# The part of such a pass that changes none, made in its place where it is left out.
EXACT_PART = {_affine_into_linear: _bias_into_linear}
