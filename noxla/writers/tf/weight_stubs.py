"""Converting a graph whose large weights are inputs (stand-ins), the real bytes attached to the
flatbuffer afterwards.

TF's converter holds several copies of every constant while it converts (measured on SmolLM-135M's
shapes: about 10x the weights per signature, 9.45 GB peak for 0.54 GB of weights) and spends most
of its time moving them. A weight that only ``MatMul`` (as its right-hand side) or ``GatherV2`` (as
its params) reads becomes a Placeholder of its shape: the converter turns those ops into
``FULLY_CONNECTED`` and ``GATHER`` with the stand-in as an input, and the input is then made a
constant tensor holding the weight's bytes. Measured on a Llama decoder: the same operators, and
outputs bit-identical to converting the real constants.

Such a graph is exact only where the converter would store the constant as given. It transposes the
right-hand side of a ``MatMul`` for ``FULLY_CONNECTED`` (shape [out, in]): those weights are handed
over already transposed, with ``transpose_b`` set. After conversion each stand-in must be read only
as ``FULLY_CONNECTED``'s weights or ``GATHER``'s params, in the stub's shape; anything else raises
``StubMismatch`` (the caller converts with the real weights instead). What the converter folds
into a constant weight and cannot into a stand-in (a constant scale on either side of a projection,
a projection of constants) is folded once the real bytes are attached (``fold_into_stand_ins``).

The real bytes are not copied on the way: a stand-in's buffer holds a placeholder (``attach``)
until ``noxla.writers.tflite.flatbuffer.large.serialized`` writes the weight from the array the lowering was given
(a transposed one made one weight at a time). With the lowering's own tensors only standing for
the weights (``interpreter.Weights``), an export holds the caller's weights and nothing more
(SmolLM-135M's shapes: 1.36 GB peak RSS, of which 1.15 GB are the imports and those weights).
"""
from __future__ import annotations

import numpy as np

from noxla.writers.tf.weight_stub_readers import untie
from noxla.writers.tflite.flatbuffer.merge import buffer_holders, builtin_code

STUB_BYTES = 64 * 1024  # the lowering's threshold for a captured weight (``Lowering``)


class StubMismatch(Exception):
    """The converted model does not read a stand-in as the weight it stands for."""


