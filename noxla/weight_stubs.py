"""Converting a graph whose large weights stand in as one-value constants, the real bytes spliced
into the flatbuffer afterwards.

TF's converter holds several copies of every constant while it converts (measured on SmolLM-135M's
shapes: about 10x the weights per signature, 9.45 GB peak for 0.54 GB of weights) and spends most
of its time moving them. A constant written as a single value (``float_val`` of one element) is
imported as a splat, which costs nothing whatever its shape, and the graph the converter sees is
otherwise the same: same ops, same shapes. Each weight's splat is a NaN with its own payload (a
marker), so that the buffer it becomes can be told apart and any folding of it (which turns it into
some other value, NaN again) is caught instead of spliced.

Splicing is exact only where the converter stores the constant as given. It transposes the
right-hand side of a ``MatMul`` for ``FULLY_CONNECTED`` (shape [out, in]): such weights are handed
to it already transposed, with ``transpose_b`` set, so that it has nothing to permute (a square
weight's permutation could not be seen from its shape). A weight is stubbed only when every op
that reads it is a ``MatMul`` (as its right-hand side) or a ``GatherV2`` (as its params); after
conversion each marker buffer must hold the splat unchanged, in a tensor of the stub's shape read
only as ``FULLY_CONNECTED``'s weights or ``GATHER``'s params. Anything else raises
``StubMismatch`` (the caller converts with the real weights instead).
"""
from __future__ import annotations

import numpy as np

STUB_BYTES = 64 * 1024  # the lowering's threshold for a captured weight (``Lowering``)
_QUIET_NAN = 0x7FC00000
_PAYLOADS = 1 << 22


class StubMismatch(Exception):
    """The converted model does not hold a stubbed weight as given: it cannot be spliced."""


class WeightStubs:
    """The weights stubbed in the graphs of one export (all its signatures): marker -> real array,
    as the flatbuffer must hold it. The same weight gets the same marker in every signature, so
    that merging the signatures shares its buffer before the bytes are spliced in."""

    def __init__(self):
        self._markers: dict = {}   # (weight's key, transposed) -> marker
        self.real: dict[int, np.ndarray] = {}
        self.shapes: dict[int, tuple] = {}
        self._pending: dict[str, tuple] = {}  # node name -> (key, array), until ``finish_graph_def``

    @staticmethod
    def takes(array: np.ndarray) -> bool:
        return (array.dtype == np.float32 and array.nbytes >= STUB_BYTES and array.ndim >= 1
                and not np.isnan(array).any())

    def stub(self, node, key, array: np.ndarray) -> None:
        """Write ``node`` (a Const) as ``array``'s stand-in; ``finish_graph_def`` gives it its marker."""
        self._pending[node.name] = (key, array)

    def finish_graph_def(self, graph_def, write_real) -> None:
        """Give each stubbed Const its marker, transposing MatMul right-hand sides; a Const read by
        any other op gets its real value (``write_real(node, array)``)."""
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
            if len(self._markers) >= _PAYLOADS - 1:
                raise StubMismatch("too many weights to mark")
            marker = _QUIET_NAN | (len(self._markers) + 1)
            self._markers[(key, transposed)] = marker
            self.real[marker] = array.T if transposed else array
            self.shapes[marker] = tuple(array.shape[::-1] if transposed else array.shape)
        tensor = node.attr["value"].tensor
        tensor.Clear()
        tensor.dtype = tf.float32.as_datatype_enum
        tensor.tensor_shape.CopyFrom(tf.TensorShape(self.shapes[marker]).as_proto())
        tensor.float_val.append(float(np.array(marker, np.uint32).view(np.float32)))

    def splice(self, model) -> None:
        """Put the real bytes into the marker buffers of ``model`` (an unpacked flatbuffer, ``ModelT``),
        after checking that the converter kept every one as given."""
        from tensorflow.lite.python import schema_py_generated as schema
        allowed = {(schema.BuiltinOperator.FULLY_CONNECTED, 1), (schema.BuiltinOperator.GATHER, 0)}
        marked = {}
        for b, buffer in enumerate(model.buffers):
            data = buffer.data
            if data is None or isinstance(data, list) or data.size < 4 or data.size % 4:
                continue
            words = np.frombuffer(np.ascontiguousarray(data).data, np.uint32)
            first = int(words[0])
            if first in self.real:
                if data.size != self.real[first].nbytes or not (words == first).all():
                    raise StubMismatch(f"buffer {b}: a stubbed weight came out changed")
                marked[b] = first
            elif (words[0] in self.real or words.size >= 16) and ((words & 0x7F800000) == 0x7F800000).all() \
                    and (words & 0x007FFFFF).all():
                # All NaN, a marker's or many: what folding a stub gives (a program's own all-NaN
                # constant of 16 or more lands here too, and is converted with the real weights).
                raise StubMismatch(f"buffer {b}: a stubbed weight was folded into another constant")
        if set(marked.values()) != set(self.real):
            raise StubMismatch("a stubbed weight is missing from the converted model (folded away)")
        for graph in model.subgraphs:
            for tensor in graph.tensors:
                if tensor.buffer in marked and tuple(tensor.shape) != self.shapes[marked[tensor.buffer]]:
                    raise StubMismatch(f"tensor {tensor.name!r}: a stubbed weight was reshaped")
            for op in graph.operators or []:
                code = model.operatorCodes[op.opcodeIndex]
                builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
                for i, t in enumerate(op.inputs if op.inputs is not None else []):
                    if t >= 0 and graph.tensors[t].buffer in marked and (builtin, i) not in allowed:
                        raise StubMismatch(f"a stubbed weight is read by operator {builtin} as input {i}")
        for b, marker in marked.items():
            model.buffers[b].data = np.ascontiguousarray(self.real[marker]).reshape(-1).view(np.uint8)


def _op_of(name: str, nodes: dict) -> str | None:
    node = nodes.get(name.split(":")[0].lstrip("^"))
    return node.op if node is not None else None
