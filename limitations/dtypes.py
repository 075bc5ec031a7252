"""Which tensor dtypes each target has at all. Per-operation gaps are declared by the rules."""
from __future__ import annotations

from typing import Iterable

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
