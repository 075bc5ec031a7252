"""The public API: ``convert``, ``check`` and the ``export_*`` functions."""
from __future__ import annotations

import inspect
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import tensorflow as tf

import lowering_rules  # noqa: F401  (registers every rule)
from limitations.engine import Report
from lowering_rules.vocabulary import Target
from noxla.export import DEFAULT_SHARD_BYTES, OnStep, export, full_check, require_supported
from noxla import gradients
from noxla.lowering import lower_program, program_inputs
from noxla.tracing import check_callable, trace


def check(fun: Callable, *example_args, target: Target | str = Target.TFLITE,
          polymorphic_shapes=None) -> Report:
    """Every use in ``fun`` that ``target`` cannot run, found before any TF op is built."""
    program = trace(fun, example_args, polymorphic_shapes)
    return full_check(program.closed_jaxpr, target)


def convert(fun: Callable, *, polymorphic_shapes=None, polymorphic_constraints: Sequence[str] = (),
            with_gradient: bool = True, enable_xla: bool | None = None, native_serialization: bool = False,
            native_serialization_platforms: Sequence[str] | None = None,
            native_serialization_disabled_checks: Sequence = (), strict: bool = False) -> Callable:
    """A TF callable computing ``fun``: a drop-in for ``jax2tf.convert(fun, enable_xla=False)``.

    It takes tf.Tensors, tf.Variables, numpy arrays, Python scalars (typed as JAX types them, so
    float64 under ``JAX_ENABLE_X64``) and pytrees of them, positionally or by parameter name, runs
    eagerly or inside ``tf.function``, and traces ``fun`` once per distinct input signature.

    ``polymorphic_shapes`` and ``polymorphic_constraints`` are jax2tf's (``jax.export``'s syntax);
    dimension variables must be >= 1, checked when the function runs (TF Assert ops in a graph).

    ``with_gradient=True`` (jax2tf's default): TF differentiates the function with JAX's own VJP
    (``jax.vjp``, converted by noxla in turn), so custom_vjp/custom_jvp rules and ``stop_gradient``
    hold, to any order. ``with_gradient=False``: asking TF for a gradient is an error.

    ``enable_xla`` is accepted either way: noxla never emits XLA ops, and a graph without them also
    runs where XLA does. ``native_serialization=True`` (StableHLO in an ``XlaCallModule`` op, and
    its ``native_serialization_*`` options) is jax2tf's other path: use ``jax2tf.convert`` for it.

    By default patterns become fused ops (MaxPool, Softmax, Relu, ...) that compute what JAX
    computes for finite inputs but may treat NaN/inf differently (``noxla limitations`` lists
    where, per rule). ``strict=True`` keeps JAX's NaN/inf semantics exactly, with more ops.
    """
    check_callable(fun)
    refuse_native_serialization(native_serialization, native_serialization_platforms,
                                native_serialization_disabled_checks)
    del enable_xla
    options = dict(polymorphic_constraints=tuple(polymorphic_constraints), with_gradient=with_gradient,
                   strict=strict)
    programs: dict = {}

    def converted(*args, **kwargs):
        positional, shapes, target = positional_call(fun, args, kwargs, polymorphic_shapes)
        flat, tree = jax.tree_util.tree_flatten(positional)
        flat = [as_tensor(x) for x in flat]
        key = (tree, tuple((tuple(x.shape.as_list()), x.dtype) for x in flat))
        entry = programs.get(key)
        if entry is None:
            program = trace(target, jax.tree_util.tree_unflatten(tree, flat), shapes,
                            options["polymorphic_constraints"])
            require_supported(program, Target.TF)
            entry = programs[key] = [program, None]
        program = entry[0]
        flat = program_inputs(program, flat)

        def forward(xs):
            return lower_program(program, xs, check_shapes=True, strict=strict)
        if not with_gradient:
            outs = gradients.without_gradient(forward(flat))
        else:
            def converted_vjp(*primals_and_cts):
                if entry[1] is None:  # converted on first use: most calls never ask for a gradient
                    vjp = gradients.vjp_function(gradients.flat_function(target, program.in_tree),
                                                 program.in_avals, program.out_avals)
                    entry[1] = convert(vjp, polymorphic_shapes=gradients.vjp_polymorphic_shapes(
                        program.in_avals, program.out_avals), **options)
                return entry[1](*primals_and_cts)
            outs = gradients.with_custom_gradient(forward, flat, program.in_avals, program.out_avals,
                                                  converted_vjp)
        return jax.tree_util.tree_unflatten(program.out_tree, outs)

    converted.__name__ = f"noxla_{getattr(fun, '__name__', 'fun')}"
    converted.__doc__ = getattr(fun, "__doc__", None)
    return converted


