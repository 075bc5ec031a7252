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
"""
from __future__ import annotations

import numpy as np

STUB_BYTES = 64 * 1024  # the lowering's threshold for a captured weight (``Lowering``)


class StubMismatch(Exception):
    """The converted model does not read a stand-in as the weight it stands for."""


class WeightStubs:
    """The weights stubbed in the graphs of one export (all its signatures): marker -> real array,
    as the flatbuffer must hold it (the same weight has the same marker in every signature)."""

    def __init__(self):
        self._markers: dict = {}   # (weight's key, transposed) -> marker
        self.real: dict[int, np.ndarray] = {}
        self.inputs: dict[str, int] = {}  # the graph just finished: stand-in (Placeholder) -> marker
        self.shapes: dict[int, tuple] = {}
        self._pending: dict[str, tuple] = {}  # node name -> (key, array), until ``finish_graph_def``

    @staticmethod
    def takes(array: np.ndarray) -> bool:
        return (array.dtype == np.float32 and array.nbytes >= STUB_BYTES and array.ndim >= 1
                and not np.isnan(array).any())

    def stub(self, node, key, array: np.ndarray) -> None:
        """Make ``node`` (a Const) ``array``'s stand-in; ``finish_graph_def`` decides."""
        self._pending[node.name] = (key, array)

    def finish_graph_def(self, graph_def, write_real) -> None:
        """Turn each stubbed Const into a Placeholder, transposing MatMul right-hand sides; a Const
        read by any other op gets its real value (``write_real(node, array)``)."""
        readers: dict[str, list] = {}
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
            if not uses or not (matmul or gather) or len(flips) > 1 or array.ndim != 2 and matmul:
                write_real(node, array)
                continue
            transposed = matmul and flips == {False}
            if transposed:
                for r, _, _ in uses:
                    r.attr["transpose_b"].b = True
            self._write_marker(node, key, array, transposed)
        self._pending.clear()

    def _write_marker(self, node, key, array: np.ndarray, transposed: bool) -> None:
        import tensorflow as tf
        marker = self._markers.get((key, transposed))
        if marker is None:
            marker = len(self._markers)
            self._markers[(key, transposed)] = marker
            # One contiguous copy of a transposed weight, however many signatures read it.
            self.real[marker] = np.ascontiguousarray(array.T) if transposed else array
            self.shapes[marker] = tuple(self.real[marker].shape)
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
            buffer.data = self.real[marker].reshape(-1).view(np.uint8)
            graph.tensors[t].buffer = len(model.buffers)
            model.buffers.append(buffer)


def _op_of(name: str, nodes: dict) -> str | None:
    node = nodes.get(name.split(":")[0].lstrip("^"))
    return node.op if node is not None else None
