"""A property-based fuzzer over primitives' parameters, shapes and dtypes, JAX against each runtime.

Hypothesis draws programs of one primitive each (conv_general_dilated, gather, scatter,
reduce_window, dot_general, pad, slice, dynamic_slice, sort) with random shapes, parameters and
dtypes, (tests/fuzz_ops.py) chains of elementwise ops, reductions, shape ops and control flow,
(tests/fuzz_poly.py) such programs traced with symbolic sizes, (tests/fuzz_grad.py) the
derivatives JAX builds of such programs (vjp, jvp), and (tests/fuzz_batched.py) such programs under
``jax.vmap``.
Each program must, in each runtime, either be rejected up front by the check for that runtime's
target, or run and match JAX (tests/differential.py's comparison). A crash after the
check passed, or a silent mismatch, is a failure, reported with the program. A mismatch that a
declared difference explains is counted apart ("declared") and printed, not a failure (``declared``):
in the default mode, an equation taking a rule's fast lowering (``FastVariant``) got a NaN or inf
operand, JAX's own from finite inputs (sqrt of a negative, then min), and strict mode matches; or TF.js
(cpu, wasm), which keeps float32 subnormals, got one that JAX's CPU flushes to zero (nextafter from 0.0).

In the suite: tests/test_fuzz.py (a fixed seed, a few examples). By hand, for a longer run:

    python3 -m tests.fuzz --minutes 20 [--targets tf,tflite,tfjs] [--seed 0]

prints, per primitive, the programs tried, rejected up front, matched, crashed after the check and
differed silently, and every failure's program.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Callable, Sequence

import numpy as np

# Runtimes per target name: TF eager only (tf), LiteRT (tflite: the file the default export writes,
# tests/default_tflite.py), TF.js in Node (tfjs: cpu and wasm, the model the default export writes).
TARGET_RUNTIMES = {"tf": ("tf_eager",), "tflite": ("tflite",), "tfjs": ("tfjs_cpu", "tfjs_wasm")}
OUTCOMES = ("tried", "invalid", "rejected", "matched", "crashed", "differed", "declared")
# The runtimes that keep float32 subnormals, which JAX's CPU (and TF's, and LiteRT's) flush to zero.
KEEP_SUBNORMALS = ("tfjs_cpu", "tfjs_wasm")


@dataclasses.dataclass
class Program:
    """One drawn program: the primitive it exercises, a readable description, the function and inputs."""
    primitive: str
    description: str
    fun: Callable
    args: tuple
    strict: bool = False  # IEEE-exact lowerings: the program's inputs hold NaN, infinities or -0.0
    polymorphic_shapes: tuple | None = None  # one jax2tf-style spec per input: traced for any size

    def __repr__(self) -> str:
        inputs = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.args)
        poly = f" as ({'; '.join(map(str, self.polymorphic_shapes))})" if self.polymorphic_shapes else ""
        return f"{self.primitive}: {self.description} on ({inputs}){poly}"


# ----------------------------------------------------------------------------- data

def values(rng: np.random.RandomState, shape, dtype: str, special: bool = False, wide: bool = False) -> np.ndarray:
    """Small values: integers in a range no product or sum of the programs overflows; floats with
    ties, and (``special``) NaN, infinities and signed zeros. ``wide``: integers over their whole
    range, a fifth of them at its edges and where float32 stops holding them (2^24 + 1): what
    wraps, and what a runtime computing integers through floats gets wrong."""
    import jax.numpy as jnp
    dt = jnp.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.rand(*shape) < 0.5)
    if np.issubdtype(dt, np.integer) and wide:
        info = np.iinfo(dt)
        edges = [v for v in (info.min, info.min + 1, info.max, -1, 0, 1, 2 ** 16, 2 ** 24 + 1, -(2 ** 24) - 1)
                 if info.min <= v <= info.max]
        drawn = rng.randint(int(info.min), int(info.max) + 1, size=shape, dtype=np.int64)
        return np.where(rng.rand(*shape) < 0.2, rng.choice(edges, size=shape), drawn).astype(dt)
    if np.issubdtype(dt, np.integer):
        low = 0 if np.issubdtype(dt, np.unsignedinteger) else -8
        return rng.randint(low, 9, size=shape).astype(dt)
    x = np.round(rng.uniform(-4, 4, size=shape) * 4) / 4  # quarters: ties and exact sums
    if special and x.size:
        picks = rng.rand(*shape)
        x = np.where(picks < 0.05, np.nan, x)
        x = np.where((picks >= 0.05) & (picks < 0.08), np.inf, x)
        x = np.where((picks >= 0.08) & (picks < 0.11), -np.inf, x)
        x = np.where((picks >= 0.11) & (picks < 0.16), -0.0, x)
    return np.asarray(x, dtype=dt)


# float32 and int32 repeated: the dtypes every runtime has (TF.js has no other) are drawn most often.
FLOATS = ("float32", "float32", "float32", "float16", "bfloat16")
INTS = ("int32", "int32", "int8", "uint8", "int16")


# ----------------------------------------------------------------------------- strategies

def shapes(min_rank=1, max_rank=3, min_size=0, max_size=5):
    from hypothesis import strategies as st
    return st.lists(st.integers(min_size, max_size), min_size=min_rank, max_size=max_rank)


def strategies():
    """The programs per primitive, as hypothesis strategies (imported here: a test-only library)."""
    from hypothesis import strategies as st

    seeds = st.integers(0, 2 ** 31 - 1)

    @st.composite
    def conv(draw):
        from jax import lax
        nd = draw(st.integers(1, 2))
        dtype = draw(st.sampled_from(FLOATS + ("int32", "int8")))
        groups = draw(st.sampled_from(["none", "feature", "batch"]))
        g = draw(st.integers(2, 3)) if groups != "none" else 1
        fgc, bgc = (g, 1) if groups == "feature" else (1, g) if groups == "batch" else (1, 1)
        n = bgc * draw(st.integers(1, 2))
        cin_group = draw(st.integers(1, 3))
        cin = fgc * cin_group
        cout = fgc * bgc * draw(st.integers(1, 2))
        spatial = [draw(st.integers(1, 7)) for _ in range(nd)]
        kernel = [draw(st.integers(1, 3)) for _ in range(nd)]
        strides = [draw(st.integers(1, 3)) for _ in range(nd)]
        lhs_dil = [draw(st.integers(1, 2)) for _ in range(nd)]
        rhs_dil = [draw(st.integers(1, 2)) for _ in range(nd)]
        # String padding only without lhs dilation (JAX has none for transposed convolutions). Explicit
        # padding, negative too, keeps every output dimension at least 1.
        padding = draw(st.sampled_from(["SAME", "VALID", "explicit"])) if lhs_dil == [1] * nd else "explicit"
        if padding == "VALID" and any(size < (k - 1) * rd + 1 for size, k, rd in zip(spatial, kernel, rhs_dil)):
            padding = "SAME"
        if padding == "explicit":
            padding = []
            for size, k, ld, rd in zip(spatial, kernel, lhs_dil, rhs_dil):
                lo, hi = draw(st.integers(-2, 3)), draw(st.integers(-2, 3))
                shortfall = (k - 1) * rd + 1 - ((size - 1) * ld + 1 + lo + hi)
                padding.append((lo, hi + max(0, shortfall)))
        layout = draw(st.sampled_from(["channels_first", "channels_last"]))
        spatial_names = "HW"[:nd] if nd == 2 else "H"
        if layout == "channels_first":
            dn = ("NC" + spatial_names, "OI" + spatial_names, "NC" + spatial_names)
            lhs_shape, rhs_shape = [n, cin, *spatial], [cout, cin // fgc, *kernel]
        else:
            dn = ("N" + spatial_names + "C", spatial_names + "IO", "N" + spatial_names + "C")
            lhs_shape, rhs_shape = [n, *spatial, cin], [*kernel, cin // fgc, cout]
        preferred = None
        if dtype == "int8" and draw(st.booleans()):
            preferred = np.int32
        rng = np.random.RandomState(draw(seeds))
        lhs, rhs = values(rng, lhs_shape, dtype), values(rng, rhs_shape, dtype)
        params = dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
                      dimension_numbers=dn, feature_group_count=fgc, batch_group_count=bgc,
                      preferred_element_type=preferred)

        def fun(x, w):
            return lax.conv_general_dilated(x, w, **params)
        return Program("conv_general_dilated", f"{params}", fun, (lhs, rhs))

    @st.composite
    def dot_general(draw):
        from jax import lax
        dtype = draw(st.sampled_from(FLOATS + ("int32", "int8")))
        batch = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
        contract = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 2)))]
        lhs_free = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 2)))]
        rhs_free = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 2)))]
        nb, nc = len(batch), len(contract)
        lhs_perm = draw(st.permutations(range(nb + nc + len(lhs_free))))
        rhs_perm = draw(st.permutations(range(nb + nc + len(rhs_free))))
        # Logical order (batch, contract, free) placed at the permuted axes.
        lhs_logical, rhs_logical = batch + contract + lhs_free, batch + contract + rhs_free
        lhs_shape = [0] * len(lhs_logical)
        rhs_shape = [0] * len(rhs_logical)
        for logical, axis in enumerate(lhs_perm):
            lhs_shape[axis] = lhs_logical[logical]
        for logical, axis in enumerate(rhs_perm):
            rhs_shape[axis] = rhs_logical[logical]
        dn = ((tuple(lhs_perm[nb:nb + nc]), tuple(rhs_perm[nb:nb + nc])),
              (tuple(lhs_perm[:nb]), tuple(rhs_perm[:nb])))
        preferred = None
        if dtype in ("int8", "float16", "bfloat16") and draw(st.booleans()):
            preferred = np.int32 if dtype == "int8" else np.float32
        # The product transposed, as jnp.einsum writes attention: transpose's rule then computes it in
        # another axis order (linalg.transposed_product).
        out_perm = draw(st.one_of(st.none(), st.permutations(range(nb + len(lhs_free) + len(rhs_free)))))
        rng = np.random.RandomState(draw(seeds))
        lhs, rhs = values(rng, lhs_shape, dtype), values(rng, rhs_shape, dtype)

        def fun(x, y):
            out = lax.dot_general(x, y, dn, preferred_element_type=preferred)
            return out if out_perm is None else lax.transpose(out, tuple(out_perm))
        return Program("dot_general", f"dimension_numbers={dn} preferred_element_type={preferred} "
                       f"transposed={out_perm}", fun, (lhs, rhs))

    @st.composite
    def pad(draw):
        from jax import lax
        dtype = draw(st.sampled_from(FLOATS + INTS + ("bool",)))
        shape = draw(shapes())
        config = []
        for size in shape:
            interior = draw(st.integers(0, 2))
            dilated = max(0, (size - 1) * (interior + 1) + 1) if size else 0
            lo = draw(st.integers(-min(3, dilated), 3))
            hi = draw(st.integers(-min(3, dilated + lo), 3)) if dilated + lo >= 0 else draw(st.integers(0, 3))
            config.append((lo, hi, interior))
        rng = np.random.RandomState(draw(seeds))
        x, value = values(rng, shape, dtype), values(rng, (), dtype)

        def fun(x, v):
            return lax.pad(x, v, config)
        return Program("pad", f"padding_config={config}", fun, (x, value))

    @st.composite
    def slice_(draw):
        from jax import lax
        dtype = draw(st.sampled_from(FLOATS + INTS + ("bool",)))
        shape = draw(shapes(min_size=1, max_size=7))
        starts, limits, strides = [], [], []
        for size in shape:
            start = draw(st.integers(0, size))
            starts.append(start)
            limits.append(draw(st.integers(start, size)))
            strides.append(draw(st.integers(1, 3)))
        rng = np.random.RandomState(draw(seeds))

        def fun(x):
            return lax.slice(x, starts, limits, strides)
        return Program("slice", f"start={starts} limit={limits} strides={strides}", fun,
                       (values(rng, shape, dtype),))

    @st.composite
    def dynamic_slice(draw):
        from jax import lax
        dtype = draw(st.sampled_from(FLOATS + INTS + ("bool",)))
        shape = draw(shapes(min_size=1, max_size=6))
        sizes = [draw(st.integers(0, size)) for size in shape]
        index_dtype = draw(st.sampled_from(["int32", "int8", "uint8", "int16"]))
        low = 0 if index_dtype == "uint8" else -8
        starts = np.array([draw(st.integers(low, size + 3)) for size in shape], index_dtype)
        rng = np.random.RandomState(draw(seeds))

        def fun(x, idx):
            return lax.dynamic_slice(x, [idx[i] for i in range(len(shape))], sizes)
        return Program("dynamic_slice", f"slice_sizes={sizes} starts={starts.tolist()}", fun,
                       (values(rng, shape, dtype), starts))

    def _indices(draw, rng, dims, windows, batch_shape, mode, batch_of=None):
        """Index vectors (last axis) into ``dims`` for windows of ``windows``: within bounds for
        PROMISE_IN_BOUNDS, else also out of bounds on either side."""
        columns = []
        for dim, window in zip(dims, windows):
            if mode == "PROMISE_IN_BOUNDS":
                columns.append(rng.randint(0, dim - window + 1, size=batch_shape))
            else:
                columns.append(rng.randint(-2, dim + 2, size=batch_shape))
        return np.stack(columns, axis=-1).astype(np.int32) if columns else \
            np.zeros(tuple(batch_shape) + (0,), np.int32)

    def _dimensions(draw):
        """(operand shape, batching dim or None, index map, collapsed dims, window sizes)."""
        rank = draw(st.integers(1, 3))
        shape = [draw(st.integers(1, 5)) for _ in range(rank)]
        batching = draw(st.sampled_from([None] + list(range(rank)))) if rank > 1 and draw(
            st.integers(0, 3)) == 0 else None
        free = [d for d in range(rank) if d != batching]
        index_map = draw(st.permutations(free))[:draw(st.integers(1 if free else 0, len(free)))]
        collapsed = sorted(d for d in index_map if draw(st.booleans()))
        windows = [1 if d == batching or d in collapsed else draw(st.integers(0 if d not in index_map else 1,
                                                                              shape[d])) for d in range(rank)]
        return shape, batching, list(index_map), collapsed, windows

    def _mode(draw):
        from jax.lax import GatherScatterMode
        return draw(st.sampled_from([GatherScatterMode.FILL_OR_DROP, GatherScatterMode.CLIP,
                                     GatherScatterMode.PROMISE_IN_BOUNDS]))

    def _batch_shape(draw, batching_size):
        batch_shape = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
        position = None
        if batching_size is not None:
            position = draw(st.integers(0, len(batch_shape)))
            batch_shape.insert(position, batching_size)
        return batch_shape, position

    @st.composite
    def gather(draw):
        from jax import lax
        dtype = draw(st.sampled_from(FLOATS + INTS + ("bool",)))
        shape, batching, index_map, collapsed, windows = _dimensions(draw)
        mode = _mode(draw)
        batch_shape, position = _batch_shape(draw, None if batching is None else shape[batching])
        rng = np.random.RandomState(draw(seeds))
        indices = _indices(draw, rng, [shape[d] for d in index_map], [windows[d] for d in index_map],
                           batch_shape, mode.name)
        offset_count = len(shape) - len(collapsed) - (batching is not None)
        out_rank = len(batch_shape) + offset_count
        offset_dims = sorted(draw(st.permutations(range(out_rank)))[:offset_count])
        dn = lax.GatherDimensionNumbers(
            offset_dims=tuple(offset_dims), collapsed_slice_dims=tuple(collapsed),
            start_index_map=tuple(index_map),
            operand_batching_dims=() if batching is None else (batching,),
            start_indices_batching_dims=() if batching is None else (position,))
        flat = indices.reshape(-1, indices.shape[-1]) if indices.size else indices.reshape(0, 1)
        unique = bool(len({tuple(r) for r in flat.tolist()}) == len(flat) and batching is None)
        ordered = bool(np.all(np.diff(flat[:, 0]) >= 0)) if len(flat) > 1 and indices.shape[-1] == 1 else False
        unique_indices = unique and draw(st.booleans())
        sorted_indices = ordered and draw(st.booleans())
        fill = None
        if mode.name == "FILL_OR_DROP" and dtype != "bool" and draw(st.booleans()):
            fill = float(draw(st.integers(-3, 3)))
        x = values(rng, shape, dtype)

        def fun(operand, idx):
            return lax.gather(operand, idx, dn, tuple(windows), mode=mode, fill_value=fill,
                              unique_indices=unique_indices, indices_are_sorted=sorted_indices)
        return Program("gather", f"{dn} slice_sizes={windows} mode={mode.name} fill_value={fill} "
                       f"unique_indices={unique_indices} indices_are_sorted={sorted_indices} "
                       f"indices={indices.tolist()}", fun, (x, indices))

    @st.composite
    def scatter(draw):
        import jax.numpy as jnp
        from jax import lax
        kind = draw(st.sampled_from(["scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max"]))
        dtype = draw(st.sampled_from(FLOATS + INTS + (("bool",) if kind == "scatter" else ())))
        shape, batching, index_map, collapsed, windows = _dimensions(draw)
        mode = _mode(draw)
        batch_shape, position = _batch_shape(draw, None if batching is None else shape[batching])
        rng = np.random.RandomState(draw(seeds))
        indices = _indices(draw, rng, [shape[d] for d in index_map], [windows[d] for d in index_map],
                           batch_shape, mode.name)
        inserted = collapsed
        window_dims = [d for d in range(len(shape)) if d not in inserted and d != batching]
        update_rank = len(batch_shape) + len(window_dims)
        update_window_dims = sorted(draw(st.permutations(range(update_rank)))[:len(window_dims)])
        update_shape, window_iter, batch_iter = [], iter(window_dims), iter(batch_shape)
        for axis in range(update_rank):
            update_shape.append(windows[next(window_iter)] if axis in update_window_dims else next(batch_iter))
        dn = lax.ScatterDimensionNumbers(
            update_window_dims=tuple(update_window_dims), inserted_window_dims=tuple(inserted),
            scatter_dims_to_operand_dims=tuple(index_map),
            operand_batching_dims=() if batching is None else (batching,),
            scatter_indices_batching_dims=() if batching is None else (position,))
        x, updates = values(rng, shape, dtype), values(rng, update_shape, dtype)
        scatter_fn = getattr(lax, kind)
        # How many updates reach each operand element (JAX's own scatter-add of ones): a replacing
        # scatter whose windows overlap has no defined result, and unique_indices promises none do.
        counts = np.asarray(lax.scatter_add(jnp.zeros(shape, jnp.int32), indices, jnp.ones(update_shape, jnp.int32),
                                            dn, mode=mode))
        disjoint = bool(counts.size == 0 or counts.max() <= 1)
        if kind == "scatter" and not disjoint:
            kind, scatter_fn = "scatter_add", lax.scatter_add
            if dtype == "bool":
                x, updates = x.astype(np.int32), updates.astype(np.int32)
        unique_indices = disjoint and draw(st.booleans())
        flat = indices.reshape(-1, indices.shape[-1]) if indices.size else indices.reshape(0, 1)
        ordered = bool(np.all(np.diff(flat[:, 0]) >= 0)) if len(flat) > 1 and indices.shape[-1] == 1 else False
        sorted_indices = ordered and draw(st.booleans())

        def fun(operand, idx, upd):
            return scatter_fn(operand, idx, upd, dn, mode=mode, unique_indices=unique_indices,
                              indices_are_sorted=sorted_indices)
        return Program(kind, f"{dn} mode={mode.name} unique_indices={unique_indices} "
                       f"indices_are_sorted={sorted_indices} indices={indices.tolist()}",
                       fun, (x, indices, updates))

    @st.composite
    def reduce_window(draw):
        from jax import lax
        monoid = draw(st.sampled_from(["add", "mul", "max", "min", "add_nonzero_init"]))
        dtype = draw(st.sampled_from(FLOATS + ("int32", "int8", "uint8")))
        shape = draw(shapes(min_size=1, max_size=6))
        rank = len(shape)
        window = [draw(st.integers(1, 3)) for _ in range(rank)]
        strides = [draw(st.integers(1, 3)) for _ in range(rank)]
        base_dil = [draw(st.integers(1, 2)) for _ in range(rank)]
        win_dil = [draw(st.integers(1, 2)) for _ in range(rank)]
        padding = []
        for size, w, bd, wd in zip(shape, window, base_dil, win_dil):
            need = max(0, (w - 1) * wd + 1 - ((size - 1) * bd + 1))
            lo = draw(st.integers(0, 2))
            padding.append((lo, max(need - lo, draw(st.integers(0, 2)))))
        rng = np.random.RandomState(draw(seeds))
        x = values(rng, shape, dtype)
        ops = {"add": lax.add, "mul": lax.mul, "max": lax.max, "min": lax.min, "add_nonzero_init": lax.add}
        info = np.finfo(np.float32) if dtype in FLOATS else np.iinfo(np.dtype(dtype))
        inits = {"add": 0, "mul": 1, "max": -np.inf if dtype in FLOATS else info.min,
                 "min": np.inf if dtype in FLOATS else info.max, "add_nonzero_init": 2}
        import jax.numpy as jnp
        init = np.asarray(inits[monoid], jnp.dtype(dtype))
        op = ops[monoid]

        def fun(v):
            return lax.reduce_window(v, init, op, window, strides, padding, base_dil, win_dil)
        return Program("reduce_window", f"{monoid} window={window} strides={strides} padding={padding} "
                       f"base_dilation={base_dil} window_dilation={win_dil}", fun, (x,))

    @st.composite
    def sort(draw):
        from jax import lax
        count = draw(st.integers(1, 3))
        num_keys = draw(st.integers(1, count))
        shape = draw(shapes(min_size=1, max_size=6))
        dimension = draw(st.integers(0, len(shape) - 1))
        dtypes = [draw(st.sampled_from(FLOATS + INTS + ("bool",))) for _ in range(count)]
        rng = np.random.RandomState(draw(seeds))
        special = draw(st.booleans())
        operands = tuple(values(rng, shape, d, special=special) for d in dtypes)
        # An unstable sort orders ties as it likes: only when the keys have none.
        keys = np.stack([np.moveaxis(o.astype(np.float64), dimension, -1) for o in operands[:num_keys]], -1)
        keys = keys.reshape(-1, shape[dimension], num_keys)
        signs = np.stack([np.moveaxis(np.signbit(o.astype(np.float64)), dimension, -1)
                          for o in operands[:num_keys]], -1).reshape(keys.shape)
        tied = any(len({tuple(map(str, zip(k, s))) for k, s in zip(row, srow)}) < len(row)
                   for row, srow in zip(keys, signs))
        is_stable = draw(st.booleans()) or (tied and count > num_keys)
        if tied and not is_stable:
            is_stable = True

        def fun(*xs):
            return lax.sort(xs, dimension=dimension, is_stable=is_stable, num_keys=num_keys)
        return Program("sort", f"dimension={dimension} is_stable={is_stable} num_keys={num_keys} "
                       f"operands={[str(o.dtype) for o in operands]}", fun, operands)

    from tests import fuzz_batched, fuzz_grad, fuzz_ops, fuzz_poly
    drawn = {"conv_general_dilated": conv(), "dot_general": dot_general(), "pad": pad(), "slice": slice_(),
             "dynamic_slice": dynamic_slice(), "gather": gather(), "scatter": scatter(),
             "reduce_window": reduce_window(), "sort": sort(), **fuzz_ops.strategies()}
    return {**drawn, **fuzz_poly.strategies(drawn), **fuzz_grad.strategies(drawn), **fuzz_batched.strategies(drawn)}


def any_program():
    from hypothesis import strategies as st
    return st.one_of(*strategies().values())


# ----------------------------------------------------------------------------- running

@dataclasses.dataclass
class Failure:
    runtime: str
    outcome: str  # "crashed" or "differed"
    program: Program
    message: str

    def __str__(self) -> str:
        return f"[{self.outcome} in {self.runtime}] {self.program!r}\n    {self.message}"


class Tally:
    """Counts per primitive and outcome; ``tried`` counts programs, the others program-runtime pairs."""

    def __init__(self):
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.failures: list[Failure] = []
        self.declared: list[Failure] = []   # mismatches a declared difference explains (``declared``)
        self.rejections: collections.Counter = collections.Counter()
        # Runtimes caches exports by id(program): every traced program stays alive so no id is reused.
        self.programs: list = []
        self.default_tflite = None   # tests.default_tflite.DefaultTflite, made on the first tflite run
        self.writers: collections.Counter = collections.Counter()   # (tflite or tfjs, writer): files that ran
        # Where a supervised run (tests/fuzz_supervise.py) keeps the counts and the step running now,
        # so that a process a native library aborts loses nothing and names the program.
        self.state_path: str | None = None

    def at(self, program: Program | None, step: str = "") -> None:
        """Save the counts and the step about to run (``program`` None: between programs)."""
        if self.state_path is None:
            return
        state = {"counts": self.counts, "rejections": self.rejections,
                 "writers": [[kind, writer, n] for (kind, writer), n in self.writers.items()],
                 "failures": [str(f) for f in self.failures], "declared": [str(d) for d in self.declared],
                 "current": None if program is None else [program.primitive, repr(program), step]}
        with open(self.state_path + ".part", "w") as f:
            json.dump(state, f)
        os.replace(self.state_path + ".part", self.state_path)

    def absorb(self, state: dict) -> None:
        """Add a saved state's counts (of another process) to these."""
        for name, counts in state["counts"].items():
            self.counts[name].update(counts)
        self.rejections.update(state["rejections"])
        self.writers.update({(kind, writer): n for kind, writer, n in state["writers"]})
        self.failures.extend(state["failures"])
        self.declared.extend(state.get("declared", ()))

    def table(self) -> str:
        rows = [f"{'primitive':<22}" + "".join(f"{o:>10}" for o in OUTCOMES)]
        total = collections.Counter()
        for name in sorted(self.counts):
            total.update(self.counts[name])
            rows.append(f"{name:<22}" + "".join(f"{self.counts[name][o]:>10}" for o in OUTCOMES))
        rows.append(f"{'total':<22}" + "".join(f"{total[o]:>10}" for o in OUTCOMES))
        return "\n".join(rows)


