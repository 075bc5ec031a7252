"""The public API: ``convert``, ``check`` and the ``export_*`` functions."""
from __future__ import annotations

from typing import Callable, Mapping

import jax
import tensorflow as tf

import lowering_rules  # noqa: F401  (registers every rule)
from limitations.engine import Report
from lowering_rules.vocabulary import Target
from noxla.errors import ExportError
from noxla.export import DEFAULT_SHARD_BYTES, OnStep, export, export_signatures, full_check, require_supported
from noxla.lowering import lower_program
from noxla.tracing import check_callable, trace


def check(fun: Callable, *example_args, target: Target | str = Target.TFLITE,
          polymorphic_shapes=None) -> Report:
    """Every use in ``fun`` that ``target`` cannot run, found before any TF op is built."""
    program = trace(fun, example_args, polymorphic_shapes)
    return full_check(program.closed_jaxpr, target)


def convert(fun: Callable, *, polymorphic_shapes=None, strict: bool = False) -> Callable:
    """A TF callable computing ``fun``: a drop-in for ``jax2tf.convert(fun, enable_xla=False)``.

    It takes tf.Tensors, numpy arrays and pytrees of them, runs eagerly or inside
    ``tf.function``, and traces ``fun`` once per distinct input signature.

    By default patterns become fused ops (MaxPool, Softmax, Relu, ...) that compute what JAX
    computes for finite inputs but may treat NaN/inf differently (``noxla limitations`` lists
    where, per rule). ``strict=True`` keeps JAX's NaN/inf semantics exactly, with more ops.
    """
    check_callable(fun)
    programs: dict = {}

    def converted(*args):
        flat, tree = jax.tree_util.tree_flatten(args)
        flat = [x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x) for x in flat]
        key = (tree, tuple((tuple(x.shape.as_list()), x.dtype) for x in flat))
        program = programs.get(key)
        if program is None:
            program = trace(fun, jax.tree_util.tree_unflatten(tree, flat), polymorphic_shapes)
            require_supported(program, Target.TF)
            programs[key] = program
        outs = lower_program(program, flat, check_shapes=True, strict=strict)
        return jax.tree_util.tree_unflatten(program.out_tree, outs)

    converted.__name__ = f"noxla_{getattr(fun, '__name__', 'fun')}"
    converted.__doc__ = getattr(fun, "__doc__", None)
    return converted


def export_saved_model(fun: Callable, *example_args, path: str, polymorphic_shapes=None,
                       overwrite: bool = False, strict: bool = False, on_step: OnStep | None = None) -> str:
    """A SavedModel whose ``serving_default`` signature computes ``fun`` (inputs checked against
    ``polymorphic_shapes`` at run time). ``strict``: JAX's NaN/inf semantics exactly (see ``convert``).
    ``fun`` may instead be ``{signature_key: (function, example_args)}``: one SavedModel with a
    signature per key (see ``export_tflite``)."""
    if isinstance(fun, Mapping):
        _check_signatures_call(example_args, polymorphic_shapes)
        return export_signatures(fun, saved_model=path, overwrite=overwrite, strict=strict,
                                 on_step=on_step)["saved_model"]
    return export(fun, example_args, saved_model=path, polymorphic_shapes=polymorphic_shapes,
                  overwrite=overwrite, strict=strict, on_step=on_step).written["saved_model"]


def export_tflite(fun: Callable, *example_args, path: str, polymorphic_shapes=None, allow_flex: bool = False,
                  overwrite: bool = False, strict: bool = False, quantize: str | None = None,
                  representative_data=None, on_step: OnStep | None = None) -> str:
    """A .tflite using TFLITE_BUILTINS only (plus SELECT_TF_OPS when ``allow_flex``).
    ``strict``: JAX's NaN/inf semantics exactly (see ``convert``).
    ``quantize``: None, "float16", "dynamic_int8" or "int8" (see noxla.quantize); "int8" calibrates
    on ``representative_data``: a callable yielding samples (one array per input, shaped like the
    example's), or one array per input with a leading axis of samples.

    ``fun`` may instead be ``{signature_key: (function, example_args)}`` (e.g. ``prefill_8`` and
    ``decode``): one .tflite with a signature per key, for LiteRT's signature runners, whose
    weights are stored once however many signatures use them (not with ``quantize="int8"``)."""
    if isinstance(fun, Mapping):
        _check_signatures_call(example_args, polymorphic_shapes)
        if representative_data is not None:
            raise ExportError("representative_data is for int8, which several signatures do not take")
        return export_signatures(fun, tflite=path, allow_flex=allow_flex, overwrite=overwrite, strict=strict,
                                 quantize=quantize, on_step=on_step)["tflite"]
    return export(fun, example_args, tflite=path, polymorphic_shapes=polymorphic_shapes, allow_flex=allow_flex,
                  overwrite=overwrite, strict=strict, quantize=quantize, representative_data=representative_data,
                  on_step=on_step).written["tflite"]


def export_tfjs(fun: Callable, *example_args, path: str, polymorphic_shapes=None, overwrite: bool = False,
                strict: bool = False, quantize: str | None = None,
                weight_shard_size_bytes: int = DEFAULT_SHARD_BYTES, on_step: OnStep | None = None) -> str:
    """A TF.js graph model directory (model.json and weight shards of at most ``weight_shard_size_bytes``).
    ``strict``: JAX's NaN/inf semantics exactly (see ``convert``).
    ``quantize``: None, "uint8", "uint16" or "float16" weight storage (dequantized when loaded)."""
    return export(fun, example_args, tfjs=path, polymorphic_shapes=polymorphic_shapes, overwrite=overwrite,
                  strict=strict, tfjs_quantize=quantize, tfjs_shard_bytes=weight_shard_size_bytes,
                  on_step=on_step).written["tfjs"]


def _check_signatures_call(example_args, polymorphic_shapes) -> None:
    if example_args:
        raise ExportError("with {signature_key: (function, example_args)}, the example arguments go in "
                          "the dict, not after it")
    if polymorphic_shapes is not None:
        raise ExportError("several signatures take static shapes: export one signature per shape "
                          "(e.g. prefill_8, prefill_32)")
