"""From a Python function and example arguments to a traced ``Program``."""
from __future__ import annotations

import dataclasses
import inspect
import re
import traceback as tb
from typing import Any, Callable, Sequence

import jax
import numpy as np

from lowering_rules.core.jax_compat import InconclusiveDimensionOperation, dce_jaxpr
from noxla.errors import _LIBRARY_DIRS, TracingError


@dataclasses.dataclass(frozen=True)
class Program:
    """A traced function: its jaxpr and the names and abstract values of its flat inputs and outputs."""
    name: str
    closed_jaxpr: Any
    in_tree: Any
    out_tree: Any
    in_avals: tuple
    out_avals: tuple
    in_names: tuple[str, ...]
    out_names: tuple[str, ...]

    @property
    def consts(self):
        return self.closed_jaxpr.consts


def check_callable(fun) -> None:
    if not callable(fun):
        raise TracingError(f"noxla expects a callable (a JAX function), got {type(fun).__name__}: {fun!r:.80}")


def _leaf_spec(path, leaf) -> jax.ShapeDtypeStruct:
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(leaf.shape, jax.dtypes.canonicalize_dtype(leaf.dtype))
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        if isinstance(leaf, (bool, int, float, complex, np.generic)):
            leaf = np.asarray(leaf)
            shape, dtype = leaf.shape, leaf.dtype
        else:
            raise TracingError(
                f"argument {jax.tree_util.keystr(path) or '(root)'} is a {type(leaf).__name__}, not an array. "
                "noxla converts functions of arrays: pass arrays, jax.ShapeDtypeStruct or tf.TensorSpec, and "
                "bind non-array arguments with functools.partial (or close over them).")
    dtype = getattr(dtype, "as_numpy_dtype", dtype)  # tf.DType -> numpy
    shape = tuple(getattr(shape, "as_list", lambda: shape)() if shape is not None else ())
    dtype = jax.dtypes.canonicalize_dtype(np.dtype(dtype))
    if any(d is None for d in shape):
        try:
            return jax.ShapeDtypeStruct(shape, dtype)
        except ValueError:  # JAX 0.11 refuses None dimensions
            return UnknownDims(shape, dtype)
    return jax.ShapeDtypeStruct(shape, dtype)


