"""Infinite constants through the TFLite converter, exact.

The converter reads a float constant holding an infinity as the largest finite float (importing
the GraphDef: float16's 65504 shows in its own dump), and folds what it computes from it on
that value. In LiteRT ``jnp.where(jnp.abs(x) == jnp.inf, 0.0, x)`` compared |x| with FLT_MAX and
returned inf for x = inf (JAX: 0), and JAX 0.12's ``jnp.sinc(inf)``, which compares |x| with an
infinite literal, was NaN (JAX: 0). So each such Const of the GraphDef the converter gets is handed
to it as an input of its shape and dtype (``take``), which it cannot read or fold, and the input is
then made a constant holding the exact value (``attach``), as ``noxla.writers.tf.weight_stubs`` does for large
weights. Only programs holding an infinite constant change: what computes on it computes at run time,
but its RESHAPEs are folded again and a one-element one read by broadcasting ops becomes a scalar, as
the converter would have stored them (LiteRT.js's WebGPU delegate runs neither form of them on the GPU).
"""
from __future__ import annotations

import numpy as np

from noxla.errors import ExportError

_FLOAT_TYPES = {1: np.float32, 2: np.float64, 19: np.float16}  # DataType DT_FLOAT, DT_DOUBLE, DT_HALF
_TFLITE_TYPES = {0: np.float32, 1: np.float16, 10: np.float64}  # TensorType FLOAT32, FLOAT16, FLOAT64


def take(graph_def) -> dict[str, np.ndarray]:
    """Turn every Const of ``graph_def`` (its main graph) holding an infinity, and every value that
    constants alone compute holding one (``_fold_infinite``), into a Placeholder of its dtype and
    shape; returns each one's name and value."""
    _fold_infinite(graph_def)
    taken = {}
    for node in graph_def.node:
        if node.op != "Const" or node.input or node.attr["dtype"].type not in _FLOAT_TYPES:
            continue
        value = _value(node.attr["value"].tensor, _FLOAT_TYPES[node.attr["dtype"].type])
        if value is None or not np.isinf(value).any():
            continue
        shape = node.attr["value"].tensor.tensor_shape
        dtype = node.attr["dtype"].type
        node.op = "Placeholder"
        node.ClearField("attr")
        node.attr["dtype"].type = dtype
        node.attr["shape"].shape.CopyFrom(shape)
        taken[node.name] = np.array(value)
    return taken


# Float values the converter would fold are computed here up to this many elements at once; a larger
# one is checked for an infinity first (``_may_make_infinity``, then TF computes only whether it holds one).
_MAX_FOLDED = 1 << 20
_TYPE_ATTRS = ("T", "DstT", "dtype", "out_type", "Tout")
# Ops whose float outputs hold no infinity that their inputs do not: a value constants compute through
# these alone holds only the infinities of the Consts it reads, which ``take`` hands over anyway.
_MOVES = frozenset({"Const", "Identity", "Snapshot", "Transpose", "Reshape", "ExpandDims", "Squeeze", "Slice",
                    "StridedSlice", "GatherV2", "Gather", "GatherNd", "ConcatV2", "Pack", "Unpack", "Split",
                    "SplitV", "Tile", "BroadcastTo", "Fill", "Pad", "PadV2", "MirrorPad", "ReverseV2",
                    "Select", "SelectV2", "Maximum", "Minimum", "Neg", "Abs", "Sign", "Floor", "Ceil", "Round",
                    "Rint", "ZerosLike", "OnesLike", "Shape", "Range", "OneHot"})


