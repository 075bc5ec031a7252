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
``StubMismatch`` (the caller converts with the real weights instead).

The real bytes are not copied on the way: a stand-in's buffer holds a placeholder (``attach``)
until ``noxla.large_tflite.serialized`` writes the weight from the array the lowering was given
(a transposed one made one weight at a time). With the lowering's own tensors only standing for
the weights (``interpreter.Weights``), an export holds the caller's weights and nothing more
(SmolLM-135M's shapes: 1.36 GB peak RSS, of which 1.15 GB are the imports and those weights).
"""
from __future__ import annotations

import numpy as np

STUB_BYTES = 64 * 1024  # the lowering's threshold for a captured weight (``Lowering``)


class StubMismatch(Exception):
    """The converted model does not read a stand-in as the weight it stands for."""


class WeightStubs:
    """The weights stubbed in the graphs of one export (all its signatures): marker -> real array,
    as the flatbuffer must hold it (the same weight has the same marker in every signature)."""

    def __init__(self, fold_scales: bool = True):
        # ``fold_scaled_fully_connected`` may run (not in strict mode: see there).
        self.fold_scales = fold_scales
        self._markers: dict = {}   # (weight's key, transposed) -> marker
        # marker -> the weight as the lowering holds it (a view, no copy); ``transposed`` markers
        # are stored transposed, made one weight at a time when written (``content``).
        self.real: dict[int, np.ndarray] = {}
        self.transposed: set[int] = set()
        self.inputs: dict[str, int] = {}  # the graph just finished: stand-in (Placeholder) -> marker
        self.shapes: dict[int, tuple] = {}
        self._pending: dict[str, tuple] = {}  # node name -> (key, array), until ``finish_graph_def``
        # The buffers' data ``attach`` gives the stand-ins: marker -> placeholder, id -> marker.
        self._placeholder_of: dict = {}  # marker (or ("scaled", marker, factor)) -> placeholder
        self._placeholders: dict[int, int] = {}
        self._digests: dict = {}  # (marker, scale) -> digest
        self._scales: dict[int, np.float32] = {}  # id of a ``scaled`` placeholder -> its factor

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
        returns only the cache: the converter would copy it several times before pruning it)."""
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
            marker = len(self._markers)
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
        from tensorflow.lite.python import schema_py_generated as schema
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
            code = model.operatorCodes[op.opcodeIndex]
            builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
            for i, t in enumerate(op.inputs if op.inputs is not None else []):
                if t in stubbed and (builtin, i) not in allowed:
                    raise StubMismatch(f"a stand-in is read by operator {builtin} as input {i}")
        graph.inputs = [t for t in graph.inputs if t not in stubbed]
        for t, marker in stubbed.items():
            buffer = schema.BufferT()
            buffer.data = self._placeholder(marker)
            graph.tensors[t].buffer = len(model.buffers)
            model.buffers.append(buffer)

    def _placeholder(self, marker: int) -> np.ndarray:
        """A buffer's data standing for the weight's bytes until they are written
        (``noxla.large_tflite.serialized``): as many bytes, all of them one zero in memory."""
        if marker not in self._placeholder_of:
            placeholder = np.broadcast_to(np.zeros((), np.uint8), (self.real[marker].nbytes,))
            self._placeholder_of[marker] = placeholder
            self._placeholders[id(placeholder)] = marker
        return self._placeholder_of[marker]

    def is_placeholder(self, data) -> bool:
        return id(data) in self._placeholders

    def content(self, data: np.ndarray) -> np.ndarray:
        """The bytes a buffer's data stands for (uint8, 1-D): a stand-in's weight, transposed
        when so stored, times its factor when ``scaled`` (a copy of that one weight), else ``data`` itself."""
        marker = self._placeholders.get(id(data))
        if marker is None:
            return data
        array = self.real[marker]
        if marker in self.transposed:
            array = np.ascontiguousarray(array.T)
        if id(data) in self._scales:
            array = array * self._scales[id(data)]
        return np.ascontiguousarray(array).reshape(-1).view(np.uint8)

    def digest(self, data: np.ndarray, digest) -> bytes:
        """``digest(content(data))``, computed once per stand-in (and factor)."""
        marker = self._placeholders.get(id(data))
        if marker is None:
            return digest(data)
        key = (marker, self._scales.get(id(data)))
        if key not in self._digests:
            self._digests[key] = digest(self.content(data))
        return self._digests[key]

    def scaled(self, data: np.ndarray, factor: np.float32) -> np.ndarray | None:
        """A buffer's data standing for ``data``'s float32 values times ``factor`` (a power of two),
        or None where a product would leave the normal range (so be rounded or overflow): a new
        placeholder for a stand-in's (made when written, as its weight is), else the values."""
        marker = self._placeholders.get(id(data))
        values = (self.real[marker] if marker is not None else data).view(np.float32)
        if id(data) in self._scales:
            return None  # scaled twice: never made by one fold pass
        if not _exactly_scaled(values, factor):
            return None
        if marker is None:
            return (values * factor).view(np.uint8)
        key = ("scaled", marker, float(factor))  # one placeholder per weight and factor, as per weight
        if key not in self._placeholder_of:
            placeholder = np.broadcast_to(np.zeros((), np.uint8), (self.real[marker].nbytes,))
            self._placeholder_of[key] = placeholder
            self._placeholders[id(placeholder)] = marker
            self._scales[id(placeholder)] = factor
        return self._placeholder_of[key]

def _op_of(name: str, nodes: dict) -> str | None:
    node = nodes.get(name.split(":")[0].lstrip("^"))
    return node.op if node is not None else None


def fold_constant_fully_connected(model, stubs: WeightStubs) -> None:
    """Compute each float32 ``FULLY_CONNECTED`` whose inputs are all constants once ``attach`` has
    made the stand-ins constants (``model``: an unpacked flatbuffer, ``ModelT``): its output becomes
    a constant and the operator goes. The converter rewrites ``fc(x + c, w, b)`` (a LayerNorm's
    offset before a projection) as ``fc(x, w, fc(c, w, b))`` and folds the inner one when ``w`` is
    a constant; a stand-in left it one operator per projection (BERT-base: 45 more)."""
    from tensorflow.lite.python import schema_py_generated as schema
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
    code = model.operatorCodes[op.opcodeIndex]
    options = op.builtinOptions
    if (max(code.builtinCode, code.deprecatedBuiltinCode) != schema.BuiltinOperator.FULLY_CONNECTED
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


def _exactly_scaled(values: np.ndarray, factor: np.float32) -> bool:
    """Whether every ``values * factor`` (float32, factor a power of two) is that product exactly:
    finite, and not rounded off in the subnormal range (dividing back gives the value)."""
    product = values * factor
    return bool(np.isfinite(product).all() and np.array_equal(product / factor, values))


def fold_scaled_fully_connected(model, stubs: WeightStubs) -> None:
    """``MUL(FULLY_CONNECTED(x, w, b), c)`` for a float32 scalar constant ``c`` that is a power of
    two, the product read by that MUL alone: ``FULLY_CONNECTED(x, w * c, b * c)``, as the converter
    folds it when ``w`` is a constant; a stand-in kept the MUL (BERT-base: the queries' 1 / 8 that
    ``lowering_rules.fusion.scaled_product`` moves there, 12 ops over 128 x 768 values).
    Exact as that fold is: a power of two only moves exponents, so each product and partial sum is
    the same number scaled, unless one leaves the normal range; ``w * c`` itself must be exact (no
    weight rounded off as a subnormal). Not in strict mode (``WeightStubs.fold_scales``)."""
    from tensorflow.lite.python import schema_py_generated as schema
    if not stubs.fold_scales:
        return
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    for graph in model.subgraphs:
        readers: dict[int, int] = {}
        producer: dict[int, object] = {}
        for op in graph.operators or []:
            for t in op.inputs if op.inputs is not None else []:
                readers[t] = readers.get(t, 0) + 1
            for t in op.outputs if op.outputs is not None else []:
                producer[t] = op
        for t in graph.outputs if graph.outputs is not None else []:
            readers[t] = readers.get(t, 0) + 1
        buffer_users: dict[int, int] = {}
        for g in model.subgraphs:
            for tensor in g.tensors:
                buffer_users[tensor.buffer] = buffer_users.get(tensor.buffer, 0) + 1
        folded = set()
        for op in graph.operators or []:
            fc = _scaled_fully_connected(model, graph, op, codes, producer, readers, stubs, schema)
            if fc is None:
                continue
            fc_op, weight, bias = fc
            fc_op.inputs = list(fc_op.inputs)  # a read-only view of the flatbuffer's bytes
            for i, data in ((1, weight), (2, bias)):
                if data is None:
                    continue
                t = fc_op.inputs[i]
                if readers[t] > 1 or buffer_users[graph.tensors[t].buffer] > 1:  # another reads it as it is
                    copy = schema.TensorT()
                    copy.name, copy.type = graph.tensors[t].name + b"_scaled", graph.tensors[t].type
                    copy.shape = list(graph.tensors[t].shape)
                    copy.buffer = len(model.buffers)
                    model.buffers.append(schema.BufferT())
                    readers[t] -= 1
                    fc_op.inputs[i] = t = len(graph.tensors)
                    graph.tensors.append(copy)
                    readers[t], buffer_users[copy.buffer] = 1, 1
                model.buffers[graph.tensors[t].buffer].data = data
            fc_op.outputs = list(op.outputs)
            folded.add(id(op))
        graph.operators = [op for op in graph.operators or [] if id(op) not in folded]


def _scaled_fully_connected(model, graph, op, codes, producer, readers, stubs: WeightStubs, schema):
    """For ``op`` a MUL that ``fold_scaled_fully_connected`` folds: the FULLY_CONNECTED, its
    weight's and bias's data scaled (the bias None where there is none), else None."""
    plain = schema.ActivationFunctionType.NONE
    if (codes[op.opcodeIndex] != schema.BuiltinOperator.MUL or op.inputs is None or len(op.inputs) != 2
            or not isinstance(op.builtinOptions, schema.MulOptionsT)
            or op.builtinOptions.fusedActivationFunction != plain):
        return None
    for product, scale in ((op.inputs[0], op.inputs[1]), (op.inputs[1], op.inputs[0])):
        fc_op = producer.get(product)
        factor = _constant_float32(model, graph, scale, stubs, schema)
        if fc_op is not None and factor is not None and factor.size == 1 and readers[product] == 1:
            break
    else:
        return None
    factor = np.float32(factor.reshape(()))
    options = fc_op.builtinOptions
    if (codes[fc_op.opcodeIndex] != schema.BuiltinOperator.FULLY_CONNECTED
            or not isinstance(options, schema.FullyConnectedOptionsT) or options.fusedActivationFunction != plain
            or options.weightsFormat != schema.FullyConnectedOptionsWeightsFormat.DEFAULT
            or not (np.isfinite(factor) and factor > 0 and np.frexp(factor)[0] == 0.5)
            or list(graph.tensors[product].shape) != list(graph.tensors[op.outputs[0]].shape)):
        return None
    datas = []
    for i in (1, 2):
        t = fc_op.inputs[i] if i < len(fc_op.inputs) else -1
        if t < 0:
            datas.append(None)
            continue
        data = model.buffers[graph.tensors[t].buffer].data
        if (graph.tensors[t].type != schema.TensorType.FLOAT32 or data is None or isinstance(data, list)
                or data.size == 0):
            return None
        scaled = stubs.scaled(data, factor)
        if scaled is None:
            return None
        datas.append(scaled)
    if datas[0] is None:
        return None
    return fc_op, datas[0], datas[1]