def _same_bits(a, b) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
                                    for x, y in zip(a, b))


def _first_line(e: BaseException) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {' / '.join(lines[:6])[:1500]}"


def run_program(program: Program, runtimes_to_run: Sequence[str], runtimes, tally: Tally) -> list[Failure]:
    """Run one program in each runtime; record the outcome of each; return its failures."""
    from noxla.front.tracing import trace
    from noxla.runtimes.verify import jax_outputs
    from tests.differential import assert_matches, runtime_tolerance

    counts = tally.counts[program.primitive]
    counts["tried"] += 1
    tally.at(program, "jax")
    try:
        traced = trace(program.fun, program.args, program.polymorphic_shapes)
        tally.programs.append(traced)
        expected = tuple(jax_outputs(program.fun, program.args))
    except Exception as e:  # noqa: BLE001 - parameters JAX itself refuses: the generator's fault
        counts["invalid"] += 1
        tally.rejections[f"JAX refuses: {_first_line(e)[:160]}"] += 1
        return []
    if not _same_bits(expected, jax_outputs(program.fun, program.args)):
        # JAX 0.10.2's XLA reads uninitialized memory for some negative paddings of a strided, grouped
        # convolution (1e27 or NaN where 0.12.1 and noxla give 11.25): no reference to compare with.
        counts["invalid"] += 1
        tally.rejections["JAX's reference differs between two runs of the same program"] += 1
        return []
    failures = []
    operands = _Operands(program, traced)
    for runtime in runtimes_to_run:
        tally.at(program, runtime)
        try:
            report = runtimes.check(traced, runtime, strict=program.strict)
        except Exception as e:  # noqa: BLE001 - the check itself must not crash
            failures.append(Failure(runtime, "crashed", program, "the check crashed: " + _first_line(e)))
            continue
        if report is not None and not report.ok:
            counts["rejected"] += 1
            for v in report.violations:
                tally.rejections[f"{runtime}: {v.primitive}: {v.reason[:160]}"] += 1
            continue
        try:
            actual = _run(runtime, program, traced, runtimes, tally)
        except Exception as e:  # noqa: BLE001 - any crash after the check passed is a finding
            failures.append(Failure(runtime, "crashed", program, _first_line(e)))
            continue
        try:
            assert_matches(expected, actual, traced.out_names, where=runtime, floor=runtime_tolerance(runtime))
        except AssertionError as e:
            reason = declared(program, traced, runtime, runtimes, tally, expected, operands)
            if reason:
                counts["declared"] += 1
                tally.declared.append(Failure(runtime, "declared", program, f"{reason}\n    {_first_line(e)}"))
            else:
                failures.append(Failure(runtime, "differed", program, _first_line(e)))
            continue
        counts["matched"] += 1
    for failure in failures:
        counts[failure.outcome] += 1
    tally.failures.extend(failures)
    tally.at(None)
    return failures


