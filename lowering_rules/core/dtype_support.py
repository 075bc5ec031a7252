"""Dtypes as data: which tensor dtypes each target has at all, and which each rule computes exactly.

Two layers decide whether a dtype reaching a primitive is accepted for a target:

1. the target's own table (``_TARGET_LACKS``): TF.js has no int8 tensors, TFLite no float64 kernels
   (and ``_BOUNDARY_LACKS``: a .tflite computes bfloat16 inside, in float32, but takes none in or out);
2. the rule's ``DtypeSupport``: the dtypes its lowering computes exactly (natively, or through a
   widening cast that is exact), and the per-target gaps it declares with a reason.

Dtypes are named by strings (``"float32"``, ``"bfloat16"``); every PRNG key dtype (``key<fry>``,
``key<rbg>``, ...) falls in the one class ``KEY``, which a rule accepts only by naming it.
``tests/test_dtype_sweep.py`` proves the data: every rule on every dtype either matches JAX in the
target's runtimes or is rejected up front.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import jax
import numpy as np

from lowering_rules.core.vocabulary import Target, dtype_name  # noqa: F401  (dtype_name is re-exported)

KEY = "key"  # the class of every PRNG key dtype

BOOL = frozenset({"bool"})
SIGNED = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTEGERS = SIGNED | UNSIGNED
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
COMPLEX = frozenset({"complex64", "complex128"})
NUMERIC = BOOL | INTEGERS | FLOATS | COMPLEX  # every array dtype JAX has, keys aside

# The order the table and the messages list dtypes in.
ORDER = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "bfloat16", "float32", "float64", "complex64", "complex128", KEY)
SHORT = dict(zip(ORDER, ("bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64",
                         "f16", "bf16", "f32", "f64", "c64", "c128", "key")))


def is_key(dtype) -> bool:
    return isinstance(dtype, str) and dtype.startswith("key") or (
        not isinstance(dtype, str) and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))


def dtype_class(dtype) -> str:
    """The name rules and target tables use: the dtype's name, or ``KEY`` for any PRNG key dtype."""
    return KEY if is_key(dtype) else dtype_name(dtype)