class WeightStubs:
    """The weights stubbed in the graphs of one export (all its signatures): marker -> real array,
    as the flatbuffer must hold it (the same weight has the same marker in every signature)."""

    def __init__(self, reassociate: bool = False):
        # Fold a constant [1, in] scale before a projection into its weight, which the converter
        # does only for a rank-1 one: (x * c) @ w becomes x @ (w * c), rounded otherwise (not in
        # strict mode; ``fold_constant_scales``).
        self.reassociate = reassociate
        self._markers: dict = {}   # (weight's key, transposed) -> marker
        # marker -> the weight as the lowering holds it (a view, no copy); ``transposed`` markers
        # are stored transposed, made one weight at a time when written (``content``).
        self.real: dict[int, np.ndarray] = {}
        self.transposed: set[int] = set()
        self.inputs: dict[str, int] = {}  # the graph just finished: stand-in (Placeholder) -> marker
        self.shapes: dict[int, tuple] = {}
        self._pending: dict[str, tuple] = {}  # node name -> (key, array), until ``finish_graph_def``
        # The buffers' data ``attach`` gives the stand-ins: marker -> placeholder, id -> marker.
        self._placeholder_of: dict[int, np.ndarray] = {}
        self._placeholders: dict[int, int] = {}
        self._digests: dict[int, bytes] = {}
        # A stand-in with constant scales folded in (``fold_constant_scales``): marker -> (the
        # unscaled weight's marker, ((axis, factors), ...) applied in order), and back.
        self._scales: dict[int, tuple] = {}
        self._scaled: dict[tuple, int] = {}
        # Stand-ins joined along their first axis (``noxla.writers.tflite.flatbuffer.projections``): marker -> the
        # parts' markers, and back.
        self._joins: dict[int, tuple] = {}
        self._joined: dict[tuple, int] = {}

    @staticmethod
    def takes(array: np.ndarray) -> bool:
        return (array.dtype == np.float32 and array.nbytes >= STUB_BYTES and array.ndim >= 1
                and not np.isnan(array).any())

    def stub(self, node, key, array: np.ndarray) -> None:
        """Make ``node`` (a Const) ``array``'s stand-in; ``finish_graph_def`` decides."""
        self._pending[node.name] = (key, array)

    def finish_graph_def(self, graph_def, write_real) -> None:
        """Turn each stubbed Const into a Placeholder, transposing MatMul right-hand sides; a Const
        read by any other op gets its real value (``write_real(node, array)``), and one that nothing
        reads is dropped (a weight the signature does not need, e.g. the logits' in a prefill that
        returns only the cache: the converter would copy it several times before pruning it).
        A tied embedding's readers are first put in those forms (``noxla.writers.tf.weight_stub_readers``)."""
        untie(graph_def, self._pending)
        readers: dict[str, list] = {}
        unused = set()
        graph_def_nodes = {node.name: node for node in graph_def.node}
        for node in graph_def.node:
            for i, name in enumerate(node.input):
                readers.setdefault(name.split(":")[0].lstrip("^"), []).append((node, i, name))
        for node in graph_def.node:
            if node.name not in self._pending:
                continue
            key, array = self._pending.pop(node.name)
            uses = readers.get(node.name, [])
            # Read with a constant, it would be folded: a computed input is what keeps it a weight.
            computed = all(not name.startswith("^") and _op_of(r.input[1 - i], graph_def_nodes) != "Const"
                           for r, i, name in uses if i < 2)
            matmul = computed and all(r.op == "MatMul" and i == 1 for r, i, _ in uses)
            gather = computed and all(r.op == "GatherV2" and i == 0 for r, i, _ in uses)
            flips = {bool(r.attr["transpose_b"].b) for r, _, _ in uses} if matmul else set()
            if not uses:
                unused.add(node.name)
                continue
            if not (matmul or gather) or len(flips) > 1 or array.ndim != 2 and matmul:
                write_real(node, array)
                continue
            transposed = matmul and flips == {False}
            if transposed:
                for r, _, _ in uses:
                    r.attr["transpose_b"].b = True
            self._write_marker(node, key, array, transposed)
        self._pending.clear()
        for i in reversed([i for i, node in enumerate(graph_def.node) if node.name in unused]):
            del graph_def.node[i]

    def _write_marker(self, node, key, array: np.ndarray, transposed: bool) -> None:
        import tensorflow as tf
        marker = self._markers.get((key, transposed))
        if marker is None:
            marker = len(self.real)
            self._markers[(key, transposed)] = marker
            self.real[marker] = array
            if transposed:
                self.transposed.add(marker)
            self.shapes[marker] = tuple(reversed(array.shape)) if transposed else tuple(array.shape)
        node.op = "Placeholder"
        node.ClearField("input")
        node.ClearField("attr")
        node.attr["dtype"].type = tf.float32.as_datatype_enum
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(self.shapes[marker]).as_proto())
        self.inputs[node.name] = marker

    def input_specs(self) -> list:
        """The stand-ins of the graph just finished, as inputs for the converter."""
        import tensorflow as tf
        return [tf.TensorSpec(self.shapes[m], tf.float32, name=f"{name}:0") for name, m in self.inputs.items()]

    def attach(self, model) -> None:
        """Turn the stand-in inputs of ``model`` (an unpacked flatbuffer, ``ModelT``, converted from
        the graph just finished) into constants holding the real bytes, after checking that each is
        read only as ``FULLY_CONNECTED``'s weights or ``GATHER``'s params, in the stub's shape."""
        from noxla.writers.tflite.flatbuffer.schema import schema
        allowed = {(schema.BuiltinOperator.FULLY_CONNECTED, 1), (schema.BuiltinOperator.GATHER, 0)}
        graph = model.subgraphs[0]
        names = {name.encode(): m for name, m in self.inputs.items()}
        self.inputs = {}
        stubbed = {t: names[graph.tensors[t].name] for t in graph.inputs if graph.tensors[t].name in names}
        if len(stubbed) != len(names):
            raise StubMismatch("a stand-in is missing from the converted model's inputs")
        for t, marker in stubbed.items():
            if tuple(graph.tensors[t].shape) != self.shapes[marker]:
                raise StubMismatch(f"tensor {graph.tensors[t].name!r}: a stand-in was reshaped")
        for op in graph.operators or []:
            builtin = builtin_code(model, op)
            for i, t in enumerate(op.inputs if op.inputs is not None else []):
                if t in stubbed and (builtin, i) not in allowed:
                    raise StubMismatch(f"a stand-in is read by operator {builtin} as input {i}")
        graph.inputs = [t for t in graph.inputs if t not in stubbed]
        for t, marker in stubbed.items():
            buffer = schema.BufferT()
            buffer.data = self._placeholder(marker)
            graph.tensors[t].buffer = len(model.buffers)
            model.buffers.append(buffer)

    def hold(self, array: np.ndarray) -> np.ndarray:
        """The placeholder of a constant that noxla's graph writes (``noxla.writers.tflite.model``),
        ``array`` as the flatbuffer stores it, maybe a view (a weight transposed): its bytes made
        when written. The same memory in the same layout, whichever signature reads it, has one
        placeholder, and ``array`` is kept alive, so that its address names it."""
        key = ("held", array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str)
        marker = self._markers.get(key)
        if marker is None:
            marker = len(self.real)
            self._markers[key] = marker
            self.real[marker] = array
            self.shapes[marker] = tuple(array.shape)
        return self._placeholder(marker)

    def _placeholder(self, marker: int) -> np.ndarray:
        """A buffer's data standing for the weight's bytes until they are written
        (``noxla.writers.tflite.flatbuffer.large.serialized``): as many bytes, all of them one zero in memory."""
        if marker not in self._placeholder_of:
            placeholder = np.broadcast_to(np.zeros((), np.uint8), (self.real[marker].nbytes,))
            self._placeholder_of[marker] = placeholder
            self._placeholders[id(placeholder)] = marker
        return self._placeholder_of[marker]

    def is_placeholder(self, data) -> bool:
        return id(data) in self._placeholders

    def content(self, data: np.ndarray) -> np.ndarray:
        """The bytes a buffer's data stands for (uint8, 1-D): a stand-in's weight, transposed
        when so stored (a copy of that one weight), else ``data`` itself."""
        marker = self._placeholders.get(id(data))
        if marker is None:
            return data
        return np.ascontiguousarray(self._weight(marker)).reshape(-1).view(np.uint8)

    def sample(self, data: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``content(data)[positions]``, read from a stand-in's weight as it is held (not made, a
        transposed copy, for a few bytes of it)."""
        marker = self._placeholders.get(id(data))
        if marker is None:
            return np.ascontiguousarray(data).reshape(-1).view(np.uint8)[positions]
        base, scales = self._scales.get(marker, (marker, ()))
        if base in self._joins:  # joined after every fold, so never sampled by noxla: made whole
            return self.content(data)[positions]
        array = self.real[base]
        held = array.T if base in self.transposed else array
        size = array.dtype.itemsize
        index = np.unravel_index(positions // size, held.shape)
        elements = np.ascontiguousarray(held[index])
        # A scaled weight's elements as ``_weight`` makes them, one float32 product per scale (not
        # the whole weight made: a fold asks for samples of each scaled weight, SmolLM-135M 300).
        for axis, factors in scales:
            elements = np.multiply(elements, factors[index[axis]] if factors.size > 1 else factors[0],
                                   dtype=np.float32)
        return elements.view(np.uint8).reshape(-1, size)[np.arange(len(positions)), positions % size]

    def _weight(self, marker: int) -> np.ndarray:
        if marker in self._joins:
            return np.concatenate([self._weight(part) for part in self._joins[marker]])
        if marker in self._scales:
            base, scales = self._scales[marker]
            array = self._weight(base)
            for axis, factors in scales:
                # float32 products, as the converter folds a constant scale into a weight.
                array = np.multiply(array, factors.reshape((-1,) + (1,) * (array.ndim - 1 - axis)),
                                    dtype=np.float32)
            return array
        array = self.real[marker]
        return np.ascontiguousarray(array.T) if marker in self.transposed else array

    def scaled(self, data, axis: int, factors: np.ndarray):
        """The placeholder of ``data``'s weight (a stand-in's placeholder) times ``factors``
        (float32, broadcast along ``axis`` of the weight as the flatbuffer holds it): made when
        written, like the weight."""
        base = self._placeholders[id(data)]
        if base in self._scales:  # scales folded one after another apply in that order
            base, earlier = self._scales[base]
        else:
            earlier = ()
        scales = (*earlier, (axis, np.ascontiguousarray(factors, np.float32).reshape(-1)))
        key = (base, tuple((a, f.tobytes()) for a, f in scales))
        if key not in self._scaled:
            marker = len(self.real)
            self._scaled[key] = marker
            self._scales[marker] = (base, scales)
            self.real[marker] = self.real[base]  # its size; never written as it is
            self.shapes[marker] = self.shapes[base]
        return self._placeholder(self._scaled[key])

    def joined(self, parts, shapes) -> np.ndarray:
        """The placeholder of the weights of ``parts`` stacked along their first axis: made when
        written, like the weights. A part: a stand-in's placeholder, or a constant's bytes (uint8)
        holding a float32 weight of its shape in ``shapes``."""
        markers = tuple(self._marker_of(data, shape) for data, shape in zip(parts, shapes, strict=True))
        if markers not in self._joined:
            marker = len(self.real)
            self._joined[markers] = marker
            self._joins[marker] = markers
            shape = (sum(self.shapes[m][0] for m in markers), *self.shapes[markers[0]][1:])
            self.real[marker] = np.broadcast_to(np.float32(0), shape)  # its size; never written as it is
            self.shapes[marker] = shape
        return self._placeholder(self._joined[markers])

    def _marker_of(self, data: np.ndarray, shape) -> int:
        if id(data) in self._placeholders:
            return self._placeholders[id(data)]
        marker = len(self.real)
        self.real[marker] = data.view(np.float32).reshape(shape)  # a view of the constant's bytes
        self.shapes[marker] = tuple(shape)
        return marker

    def digest(self, data: np.ndarray, digest) -> bytes:
        """``digest(content(data))``, computed once per stand-in."""
        marker = self._placeholders.get(id(data))
        if marker is None:
            return digest(data)
        if marker not in self._digests:
            self._digests[marker] = digest(self.content(data))
        return self._digests[marker]


def _op_of(name: str, nodes: dict) -> str | None:
    node = nodes.get(name.split(":")[0].lstrip("^"))
    return node.op if node is not None else None


def fold_constant_fully_connected(model, stubs: WeightStubs) -> None:
    """Compute each float32 ``FULLY_CONNECTED`` whose inputs are all constants once ``attach`` has
    made the stand-ins constants (``model``: an unpacked flatbuffer, ``ModelT``): its output becomes
    a constant and the operator goes. The converter rewrites ``fc(x + c, w, b)`` (a LayerNorm's
    offset before a projection) as ``fc(x, w, fc(c, w, b))`` and folds the inner one when ``w`` is
    a constant; a stand-in left it one operator per projection (BERT-base: 45 more)."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    for graph in model.subgraphs:
        kept = []
        for op in graph.operators or []:
            value = _folded_fully_connected(model, graph, op, stubs, schema)
            if value is None:
                kept.append(op)
                continue
            buffer = schema.BufferT()
            buffer.data = value.reshape(-1).view(np.uint8)
            graph.tensors[op.outputs[0]].buffer = len(model.buffers)
            model.buffers.append(buffer)
        # A folded operator's own constants (an offset and a bias: vectors) stay in the file
        # unread, a few KB; its weight is the outer projection's too.
        graph.operators = kept