class _Operands:
    """Each top-level equation of the program with its operands as JAX computes them, op by op
    (made on first use); empty where that cannot be done (symbolic sizes, an equation JAX will not
    bind alone): no difference is then declared."""

    def __init__(self, program: Program, traced):
        self.program, self.traced, self._eqns = program, traced, None

    def __iter__(self):
        if self._eqns is None:
            try:
                self._eqns = [] if self.program.polymorphic_shapes else _eqn_operands(self.traced, self.program.args)
            except Exception:  # noqa: BLE001 - nothing declared: the mismatch stays a failure
                self._eqns = []
        return iter(self._eqns)


def _eqn_operands(traced, args) -> list:
    from jax.extend.core import Literal
    closed = traced.closed_jaxpr
    env = dict(zip(closed.jaxpr.constvars, closed.consts))
    env.update(zip(closed.jaxpr.invars, args))
    eqns = []
    for eqn in closed.jaxpr.eqns:
        operands = [v.val if isinstance(v, Literal) else env[v] for v in eqn.invars]
        results = eqn.primitive.bind(*operands, **eqn.primitive.get_bind_params(eqn.params))
        env.update(zip(eqn.outvars, results if eqn.primitive.multiple_results else [results]))
        eqns.append((eqn, [np.asarray(x) for x in operands]))
    return eqns


