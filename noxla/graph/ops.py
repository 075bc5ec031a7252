"""Recording one raw TF op: attributes in GraphDef's form, the outputs' dtypes and shapes, and the
fold of an op whose inputs are all constants into a Const (grappler folds the same on TF's path;
here it happens when the op is recorded, so ``tf.get_static_value`` and the rules that read
constants see the value). A fold computes in NumPy what the TF kernel computes; an op whose
kernel NumPy does not match exactly for its inputs (NaN in a max, an integer division by zero)
is left unfolded rather than folded differently."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from noxla.graph.core import Tensor, current, recording  # noqa: F401  (recording: re-exported)
from noxla.graph.dtypes import DTYPES, DType, as_dtype

BFLOAT16 = np.dtype(DTYPES["bfloat16"].as_numpy_dtype)
FOLD_BYTES = 10 << 20  # grappler's largest folded constant (kMaxConstantSize)

# Attribute values in model.json's (proto3 JSON) form.
def type_attr(dtype: DType) -> dict:
    return {"type": as_dtype(dtype).json_name}


def int_attr(value: int) -> dict:
    return {"i": str(int(value))}


def bool_attr(value: bool) -> dict:
    return {"b": bool(value)}


def float_attr(value: float) -> dict:
    return {"f": float(value)}


def str_attr(value: str) -> dict:
    import base64
    return {"s": base64.b64encode(value.encode()).decode("ascii")}


def ints_attr(values) -> dict:
    return {"list": {"i": [str(int(v)) for v in values]}} if len(values) else {"list": {}}


def types_attr(dtypes) -> dict:
    return {"list": {"type": [as_dtype(d).json_name for d in dtypes]}}


def constant(value: np.ndarray, dtype: DType | None = None, name: str = "Const") -> Tensor:
    """A Const node holding ``value`` (as ``dtype``'s numpy type)."""
    dtype = as_dtype(value.dtype) if dtype is None else as_dtype(dtype)
    value = np.asarray(value, dtype=dtype.as_numpy_dtype)
    node = current().add("Const", [], {"dtype": type_attr(dtype)}, [(dtype, value.shape)], value=value, name=name)
    return node.output(0)


def emit(op: str, inputs: Sequence[Tensor], attrs: dict, outputs: Sequence[tuple[DType, tuple]],
         fold: Callable | None = None, name: str | None = None) -> list[Tensor]:
    """Record ``op``; folded into Consts when every input is one and ``fold`` computes it
    (``fold`` returns the output arrays, or None to leave this instance unfolded)."""
    if fold is not None and all(t.constant is not None for t in inputs) and sum(
            int(np.prod(shape, dtype=np.int64)) * (dtype.size if dtype.name != "string" else 8)
            for dtype, shape in outputs) <= FOLD_BYTES:
        with np.errstate(all="ignore"):
            values = fold(*[_widened(t.constant) for t in inputs])
        if values is not None:
            out = []
            for value, (dtype, shape) in zip(values, outputs):
                value = np.asarray(value)
                if value.shape != tuple(shape):
                    raise AssertionError(f"the fold of {op} made shape {value.shape}, inferred {shape}")
                out.append(constant(value.astype(dtype.as_numpy_dtype, copy=False), dtype, name=name or op))
            return out
    node = current().add(op, inputs, attrs, outputs, name=name)
    return [node.output(i) for i in range(len(outputs))]


def _widened(value: np.ndarray) -> np.ndarray:
    """A bfloat16 constant as float32 (exact) for a fold: NumPy's checks (``kind == "f"``, NaN) do
    not see ml_dtypes' type. A bfloat16 result is rounded once from the float32 fold (``emit``),
    which is what TF's bfloat16 kernels of one rounding, JAX on CPU, and the writers carrying
    bfloat16 in float32 compute; the ops whose kernel rounds more often are not recorded on it."""
    return value.astype(np.float32) if value.dtype == BFLOAT16 else value


def emit1(op, inputs, attrs, dtype, shape, fold=None, name=None, partial=None) -> Tensor:
    """One output; ``partial``: its partly known value (``Node.partial``), kept where not folded."""
    out = emit(op, inputs, attrs, [(dtype, tuple(shape))], None if fold is None else (lambda *v: _one(fold(*v))),
               name)[0]
    if partial is not None and out.constant is None:
        out.node.partial = partial
    return out


def partial(t: Tensor):
    """What is known of an int tensor's value before it runs: a Const's value, a node's ``partial``
    (ints, None where unknown), or None (nothing known)."""
    if t.constant is not None:
        value = t.constant
        return int(value) if value.ndim == 0 else [int(v) for v in value.reshape(-1)] if value.ndim == 1 else None
    return t.node.partial if t.index == 0 else None


def broadcast_shapes(*shapes) -> tuple:
    """The broadcast of static shapes with unknown sizes (None), as TF's shape inference makes it: a
    1 takes the other size; an unknown size against a known one other than 1 is that one."""
    rank = max(len(s) for s in shapes)
    out = []
    for sizes in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        known = {d for d in sizes if d is not None and d != 1}
        if len(known) > 1:
            raise ValueError(f"incompatible shapes {[list(s) for s in shapes]}")
        if known:
            out.append(known.pop())
        else:
            out.append(None if None in sizes else 1)
    return tuple(out)


def _one(value):
    return None if value is None else [value]
