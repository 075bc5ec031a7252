"""RESHAPEs and TRANSPOSEs that move nothing, removed from an unpacked TFLite flatbuffer
(``ModelT``): pairs that wrap an elementwise chain and restore the shape (``remove_reshape_pairs``),
squeezes of leading unit axes in front of BATCH_MATMUL (``read_caches_in_batch_matmul``), and
transposes of transposes (``fold_transpose_pairs``). Flatbuffer objects in, flatbuffer objects out.

JAX's attention reshapes its scores to add a unit axis for the mask, adds it, takes the softmax
and reshapes back; TF keeps both reshapes, and LiteRT runs each as an op that moves nothing
(60 of the 306 RESHAPEs in SmolLM-135M's decode step); Flax's attention reshapes between its
scale and its softmax too. Run in the first reshape's input layout, the chain gives
the same values: an elementwise op pairs the same elements, a softmax over an unchanged last axis
normalizes the same rows. Whether another operand's broadcast pairs the same elements in the new
layout is decided exactly, on its element indices, not by cases of shapes."""
from __future__ import annotations

import numpy as np

from noxla.writers.tflite.flatbuffer.merge import buffer_holders, builtin_code
from noxla.writers.tflite.flatbuffer.schema import schema

_OP = schema.BuiltinOperator
# Ops whose output element i depends on input element i only (and on the other operand's element
# that broadcasting pairs with it); none has options that name an axis or a layout.
_UNARY = {_OP.ABS, _OP.CAST, _OP.CEIL, _OP.COS, _OP.ELU, _OP.EXP, _OP.FLOOR, _OP.GELU, _OP.HARD_SWISH,
          _OP.LEAKY_RELU, _OP.LOG, _OP.LOGISTIC, _OP.NEG, _OP.RELU, _OP.RELU6, _OP.RELU_0_TO_1,
          _OP.RELU_N1_TO_1, _OP.ROUND, _OP.RSQRT, _OP.SIGN, _OP.SIN, _OP.SQRT, _OP.SQUARE, _OP.TANH}
_BINARY = {_OP.ADD, _OP.DIV, _OP.FLOOR_DIV, _OP.FLOOR_MOD, _OP.MAXIMUM, _OP.MINIMUM, _OP.MUL, _OP.POW,
           _OP.SQUARED_DIFFERENCE, _OP.SUB}
# Normalize over the last axis: the same rows in both layouts when that axis keeps its length.
_LAST_AXIS = {_OP.SOFTMAX, _OP.LOG_SOFTMAX}
_TYPES = {schema.TensorType.FLOAT32, schema.TensorType.INT32}
# The pairing check builds an index array of the broadcast's size: cheap below this.
_MAX_CHECKED = 1 << 22
# Every TFLite elementwise kernel broadcasts up to 4-D at least (ADD and MUL up to 6-D, POW only
# 4-D); a chain moved above the rank it ran at could pass its kernel's limit, so above 4-D a chain
# may only lose axes.
_ANY_KERNEL_RANK = 4


def remove_reshape_pairs(model) -> int:
    """Rewrite every ``RESHAPE (a -> b); chain; RESHAPE (-> a)`` in ``model``'s subgraphs so the
    chain runs on the first reshape's input and writes the last reshape's output, until none is
    left; a last reshape to ``a`` without its leading unit axes stays, reading the chain's output
    (``read_caches_in_batch_matmul`` removes it before a batched product). The chain: ops each the
    only reader of the previous output, unary or binary elementwise (the other operand any tensor
    whose broadcast pairs the same elements in ``a``), a softmax if the shape it ran in ends in
    ``a``'s last length, or more reshapes (none restoring ``a``); float32/int32 only, static shapes
    only. Returns the number of reshapes removed."""
    removed = 0
    for graph in model.subgraphs:
        orphans: set[int] = set()
        while True:
            found = _rewrite_pass(model, graph, orphans)
            if not found:
                break
            removed += found
        if orphans:
            _drop_orphans(model, graph, orphans)
    return removed