def _fold_infinite(graph_def) -> None:
    """Each float value of the main graph that constants alone compute and that a computed op reads
    (or the program returns) becomes a Const of its value where that holds an infinity: the
    converter folds such a computation itself and writes the infinity as the largest finite float
    (``atanh(integer_pow(x, 0))``, whose power is a constant 1, returned FLT_MAX where JAX has inf,
    for a value of any size)."""
    from noxla.writers.tflite.converter.transpose_moves import constant_nodes, node_name
    constant = constant_nodes(graph_def.node)
    read_by_computed, read, other_outputs = set(), set(), set()
    for node in graph_def.node:
        for i in node.input:
            read.add(node_name(i))
            if node.name not in constant:
                read_by_computed.add(node_name(i))
            if ":" in i and not i.endswith(":0"):
                other_outputs.add(node_name(i))  # a Const has one output: such a node stays
    frontier = [n for n in graph_def.node if n.name in constant and n.op != "Const" and n.name not in other_outputs
                and (n.name in read_by_computed or n.name not in read)
                and any(n.attr[a].type in _FLOAT_TYPES for a in _TYPE_ATTRS if a in n.attr)]
    if not frontier:
        return
    import tensorflow as tf
    names = [n.name for n in frontier]
    pruned = _ancestors(graph_def, names)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(pruned, name="")
    tensors = {n: graph.get_tensor_by_name(f"{n}:0") for n in names}
    tensors = {n: t for n, t in tensors.items() if t.dtype.as_numpy_dtype in _FLOAT_TYPES.values()
               and t.shape.is_fully_defined()}
    small = {n: t for n, t in tensors.items() if t.shape.num_elements() <= _MAX_FOLDED}
    nodes, memo = {n.name: n for n in pruned.node}, {}
    large = [n for n in tensors if n not in small and _may_make_infinity(nodes, n, memo)]
    if not small and not large:
        return
    with tf.compat.v1.Session(graph=graph) as session:
        values = dict(zip(small, session.run(list(small.values())))) if small else {}
        for name in large:  # one at a time, and fetched only when it holds an infinity
            with graph.as_default():
                infinite = tf.reduce_any(tf.math.is_inf(tensors[name]))
            if session.run(infinite):
                values[name] = session.run(tensors[name])
    for node in frontier:
        value = values.get(node.name)
        if value is None or not np.isinf(value).any():
            continue
        node.op = "Const"
        node.ClearField("attr")
        del node.input[:]
        node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))


def _may_make_infinity(nodes, name: str, memo: dict) -> bool:
    """Whether the constant-only value ``name`` is computed through an op not in ``_MOVES`` (a float
    Cast that narrows counts: 1e39 is inf in float32). Iterative: a weight's chain may be deep."""
    from noxla.writers.tflite.converter.transpose_moves import node_name
    stack = [name]
    while stack:
        current = stack[-1]
        if current in memo:
            stack.pop()
            continue
        node = nodes[current]
        if not (node.op in _MOVES or node.op == "Cast" and not _narrows(node)):
            memo[current] = True
            stack.pop()
            continue
        inputs = [node_name(i) for i in node.input]
        waiting = [i for i in inputs if i not in memo]
        if waiting:
            stack.extend(waiting)
            continue
        memo[current] = any(memo[i] for i in inputs)
        stack.pop()
    return memo[name]


def _narrows(cast) -> bool:
    """Whether a Cast can turn a finite value infinite: to float16, or from float64 to float32 or bfloat16."""
    source, target = cast.attr["SrcT"].type, cast.attr["DstT"].type
    return target == 19 or (target in (1, 14) and source == 2)  # DT_HALF; DT_FLOAT or DT_BFLOAT16 from DT_DOUBLE


def _ancestors(graph_def, names):
    """A GraphDef of the nodes ``names`` and those they read (control inputs too), and the functions."""
    from noxla.writers.tflite.converter.transpose_moves import node_name
    nodes = {n.name: n for n in graph_def.node}
    kept, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name not in kept:
            kept.add(name)
            stack.extend(node_name(i) for i in nodes[name].input)
    pruned = type(graph_def)()
    pruned.versions.CopyFrom(graph_def.versions)
    pruned.library.CopyFrom(graph_def.library)  # a loop of constants reads its bodies
    pruned.node.extend(n for n in graph_def.node if n.name in kept)
    return pruned


def input_specs(taken: dict[str, np.ndarray]) -> list:
    """The taken constants, as inputs for the converter."""
    import tensorflow as tf
    return [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype), name=f"{name}:0") for name, v in taken.items()]


