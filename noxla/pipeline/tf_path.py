"""Exporters: SavedModel, .tflite (builtins only unless Flex is allowed) and TF.js graph models.

One pipeline (``export``) serves the public ``export_*`` functions and the CLI: it traces, runs
the up-front check for each target, lowers into one ``tf.function`` with named inputs and
outputs, and writes beside the final path before renaming into place: a failed export leaves
nothing at ``path``. ``on_step`` reports each step as it runs (the CLI prints them).
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import json
import os
import warnings
from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from lowering_rules.vocabulary import Target
from noxla.errors import ExportError, QuantizationError
from noxla.front.interpreter import Weights
from noxla.front.lowering import (  # noqa: F401  (part of this module's API)
    input_signature,
    needs_tfjs_lowering,
    needs_tflite_lowering,
    serving_function,
    uses_uint32,
)
from noxla.front.shapes import dim_vars
from noxla.front.tracing import Program
from noxla.pipeline import graph_signatures
from noxla.pipeline.preflight import (  # noqa: F401  (atomic_output, Exported: part of this module's API)
    DEFAULT_SHARD_BYTES,
    Cleared,
    ClearedSignatures,
    Exported,
    ExportOptions,
    OnStep,
    atomic_output,
    ensure_writable,
    preflight,
    preflight_signatures,
    require_supported,
    run_step,
    write_chunks,
)
from noxla.runtimes.demo import write_demo
from noxla.writers import quantize as quantization
from noxla.writers.tf.gradients import SAVE_OPTIONS, saved_model_module
from noxla.writers.tf.weight_stubs import StubMismatch, WeightStubs, fold_into_stand_ins
from noxla.writers.tfjs.graph import TensorSpec
from noxla.writers.tfjs.graph_def import graph_from_graph_def
from noxla.writers.tfjs.ops import backstop_reading
from noxla.writers.tfjs.optimize import optimized_for_tfjs
from noxla.writers.tfjs.writer import write_graph_model
from noxla.writers.tflite.converter import graph_passes as tflite_graph_passes
from noxla.writers.tflite.converter import infinities as tflite_infinities
from noxla.writers.tflite.flatbuffer import large as large_tflite
from noxla.writers.tflite.flatbuffer.merge import builtin_code, merge_tflite, merged_model, share_constant_buffers  # noqa: F401  (API)
from noxla.writers.tflite.flatbuffer.projections import join_matrix_vector_projections
from noxla.writers.tflite.flatbuffer.reshapes import (
    fold_transpose_pairs,
    read_caches_in_batch_matmul,
    remove_reshape_pairs,
)
from noxla.writers.tflite.flatbuffer.webgpu import (
    copy_passthrough_outputs,
    not_equal_as_negated_equal,
    unfuse_transpose_conv_activations,
)
from noxla.writers.tflite.flatbuffer.webgpu_constants import constants_with_unit_batch


def module_for(concrete) -> tf.Module:
    module = tf.Module()
    module.serve = concrete
    return module


def write_saved_model(concrete, path: str, module: tf.Module | None = None) -> None:
    """``module`` (default: one holding ``concrete``) saved with ``concrete`` as ``serving_default``,
    custom gradients included (``gradients.saved_model_module``'s are JAX's)."""
    tf.saved_model.save(module or module_for(concrete), path, signatures={"serving_default": concrete},
                        options=SAVE_OPTIONS)


class Handoff:
    """A lowered function given to its last user, which drops it once it has read the graph: the
    TF graph and the weights it holds (2-3x the weights' size) are then freed before the TFLite
    converter, whose own copies make an export's peak memory, starts (BERT-base-shaped, 2 layers:
    376 of 2,639 MB)."""

    def __init__(self, concrete):
        self._concrete = concrete

    def take(self):
        concrete, self._concrete = self._concrete, None
        return concrete


@dataclasses.dataclass(frozen=True)
class _Endpoint:
    """What ``convert_graphdef`` reads of an input or output tensor, without its graph."""
    name: str
    dtype: object
    shape: object


def tflite_bytes(concrete, allow_flex: bool = False, quantize: str | None = None,
                 samples: Callable | None = None, webgpu: bool = False,
                 stubs: WeightStubs | None = None, weights: Weights | None = None) -> bytes:
    """The converted model. ``concrete``: the lowered function, or a ``Handoff`` of it (released
    before converting). ``webgpu``: with the rewrites LiteRT.js's WebGPU delegate needs
    (``noxla.writers.tflite.flatbuffer.webgpu``), for a concrete function lowered for it. ``stubs``: convert with the
    large weights as stand-ins (``noxla.writers.tf.weight_stubs``); the result is then the unpacked model,
    whose weights ``large_tflite.serialized`` writes. ``weights``: those the function was lowered
    with, its values (``frozen_graph_def``)."""
    from tensorflow.core.framework.graph_debug_info_pb2 import GraphDebugInfo
    from tensorflow.lite.python import convert as tflite_convert
    handoff = isinstance(concrete, Handoff)
    if handoff:
        concrete = concrete.take()
    trackable = module_for(concrete)
    # Without debug info the converter collects every op's Python stack for its error messages
    # (10-15% of a conversion); the model comes out byte for byte the same, and an error still
    # names the op by its name-scope path, which holds the primitive's name.
    trackable.graph_debug_info = GraphDebugInfo()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], trackable)
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if allow_flex:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    converter.target_spec.supported_ops = ops
    quantization.configure_tflite(converter, quantize, samples)
    graph_def, inputs = frozen_graph_def(concrete, stubs, weights)
    if not allow_flex:
        tflite_graph_passes.for_builtins(graph_def, calibrated=quantize == "int8")
    # int8's calibration runs the model with its constants inside (an input it is not given would
    # not be fed), and int8 activations hold no infinity: the converter's FLT_MAX stays.
    infinite = tflite_infinities.take(graph_def) if quantize != "int8" else {}
    in_names = [t.name.split(":")[0] for t in inputs]
    out_names = sorted(concrete.structured_outputs)
    constants = _outputs_of_a_constant_program(concrete, inputs, out_names)
    # The converter's own entry point for a concrete function saves it as a SavedModel, loads it
    # back and converts that (or, without a trackable object, re-imports the graph to freeze it):
    # most of its time on a model without loops (mobilenet_v2: 0.51 of 0.65 CPU s). A noxla graph
    # has no variables, so it is frozen already and its GraphDef goes straight to the converter
    # step both of those paths end in; the ops and weights come out the same. That step writes no
    # signature, which LiteRT's signature runner reads the names from: ``finish_tflite`` adds it.
    try:
        # ``TFLiteConverterBaseV2.convert`` without its last step, ``_optimize_tflite_model``: for the
        # other modes (no calibration, no sparsity) that step only unpacks the flatbuffer
        # into Python objects twice and packs it once, to share equal constant buffers (0.2-0.35 CPU s
        # of a sampling model's 690-op export). ``finish_tflite`` shares them in its own single pass.
        # int8 runs that step: its calibration is there.
        converter._validate_inputs(graph_def, inputs)
        flags = converter._get_base_converter_args()
        flags.update(converter._quant_mode.converter_flags())
        # The converter serializes the GraphDef it is given; given it serialized, the proto (a copy
        # of the weights) is freed before the conversion's own copies are made.
        serialized = _SerializedGraphDef(graph_def.SerializeToString())
        del graph_def
        inputs, outputs = ([_Endpoint(t.name, t.dtype, t.shape) for t in tensors]
                           for tensors in (inputs, concrete.outputs))
        if handoff and quantize != "int8":  # the graph is cyclic: collected, not just dereferenced
            del concrete, converter, trackable
            gc.collect()
        stand_ins = stubs.input_specs() if stubs is not None else []
        data = tflite_convert.convert_graphdef(serialized, inputs + stand_ins + tflite_infinities.input_specs(infinite),
                                               outputs, **flags)
        if quantize == "int8":
            from tensorflow.lite.python.lite import _build_conversion_flags
            with warnings.catch_warnings():  # "Statistics for quantized inputs were expected": calibration's
                warnings.simplefilter("ignore", UserWarning)
                debug_options = _build_conversion_flags(**flags).debug_options
            data = quantization.float_divisions(quantization.calibrated_int8(converter, data, debug_options))
    except QuantizationError:
        raise
    except Exception as e:  # the converter raises several private error types
        raise ExportError(f"the TFLite converter rejected the lowered program: {e}") from e
    return finish_tflite(data, in_names, out_names, stubs, webgpu, constants, infinite)


def _outputs_of_a_constant_program(concrete, inputs, out_names) -> list[np.ndarray] | None:
    """The outputs, in ``out_names`` order, of a program whose inputs hold no elements (or that has
    none): its outputs are constants, which the converter folds, and it writes an infinite constant
    as the largest finite float. Their values, computed here in TF (a polymorphic size as 1: an output
    whose shape depends on it is not folded, and ``_write_constant_outputs`` passes it by), are
    written back exactly."""
    if not all(0 in t.shape.as_list() for t in inputs):  # a polymorphic size times 0 is 0 too
        return None
    outputs = concrete(*(tf.zeros([1 if d is None else d for d in t.shape.as_list()], t.dtype) for t in inputs))
    return [np.asarray(outputs[name]) for name in out_names]


class _SerializedGraphDef:
    """A GraphDef already serialized, as ``convert_graphdef`` reads it (``SerializeToString`` only)."""

    def __init__(self, data: bytes):
        self.data = data

    def SerializeToString(self) -> bytes:  # noqa: N802  (protobuf's name)
        return self.data


# The dtypes whose values ``make_tensor_proto`` writes as raw ``tensor_content`` (more than one element).
_CONTENT_DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                         np.int64, np.uint8, np.uint16)}


def frozen_graph_def(concrete, stubs: WeightStubs | None = None, weights: Weights | None = None) -> tuple:
    """The function's GraphDef with every captured eager tensor (a rule's module-level constant)
    as a Const node, and its inputs without those captures: what freezing it would give, as it
    holds no variables, without re-importing the graph in Python. ``stubs``: the weights it takes
    become stand-ins (``noxla.writers.tf.weight_stubs``). ``weights``: the function's, whose values are read
    from their arrays, not from the eager tensors (see ``interpreter.Weights``)."""
    graph_def = concrete.graph.as_graph_def()
    captured = {internal.op.name: external for external, internal in concrete.graph.captures}
    for node in graph_def.node:
        if node.name in captured:
            value = captured.pop(node.name)
            if value.dtype == tf.resource:
                raise ExportError(f"the lowered program captures a resource ({node.name}); noxla emits none")
            node.op = "Const"
            node.ClearField("attr")
            node.attr["dtype"].type = value.dtype.as_datatype_enum
            array = weights.array_of(value) if weights is not None else None
            if array is None:
                array = np.asarray(value)  # a view: ``numpy()`` would copy every weight
            if stubs is not None and stubs.takes(array):
                stubs.stub(node, value.ref(), array)
            else:
                _write_const(node, array)
    if stubs is not None:
        stubs.finish_graph_def(graph_def, _write_const)
    internal = {t.ref() for _, t in concrete.graph.captures}
    return graph_def, [t for t in concrete.inputs if t.ref() not in internal]


def _write_const(node, array: np.ndarray) -> None:
    tensor = node.attr["value"].tensor
    if array.dtype in _CONTENT_DTYPES and array.size > 1:
        # A weight's bytes written straight into the node: ``make_tensor_proto`` would
        # build a second proto of the same size to copy from.
        tensor.dtype = tf.as_dtype(array.dtype).as_datatype_enum
        tensor.tensor_shape.CopyFrom(tf.TensorShape(array.shape).as_proto())
        tensor.tensor_content = np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()
    else:
        tensor.CopyFrom(tf.make_tensor_proto(array))


def finish_tflite(data: bytes, in_names: Sequence[str], out_names: Sequence[str],
                  stubs: WeightStubs | None = None, webgpu: bool = False,
                  constants: Sequence[np.ndarray] | None = None,
                  infinite: Mapping[str, np.ndarray] | None = None) -> bytes:
    """The converted model with its ``serving_default`` signature (inputs and outputs by name, in
    the subgraph's order: the concrete function's inputs, its outputs flattened in key order) and
    ``keep_num_dims`` on every FULLY_CONNECTED whose input and output are 2-D, as the native
    path's converter writes it. TF's MatMul converts without it; on a 2-D input both give the same
    [batch, units] output, but without it XNNPACK adds a reshape per op: 5% of the mlp's LiteRT
    latency (1.62 vs 1.53 us, interleaved). Equal constant buffers are shared, as the converter's
    own last step (skipped by ``tflite_bytes``) does. ``constants``: the exact values of outputs
    the converter folded (``_outputs_of_a_constant_program``). ``infinite``: the infinite constants
    handed to the converter as inputs (``noxla.writers.tflite.converter.infinities``). One unpack and pack of the
    flatbuffer; with ``stubs``, the unpacked model (``ModelT``), its weights placeholders (see
    ``WeightStubs.attach``)."""
    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model, schema
    # Read from the bytes themselves: the buffers become read-only views of them, not of a copy
    # (nothing here writes into a buffer's data; sharing only re-points tensors).
    model = read_model(data)
    main = model.subgraphs[0]
    if stubs is not None:  # the stand-ins become constants with the weights' bytes
        stubs.attach(model)
        fold_into_stand_ins(model, stubs)
    tflite_infinities.attach(model, infinite or {})
    if constants is not None:
        _write_constant_outputs(schema, model, constants)
    copy_passthrough_outputs(model)
    remove_reshape_pairs(model)  # reshapes that move nothing around elementwise chains (attention's mask)
    if not webgpu:  # WebGPU's BATCH_MATMUL is not known to broadcast batch axes of unequal rank
        read_caches_in_batch_matmul(model)
    fold_transpose_pairs(model)  # the converter folds a pair only when nothing else reads the first
    if webgpu:  # the delegate reads a constant operand's first batch only, and NOT_EQUAL of a NaN as false
        constants_with_unit_batch(model)
        not_equal_as_negated_equal(model)

    model.signatureDefs = [large_tflite.serving_signature(schema, in_names, main.inputs, out_names, main.outputs)]
    share_constant_buffers(model, stubs)
    if webgpu:
        unfuse_transpose_conv_activations(model)
    for graph in model.subgraphs:
        for op in graph.operators or []:
            if builtin_code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED:
                continue
            options = op.builtinOptions
            ranks = {len(graph.tensors[op.inputs[0]].shape), len(graph.tensors[op.outputs[0]].shape)}
            if isinstance(options, schema.FullyConnectedOptionsT) and ranks == {2}:
                options.keepNumDims = True
    if stubs is not None:
        return model
    return model_bytes(model)


def _write_constant_outputs(schema, model, values: Sequence[np.ndarray]) -> None:
    """Each output of the main subgraph that is a constant gets its own buffer holding ``values``'
    bytes (the converter's copy has the largest finite float where the value is infinite)."""
    graph = model.subgraphs[0]
    for t, value in zip(graph.outputs, values):
        tensor = graph.tensors[t]
        data = model.buffers[tensor.buffer].data if tensor.buffer else None
        exact = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        if data is None or len(data) != exact.size:
            continue
        buffer = schema.BufferT()
        buffer.data = exact
        model.buffers.append(buffer)
        tensor.buffer = len(model.buffers) - 1


def write_tfjs(concrete, path: str, quantize: str | None = None,
               weight_shard_size_bytes: int = DEFAULT_SHARD_BYTES) -> None:
    """The function's frozen graph (``frozen_graph_def``: it holds no variables), optimised as TF.js's
    converter optimises a graph (``noxla.writers.tfjs.optimize``), written as a TF.js graph model."""
    graph_def, inputs = frozen_graph_def(concrete)
    try:
        optimized = optimized_for_tfjs(graph_def, inputs, concrete.outputs)
    except ExportError:
        raise
    except Exception as e:  # grappler raises TF's error types
        raise ExportError(f"the TF.js graph optimisation rejected the lowered program: {e}") from e
    specs = [[TensorSpec(t.name, _dtype_name(t.dtype),
                         None if t.shape.rank is None else tuple(t.shape.as_list())) for t in tensors]
             for tensors in (inputs, concrete.outputs)]
    write_graph_model(graph_from_graph_def(optimized), path, *specs, quantize=quantize,
                      weight_shard_size_bytes=weight_shard_size_bytes, generated_by=tf.__version__,
                      # As TF.js's converter writes it: the output keys, in flattening order.
                      metadata={"structuredOutputKeys": sorted(concrete.structured_outputs)})
    name_tfjs_signature(os.path.join(path, "model.json"), concrete, inputs)


def _dtype_name(dtype) -> str:
    """A TF dtype as model.json names it (``DT_FLOAT``)."""
    from tensorflow.core.framework import types_pb2
    return types_pb2.DataType.Name(tf.as_dtype(dtype).as_datatype_enum)


def name_tfjs_signature(model_json: str, concrete, inputs: Sequence) -> None:
    """Key the graph model's signature by our readable names, its inputs (``frozen_graph_def``'s,
    in the function's parameter order) in that order.

    The TF.js converter keys outputs by graph node (``Identity_1:0``) and drops
    the name of any that share shape and dtype; TF.js's GraphModel reports and
    accepts signature keys, so keying them by name makes them stable.
    """
    with open(model_json) as f:
        model = json.load(f)
    signature = model.setdefault("signature", {})
    out_names = sorted(concrete.structured_outputs)  # tf.nest flattens dicts in key order
    by_node = {t.name: name for t, name in zip(concrete.outputs, out_names)}
    outputs = signature.get("outputs", {})
    signature["outputs"] = {by_node.get(info["name"], key): info for key, info in outputs.items()}
    # TF.js's GraphModel lists its inputs (``model.inputs``, and the order a positional
    # ``execute([...])`` feeds them in) in the order of the signature's keys, which the converter
    # writes in no particular order (f(s, t) came out [t, s]): they follow the parameters here.
    order = {t.name: i for i, t in enumerate(inputs)}
    entries = sorted(signature.get("inputs", {}).values(), key=lambda info: order.get(info["name"], len(order)))
    signature["inputs"] = {info["name"].split(":")[0]: info for info in entries}
    nodes = model["modelTopology"].get("node", [])
    slots = [i for i, n in enumerate(nodes) if n.get("op") == "Placeholder"]
    by_order = sorted((nodes[i] for i in slots), key=lambda n: order.get(n["name"] + ":0", len(order)))
    for i, node in zip(slots, by_order):  # without a signature, TF.js lists the placeholders in graph order
        nodes[i] = node
    placeholders = [nodes[i]["attr"].get("shape", {}).get("shape", {}) for i in slots]
    for shape in (*placeholders, *(info.get("tensorShape", {}) for info in signature["inputs"].values()),
                  *(info.get("tensorShape", {}) for info in signature["outputs"].values())):
        for dim in shape.get("dim", []):
            # proto3 JSON omits zero values, and TF.js reads a missing size as NaN.
            dim.setdefault("size", "0")
    with open(model_json, "w") as f:
        json.dump(model, f)


def write_tflite(concrete, path: str, allow_flex: bool = False, quantize: str | None = None) -> None:
    data = tflite_bytes(concrete, allow_flex, quantize)
    with open(path, "wb") as f:
        f.write(data)


# --------------------------------------------------------------------------- the pipeline

def collecting_new_objects_only(fun: Callable) -> Callable:
    """Run ``fun`` with the objects that exist when it starts (TF's, JAX's and noxla's modules:
    half a million after the imports) frozen, i.e. out of the garbage collector's sight, and
    unfrozen afterwards. Building a graph allocates enough to trigger a full collection, which
    would otherwise walk that whole heap: 0.3-0.4 s of a cold export. Nothing is left frozen, so
    nothing that dies meanwhile is kept; a process that froze its own heap is left as it is."""
    @functools.wraps(fun)
    def run(*args, **kwargs):
        if gc.get_freeze_count():
            return fun(*args, **kwargs)
        gc.freeze()
        try:
            return fun(*args, **kwargs)
        finally:
            gc.unfreeze()
    return run


def export(fun: Callable, example_args: Sequence, **options) -> Exported:
    """The TF pipeline for one function: ``ExportOptions(**options)`` (its fields are the keywords;
    an unknown one is a TypeError), the preflight, then ``export_cleared``. (``noxla.api.run`` is the
    entry that also takes noxla's graph for .tflite and TF.js, where they cover the export.)"""
    return export_cleared(fun, example_args, preflight(fun, example_args, ExportOptions(**options)))


@collecting_new_objects_only
def export_cleared(fun: Callable, example_args: Sequence, cleared: Cleared) -> Exported:
    """The one export pipeline, for the API and the CLI: trace once, check every requested target
    up front, lower, then convert and write each output beside its path and rename it into place.
    ``cleared``: ``noxla.pipeline.preflight.preflight``'s result (run before importing this module and
    TensorFlow, so that a refused program costs neither), with the ``ExportOptions`` it settled:

    The SavedModel is lowered with run-time checks of the inputs against ``polymorphic_shapes``
    (Assert ops); the .tflite and TF.js models without them (neither runs Assert). ``strict``
    keeps JAX's NaN/inf semantics exactly instead of fused ops (see ``noxla.api.convert``).
    ``quantize`` (.tflite: "float16", "dynamic_int8", "int8" calibrated on ``representative_data``)
    and ``tfjs_quantize`` (TF.js weight storage: "uint8", "uint16", "float16") are checked before
    anything is traced (see ``noxla.writers.quantize``).
    TF.js has no uint32: a program that uses uint32 (or PRNG keys) is lowered for it a second time,
    carrying those values as the int32s with the same bits (so is one with a rule that lowers
    otherwise for TF.js, ``needs_tfjs_lowering``). The SavedModel's TF gradient is JAX's (see
    ``noxla.api.convert``); ``saved_model_variables`` names the positional arguments it keeps as
    ``tf.Variable``s instead of inputs (``gradients.saved_model_module``); ``saved_model_gradient=False``
    saves it without a gradient (saving traces the VJP otherwise). Beside a TF.js model, ``demo_page``
    writes index.html and demo_data.json (example inputs and JAX's outputs on them): the page runs
    the model on every backend the browser offers and shows the error against JAX (``noxla serve``).
    ``tflite_target`` is where the .tflite will run: "tflite" (LiteRT), "litertjs" (LiteRT.js: checked
    for its tensor dtypes and static shapes) or "litertjs-webgpu" (also checked for what its WebGPU
    delegate computes wrong, and lowered with the exact alternatives it runs on the GPU where the
    default .tflite's ops would fall back to wasm: ``limitations.targets.WEBGPU_FALLBACKS``, ``exported``).
    """
    program, targets, samples, options = cleared.program, cleared.targets, cleared.samples, cleared.options
    wanted, strict, overwrite, on_step = options.wanted, options.strict, options.overwrite, options.on_step
    webgpu = targets.get("tflite") == Target.LITERTJS_WEBGPU
    polymorphic = bool(dim_vars(program.in_avals))
    lowered: dict[tuple[bool, bool], object] = {}
    tfjs_own_lowering = "tfjs" in wanted and needs_tfjs_lowering(program)
    # The .tflite's own lowering (``needs_tflite_lowering``) holds converter-only ops: never shared.
    tflite_own_lowering = "tflite" in wanted and needs_tflite_lowering(program)

    def concrete_for(kind: str):
        key = (polymorphic and kind == "saved_model", kind == "tfjs" and tfjs_own_lowering,
               kind == "tflite" and webgpu, kind == "tflite" and tflite_own_lowering)
        if key not in lowered:
            name = "lower"
            if lowered:
                name += (" (with input shape checks)" if key[0] else " (for TF.js)" if key[1]
                         else " (for WebGPU)" if key[2] else " (for TFLite)")
            lowered[key] = run_step(on_step, name, serving_function, program, key[0], strict, key[1],
                                    webgpu=key[2], tflite=key[3])
        return lowered[key]

    if "tfjs" in wanted:  # the declarations passed in the preflight; TF.js's op-list backstop is left
        # It reads the ops of the graph the TF.js converter gets, this export's own lowering,
        # instead of lowering the program once more: strict or not, uint32 carried as int32 or
        # not, those are the ops the converter sees. A sampling model's lowering is half its cold export.
        require_supported(program, Target.TFJS, backstop_reading(program.closed_jaxpr, lambda: concrete_for("tfjs")))

    written = {}
    for kind, path in wanted.items():
        if kind == "saved_model":  # lowered with JAX's gradients (gradients.saved_model_module)
            def write_module(_, scratch):
                module, concrete = saved_model_module(fun, program, example_args, options.polymorphic_shapes,
                                                      tuple(options.polymorphic_constraints), strict,
                                                      options.saved_model_variables, options.saved_model_gradient)
                write_saved_model(concrete, scratch, module)
            written[kind] = run_step(on_step, f"convert+write {kind} {path}", _write_with, write_module, None,
                                     path, overwrite)
            continue
        if kind == "tflite":  # converting and writing are separate steps; the other converters write
            if "tfjs" not in wanted or tfjs_own_lowering or webgpu or tflite_own_lowering:  # its only user
                data = _lone_tflite(program, strict, webgpu, tflite_own_lowering, options.allow_flex,
                                    options.quantize, samples, on_step)
            else:
                data = run_step(on_step, "convert tflite", tflite_bytes, concrete_for(kind), options.allow_flex,
                                options.quantize, samples, webgpu)
            written[kind] = run_step(on_step, f"write {path}", write_chunks, data, path, overwrite)
        else:
            concrete = concrete_for(kind)

            def writer(concrete, scratch):
                write_tfjs(concrete, scratch, options.tfjs_quantize, options.tfjs_shard_bytes)
                if options.demo_page:  # the page a user opens (or `noxla serve`s) to run the model in a browser
                    write_demo(scratch, fun, program, example_args)
            written[kind] = run_step(on_step, f"convert+write {kind} {path}", _write_with, writer, concrete,
                                     path, overwrite)
    return Exported(program, written)


def _lone_tflite(program: Program, strict: bool, webgpu: bool, tflite: bool, allow_flex: bool,
                 quantize: str | None, samples: Callable | None, on_step: OnStep | None) -> bytes | list:
    """The .tflite of a lowering no other output reads, made as the several-signature export makes
    its one: the weights held once and not copied (``interpreter.Weights``), the graph freed before
    converting, the large weights handed to the converter as stand-ins (``noxla.writers.tf.weight_stubs``) and
    written straight from their arrays. BERT-base: the converter no longer copies 0.44 GB of weights
    several times. int8 calibration runs the function itself, so it keeps real constants; were the
    converter to change a stubbed weight, the program is lowered again and converted with them."""
    def lowered(unread: bool):
        weights = Weights(unread=unread)
        return weights, Handoff(run_step(on_step, "lower", serving_function, program, False, strict,
                                         weights=weights, webgpu=webgpu, tflite=tflite,
                                         sequenced=not unread))  # unread: only frozen, never run
    if quantize == "int8":
        return run_step(on_step, "convert tflite", tflite_bytes, lowered(False)[1], allow_flex, quantize, samples,
                        webgpu)
    stubs = WeightStubs(reassociate=not strict) if quantize is None else None
    weights, concrete = lowered(True)
    try:
        model = run_step(on_step, "convert tflite", tflite_bytes, concrete, allow_flex, quantize, samples, webgpu,
                         stubs, weights)
    except StubMismatch:
        if on_step is not None:
            on_step("the converter changed a stubbed weight: converting with the real ones", 0.0)
        weights, concrete = lowered(True)
        return run_step(on_step, "convert tflite", tflite_bytes, concrete, allow_flex, quantize, samples, webgpu,
                        weights=weights)
    if stubs is None:
        return model
    if not webgpu:
        join_matrix_vector_projections(model, stubs)
    return run_step(on_step, "serialize", large_tflite.serialized, model, stubs=stubs)


def _write_with(writer, concrete, path: str, overwrite: bool) -> str:
    with atomic_output(path, overwrite) as scratch:
        writer(concrete, scratch)
    return os.path.abspath(path)


# --------------------------------------------------------------------------- several signatures

# One signature: a function and its example arguments (a tuple, as ``export_tflite``'s ``*example_args``).
Signatures = Mapping[str, "tuple[Callable, Sequence]"]


def _signature_functions(programs: Mapping[str, Program], strict: bool, on_step: OnStep | None,
                         webgpu: bool = False, tflite: bool = False, weights: Weights | None = None) -> dict:
    """Each signature's traced and checked program lowered: key -> concrete function (``tflite``: for
    the TFLite converter alone, see ``serving_function``). ``weights``: the table of their weights
    (held once for all of them, see ``Lowering``)."""
    weights = Weights() if weights is None else weights
    return {key: run_step(on_step, f"lower {key}", serving_function, program, False, strict, weights=weights,
                          webgpu=webgpu, tflite=tflite, sequenced=not weights.unread)
            for key, program in programs.items()}


def export_signatures(signatures: Signatures, *, tflite: str | None = None, saved_model: str | None = None,
                      allow_flex: bool = False, overwrite: bool = False, strict: bool = False,
                      quantize: str | None = None, tflite_target: Target | str = Target.TFLITE,
                      on_step: OnStep | None = None, rewrite: Callable | None = None) -> dict[str, str]:
    """One .tflite and/or SavedModel holding several signatures (``{key: (fun, example_args)}``),
    each with inputs named after its function's parameters and outputs after its dict keys or
    pytree paths, as a single-function export names them. In the .tflite each signature is
    converted on its own (the direct path of ``tflite_bytes``) and the models are merged into one
    flatbuffer, where equal constants (the weights the signatures share) are stored once. By
    default noxla's graph writes each model instead (``noxla.pipeline.graph_path.covers_signatures``: a .tflite
    alone, not strict, not TF's quantizer, NOXLA_TFLITE_GRAPH not 0), merged the same way, where it
    covers every signature (``noxla.pipeline.graph_signatures``).
    ``tflite_target``: as ``export``'s. Returns {"tflite" / "saved_model": absolute path}.
    Every signature is traced and checked for every output (``preflight_signatures``, the preflight
    of a single-function export) before anything is lowered or written. ``rewrite(model, stubs)``:
    called on the merged .tflite (an unpacked ``ModelT``; ``stubs`` the ``WeightStubs`` whose
    placeholders its buffers may hold, or None) before it is written
    (noxla.writers.tflite.flatbuffer.quantize_weights)."""
    options = ExportOptions(tflite=tflite, saved_model=saved_model, allow_flex=allow_flex, overwrite=overwrite,
                            strict=strict, quantize=quantize, tflite_target=tflite_target, on_step=on_step)
    cleared = preflight_signatures(signatures, options)
    written = graph_signatures.export_tflite(cleared, rewrite)  # noxla's graph, where it may and covers them
    if written is not None:
        return {"tflite": written}
    return export_cleared_signatures(cleared, rewrite).written


@collecting_new_objects_only
def export_cleared_signatures(cleared: ClearedSignatures, rewrite: Callable | None = None) -> Exported:
    """The several-signature pipeline after its preflight: each output lowered, converted and written
    beside its path, renamed into place once whole."""
    options, programs = cleared.options, cleared.programs
    strict, overwrite, on_step = options.strict, options.overwrite, options.on_step
    written = {}
    if options.tflite is not None:
        webgpu = cleared.targets["tflite"] == Target.LITERTJS_WEBGPU
        # Only ``frozen_graph_def`` reads the weights' values here: the tensors need not hold them.
        weights = Weights(unread=True)
        concretes = _signature_functions(programs, strict, on_step, webgpu, tflite=True, weights=weights)
        data = _converted_signatures(concretes, options.allow_flex, options.quantize, on_step, webgpu, weights,
                                     strict, rewrite)
        del concretes, weights
        written["tflite"] = run_step(on_step, f"write {options.tflite}", write_chunks, data, options.tflite,
                                     overwrite)
    if options.saved_model is not None:
        concretes = _signature_functions(programs, strict, on_step)

        def writer(concretes, scratch):
            module = tf.Module()
            for i, concrete in enumerate(concretes.values()):
                setattr(module, f"signature_{i}", concrete)
            tf.saved_model.save(module, scratch, signatures=concretes)
        written["saved_model"] = run_step(on_step, f"convert+write saved_model {options.saved_model}",
                                          _write_with, writer, concretes, options.saved_model, overwrite)
    return Exported(next(iter(programs.values())), written)


def _converted_signatures(concretes: Mapping, allow_flex: bool, quantize: str | None,
                          on_step: OnStep | None, webgpu: bool = False, weights: Weights | None = None,
                          strict: bool = False, rewrite: Callable | None = None) -> list:
    """The signatures converted and merged into one flatbuffer (as chunks: past 2 GB, the form of
    ``noxla.writers.tflite.flatbuffer.large``). Unquantized, the converter sees
    the large weights as stand-ins and their bytes are spliced in afterwards
    (``noxla.writers.tf.weight_stubs``); were the converter to change a weight, it converts again with them."""
    stubs = WeightStubs(reassociate=not strict) if quantize is None else None
    try:
        models = {key: run_step(on_step, f"convert tflite {key}", tflite_bytes, concrete, allow_flex, quantize,
                                webgpu=webgpu, stubs=stubs, weights=weights)
                  for key, concrete in concretes.items()}
    except StubMismatch:
        stubs = None
        if on_step is not None:
            on_step("the converter changed a stubbed weight: converting with the real ones", 0.0)
        models = {key: run_step(on_step, f"convert tflite {key}", tflite_bytes, concrete, allow_flex, quantize,
                                webgpu=webgpu, weights=weights)
                  for key, concrete in concretes.items()}
    merged = run_step(on_step, "merge signatures", merged_model, models, stubs)
    del models
    if not webgpu:  # across signatures: a weight one joins and another does not would be stored twice
        join_matrix_vector_projections(merged, stubs)
    if rewrite is not None:
        run_step(on_step, "rewrite", rewrite, merged, stubs)
    return run_step(on_step, "serialize", large_tflite.serialized, merged, stubs=stubs)
