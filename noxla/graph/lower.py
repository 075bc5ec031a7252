"""A traced program recorded as noxla's graph: the interpreter runs the rules with the recorder
(``noxla.graph.api``) as their ``tf``, on Placeholders named after the program's inputs."""
from __future__ import annotations

import dataclasses

import numpy as np

from lowering_rules.core.vocabulary import LoweringFor
from lowering_rules.values import complex_values, limb_values
from noxla.front.interpreter import Lowering, lower_jaxpr
from noxla.front.shapes import Dims, is_static
from noxla.front.tracing import Program
from noxla.graph import api, ops
from noxla.graph.core import Graph, Tensor
from noxla.graph.dtypes import Uncovered, as_dtype


@dataclasses.dataclass
class Recorded:
    graph: Graph
    inputs: list[Tensor]    # the Placeholders, in the program's input order
    outputs: list[Tensor]   # an Identity per output, in the program's output order
    in_names: tuple[str, ...]
    out_names: tuple[str, ...]
    pairs: tuple[int, ...] = ()  # with ``complex_pairs``: the outputs recorded as (real, imaginary) parts


def record_program(program: Program, strict: bool = False, uint32_as_int32: bool = False,
                   tflite_converter: bool = False, webgpu: bool = False, complex_pairs: bool = False) -> Recorded:
    """``program`` as a graph (a symbolic size is None in the static shapes, computed at run time).
    ``uint32_as_int32``: TF.js's own lowering (see ``noxla.front.lowering.serving_function``).
    ``tflite_converter``: the lowering TF's path hands its TFLite converter alone, for the graph's
    TFLite writer (``LoweringFor.tflite_converter``). ``webgpu``: for LiteRT.js's WebGPU delegate
    (``LoweringFor.webgpu``). ``complex_pairs``: a complex output is recorded as its two parts, in
    ``outputs`` one after the other (TF joins them: ``noxla.writers.tf.forward``), its index in ``pairs``.
    Raises ``Uncovered`` for anything not recorded yet."""
    if any(a.dtype == np.dtype("V") or "float0" in str(a.dtype) for a in program.out_avals):
        raise Uncovered("a float0 output")
    graph = Graph()
    recorder = api.recorder()
    with ops.recording(graph):
        from lowering_rules.core.helpers import tf_dtype
        from lowering_rules.core.lazy_tensorflow import using
        with using(recorder):
            dtypes = [tf_dtype(a.dtype, uint32_as_int32) for a in program.in_avals]
        inputs = []
        for name, aval, dtype in zip(program.in_names, program.in_avals, dtypes):
            dtype = as_dtype(dtype)
            attrs = {"dtype": ops.type_attr(dtype), "shape": {"shape": _shape_json(aval.shape)}}
            shape = tuple(int(d) if is_static([d]) else None for d in aval.shape)
            inputs.append(graph.add("Placeholder", [], attrs, [(dtype, shape)], name=name).output(0))
        with using(recorder):  # symbolic sizes: read from the inputs' Shape ops when the program runs
            dims = Dims.solve(program.in_avals, inputs)
        lowering_for = LoweringFor(tfjs=uint32_as_int32, tflite_converter=tflite_converter, webgpu=webgpu)
        # A complex input is split into its (real, imaginary) parts, as TF's path splits it
        # (``noxla.front.lowering.lower_program``); TFLite has REAL and IMAG, TF.js takes none.
        real = [t for t in inputs if not t.dtype.is_complex]
        lowering = Lowering(dims, real, strict=strict, lowering_for=lowering_for, backend=recorder)
        with using(recorder):
            args = [complex_values.split(t) if t.dtype.is_complex else t for t in inputs]
            outs = lower_jaxpr(lowering, program.closed_jaxpr.jaxpr, program.consts, args)
            outs = [limb_values.materialize(o, lowering.tf_dtype(np.uint32)) for o in outs]
            pairs = tuple(i for i, o in enumerate(outs) if isinstance(o, complex_values.ComplexPair))
            if pairs and not complex_pairs:
                # Only TF and TF with flex ops return one (a Complex op): both take TF's path. The
                # up-front check refuses it for TFLite's builtins and TF.js (dtype_support).
                raise Uncovered("a complex output")
            identity = api.recorder().identity
            outputs = [t for o, name in zip(outs, program.out_names)
                       for t in ([identity(o.re, name=f"{name}_real"), identity(o.im, name=f"{name}_imag")]
                                 if isinstance(o, complex_values.ComplexPair) else [identity(o, name=name)])]
    return Recorded(graph, inputs, outputs, tuple(program.in_names), tuple(program.out_names), pairs)


def _shape_json(shape) -> dict:
    return {"dim": [{"size": str(int(d)) if is_static([d]) else "-1"} for d in shape]} if len(shape) else {}