def _floats(operands) -> list[np.ndarray]:
    """The float operands, as float64 (bfloat16 included, which numpy does not count as inexact)."""
    import jax.numpy as jnp
    return [x.astype(np.float64) for x in operands if jnp.issubdtype(x.dtype, jnp.floating)]


def declared(program: Program, traced, runtime: str, runtimes, tally: Tally, expected, operands) -> str:
    """Why ``runtime``'s mismatch with JAX on ``program`` is a declared difference; "" where none explains it."""
    from limitations.engine import eqn_view
    from lowering_rules import RULES
    from tests.differential import assert_matches, runtime_tolerance
    if runtime in KEEP_SUBNORMALS:
        tiny = float(np.finfo(np.float32).tiny)
        for eqn, values in operands:
            if any(np.any((x != 0) & (np.abs(x) < tiny)) for x in _floats(values)):
                return (f"{eqn.primitive.name} got a float32 subnormal operand, which JAX's CPU flushes to zero "
                        "and TF.js keeps")
    if program.strict:
        return ""
    fast = [(eqn, RULES[eqn.primitive.name].fast) for eqn, values in operands
            if getattr(RULES.get(eqn.primitive.name), "fast", None) is not None
            and RULES[eqn.primitive.name].fast.applies(eqn_view(eqn))
            and any(not np.all(np.isfinite(x)) for x in _floats(values))]
    if not fast:
        return ""
    strict = dataclasses.replace(program, strict=True)
    try:  # the difference is the fast lowering's only if strict mode's lowering matches
        report = runtimes.check(traced, runtime, strict=True)
        if report is not None and not report.ok:
            return ""
        assert_matches(expected, _run(runtime, strict, traced, runtimes, tally), traced.out_names, where=runtime,
                       floor=runtime_tolerance(runtime))
    except Exception:  # noqa: BLE001 - strict mode crashes or differs too: a failure
        return ""
    eqn, variant = fast[0]
    return (f"default mode: {eqn.primitive.name} got a NaN or inf operand, where its fast lowering "
            f"{variant.differs}; strict mode matches")