def sorted_names(names: Iterable[str]) -> list[str]:
    return sorted(set(names), key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


# --------------------------------------------------------------------------- targets

# The dtypes a target cannot compute on at all, each with the reason. Key arrays are no tensor
# dtype of their own (rules that accept them carry their integer key data), so rules decide those.
_TFJS_LACKS = "TF.js tensors are float32, int32, bool or complex64 only"
_TARGET_LACKS: dict[Target, dict[str, str]] = {
    Target.TF: {},
    Target.TFLITE: {
        "float64": "TFLite's builtin kernels have no float64 arithmetic (the converter refuses AddV2, "
                   "Cast, comparisons on it)",
        "uint64": "TFLite's builtin kernels have no uint64 arithmetic or casts",
        "complex128": "TFLite's builtin kernels have no float64 arithmetic, which complex128 values are made of",
    },
    Target.TFLITE_FLEX: {},
    Target.TFJS: {name: _TFJS_LACKS for name in ("int8", "int16", "int64", "uint8", "uint16", "uint32", "uint64",
                                                 "float64", "complex128")},
}

# Dtypes a target computes on inside a program but cannot take in or return. A .tflite carries
# bfloat16 values in float32, each result rounded to bfloat16 (noxla/writers/tflite/converter/bfloat16.py, run on the
# graph the converter gets), but TF 2.21's converter refuses a bfloat16 input ("Unsupported
# TensorFlow type").
# TF.js has no half-float tensors at all; inside a model noxla carries both in float32 the same way,
# rounded with float arithmetic (noxla/writers/tfjs/half_floats.py: TF.js has no Bitcast).
_TFJS_HALVES = (_TFJS_LACKS + " (inside a model, noxla carries bfloat16 and float16 values in float32, "
                "each result rounded to its dtype)")
_BOUNDARY_LACKS: dict[Target, dict[str, str]] = {
    Target.TFLITE: {"bfloat16": "the TFLite converter takes no bfloat16 program input or output (inside a "
                                ".tflite, noxla carries bfloat16 values in float32, each rounded to bfloat16)"},
    Target.TFJS: {"bfloat16": _TFJS_HALVES, "float16": _TFJS_HALVES},
}


def target_lacks(target: Target, dtype) -> str | None:
    """Why ``target`` cannot compute on ``dtype`` at all, or None (a narrowed target, such as TF.js on
    WebGL, lacks what its base lacks)."""
    for t in target.lineage:
        reason = _TARGET_LACKS.get(t, {}).get(dtype_class(dtype))
        if reason:
            return reason
    return None


def boundary_lacks(target: Target, dtype) -> str | None:
    """Why ``target`` cannot take in or return ``dtype`` values, or None (what it lacks at all, and
    what it computes on only inside a program)."""
    for t in target.lineage:
        reason = _BOUNDARY_LACKS.get(t, {}).get(dtype_class(dtype))
        if reason:
            return reason
    return target_lacks(target, dtype)


def target_has(target: Target, dtype) -> bool:
    return target_lacks(target, dtype) is None


def unsupported_dtypes(target: Target, dtypes: Iterable) -> list[str]:
    """The names of ``dtypes`` the target has no tensors of."""
    return sorted_names(dtype_name(d) for d in dtypes if not target_has(target, d))


def supported_dtype_names(target: Target, candidates: Iterable) -> list[str]:
    return [dtype_name(d) for d in candidates if target_has(target, d)]


# --------------------------------------------------------------------------- rules

@dataclasses.dataclass(frozen=True)
class DtypeGap:
    """Dtypes a rule computes in TF but not exactly on some targets (a missing kernel, a wrong one)."""
    targets: tuple[Target, ...]
    dtypes: frozenset[str]
    reason: str
    workaround: str = ""


def gap(targets: Iterable[Target], dtypes: Iterable[str], reason: str, workaround: str = "") -> DtypeGap:
    return DtypeGap(tuple(targets), frozenset(dtypes), reason, workaround)


@dataclasses.dataclass(frozen=True)
class DtypeSupport:
    """The dtypes a rule computes exactly: ``computes`` on every target that has them, less ``gaps``.

    ``missing`` says why the dtypes outside ``computes`` are not computed (the default names no
    cause), so a message can say more than "unsupported".
    """
    computes: frozenset[str] = NUMERIC
    gaps: tuple[DtypeGap, ...] = ()
    missing: str = ""

    def rejection(self, target: Target, dtype) -> tuple[str, str] | None:
        """(reason, workaround) when the rule does not compute ``dtype`` exactly on ``target``."""
        name = dtype_class(dtype)
        if name not in self.computes:
            if name == KEY:
                return ("noxla's rule for this primitive does not take PRNG key arrays",
                        workaround_for(name, ()))
            return (self.missing or "noxla's rule does not compute this dtype exactly",
                    workaround_for(name, self.accepted(target)))
        for g in self.gaps:
            if target.within(g.targets) and name in g.dtypes:
                return g.reason, g.workaround or workaround_for(name, self.accepted(target))
        return None

    def accepted(self, target: Target) -> list[str]:
        """The dtype classes the check lets through for ``target``, in table order."""
        gaps = {n for g in self.gaps if target.within(g.targets) for n in g.dtypes}
        return [n for n in ORDER if n in self.computes and n not in gaps and target_has(target, n)]


def dtypes(*groups: Iterable[str], gaps: Iterable[DtypeGap] = (), missing: str = "") -> DtypeSupport:
    """``DtypeSupport`` from groups of names: ``dtypes(FLOATS, COMPLEX, gaps=[gap(...)])``."""
    computes = frozenset().union(*map(frozenset, groups)) if groups else NUMERIC
    unknown = computes - set(ORDER)
    if unknown:
        raise ValueError(f"unknown dtype names {sorted(unknown)}; use the names in "
                         "lowering_rules.core.dtype_support.ORDER")
    return DtypeSupport(computes, tuple(gaps), missing)


ALL = DtypeSupport()  # what a rule computes unless it says otherwise: every array dtype, no keys

# Where a value of a rejected dtype can go instead, most precise first.
_INSTEAD = {
    "bool": ("int32", "float32"), "int8": ("int32",), "int16": ("int32",), "int64": ("int32",),
    "uint8": ("int32", "uint32"), "uint16": ("int32", "uint32"), "uint32": ("int64", "float64", "int32"),
    "uint64": ("int64", "int32"), "float16": ("float32",), "bfloat16": ("float32",),
    "float64": ("float32",), "complex128": ("complex64",), "int32": ("float32",), "float32": (),
    "complex64": (),
}


def workaround_for(name: str, accepted: Iterable[str]) -> str:
    if name == KEY:
        return ("apply the operation to jax.random.key_data(key) and rewrap the result with "
                "jax.random.wrap_key_data, or use a PRNG function noxla supports")
    ok = set(accepted)
    instead = [d for d in _INSTEAD.get(name, ()) if d in ok]
    if instead:
        return f"cast to {instead[0]} before this operation (and back after it, if needed)"
    if ok:
        return f"cast to one of the dtypes this operation supports here: {', '.join(sorted_names(ok))}"
    return "compute this operation on another target, or rewrite it with other JAX operations"


# Complex values inside a program are (real, imaginary) pairs of float tensors
# (lowering_rules.values.complex_values): only a complex program input or output needs the target's own
# complex ops, Real and Imag to split an input, Complex to join an output. TFLite builtins have
# REAL and IMAG but no op that builds a complex tensor; TF.js's wasm backend has no complex kernel.
_COMPLEX_INPUTS = frozenset({Target.TF, Target.TFLITE, Target.TFLITE_FLEX})
_COMPLEX_OUTPUTS = frozenset({Target.TF, Target.TFLITE_FLEX})


def boundary_dtype_reason(target: Target, dtype, output: bool) -> str | None:
    """Why ``target`` cannot take (``output``: return) a program value of ``dtype``, else None.

    A program that applies no primitive to a value (``lambda x: x``, a broadcast to the same shape)
    passes it through untouched: only this check sees its dtype. A TFLite converter refuses a
    bfloat16 input (``_BOUNDARY_LACKS``); a TF.js model has no uint8 or float16 tensors to return, so it would hand back
    int32 or float32 values without a word. uint32 is the exception for TF.js: its models take and
    return uint32 as the int32 with the same bits (``carries_uint32``), as PRNG keys need.
    A float0 (a gradient w.r.t. an integer input) becomes jax2tf's bfloat16 zero in TF only."""
    if output and dtype == jax.dtypes.float0 and target is not Target.TF:
        return (f"{target.label} cannot return a float0 (JAX's gradient w.r.t. an integer input, which "
                "holds no value): TF gets jax2tf's bfloat16 zero, which TFLite builtins and TF.js lack")
    try:
        complex_ = np.issubdtype(np.dtype(dtype), np.complexfloating)
    except TypeError:  # extended dtypes (PRNG keys) are no tensor dtype of their own
        return None
    lacks = boundary_lacks(target, dtype)
    if lacks and not (target.within((Target.TFJS,)) and np.dtype(dtype) == np.uint32):
        return f"{target.label} cannot {'return' if output else 'take'} {dtype_name(dtype)} values: {lacks}"
    if not complex_:
        return None
    if output and target not in _COMPLEX_OUTPUTS:
        return (f"{target.label} cannot return complex values: TFLite builtins have no op that builds "
                "a complex tensor and TF.js's wasm backend has no complex kernels")
    if not output and target not in _COMPLEX_INPUTS:
        return f"{target.label} cannot take complex inputs: TF.js's wasm backend has no Real or Imag kernel"
    return None


def boundary_dtype_workaround(target: Target, dtype) -> str:
    if np.issubdtype(np.dtype(dtype), np.complexfloating) and target_has(target, dtype):
        return ("pass complex values as two float arrays: jnp.real(z), jnp.imag(z) "
                "(and lax.complex(re, im) inside the program)")
    name = dtype_name(dtype)
    instead = [d for d in _INSTEAD.get(name, ()) if boundary_lacks(target, d) is None]
    to = instead[0] if instead else "a dtype the target has"
    return (f"give the program {to} values instead (cast {name} inputs before calling it, and cast its {name} "
            f"results to {to} inside the program with .astype)")


# TF.js has no uint32, but noxla's TF.js lowering carries a uint32 as the int32 with the same bits
# (lowering_rules/core/helpers.py). That is right only where the rule reads bit patterns, never signs
# or magnitudes: PRNG keys and bits, bit operations, wrapping add/sub, equality and data movement;
# products and remainders are computed on 16-bit limbs (limb_arithmetic.py).
# Anything else on uint32 (comparisons, division, conversion to float, ...) stays rejected.
_WORDS = frozenset(np.dtype(d) for d in (np.int32, np.uint32, np.bool_))
TFJS_UINT32_AS_INT32 = frozenset({
    "random_seed", "random_wrap", "random_unwrap", "random_split", "random_fold_in", "random_bits", "raw_bits",
    "threefry2x32", "iota_2x32_shape", "rng_bit_generator", "shift_left", "shift_right_logical",
    "and", "or", "xor", "not",
    "add", "sub", "mul", "rem", "eq", "ne", "select_n", "convert_element_type", "bitcast_convert_type",
    "broadcast_in_dim", "reshape", "squeeze", "slice", "concatenate", "stack", "unstack", "split", "transpose",
    "copy", "jit",
})


def carries_uint32(target: Target, primitive: str, dtypes: Iterable) -> bool:
    """Whether ``target`` runs this application's uint32 values carried as int32 bits."""
    if not target.within((Target.TFJS,)) or primitive not in TFJS_UINT32_AS_INT32:
        return False
    dtypes = set(map(np.dtype, dtypes))
    if primitive in ("convert_element_type", "bitcast_convert_type"):
        return dtypes <= _WORDS | {np.dtype(np.float32)} and not (
            primitive == "convert_element_type" and np.dtype(np.float32) in dtypes)
    return True


__all__ = [
    "ALL",
    "BOOL",
    "COMPLEX",
    "FLOATS",
    "INTEGERS",
    "KEY",
    "NUMERIC",
    "ORDER",
    "boundary_dtype_reason",
    "boundary_lacks",
    "boundary_dtype_workaround",
    "SHORT",
    "SIGNED",
    "UNSIGNED",
    "DtypeGap",
    "DtypeSupport",
    "dtype_class",
    "dtype_name",
    "dtypes",
    "gap",
    "is_key",
    "sorted_names",
    "supported_dtype_names",
    "target_has",
    "target_lacks",
    "unsupported_dtypes",
    "workaround_for",
]