def read_caches_in_batch_matmul(model) -> int:
    """Let every BATCH_MATMUL read the input of a RESHAPE that only drops leading unit axes,
    ``[1, ..., 1, *b] -> b``, instead of its output, and remove the reshape once nothing else
    reads it. Returns the number of reshapes removed.

    A decoder squeezes its updated KV cache, ``cache[0]``, before the attention's products. The
    cache is a signature output, so LiteRT cannot alias the reshape to it and copies it, every
    layer and every token: 60 copies of 196 KB per SmolLM-135M decode step, 10% of LiteRT-LM's
    decode time on one thread. BATCH_MATMUL broadcasts its batch axes, so the unit axes give the
    same products; its output gains them, and so does every op after it up to a RESHAPE (or
    another product): elementwise ops, whose other operands broadcast the same way against leading
    unit axes, and a softmax over the unchanged last axis. Where any reader would need more (a
    reduction's axes, a graph output's shape, a rank above 4), nothing is rewritten."""
    removed = 0
    for graph in model.subgraphs:
        orphans: set[int] = set()
        ops = graph.operators or []
        readers, pinned = _readers(ops), set(graph.outputs if graph.outputs is not None else [])
        drop = set()
        for j, op in enumerate(ops):
            if builtin_code(model, op) != _OP.RESHAPE:
                continue
            source, squeezed = op.inputs[0], op.outputs[0]
            a, b = static_shape(graph.tensors[source]), static_shape(graph.tensors[squeezed])
            if a is None or b is None or len(a) <= len(b) or len(a) > _ANY_KERNEL_RANK \
                    or a[len(a) - len(b):] != b or any(d != 1 for d in a[:len(a) - len(b)]):
                continue
            products = readers.get(squeezed, [])
            if not products or squeezed in pinned or any(
                    builtin_code(model, ops[k]) != _OP.BATCH_MATMUL or squeezed not in ops[k].inputs[:2]
                    for k in products):
                continue
            grown: dict[int, int] = {}  # tensor -> the unit axes it gains
            if not all(_grows(model, graph, ops, readers, pinned, k, {squeezed: len(a) - len(b)}, grown)
                       for k in products):
                continue
            for k in products:
                ops[k].inputs = [int(source) if t == squeezed else int(t) for t in ops[k].inputs]
            for t, extra in grown.items():
                tensor = graph.tensors[t]
                tensor.shape = np.array((1,) * extra + tuple(tensor.shape), dtype=np.int32)
                if tensor.shapeSignature is not None:
                    tensor.shapeSignature = np.array((1,) * extra + tuple(tensor.shapeSignature), dtype=np.int32)
            for k in products:
                readers.setdefault(source, []).append(k)
            readers[squeezed] = []
            drop.add(j)
            orphans.update(t for t in op.inputs[1:] if t >= 0)
            orphans.add(squeezed)
        if drop:
            graph.operators = [op for j, op in enumerate(ops) if j not in drop]
            _drop_orphans(model, graph, orphans)
            removed += len(drop)
    return removed


def _grows(model, graph, ops, readers, pinned, j, extra: dict, grown: dict) -> bool:
    """Whether ``ops[j]``, its inputs grown by the leading unit axes ``extra`` gives them, still
    computes the same values with its output grown likewise, and so on down its readers; ``grown``
    gains the output tensors and their unit axes."""
    op, code = ops[j], builtin_code(model, ops[j])
    if code == _OP.RESHAPE:
        return op.inputs[0] in extra and all(t not in extra for t in op.inputs[1:])
    if op.outputs is None or len(op.outputs) != 1 or op.intermediates is not None and len(op.intermediates):
        return False
    inputs = [t for t in op.inputs if t >= 0]
    shapes = [static_shape(graph.tensors[t]) for t in inputs]
    out = op.outputs[0]
    old = static_shape(graph.tensors[out])
    if old is None or any(s is None for s in shapes) or out in pinned:
        return False
    if code == _OP.BATCH_MATMUL:
        if len(inputs) != 2:
            return False
    elif not (code in _UNARY or code in _BINARY or code in _LAST_AXIS and len(inputs) == 1):
        return False
    rank = max(len(s) + extra.get(t, grown.get(t, 0)) for t, s in zip(inputs, shapes))
    gain = rank - len(old)
    if rank > _ANY_KERNEL_RANK or gain < 0 or grown.get(out, gain) != gain:
        return False
    if gain == 0 or out in grown:
        return True
    grown[out] = gain
    return all(_grows(model, graph, ops, readers, pinned, k, {out: gain}, grown) for k in readers.get(out, []))