class UnknownDims:
    """An argument's shape with unknown (None) dimensions, for polymorphic_shapes to name: JAX 0.11's
    ShapeDtypeStruct refuses None, and its symbolic_args_specs reads any object's shape and dtype.
    Not a pytree node: a leaf, like the ShapeDtypeStruct it stands for."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype):
        self.shape, self.dtype = shape, dtype

    def __repr__(self):
        return f"UnknownDims(shape={self.shape}, dtype={self.dtype})"


def abstract_args(args: Sequence, polymorphic_shapes=None, polymorphic_constraints: Sequence[str] = ()) -> tuple:
    """Pytree of ShapeDtypeStructs for ``args``; dimensions symbolic where the spec says so."""
    specs = jax.tree_util.tree_map_with_path(_leaf_spec, tuple(args))
    if polymorphic_shapes is None:
        unknown = [jax.tree_util.keystr(p) for p, s in jax.tree_util.tree_flatten_with_path(specs)[0]
                   if any(d is None for d in s.shape)]
        if unknown:
            raise TracingError(
                f"argument(s) {', '.join(unknown)} have unknown dimensions (None); noxla needs either a "
                "concrete shape or polymorphic_shapes naming those dimensions, e.g. polymorphic_shapes=['(b, ...)'].")
        return specs
    if isinstance(polymorphic_shapes, list):
        polymorphic_shapes = tuple(polymorphic_shapes)
    if isinstance(polymorphic_shapes, tuple) and len(polymorphic_shapes) != len(args):
        raise TracingError(f"polymorphic_shapes has {len(polymorphic_shapes)} entries for "
                           f"{len(args)} arguments; give one per positional argument (None for static).")
    try:
        return tuple(jax.export.symbolic_args_specs(specs, polymorphic_shapes,
                                                    constraints=tuple(polymorphic_constraints)))
    except Exception as e:
        raise TracingError(f"invalid polymorphic_shapes {polymorphic_shapes!r}: {e}") from e


def _sanitize(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    return name if name and not name[0].isdigit() else f"t_{name}"


def _path_name(path) -> str:
    parts = []
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    return "_".join(parts)


def _unique(names: list[str]) -> tuple[str, ...]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else f"{n}_{k}")
    return tuple(out)


def _input_names(fun: Callable, specs: tuple) -> tuple[str, ...]:
    try:
        params = [p.name for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(specs)[0]:
        index = path[0].idx
        head = params[index] if index < len(params) else f"arg{index}"
        rest = _path_name(path[1:])
        names.append(_sanitize(f"{head}_{rest}" if rest else head))
    return _unique(names)


def _output_names(out_shape) -> tuple[str, ...]:
    leaves = jax.tree_util.tree_flatten_with_path(out_shape)[0]
    names = []
    for path, _ in leaves:
        if not path:
            names.append("output")
        elif hasattr(path[0], "idx"):
            names.append(_sanitize("output_" + _path_name(path)))
        else:
            names.append(_sanitize(_path_name(path)))
    return _unique(names)


_CONTROL_FLOW_ERRORS = tuple(getattr(jax.errors, n) for n in (
    "ConcretizationTypeError", "TracerBoolConversionError", "TracerIntegerConversionError",
    "TracerArrayConversionError", "NonConcreteBooleanIndexError") if hasattr(jax.errors, n))


def _user_line_of(exc: BaseException) -> str:
    frames = [f for f in tb.extract_tb(exc.__traceback__) if not f.filename.startswith(_LIBRARY_DIRS)]
    return f"{frames[-1].filename}:{frames[-1].lineno} ({frames[-1].name})" if frames else "<unknown source>"


def trace(fun: Callable, args: Sequence, polymorphic_shapes=None,
          polymorphic_constraints: Sequence[str] = ()) -> Program:
    check_callable(fun)
    specs = abstract_args(args, polymorphic_shapes, polymorphic_constraints)
    name = getattr(fun, "__name__", type(fun).__name__)
    try:
        closed_jaxpr, out_shape = jax.make_jaxpr(fun, return_shape=True)(*specs)
    except _CONTROL_FLOW_ERRORS as e:
        raise TracingError(
            f"cannot trace {name}: at {_user_line_of(e)} Python control flow or a Python conversion "
            "depends on the value of a traced array. noxla traces the function once for all inputs, so "
            "branch with lax.cond or jnp.where, loop with lax.fori_loop/lax.while_loop/lax.scan, or make "
            f"the value a static argument (functools.partial).\nJAX said: {str(e).splitlines()[0]}") from e
    except InconclusiveDimensionOperation as e:
        raise TracingError(_shape_error(name, e, polymorphic_shapes)) from e
    except Exception as e:
        if polymorphic_shapes is not None and "divide evenly" in str(e):
            raise TracingError(_shape_error(name, e, polymorphic_shapes)) from e
        raise TracingError(f"cannot trace {name}: at {_user_line_of(e)} {type(e).__name__}: {e}") from e
    closed_jaxpr = _without_dead_code(closed_jaxpr)
    in_avals = tuple(v.aval for v in closed_jaxpr.jaxpr.invars)
    out_avals = tuple(v.aval for v in closed_jaxpr.jaxpr.outvars)
    return Program(name=name, closed_jaxpr=closed_jaxpr,
                   in_tree=jax.tree_util.tree_structure(specs),
                   out_tree=jax.tree_util.tree_structure(out_shape),
                   in_avals=in_avals, out_avals=out_avals,
                   in_names=_input_names(fun, specs), out_names=_output_names(out_shape))


def _without_dead_code(closed_jaxpr):
    """Drop equations whose results are unused (e.g. PRNG splits Flax makes for a zeros carry):
    they would otherwise need rules, and cost ops, for nothing. Inputs and constants are kept."""
    jaxpr = closed_jaxpr.jaxpr
    try:
        live, _ = dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)
    except KeyError:  # a DCE rule reads a parameter the binding omitted (remat_opt's num_res): keep all
        return closed_jaxpr
    return closed_jaxpr.replace(jaxpr=live.replace(constvars=jaxpr.constvars, invars=jaxpr.invars))


def _shape_error(name: str, e: Exception, polymorphic_shapes) -> str:
    return (f"cannot trace {name} with polymorphic_shapes={polymorphic_shapes!r}: at {_user_line_of(e)} "
            f"a shape computation is not decidable for every value of the dimension variables.\n"
            f"JAX said: {str(e).splitlines()[0]}\n"
            "Fix the specification: name dimensions that must be equal with the same variable, give a "
            "dimension a concrete size ('_'), or state a relation (e.g. '2*b' where the size is even).")