def _run(runtime: str, program: Program, traced, runtimes, tally: Tally) -> list:
    if runtime != "tflite":
        if runtime == "tfjs_cpu":  # the model both TF.js runtimes run: the graph's where it records it
            wrote = runtimes.graph_model(traced, program.strict) is not None
            tally.writers["tfjs", "graph" if wrote else "tf"] += 1
        return runtimes.run(runtime, program.fun, traced, program.args, program.polymorphic_shapes,
                            strict=program.strict)
    # The .tflite users get: the graph's TFLite writer where it covers the program, else TF's path.
    from tests.default_tflite import DefaultTflite
    if tally.default_tflite is None:
        tally.default_tflite = DefaultTflite(runtimes.scratch_dir)
    try:
        return tally.default_tflite.run(program.fun, program.args, traced, program.strict, program.polymorphic_shapes)
    finally:
        tally.writers["tflite", tally.default_tflite.writer] += 1


def runtimes_for(targets: Sequence[str]) -> list[str]:
    return list(itertools.chain.from_iterable(TARGET_RUNTIMES[t] for t in targets))


def make_runtimes(scratch: str, runtimes_to_run: Sequence[str]):
    from noxla.runtimes import TfjsRunner
    from tests.differential import Runtimes
    tfjs = TfjsRunner() if any(r.startswith("tfjs") for r in runtimes_to_run) else None
    return Runtimes(scratch, tfjs), tfjs