def fold_transpose_pairs(model) -> int:
    """Make every TRANSPOSE that reads another TRANSPOSE's output read that one's input, with the
    two permutations composed (none at all when they cancel), and remove the first once nothing
    reads it; a BATCH_MATMUL reads through a TRANSPOSE of its operand's last two axes by its adj
    flag. Returns the number of TRANSPOSEs removed.

    TF's converter folds such a pair only when the first transpose has no other reader. A keras-hub
    decoder's cache (noxla.llm.keras) is updated in the contract's layout, moved to keras-hub's for
    its attention and moved back for the step's output: the first move has two readers, so both
    survived, two more copies of the cache per layer and token. Composing permutations moves the
    same elements to the same places."""
    removed = 0
    for graph in model.subgraphs:
        ops = graph.operators or []
        made = {int(op.outputs[0]): j for j, op in enumerate(ops) if builtin_code(model, op) == _OP.TRANSPOSE}
        pinned = set(graph.outputs if graph.outputs is not None else [])
        writer = {int(t): j for j, op in enumerate(ops) for t in (op.outputs if op.outputs is not None else [])}
        renamed: dict[int, int] = {}
        dropped: set[int] = set()
        orphans: set[int] = set()
        for j, op in enumerate(ops):
            first = ops[made[op.inputs[0]]] if builtin_code(model, op) == _OP.TRANSPOSE and op.inputs[0] in made \
                and made[op.inputs[0]] not in dropped else None
            inner, outer = (None, None) if first is None else (_permutation(model, graph, first),
                                                               _permutation(model, graph, op))
            if inner is None or outer is None:
                continue
            composed = [inner[d] for d in outer]
            source, output = int(first.inputs[0]), int(op.outputs[0])
            if composed == list(range(len(composed))) and output not in pinned:
                renamed[output] = source
                orphans.add(output)
                dropped.add(j)
            elif composed == list(range(len(composed))) and source not in pinned and source in writer:
                # The pair's output is a graph output: the op that made the source writes it.
                maker = ops[writer[source]]
                maker.outputs = [output if t == source else int(t) for t in maker.outputs]
                renamed[source] = output
                orphans.add(source)
                dropped.add(j)
            else:
                op.inputs = [source, int32_constant(model, graph, composed)]
        live = {t: ops[k] for t, k in made.items() if k not in dropped}
        for j, op in enumerate(ops):
            op.inputs = [renamed.get(int(t), int(t)) for t in op.inputs]
            if builtin_code(model, op) == _OP.BATCH_MATMUL and j not in dropped:
                _absorb_swaps(model, graph, op, live)
        readers = _readers([op for j, op in enumerate(ops) if j not in dropped])
        transposes = set(made.values())
        for j, op in enumerate(ops):
            if j not in dropped and j in transposes and not readers.get(int(op.outputs[0])) \
                    and int(op.outputs[0]) not in pinned:
                dropped.add(j)
        if dropped:
            for j in dropped:
                orphans.update(int(t) for t in [*ops[j].inputs, *ops[j].outputs] if t >= 0)
            graph.operators = [op for j, op in enumerate(ops) if j not in dropped]
            _drop_orphans(model, graph, orphans)
            removed += len(dropped)
    return removed


def _absorb_swaps(model, graph, op, made) -> None:
    """A BATCH_MATMUL operand that a TRANSPOSE of its last two axes made is read untransposed, its
    adj_x / adj_y flipped (the kernel reads either layout: a keras-hub decoder's keys)."""
    options = op.builtinOptions
    if not isinstance(options, schema.BatchMatMulOptionsT):
        return
    for i, flag in ((0, "adjX"), (1, "adjY")):
        swap = made.get(op.inputs[i])
        perm = None if swap is None else _permutation(model, graph, swap)
        if perm is None or len(perm) < 2 or perm != [*range(len(perm) - 2), len(perm) - 1, len(perm) - 2]:
            continue
        op.inputs = [swap.inputs[0] if k == i else t for k, t in enumerate(op.inputs)]
        setattr(options, flag, not getattr(options, flag))


def _permutation(model, graph, op) -> list[int] | None:
    """A TRANSPOSE's constant permutation, or None."""
    tensor = graph.tensors[op.inputs[1]]
    data = model.buffers[tensor.buffer].data if tensor.buffer > 0 else None
    if data is None or tensor.type != schema.TensorType.INT32:
        return None
    return [int(d) for d in np.frombuffer(bytes(data), dtype="<i4")]


