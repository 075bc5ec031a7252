"""The graph a TF.js graph model holds, as a small node interface that needs no TensorFlow.

``noxla.writers.tfjs.writer`` writes a ``Graph`` as ``model.json`` and its weight shards. A node's
attributes are given in the form model.json holds them (the proto3 JSON form of TF's AttrValue,
which TF.js's loader reads): ``{"type": "DT_FLOAT"}``, ``{"i": "1"}``, ``{"list": {"s": [...]}}``;
the helpers below build the common ones. A Const node carries its value as an array in ``value``:
the writer moves it into the weights. ``noxla.writers.tfjs.graph_def`` adapts a TF GraphDef to this form.
"""
from __future__ import annotations

import base64
import dataclasses
import functools
import json
import os

import numpy as np

# TF's DataType names, as model.json spells them, by numpy dtype.
DTYPE_NAMES = {np.dtype(np.float32): "DT_FLOAT", np.dtype(np.float64): "DT_DOUBLE", np.dtype(np.float16): "DT_HALF",
               np.dtype(np.int32): "DT_INT32", np.dtype(np.int64): "DT_INT64", np.dtype(np.int8): "DT_INT8",
               np.dtype(np.int16): "DT_INT16", np.dtype(np.uint8): "DT_UINT8", np.dtype(np.uint16): "DT_UINT16",
               np.dtype(np.uint32): "DT_UINT32", np.dtype(np.uint64): "DT_UINT64", np.dtype(np.bool_): "DT_BOOL",
               np.dtype(np.complex64): "DT_COMPLEX64", np.dtype(np.complex128): "DT_COMPLEX128",
               np.dtype(object): "DT_STRING"}


@functools.lru_cache(maxsize=None)
def tfjs_supported_ops() -> frozenset[str]:
    """The TF op types TF.js's graph models run: its converter's op mapper lists, generated into
    ``op_list.json`` beside this module by ``tools/gen_tfjs_ops.py``."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "op_list.json")) as f:
        return frozenset(name for names in json.load(f)["ops"].values() for name in names)


@dataclasses.dataclass
class Node:
    name: str
    op: str
    inputs: list[str] = dataclasses.field(default_factory=list)  # "node", "node:1", control inputs "^node"
    attrs: dict[str, dict] = dataclasses.field(default_factory=dict)  # model.json's AttrValue form
    device: str = ""
    value: np.ndarray | None = None  # a Const's value, written to the weights


@dataclasses.dataclass
class Function:
    """A function of the library (a While/If body): ``signature`` is its OpDef in model.json's form
    (name, inputArg, outputArg), ``ret`` maps its output args to tensors of ``nodes``; ``extra``
    holds the rest of the FunctionDef's fields (attr, argAttr, ...) as they are written."""
    signature: dict
    nodes: list[Node]
    ret: dict[str, str] = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.signature["name"]


@dataclasses.dataclass
class Graph:
    nodes: list[Node]
    functions: list[Function] = dataclasses.field(default_factory=list)
    versions: dict = dataclasses.field(default_factory=dict)  # {"producer": N}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A signature entry: the graph tensor (``"x:0"``), its dtype name and shape (None: any size)."""
    name: str
    dtype: str
    shape: tuple[int | None, ...] | None


def dtype_attr(dtype) -> dict:
    return {"type": DTYPE_NAMES[np.dtype(dtype)]}


def int_attr(value: int) -> dict:
    return {"i": str(int(value))}  # proto3 JSON writes int64 as a string


def float_attr(value: float) -> dict:
    return {"f": float(value)}


def bool_attr(value: bool) -> dict:
    return {"b": bool(value)}


def string_attr(value: str | bytes) -> dict:
    data = value.encode() if isinstance(value, str) else value
    return {"s": base64.b64encode(data).decode("ascii")}  # proto3 JSON writes bytes in base64


def ints_attr(values) -> dict:
    return {"list": {"i": [str(int(v)) for v in values]}}


def strings_attr(values) -> dict:
    return {"list": {"s": [string_attr(v)["s"] for v in values]}}


def shape_json(shape: tuple[int | None, ...] | None) -> dict:
    """A TensorShapeProto as model.json holds it (``-1``: any size; None: unknown rank)."""
    if shape is None:
        return {"unknownRank": True}
    return {"dim": [{"size": str(-1 if d is None else int(d))} for d in shape]} if shape else {}


def shape_attr(shape: tuple[int | None, ...] | None) -> dict:
    return {"shape": shape_json(shape)}


def attr_strings(attr: dict | None) -> list[str]:
    """The strings of a list(string) attribute (``fused_ops``), decoded."""
    return [base64.b64decode(s).decode() for s in (attr or {}).get("list", {}).get("s", [])]