def _constant_float32(model, graph, t: int, stubs: WeightStubs, schema):
    if t < 0 or graph.tensors[t].type != schema.TensorType.FLOAT32:
        return None
    data = model.buffers[graph.tensors[t].buffer].data
    if data is None or isinstance(data, list) or data.size == 0:
        return None
    return np.asarray(stubs.content(data)).view(np.float32).reshape(graph.tensors[t].shape)


def _folded_fully_connected(model, graph, op, stubs: WeightStubs, schema):
    """The output of ``op`` if it is a plain float32 FULLY_CONNECTED of constants, else None."""
    options = op.builtinOptions
    if (builtin_code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED
            or not isinstance(options, schema.FullyConnectedOptionsT)
            or options.fusedActivationFunction != schema.ActivationFunctionType.NONE
            or options.weightsFormat != schema.FullyConnectedOptionsWeightsFormat.DEFAULT
            or len(op.outputs) != 1 or graph.tensors[op.outputs[0]].type != schema.TensorType.FLOAT32):
        return None
    # The input first: most projections read an activation, and a stand-in's weight is made (a
    # copy, transposed) only for one whose input is a constant.
    x = _constant_float32(model, graph, op.inputs[0], stubs, schema)
    if x is None:
        return None
    w = _constant_float32(model, graph, op.inputs[1], stubs, schema)
    has_bias = len(op.inputs) > 2 and op.inputs[2] >= 0
    b = _constant_float32(model, graph, op.inputs[2], stubs, schema) if has_bias else None
    if w is None or (has_bias and b is None):
        return None
    y = x.reshape(-1, w.shape[1]).astype(np.float64) @ w.T.astype(np.float64)
    if b is not None:
        y = y + b
    return np.ascontiguousarray(y.astype(np.float32).reshape(graph.tensors[op.outputs[0]].shape))


