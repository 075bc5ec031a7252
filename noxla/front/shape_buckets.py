"""Shape buckets: a polymorphic function as one signature per concrete size, for runtimes without
dynamic dimensions (LiteRT.js refuses a .tflite input of size -1, and WebGPU cannot compile it).

``{"b": [1, 8, 32]}`` with ``polymorphic_shapes=["(b, 784)"]`` gives signatures ``b1``, ``b8`` and
``b32``, each traced with its inputs at that size; the multi-signature .tflite stores the weights
once (``noxla.pipeline.tf_path.export_signatures``).
"""
from __future__ import annotations

import itertools
from typing import Callable, Mapping, Sequence

import jax
import numpy as np

from noxla.errors import ExportError


def bucket_signatures(fun: Callable, example_args: Sequence, polymorphic_shapes: Sequence[str],
                      buckets: Mapping[str, Sequence[int]]) -> dict[str, tuple[Callable, tuple]]:
    """{key: (fun, example args at that size)} for every combination of the buckets' sizes. Each
    polymorphic dimension must be one of the buckets' variables or a constant."""
    if polymorphic_shapes is None or len(polymorphic_shapes) != len(example_args):
        raise ExportError("shape buckets need polymorphic_shapes, one per example argument")
    if not buckets or any(not sizes for sizes in buckets.values()):
        raise ExportError("shape buckets: give each dimension variable a non-empty list of sizes")
    specs = [jax.export.symbolic_shape(s, like=np.shape(a)) if s is not None else None  # "_": the example's size
             for s, a in zip(polymorphic_shapes, example_args)]
    names = sorted(buckets)
    for spec in specs:
        for d in spec or ():
            if not isinstance(d, (int, np.integer)) and str(d) not in buckets:
                raise ExportError(f"shape buckets: the dimension {d} is not one of {', '.join(names)} "
                                  "(each polymorphic dimension must be a bucket variable itself)")
    out = {}
    for sizes in itertools.product(*(buckets[n] for n in names)):
        env = dict(zip(names, (int(s) for s in sizes)))
        args = tuple(_at_size(a, spec, env) for a, spec in zip(example_args, specs))
        out["_".join(f"{n}{env[n]}" for n in names)] = (fun, args)
    return out


def _at_size(arg, spec, env: dict) -> jax.ShapeDtypeStruct:
    dtype = np.asarray(arg).dtype if not hasattr(arg, "dtype") else arg.dtype
    if spec is None:
        return jax.ShapeDtypeStruct(np.shape(arg), dtype)
    if len(spec) != len(np.shape(arg)):
        raise ExportError(f"shape buckets: {spec} has {len(spec)} dimensions, the example {np.shape(arg)}")
    return jax.ShapeDtypeStruct(tuple(int(d) if isinstance(d, (int, np.integer)) else env[str(d)] for d in spec),
                                dtype)