def int32_constant(model, graph, values) -> int:
    """A new constant int32 vector tensor holding ``values``; its index."""
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.asarray(values, dtype="<i4").tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    tensor = schema.TensorT()
    tensor.shape, tensor.type = np.array([len(values)], np.int32), schema.TensorType.INT32
    tensor.buffer = len(model.buffers) - 1
    tensor.name = f"noxla_constant_{len(graph.tensors)}".encode()
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def _readers(ops) -> dict[int, list[int]]:
    """Tensor -> the indices of the ops that read it."""
    readers: dict[int, list[int]] = {}
    for j, op in enumerate(ops):
        for t in set(op.inputs if op.inputs is not None else []):
            if t >= 0:
                readers.setdefault(t, []).append(j)
    return readers


def static_shape(tensor) -> tuple | None:
    """A static shape, or None (dynamic: a -1 in its signature, or no rank)."""
    if not tensor.hasRank and (tensor.shape is None or len(tensor.shape) == 0):
        return None
    if tensor.shapeSignature is not None and any(int(d) < 0 for d in tensor.shapeSignature):
        return None
    return tuple(int(d) for d in (tensor.shape if tensor.shape is not None else []))


def _rewrite_pass(model, graph, orphans: set[int]) -> int:
    """One sweep over ``graph``: the chains found in it that share no op, rewritten. ``orphans``
    gains the tensors only the removed reshapes referred to. Returns the reshapes removed."""
    ops = graph.operators or []
    readers, pinned = _readers(ops), set(graph.outputs if graph.outputs is not None else [])
    touched: set[int] = set()
    drop: set[int] = set()
    for j, op in enumerate(ops):
        if j in touched or builtin_code(model, op) != _OP.RESHAPE:
            continue
        found = _chain(model, graph, ops, readers, pinned, j)
        if found is None:
            continue
        links, reshapes, squeezes = found
        if touched.intersection(k for k, _ in links) or touched.intersection(reshapes):
            continue
        source = op.inputs[0]
        shape = graph.tensors[source].shape
        signature = graph.tensors[source].shapeSignature
        value = source  # the chain's value so far, in the source's layout
        for k, read in links:
            ops[k].inputs = [int(value) if t == read else int(t) for t in ops[k].inputs]
            value = ops[k].outputs[0]
        for k, _ in links if squeezes else links[:-1]:
            tensor = graph.tensors[ops[k].outputs[0]]
            tensor.shape = np.array(shape, dtype=np.int32)
            tensor.shapeSignature = None if signature is None else np.array(signature, dtype=np.int32)
        last = links[-1][0]
        if squeezes:  # the last reshape stays, squeezing the chain's output (read_caches_in_batch_matmul's form)
            end = ops[reshapes[-1]]
            orphans.update(t for k in reshapes[:-1] for t in [*ops[k].inputs, *ops[k].outputs])
            orphans.add(end.inputs[0])
            end.inputs = [int(ops[last].outputs[0]), *(int(t) for t in end.inputs[1:])]
            reshapes = reshapes[:-1]
        else:
            # The chain's last op writes the last reshape's output: its name, and its place among
            # the graph's outputs if it is one, stay.
            orphans.add(ops[last].outputs[0])
            orphans.update(t for k in reshapes for t in [*ops[k].inputs, *ops[k].outputs])
            ops[last].outputs = [int(ops[reshapes[-1]].outputs[0])]
        touched.update(k for k, _ in links)
        touched.update(reshapes)
        drop.update(reshapes)
    if drop:
        graph.operators = [op for j, op in enumerate(ops) if j not in drop]
    return len(drop)