def fold_constant_offsets(model, stubs: WeightStubs) -> None:
    """Rewrite each constant float32 ``ADD`` read only as the input of projections whose weights
    are stand-ins, ``fc(x + c, w, b)`` with ``c`` one offset per input feature, as
    ``fc(x, w, b + c @ w.T)`` (``c`` a scalar too): what TF 2.21's converter does given the real weight (a LayerNorm's
    offset before a projection). TF 2.19's converter rewrote it with a stand-in too and left the
    inner projection of constants (``fold_constant_fully_connected``); 2.21's leaves the ADD."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    for graph in model.subgraphs:
        ops = graph.operators or []
        readers: dict = {}
        for op in ops:
            for i, t in enumerate(_indices(op.inputs)):
                readers.setdefault(t, []).append((op, i))
        boundary = {t for ts in (graph.inputs, graph.outputs) for t in _indices(ts)}
        folded, replaced = set(), []
        for add in ops:
            if (builtin_code(model, add) != schema.BuiltinOperator.ADD or len(add.inputs) != 2
                    or not isinstance(add.builtinOptions, schema.AddOptionsT)
                    or add.builtinOptions.fusedActivationFunction != schema.ActivationFunctionType.NONE):
                continue
            split = _one_constant_operand(model, graph, add, stubs, schema)
            if split is None:
                continue
            (x, c), out = split, int(add.outputs[0])
            fcs = readers.get(out, [])
            if (out in boundary or not fcs or list(graph.tensors[out].shape) != list(graph.tensors[x].shape)
                    or (c.size != 1 and (c.size != c.shape[-1] or c.size != graph.tensors[x].shape[-1]))
                    or not all(i == 0 and _stand_in_projection(model, graph, op, stubs, schema) for op, i in fcs)):
                continue
            for fc, _ in fcs:
                w = _constant_float32(model, graph, fc.inputs[1], stubs, schema)
                has_bias = len(fc.inputs) > 2 and fc.inputs[2] >= 0
                bias = _constant_float32(model, graph, fc.inputs[2], stubs, schema) if has_bias else 0.0
                row = np.broadcast_to(c.reshape(1, -1), (1, w.shape[1]))
                offset = (row.astype(np.float64) @ w.T.astype(np.float64)).reshape(-1)
                value = (offset + bias).astype(np.float32)
                fc.inputs = list(fc.inputs)  # the unpacked model's are read-only views of its bytes
                if has_bias:
                    replaced.append(fc.inputs[2])
                    fc.inputs[2] = _new_constant(model, graph, fc.inputs[2], value)
                else:
                    bias_tensor = _new_constant(model, graph, fc.outputs[0], value)
                    graph.tensors[bias_tensor].shape = np.asarray([value.size], np.int32)
                    fc.inputs = [*fc.inputs[:2], bias_tensor]
                fc.inputs[0] = x
            folded.add(id(add))
            replaced += [t for t in add.inputs if t != x]
        if folded:
            graph.operators = [op for op in ops if id(op) not in folded]
            _drop_unread(model, graph, replaced)


def _one_constant_operand(model, graph, op, stubs: WeightStubs, schema):
    """(the other operand's index, the constant as float32) of a binary ``op`` with exactly one
    constant float32 operand, else None."""
    constants = [_constant_float32(model, graph, t, stubs, schema) for t in op.inputs]
    if (constants[0] is None) == (constants[1] is None):
        return None
    return (int(op.inputs[1]), constants[0]) if constants[1] is None else (int(op.inputs[0]), constants[1])


def _stand_in_fc(model, graph, op, stubs: WeightStubs, schema) -> bool:
    """``op`` is a plain float32 FULLY_CONNECTED whose weight is a stand-in."""
    options = op.builtinOptions
    if (builtin_code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED
            or not isinstance(options, schema.FullyConnectedOptionsT)
            or options.weightsFormat != schema.FullyConnectedOptionsWeightsFormat.DEFAULT
            or len(op.outputs) != 1 or graph.tensors[op.outputs[0]].type != schema.TensorType.FLOAT32):
        return False
    data = model.buffers[graph.tensors[op.inputs[1]].buffer].data
    return data is not None and not isinstance(data, list) and stubs.is_placeholder(data)


def _stand_in_projection(model, graph, op, stubs: WeightStubs, schema) -> bool:
    """A stand-in FULLY_CONNECTED (``_stand_in_fc``) with a constant bias or none."""
    if not _stand_in_fc(model, graph, op, stubs, schema):
        return False
    has_bias = len(op.inputs) > 2 and op.inputs[2] >= 0
    return not has_bias or _constant_float32(model, graph, op.inputs[2], stubs, schema) is not None


def fold_into_stand_ins(model, stubs: WeightStubs) -> None:
    """What the converter folds into a constant weight and could not into a stand-in, once
    ``attach`` has made the stand-ins constants: offsets before projections (``fold_constant_offsets``),
    projections of constants (``fold_constant_fully_connected``), then constant scales
    (``fold_constant_scales``), in that order because a projection's bias may be one of the former (a
    LayerNorm's offset through the projection) until it is folded, and the scale must then scale it
    too (BERT-base's queries' 1 / 8)."""
    fold_constant_offsets(model, stubs)
    fold_constant_fully_connected(model, stubs)
    fold_constant_scales(model, stubs)


# The fused activations a MUL may hand over to the FULLY_CONNECTED it is folded into.
_FC_ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def fold_constant_scales(model, stubs: WeightStubs) -> None:
    """Fold each constant float32 ``MUL`` next to a ``FULLY_CONNECTED`` whose weight is a stand-in
    into that weight, as the converter does with a constant weight: ``fc(x * c, w, b)``, ``c`` a
    scalar or one factor per input, becomes ``fc(x, w * c[None, :], b)``; ``fc(x, w, b) * c``, ``c``
    a scalar or one factor per output, becomes ``fc(x, w * c[:, None], b * c)``. With a stand-in it
    left the MUL (a sampling VAE's sqrt(2) on its latent). The converter's folded weight is the
    float32 product, bit for bit (measured, TF 2.19), and so is this one. It folds one factor per
    input only from a rank-1 constant, and the lowering broadcasts a weight to [1, in]: that one
    (an RMSNorm's weight: 60 of SmolLM-135M's 1,860 decode operators) is folded only with
    ``stubs.reassociate`` (not in strict mode: JAX rounds x * c first). The scaled weight is made when written (one
    weight at a time, ``WeightStubs.scaled``); a weight nothing reads any more is not written. A
    weight something else reads too is not scaled before the projection (a second copy of it)."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    shared = _shared_weights(model, stubs)
    for graph in model.subgraphs:
        while _fold_scales(model, graph, stubs, schema, shared):
            pass


def _fold_scales(model, graph, stubs: WeightStubs, schema, shared: set) -> bool:
    """Fold the foldable MULs of ``graph`` in one pass over its operators; whether any was. A fold
    can make foldable only a MUL producing its input (a chain of scales before a projection), an
    earlier operator: the next pass finds it. One pass per fold, each mapping the graph anew, took
    3.0-3.7 CPU s on SmolLM-135M's two signatures (121 folds of 2,000 operators); this, 0.1 s."""
    ops = graph.operators or []
    producer, readers = {}, {}
    for op in ops:
        # Python ints, not the unpacked model's numpy ones: 3x faster to hash.
        for t in _indices(op.outputs):
            producer[t] = op
        for i, t in enumerate(_indices(op.inputs)):
            readers.setdefault(t, []).append((op, i))
    boundary = {t for ts in (graph.inputs, graph.outputs) for t in _indices(ts)}

    def stand_in_fc(op):
        return _stand_in_fc(model, graph, op, stubs, schema)

    folded, replaced = set(), []
    for mul in ops:
        if (builtin_code(model, mul) != schema.BuiltinOperator.MUL or len(mul.inputs) != 2
                or not isinstance(mul.builtinOptions, schema.MulOptionsT)):
            continue
        split = _one_constant_operand(model, graph, mul, stubs, schema)
        if split is None:
            continue
        (x, c), out = split, int(mul.outputs[0])
        if list(graph.tensors[out].shape) != list(graph.tensors[x].shape):
            continue
        activation = mul.builtinOptions.fusedActivationFunction
        fc = producer.get(x)
        has_bias = fc is not None and len(fc.inputs) > 2 and fc.inputs[2] >= 0
        bias = _constant_float32(model, graph, fc.inputs[2], stubs, schema) if has_bias else None
        if (fc is not None and stand_in_fc(fc) and x not in boundary and len(readers[x]) == 1
                and fc.builtinOptions.fusedActivationFunction == schema.ActivationFunctionType.NONE
                and activation in [getattr(schema.ActivationFunctionType, a) for a in _FC_ACTIVATIONS]
                and (c.size == 1 or c.shape[-1] == c.size == graph.tensors[x].shape[-1])
                and (bias is not None or not has_bias)):
            # After the projection: a factor per output row of the weight, and of the bias.
            fc.inputs = list(fc.inputs)  # the unpacked model's are read-only views of its bytes
            replaced += fc.inputs[1:]
            factors = np.broadcast_to(c.reshape(-1), (graph.tensors[fc.inputs[1]].shape[0],))
            _scale_weight(model, graph, fc, stubs, 0, factors)
            if has_bias:
                fc.inputs[2] = _new_constant(model, graph, fc.inputs[2], np.multiply(bias, factors, dtype=np.float32))
            fc.builtinOptions.fusedActivationFunction = activation
            fc.outputs = list(mul.outputs)
            producer[out] = fc  # a scale after this one sees the projection as its producer
            del producer[x], readers[x]
        elif (activation == schema.ActivationFunctionType.NONE and out not in boundary and readers.get(out)
                and (c.size == 1 or c.size == c.shape[-1] == graph.tensors[x].shape[-1]
                     and (c.ndim == 1 or stubs.reassociate))
                and all(i == 0 and stand_in_fc(op) for op, i in readers[out])
                and not any(id(model.buffers[graph.tensors[op.inputs[1]].buffer].data) in shared
                            for op, _ in readers[out])):
            # Before the projections: every one reading the scaled input takes it unscaled, its
            # weight scaled per input feature (an RMSNorm's weight before the q/k/v or gate/up
            # projections: one MUL less per norm).
            replaced += [op.inputs[1] for op, _ in readers[out]]
            for op, _ in readers[out]:
                op.inputs = [x, *op.inputs[1:]]
                _scale_weight(model, graph, op, stubs, 1, c.reshape(-1))
            readers[x] = [r for r in readers[x] if r[0] is not mul] + [(op, 0) for op, _ in readers.pop(out)]
        else:
            continue
        folded.add(id(mul))
        # The scale too: unread, it would stay in each signature's model, where merging shares
        # only constants something reads (SmolLM-135M: 60 RMSNorm weights twice, 138 KB).
        replaced += [t for t in mul.inputs if t != x]
    if not folded:
        return False
    graph.operators = [op for op in ops if id(op) not in folded]
    _drop_unread(model, graph, replaced)
    return True


def _indices(tensors) -> list:
    """An operator's or graph's tensor indices (a numpy array, a list or None) as a list of ints."""
    if tensors is None:
        return []
    return tensors.tolist() if isinstance(tensors, np.ndarray) else list(tensors)


def _shared_weights(model, stubs: WeightStubs) -> set:
    """The ids of the stand-ins' placeholders whose bytes ``model`` reads more than once (in any
    subgraph, as any input): scaled, such a weight would be written twice. Tied embeddings: the
    lm_head's weight holds the GATHER's params (another stand-in: the lowering transposes the
    embedding for the projection; SmolLM-135M: 113 MB). Bucketed by size and a sample of the bytes,
    compared in full only within a bucket (almost only equal weights share one). ``model`` is one
    signature's: a weight one signature gathers and another only projects is not seen here (each
    signature of noxla.llm reads its embedding both ways)."""
    buckets: dict = {}
    keys: dict = {}  # id(data) -> its bucket, each buffer's sampled once
    for g in model.subgraphs:
        for op in g.operators or []:
            for t in _indices(op.inputs):
                data = model.buffers[g.tensors[t].buffer].data if t >= 0 else None
                if data is None or isinstance(data, list) or data.size == 0:
                    continue
                if id(data) not in keys:
                    positions = np.linspace(0, data.nbytes - 1, min(64, data.nbytes)).astype(np.int64)
                    keys[id(data)] = (data.nbytes, stubs.sample(data, positions).tobytes())
                buckets.setdefault(keys[id(data)], []).append(data)
    shared = set()
    for reads in buckets.values():
        for data in reads:
            if stubs.is_placeholder(data) and sum(
                    1 for other in reads if other is data
                    or np.array_equal(stubs.content(other), stubs.content(data))) > 1:
                shared.add(id(data))
    return shared


def _scale_weight(model, graph, fc, stubs: WeightStubs, axis: int, factors: np.ndarray) -> None:
    """Point ``fc`` at a new tensor: its stand-in weight times ``factors`` along ``axis``."""
    weight = graph.tensors[fc.inputs[1]]
    fc.inputs[1] = _new_constant(model, graph, fc.inputs[1], stubs.scaled(model.buffers[weight.buffer].data,
                                                                          axis, factors))


def _new_constant(model, graph, like: int, data: np.ndarray) -> int:
    """A new tensor like ``graph.tensors[like]`` holding ``data`` (a float32 array or a weight's
    placeholder) in a new buffer; its index."""
    import copy

    from noxla.writers.tflite.flatbuffer.schema import schema
    tensor = copy.copy(graph.tensors[like])
    tensor.name = (tensor.name or b"") + b"/folded"  # names stay unique
    buffer = schema.BufferT()
    buffer.data = data if data.dtype == np.uint8 else np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    tensor.buffer = len(model.buffers)
    model.buffers.append(buffer)
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def _drop_unread(model, graph, tensors) -> None:
    """Empty the buffers of ``tensors`` (constants of ``graph`` a fold replaced) that no operator
    reads any more and no other tensor holds: a stand-in's is written as a whole weight."""
    read = {t for op in graph.operators or [] for t in (op.inputs if op.inputs is not None else [])}
    held = buffer_holders(model)
    for t in set(tensors) - read:
        buffer = graph.tensors[t].buffer
        if buffer > 0 and held[buffer] == 1:
            model.buffers[buffer].data = None
