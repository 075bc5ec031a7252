"""Which tensor dtypes each target has at all. Per-operation gaps are declared by the rules."""
from __future__ import annotations

from collections.abc import Iterable

import ml_dtypes
import numpy as np

from limitations.targets import Target

# TF.js tensors are float32, int32, bool or complex64 only; its converter narrows int64 weights
# but cannot run ops on the narrow integer or half-precision types.
_TFJS_DTYPES = frozenset(np.dtype(d) for d in (np.float32, np.int32, np.bool_, np.complex64))

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

# Whether a target has tensors of a dtype at all.
_HAS_DTYPE = {
    Target.TF: lambda dtype: True,
    Target.TFLITE: lambda dtype: dtype != _BFLOAT16,
    Target.TFLITE_FLEX: lambda dtype: True,
    Target.TFJS: lambda dtype: dtype in _TFJS_DTYPES,
}


def unsupported_dtypes(target: Target, dtypes: Iterable) -> set[np.dtype]:
    return {d for d in map(np.dtype, dtypes) if not _HAS_DTYPE[target](d)}


def supported_dtype_names(target: Target, candidates: Iterable) -> list[str]:
    return [np.dtype(d).name for d in candidates if not unsupported_dtypes(target, [d])]


# Complex values inside a program are (real, imaginary) pairs of float tensors
# (lowering_rules.complex_values): only a complex program input or output needs the target's own
# complex ops, Real and Imag to split an input, Complex to join an output. TFLite builtins have
# REAL and IMAG but no op that builds a complex tensor; TF.js's wasm backend has no complex kernel.
_COMPLEX_INPUTS = frozenset({Target.TF, Target.TFLITE, Target.TFLITE_FLEX})
_COMPLEX_OUTPUTS = frozenset({Target.TF, Target.TFLITE_FLEX})


def boundary_dtype_reason(target: Target, dtype, output: bool) -> str | None:
    """Why ``target`` cannot take (``output``: return) a program value of ``dtype``, else None."""
    try:
        if not np.issubdtype(np.dtype(dtype), np.complexfloating):
            return None
    except TypeError:  # extended dtypes (PRNG keys) are not complex
        return None
    if output and target not in _COMPLEX_OUTPUTS:
        return (f"{target.label} cannot return complex values: TFLite builtins have no op that builds "
                "a complex tensor and TF.js's wasm backend has no complex kernels")
    if not output and target not in _COMPLEX_INPUTS:
        return f"{target.label} cannot take complex inputs: TF.js's wasm backend has no Real or Imag kernel"
    return None


# TF.js has no uint32, but noxla's TF.js lowering carries a uint32 as the int32 with the same bits
# (lowering_rules/helpers.py). That is right only where the rule reads bit patterns, never signs
# or magnitudes: PRNG keys and bits, bit operations, wrapping add/sub, equality and data movement.
# Anything else on uint32 (comparisons, division, conversion to float, ...) stays rejected.
_WORDS = frozenset(np.dtype(d) for d in (np.int32, np.uint32, np.bool_))
TFJS_UINT32_AS_INT32 = frozenset({
    "random_seed", "random_wrap", "random_unwrap", "random_split", "random_fold_in", "random_bits",
    "threefry2x32", "iota_2x32_shape", "shift_left", "shift_right_logical", "and", "or", "xor", "not",
    "add", "sub", "eq", "ne", "select_n", "convert_element_type", "bitcast_convert_type",
    "broadcast_in_dim", "reshape", "squeeze", "slice", "concatenate", "stack", "split", "transpose",
    "copy", "jit",
})


def carries_uint32(target: Target, primitive: str, dtypes: Iterable) -> bool:
    """Whether ``target`` runs this application's uint32 values carried as int32 bits."""
    if target is not Target.TFJS or primitive not in TFJS_UINT32_AS_INT32:
        return False
    dtypes = set(map(np.dtype, dtypes))
    if primitive in ("convert_element_type", "bitcast_convert_type"):
        return dtypes <= _WORDS | {np.dtype(np.float32)} and not (
            primitive == "convert_element_type" and np.dtype(np.float32) in dtypes)
    return True