def refuse_native_serialization(native_serialization, platforms, disabled_checks) -> None:
    if native_serialization or platforms or disabled_checks:
        raise TypeError(
            "noxla lowers to plain TF ops and never serializes StableHLO: native_serialization=True, "
            "native_serialization_platforms and native_serialization_disabled_checks belong to "
            "jax2tf's native path. Drop them to get noxla's ops (TFLite, TF.js, TF), or call "
            "jax.experimental.jax2tf.convert for an XlaCallModule op.")


def as_tensor(x):
    """A call argument as a TF value; a Python scalar typed as JAX types it (float64 under x64)."""
    if isinstance(x, (tf.Tensor, tf.Variable)):
        return x
    if isinstance(x, (bool, int, float, complex)):
        return tf.convert_to_tensor(x, dtype=jnp.result_type(x))
    return tf.convert_to_tensor(x)


def positional_call(fun: Callable, args: tuple, kwargs: dict, polymorphic_shapes):
    """Keyword arguments bound to ``fun``'s parameters by its signature: the positional arguments,
    the ``polymorphic_shapes`` for them (keyword-only arguments are static, as in jax2tf) and a
    function of positional arguments only."""
    if not kwargs:
        return args, polymorphic_shapes, fun
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise TypeError(f"cannot bind the arguments of {getattr(fun, '__name__', fun)}: {e}") from None
    positional, named = tuple(bound.args), dict(bound.kwargs)
    if not named:
        return positional, polymorphic_shapes, fun
    names = tuple(named)
    shapes = polymorphic_shapes
    if isinstance(shapes, (list, tuple)):
        shapes = (*tuple(shapes)[:len(positional)], *[None] * (len(positional) - len(shapes)),
                  *[None] * len(names))

    def of_positional(*all_args):
        return fun(*all_args[:len(positional)], **dict(zip(names, all_args[len(positional):])))
    of_positional.__name__ = getattr(fun, "__name__", "fun")
    return (*positional, *named.values()), shapes, of_positional


def export_saved_model(fun: Callable, *example_args, path: str, polymorphic_shapes=None,
                       overwrite: bool = False, strict: bool = False, on_step: OnStep | None = None) -> str:
    """A SavedModel whose ``serving_default`` signature computes ``fun`` (inputs checked against
    ``polymorphic_shapes`` at run time). ``strict``: JAX's NaN/inf semantics exactly (see ``convert``)."""
    return export(fun, example_args, saved_model=path, polymorphic_shapes=polymorphic_shapes,
                  overwrite=overwrite, strict=strict, on_step=on_step).written["saved_model"]


def export_tflite(fun: Callable, *example_args, path: str, polymorphic_shapes=None, allow_flex: bool = False,
                  overwrite: bool = False, strict: bool = False, quantize: str | None = None,
                  representative_data=None, on_step: OnStep | None = None) -> str:
    """A .tflite using TFLITE_BUILTINS only (plus SELECT_TF_OPS when ``allow_flex``).
    ``strict``: JAX's NaN/inf semantics exactly (see ``convert``).
    ``quantize``: None, "float16", "dynamic_int8" or "int8" (see noxla.quantize); "int8" calibrates
    on ``representative_data``: a callable yielding samples (one array per input, shaped like the
    example's), or one array per input with a leading axis of samples."""
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
