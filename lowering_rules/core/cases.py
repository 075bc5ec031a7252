"""Differential test cases, declared beside the rules they exercise.

A case is a JAX callable and its arguments. The arguments are either concrete
numpy arrays or ``ArgSpec``s (``f32(2, 3)``, ``i32(4, low=-2, high=9)``) that
the harness fills with data seeded from the case name, so every run sees the
same inputs. JAX's own result on those inputs is the reference in every runtime.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    shape: tuple[int, ...]
    dtype: np.dtype
    low: float | None = None
    high: float | None = None

    def materialize(self, rng: np.random.Generator) -> np.ndarray:
        dtype = self.dtype
        if dtype == np.bool_:
            return rng.random(self.shape) < 0.5
        if np.issubdtype(dtype, np.complexfloating):
            parts = [ArgSpec(self.shape, np.dtype(np.float32), self.low, self.high).materialize(rng)
                     for _ in range(2)]
            return (parts[0] + 1j * parts[1]).astype(dtype)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            low = max(info.min, -10 if self.low is None else self.low)
            high = min(info.max, 10 if self.high is None else self.high)
            if np.issubdtype(dtype, np.unsignedinteger):
                low = max(low, 0)
            return rng.integers(low, high, size=self.shape, endpoint=True).astype(dtype)
        if self.low is None and self.high is None:
            return rng.standard_normal(self.shape).astype(dtype)
        low = -1.0 if self.low is None else self.low
        high = 1.0 if self.high is None else self.high
        return rng.uniform(low, high, size=self.shape).astype(dtype)


def _spec(dtype):
    def make(*shape: int, low: float | None = None, high: float | None = None) -> ArgSpec:
        return ArgSpec(tuple(shape), np.dtype(dtype), low, high)
    make.__name__ = np.dtype(dtype).name
    return make


f32, f16, i32, i8, u8, u32, boolean, c64 = map(
    _spec, (np.float32, np.float16, np.int32, np.int8, np.uint8, np.uint32, np.bool_, np.complex64))


def default_tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(atol, rtol) for comparing a runtime's result with JAX's, relative to output scale."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return 1e-2, 1e-2
    if dtype == ml_dtypes.bfloat16:  # 8 significant bits: a few units in the last place
        return 3.2e-2, 3.2e-2
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return 1e-5, 1e-5
    return 0.0, 0.0


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fun: Callable
    args: tuple[Any, ...]
    atol: float | None = None
    rtol: float | None = None
    polymorphic_shapes: Sequence[str | None] | None = None
    primitive: str = ""
    # Why the case cannot run under the installed JAX (e.g. its primitive is newer), or "".
    skip: str = ""

    @property
    def id(self) -> str:
        return f"{self.primitive}:{self.name}"

    def for_primitive(self, primitive: str) -> "Case":
        return dataclasses.replace(self, primitive=primitive)

    def concrete_args(self) -> list[np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        return [a.materialize(rng) if isinstance(a, ArgSpec) else np.asarray(a) for a in self.args]


def flax_linen():
    """``flax.linen``, imported when a case runs: flax is a test extra, and importing noxla (or
    building the registry) must not import it."""
    import flax.linen
    return flax.linen


def case(name: str, fun: Callable, *args, atol: float | None = None, rtol: float | None = None,
         polymorphic_shapes: Sequence[str | None] | None = None, skip: str = "") -> Case:
    """``skip``: the reason the case cannot run under the installed JAX ("" where it runs); tests
    report such a case as skipped with that reason, never silently."""
    return Case(name, fun, tuple(args), atol, rtol, polymorphic_shapes, skip=skip)


def newer_jax(present: bool, missing: str, *cases_: Case) -> list[Case]:
    """``cases_`` of something a newer JAX added (a primitive, a parameter): each skipped with the
    reason ``missing`` where the installed JAX lacks it (``present`` false)."""
    return [dataclasses.replace(c, skip="" if present else missing) for c in cases_]


def newer_primitive(name: str, since: str, *cases_: Case) -> list[Case]:
    """``cases_`` of ``jax.lax.<name>_p``, skipped under a JAX older than ``since``, which has none."""
    from jax import lax
    return newer_jax(hasattr(lax, f"{name}_p"), f"JAX before {since} has no {name} primitive", *cases_)