class _TimeUp(Exception):
    pass


def fuzz(runtimes_to_run: Sequence[str], runtimes, tally: Tally, max_examples: int, seconds: float | None = None,
         seed: int = 0, primitives: Sequence[str] | None = None, raise_failures: bool = False) -> Tally:
    """Draw programs (hypothesis, seeded) and run each in every runtime until ``max_examples`` or
    ``seconds`` run out. ``raise_failures``: the first failure fails the hypothesis test (the suite)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    chosen = strategies()
    unknown = sorted(set(primitives or ()) - set(chosen))
    if unknown:  # a KeyError inside hypothesis's first draw would read as a run that found nothing
        raise ValueError(f"no fuzz family {', '.join(unknown)}; the families: {', '.join(sorted(chosen))}")
    # The primitive first, uniformly (one_of draws its first alternatives far more often).
    pool = st.sampled_from(sorted(primitives or chosen)).flatmap(chosen.__getitem__)
    stop = None if seconds is None else time.monotonic() + seconds

    @hypothesis_seed(seed)
    @settings(max_examples=max_examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=False, print_blob=False)
    @given(pool)
    def check(program):
        if stop is not None and time.monotonic() > stop:
            raise _TimeUp
        failures = run_program(program, runtimes_to_run, runtimes, tally)
        if failures and raise_failures:
            raise AssertionError("\n".join(map(str, failures)))

    try:
        check()
    except _TimeUp:
        pass
    return tally


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--targets", default="tf,tflite,tfjs", help="any of tf, tflite, tfjs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--primitives", default="", help="comma-separated; default: all")
    parser.add_argument("--in-process", action="store_true",
                        help="run in this process (a library that aborts the process ends the run); by "
                             "default the run goes on in a new process, from the next seed (tests/fuzz_supervise.py)")
    parser.add_argument("--state", help=argparse.SUPPRESS)  # a supervised child's saved counts
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if not args.in_process and args.state is None:
        from tests.fuzz_supervise import supervise
        return supervise(args)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    runtimes_to_run = runtimes_for([t for t in args.targets.split(",") if t])
    tally = Tally()
    tally.state_path = args.state
    start = time.monotonic()
    stopped = False
    with tempfile.TemporaryDirectory() as scratch:
        runtimes, tfjs = make_runtimes(scratch, runtimes_to_run)
        try:
            fuzz(runtimes_to_run, runtimes, tally, max_examples=10 ** 9, seconds=args.minutes * 60, seed=args.seed,
                 primitives=[p for p in args.primitives.split(",") if p] or None)
        except Exception:  # noqa: BLE001 - print what was counted before the error
            traceback.print_exc()
            stopped = True
        finally:
            if tfjs is not None:
                tfjs.close()
    if args.state is None:  # a supervised child's counts are its supervisor's to print
        report(tally, args, runtimes_to_run, time.monotonic() - start, stopped)
    return 2 if stopped else 1 if tally.failures else 0


def report(tally: Tally, args: argparse.Namespace, runtimes_to_run: Sequence[str], seconds: float,
           stopped: bool, seeds: str = "") -> None:
    print(f"\nfuzzed {args.minutes} min (seed {seeds or args.seed}, runtimes {', '.join(runtimes_to_run)}), "
          f"{seconds:.0f} s; tried counts programs, the other columns program-runtime runs\n")
    print(tally.table())
    for kind in sorted({kind for kind, _ in tally.writers}):
        print(f"\n{kind} files that ran: written by noxla's graph {tally.writers[kind, 'graph']}, "
              f"by TF's path {tally.writers[kind, 'tf']}")
    print("\nmost common rejections:")
    for reason, count in tally.rejections.most_common(15):
        print(f"  {count:5d}  {reason}")
    print(f"\n{len(tally.failures)} failures")
    for failure in tally.failures:
        print(str(failure)[:2500])
    if tally.declared:
        print(f"\n{len(tally.declared)} declared differences (not failures)")
        for difference in tally.declared:
            print(str(difference)[:1200])
    if stopped:
        print("the run stopped on the error above, before its time was up")


if __name__ == "__main__":
    sys.exit(main())