def _chain(model, graph, ops, readers, pinned, first) -> tuple[list, list[int], bool] | None:
    """After the RESHAPE ``ops[first]``: the chain's elementwise ops (index, the tensor it reads
    the chain's value from), the chain's reshapes (``first``, any between the ops, and, last,
    the one that restores the first's input shape or that shape without its leading unit axes),
    and whether the last one drops them (noxla's graph writes the reshape back and the squeeze
    before a batched product as one); None if they do not form the pattern."""
    reshape = ops[first]
    source, current = reshape.inputs[0], reshape.outputs[0]
    a = static_shape(graph.tensors[source])
    if a is None or int(np.prod(a)) > _MAX_CHECKED:
        return None
    links: list[tuple[int, int]] = []
    reshapes = [first]
    while True:
        b = static_shape(graph.tensors[current])
        if b is None or current in pinned or len(readers.get(current, [])) != 1:
            return None
        j = readers[current][0]
        op = ops[j]
        code = builtin_code(model, op)
        if code == _OP.RESHAPE:
            if op.inputs[0] != current or j in reshapes:
                return None
            reshapes.append(j)
            current = op.outputs[0]
            c = static_shape(graph.tensors[current])
            if c == a:
                return (links, reshapes, False) if links else None
            if links and c is not None and len(c) < len(a) and a[len(a) - len(c):] == c \
                    and all(d == 1 for d in a[:len(a) - len(c)]):
                return links, reshapes, True
            continue
        if len(a) > max(len(b), _ANY_KERNEL_RANK) or not _elementwise_here(model, graph, op, code, current, a, b):
            return None
        links.append((j, current))
        current = op.outputs[0]


def _elementwise_here(model, graph, op, code, current, a, b) -> bool:
    """Whether ``op``, reading ``current`` (shape ``b``), gives the same values run in shape ``a``."""
    if op.outputs is None or len(op.outputs) != 1 or op.intermediates is not None and len(op.intermediates):
        return False
    output = graph.tensors[op.outputs[0]]
    if static_shape(output) != b or output.type not in _TYPES:
        return False
    inputs = [t for t in op.inputs if t >= 0]
    if any(graph.tensors[t].type not in _TYPES for t in inputs):
        return False
    if code in _UNARY or code in _LAST_AXIS:
        if inputs != [current]:
            return False
        return code in _UNARY or bool(a and b) and a[-1] == b[-1]
    if code not in _BINARY or len(inputs) != 2:
        return False
    others = [t for t in inputs if t != current]
    return all(_pairs_alike(static_shape(graph.tensors[t]), a, b) for t in others)


def _pairs_alike(other, a, b) -> bool:
    """Whether ``other`` broadcast to ``b`` and laid out as ``a`` holds the elements it holds
    broadcast to ``a`` (and it broadcasts to ``a`` without growing it)."""
    if other is None or int(np.prod(other)) > _MAX_CHECKED:
        return False
    try:
        if np.broadcast_shapes(other, a) != tuple(a):
            return False
        index = np.arange(int(np.prod(other)), dtype=np.int32).reshape(other)
        return np.array_equal(np.broadcast_to(index, b).reshape(a), np.broadcast_to(index, a))
    except ValueError:
        return False


def _drop_orphans(model, graph, orphans: set[int]) -> None:
    """Remove the tensors of ``orphans`` that no op and no graph input or output refers to any more
    (the removed reshapes' outputs and shapes), renumbering the rest; empty the buffers only they
    held."""
    index = model.subgraphs.index(graph)
    used = {int(entry.tensorIndex) for signature in model.signatureDefs or [] if signature.subgraphIndex == index
            for entry in (signature.inputs or []) + (signature.outputs or [])}
    used.update(graph.inputs if graph.inputs is not None else [], graph.outputs if graph.outputs is not None else [])
    for op in graph.operators or []:
        for field in (op.inputs, op.outputs, op.intermediates):
            used.update(t for t in (field if field is not None else []) if t >= 0)
    gone = {t for t in orphans if t >= 0 and t not in used}
    if not gone:
        return
    held = buffer_holders(model)
    number = {}
    kept = []
    for t, tensor in enumerate(graph.tensors):
        if t not in gone:
            number[t] = len(kept)
            kept.append(tensor)
        elif tensor.buffer > 0 and held[tensor.buffer] == 1:
            model.buffers[tensor.buffer].data = None
    graph.tensors = kept

    def renumber(indices):
        return None if indices is None else [number[t] if t >= 0 else t for t in indices]
    graph.inputs, graph.outputs = renumber(graph.inputs), renumber(graph.outputs)
    for op in graph.operators or []:
        op.inputs, op.outputs = renumber(op.inputs), renumber(op.outputs)
        op.intermediates = renumber(op.intermediates)
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex == index:
            for entry in (signature.inputs or []) + (signature.outputs or []):
                entry.tensorIndex = number[entry.tensorIndex]