def attach(model, taken: dict[str, np.ndarray]) -> None:
    """Make each taken constant's input of ``model`` (``ModelT``, unpacked; its main subgraph) a
    constant tensor holding the exact value, no longer an input."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    if not taken:
        return
    graph = model.subgraphs[0]
    names = {name.encode(): value for name, value in taken.items()}
    kept, attached = [], set()
    for t in graph.inputs:
        tensor = graph.tensors[t]
        value = names.get(tensor.name)
        if value is None:
            kept.append(t)
            continue
        if tensor.type not in _TFLITE_TYPES or tuple(int(d) for d in tensor.shape) != value.shape:
            raise ExportError(f"the TFLite converter changed the infinite constant {tensor.name!r}")
        buffer = schema.BufferT()
        buffer.data = np.ascontiguousarray(value.astype(_TFLITE_TYPES[tensor.type])).view(np.uint8).reshape(-1)
        model.buffers.append(buffer)
        tensor.buffer = len(model.buffers) - 1
        attached.add(t)
    graph.inputs = kept
    _as_scalars(model, graph, attached | _fold_reshapes(model, graph))


def _fold_reshapes(model, graph) -> set[int]:
    """Give the output of each RESHAPE, EXPAND_DIMS or SQUEEZE of a constant its input's buffer (the
    same bytes) and drop the op: what the converter folded before the constant was an input. A
    broadcast literal arrives as a RESHAPE of it, and LiteRT.js's WebGPU delegate runs a RESHAPE of a
    constant on wasm. Returns the outputs made constants."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code
    from noxla.writers.tflite.flatbuffer.schema import schema
    moves = {schema.BuiltinOperator.RESHAPE, schema.BuiltinOperator.EXPAND_DIMS, schema.BuiltinOperator.SQUEEZE}
    outputs = set(graph.outputs if graph.outputs is not None else [])
    kept, folded = [], set()
    for op in graph.operators or []:
        source = graph.tensors[op.inputs[0]] if op.inputs is not None and len(op.inputs) else None
        out = op.outputs[0] if op.outputs is not None and len(op.outputs) == 1 else None
        if (builtin_code(model, op) in moves and source is not None and source.buffer > 0
                and model.buffers[source.buffer].data is not None and out is not None and out not in outputs
                and graph.tensors[out].type == source.type):
            graph.tensors[out].buffer = source.buffer
            folded.add(out)
            continue
        kept.append(op)
    graph.operators = kept
    return folded


_BROADCASTING = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE", "SELECT_V2",
                 "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"}


def _as_scalars(model, graph, tensors: set[int]) -> None:
    """Make each of ``tensors`` holding one element a scalar (shape []) where every op reading it
    broadcasts it against an operand of at least its rank, as the converter stores such a folded
    constant: a literal broadcast to (1, 1) for a select stayed (1, 1), and LiteRT.js's WebGPU
    delegate takes a constant SELECT_V2 branch only of the output's shape or a scalar."""
    from noxla.writers.tflite.flatbuffer.merge import builtin_code
    from noxla.writers.tflite.flatbuffer.schema import schema
    names = {getattr(schema.BuiltinOperator, n) for n in _BROADCASTING}
    readers: dict[int, list] = {}
    for op in graph.operators or []:
        for t in op.inputs if op.inputs is not None else []:
            readers.setdefault(int(t), []).append(op)
    outputs = set(graph.outputs if graph.outputs is not None else [])
    for t in tensors:
        tensor = graph.tensors[t]
        rank = len(tensor.shape)
        if rank == 0 or int(np.prod(tensor.shape)) != 1 or t in outputs or t not in readers:
            continue
        if all(builtin_code(model, op) in names
               and max((len(graph.tensors[u].shape) for u in op.inputs if u != t), default=0) >= rank
               for op in readers[t]):
            tensor.shape = np.zeros([0], np.int32)
            tensor.shapeSignature = None


def _value(tensor, dtype) -> np.ndarray | None:
    """A Const's value; a view of its bytes when it is written as raw content (a weight)."""
    shape = [d.size for d in tensor.tensor_shape.dim]
    if tensor.tensor_content:
        return np.frombuffer(tensor.tensor_content, np.dtype(dtype).newbyteorder("<")).reshape(shape)
    import tensorflow as tf
    try:
        return tf.make_ndarray(tensor)
    except (TypeError, ValueError):
        return None
