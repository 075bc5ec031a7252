"""What the commands read from their arguments: ``--input DTYPE[DIMS]`` specs (``InputSpec``, with
random samples for verifying), the ``MODULE:FUNCTION`` to load, the polymorphic shapes and the
example arguments and representative data they give."""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from typing import Callable, Sequence

import numpy as np

_DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i8": np.int8, "u8": np.uint8,
           "bool": np.bool_, "i64": np.int64, "f64": np.float64}
_INPUT = re.compile(r"^(?P<dtype>[a-z0-9]+)\[(?P<dims>[^\]]*)\]$")
SAMPLE_SIZE_OF_SYMBOLIC_DIM = 3


class InputSpec:
    """One `--input` such as ``f32[1,28,28,1]`` or ``f32[b,28,28,1]`` (``b`` symbolic)."""

    def __init__(self, text: str):
        match = _INPUT.match(text.replace(" ", ""))
        if not match or match["dtype"] not in _DTYPES:
            raise argparse.ArgumentTypeError(
                f"bad --input {text!r}: write DTYPE[DIMS], e.g. f32[1,28,28,1] or i32[b,16]; "
                f"dtypes: {', '.join(_DTYPES)}")
        self.text = text
        self.dtype = np.dtype(_DTYPES[match["dtype"]])
        self.dims = [d for d in match["dims"].split(",") if d]
        self.symbolic = any(not d.isdigit() for d in self.dims)

    def polymorphic_spec(self) -> str | None:
        return f"({', '.join(d if not d.isdigit() else '_' for d in self.dims)})" if self.symbolic else None

    def sample(self, rng: np.random.Generator, symbolic_size: int = SAMPLE_SIZE_OF_SYMBOLIC_DIM) -> np.ndarray:
        shape = tuple(int(d) if d.isdigit() else symbolic_size for d in self.dims)
        if self.dtype == np.bool_:
            return rng.random(shape) < 0.5
        if np.issubdtype(self.dtype, np.integer):
            return rng.integers(0, 10, size=shape).astype(self.dtype)
        return rng.standard_normal(shape).astype(self.dtype)


def load_function(ref: str) -> Callable:
    """``package.module:function`` (``module`` looked up from the current directory too)."""
    if ":" not in ref:
        raise SystemExit(f"noxla: expected MODULE:FUNCTION, got {ref!r}")
    module_name, _, attr = ref.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise SystemExit(f"noxla: cannot import {module_name!r}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SystemExit(f"noxla: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def function_and_inputs(args, out) -> tuple[Callable, list[InputSpec]]:
    if args.function is None:
        from noxla import example
        print(f"noxla: no MODULE:FUNCTION given; exporting the built-in example "
              f"noxla.example:mnist_cnn with --input {example.INPUT}", file=out)
        return example.mnist_cnn, args.input or [InputSpec(example.INPUT)]
    if not args.input:
        raise SystemExit("noxla: give one --input per positional argument, e.g. --input f32[1,28,28,1]")
    return load_function(args.function), args.input


def polymorphic_shapes(args, inputs: Sequence[InputSpec]):
    if args.polymorphic:
        if len(args.polymorphic) != len(inputs):
            raise SystemExit("noxla: give one --polymorphic per --input (use _ for a static argument)")
        return [None if p == "_" else p for p in args.polymorphic]
    specs = [i.polymorphic_spec() for i in inputs]
    return specs if any(specs) else None


def example_args(inputs: Sequence[InputSpec]):
    import jax
    return [jax.ShapeDtypeStruct(tuple(int(d) if d.isdigit() else 1 for d in i.dims), i.dtype) for i in inputs]


def representative_data(path: str | None):
    if path is None:
        return None
    with np.load(path) as arrays:  # np.savez names positional arrays arr_0, arr_1, ...
        return [arrays[k] for k in sorted(arrays.files, key=lambda k: (len(k), k))]
