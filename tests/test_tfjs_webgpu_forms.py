"""The TF.js model's forms for TF.js 4.22's WebGPU backend, on every backend.

int32 and bool transposes through float32 (noxla/writers/tfjs/webgpu.py): TF.js 4.22's
WebGPU Transpose shader does not compile for an int32 or bool tensor a GPU kernel made, and TF.js
transposes inside reductions over leading axes, so ``jnp.argmax(x, axis=1)`` of a float32 (2, 3, 4)
came back zeros there. Each program's default TF.js export: its graph has no int32 or bool Transpose
left (but a matrix's [1, 0], which has a shader of its own), and it equals JAX on Node's cpu and wasm
(wide int32 values too) and, slow, on Chromium's webgpu (and its other backends), where the shapes are
large enough that TF.js runs the ops on the GPU, not on the CPU it hands small tensors to. And an
ArgMax of a vector, which TF.js's WebGPU gave shape (1,), reshaped to its scalar; a rank-5 Pad made
at rank 4 or less (its shader gave zeros above rank 4), and so rank-5 reverses and selects.

Run-time starts (noxla/writers/tfjs/run_time_sizes.py): the select JAX wraps a negative start with
is arithmetic, so the Slice's begin and the Pad's paddings stay on the CPU, where TF.js's executor
reads them (read back from WebGPU, they lost the device or came back wrong). So is the rules'
run-time +inf (``1 / sum(0 * |x|)``), which a Fill or PadV2 reads: the TF.js model holds it as a weight."""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import noxla
from tests.differential import CHROMIUM_BACKENDS, chromium

_RS = np.random.RandomState(0)
_SMALL = _RS.randint(-5, 5, (20, 30, 10)).astype(np.int32)      # GPU backends hold int32 exactly below 2^24
_WIDE = _RS.randint(-2 ** 31, 2 ** 31 - 1, (20, 30, 10), dtype=np.int64).astype(np.int32)
_FLOATS = _RS.randn(20, 30, 10).astype(np.float32)

# name -> (function, input for Node, input for the GPU backends)
PROGRAMS = {
    "int32_transpose": (lambda x: jnp.transpose(x * 3, (1, 2, 0)), _WIDE, _SMALL),
    "int32_transpose_bounded": (lambda x: jnp.transpose((x % 1000) * 2, (2, 0, 1)), _WIDE, _SMALL),
    "bool_transpose": (lambda x: jnp.transpose(x * 2 > 0, (1, 2, 0)).astype(jnp.int32), _FLOATS, _FLOATS),
    "argmax_middle_axis": (lambda x: jnp.argmax(x * 2, axis=1), _FLOATS, _FLOATS),
    "argmin_leading_axis": (lambda x: jnp.argmin(x * 2, axis=0), _FLOATS, _FLOATS),
    "int32_min_leading_keepdims": (lambda x: jnp.min(x * 3, axis=0, keepdims=True), _WIDE, _SMALL),
    "int32_sum_two_axes": (lambda x: jnp.sum(x * 2, axis=(0, 2)), _SMALL, _SMALL),
    "int32_cumsum_leading": (lambda x: jnp.cumsum(x * 2, axis=0), _SMALL, _SMALL),
    "any_leading_axis": (lambda x: jnp.any(x * 2 > 1, axis=0), _FLOATS, _FLOATS),
    "int32_argmax_leading": (lambda x: jnp.argmax(x * 3, axis=0), _WIDE, _SMALL),
    # TF.js's WebGPU gave an ArgMax of a vector shape (1,): lu's pivots came back (1, 5)
    "lu_pivots": (lambda x: jax.lax.linalg.lu(x[0, :5, :5])[1], _FLOATS, _FLOATS),
    # interior padding is a Pad of a rank-5 reshape: TF.js's WebGPU Pad shader gave zeros above rank 4
    "interior_pad": (lambda x: lax.pad(x.reshape(20, 3, 10, 10) * 2, np.float32(-1),
                                       ((0, 0, 0), (1, 0, 1), (0, 0, 0), (0, 1, 0))), _FLOATS, _FLOATS),
    # rank-5 reverses and selects: TF.js's WebGPU and WebGL failed on them ("Where for rank 5 ...")
    "rank5_reverse_int32": (lambda x: jnp.flip((x * 3).reshape(2, 10, 3, 10, 10), (1, 2, 4)), _WIDE, _SMALL),
    "rank5_select": (lambda x: jnp.where(x.reshape(2, 10, 3, 10, 10) > 0, x.reshape(2, 10, 3, 10, 10) * 2,
                                         np.float32(-1)), _FLOATS, _FLOATS),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_int_transposes")
    return {name: noxla.export_tfjs(fun, node_x, path=str(root / name))
            for name, (fun, node_x, _) in PROGRAMS.items()}


def _nodes(path: str) -> list[dict]:
    with open(os.path.join(path, "model.json")) as f:
        return json.load(f)["modelTopology"]["node"]


def _int_transposes(path: str) -> list[str]:
    nodes = _nodes(path)
    consts = {n["name"]: n for n in nodes if n["op"] == "Const"}
    found = []
    for n in nodes:
        if n["op"] == "Transpose" and n["attr"]["T"]["type"] in ("DT_INT32", "DT_BOOL"):
            perm = consts[n["input"][1]]["attr"]["value"]["tensor"]
            found.append(f"{n['name']} {perm}")
    return found


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_no_int_transpose_is_left_for_the_webgpu_shader(name, exported):
    assert _int_transposes(exported[name]) == []
    ops = [n["op"] for n in _nodes(exported[name])]
    if name != "int32_transpose_bounded" and PROGRAMS[name][1] is _WIDE and "transpose" in name:
        assert ops.count("Transpose") == 2 and "FloorMod" in ops, ops  # the two 16-bit halves
    if name == "int32_transpose_bounded":
        assert ops.count("Transpose") == 1, ops  # within 2^24: the values themselves
    if "leading" in name or "middle" in name:  # the reduction's own transpose, made explicit
        assert "Transpose" in ops, ops


def _matches(name, path, run, gpu: bool) -> None:
    fun, node_x, gpu_x = PROGRAMS[name]
    x = gpu_x if gpu else node_x
    expected = np.asarray(jax.jit(fun)(x))
    (actual,) = run(path, {"x": x}).values()
    np.testing.assert_array_equal(np.asarray(actual).astype(expected.dtype), expected, err_msg=name)


@pytest.mark.parametrize("backend", ["cpu", "wasm"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_int_transposes_match_jax_on_node(name, backend, exported, tfjs_runner):
    _matches(name, exported[name], lambda path, inputs: tfjs_runner.run(path, inputs, backend), gpu=False)


@pytest.mark.slow
@pytest.mark.parametrize("backend", CHROMIUM_BACKENDS)
def test_int_transposes_match_jax_in_chromium(backend, exported, browser_runner, tmp_path):
    browser = chromium(browser_runner, backend)
    for name in sorted(PROGRAMS):
        fun, _, gpu_x = PROGRAMS[name]
        path = noxla.export_tfjs(fun, gpu_x, path=str(tmp_path / name))
        _matches(name, path, lambda p, inputs: browser.run(p, inputs, backend), gpu=True)


_DATA = _RS.randn(6, 5).astype(np.float32)
STARTS = {
    "dynamic_slice_negative": (lambda x, i: lax.dynamic_slice(x, (i, i + 1), (2, 3)), np.int32(-3)),
    "dynamic_slice_indexing": (lambda x, i: x[i], np.int32(-2)),
    "dynamic_update_slice": (lambda x, i: lax.dynamic_update_slice(x, jnp.ones((2, 2)), (i, 2 * i)), np.int32(-1)),
    "dynamic_update_slice_clamped": (lambda x, i: lax.dynamic_update_slice(x, -x[:3, :2], (i, i)), np.int32(7)),
}


@pytest.mark.parametrize("name", sorted(STARTS))
def test_run_time_starts_are_not_selected_on_the_gpu(name, extra_exported):
    """No SelectV2 computes what a Slice or Pad reads on the CPU (the data's own select may stay)."""
    nodes = {n["name"]: n for n in _nodes(extra_exported[f"starts_{name}"])}
    read = [n["input"][1] for n in nodes.values() if n["op"] in ("Slice", "Pad", "PadV2")]
    seen, stack = set(), [r.partition(":")[0] for r in read]
    while stack:
        node = nodes.get(stack.pop())
        if node is None or node["name"] in seen:
            continue
        seen.add(node["name"])
        assert node["op"] != "SelectV2", (name, node["name"])
        stack.extend(i.partition(":")[0] for i in node.get("input", []))
    assert read, name


# Programs whose TF.js model reads the rules' run-time +inf where TF.js's executor reads a value on
# the CPU (a Fill's, a PadV2's): max/min pooling and its gradient, a max over an empty axis.
_POOL = _RS.randn(2, 9, 9, 3).astype(np.float32)
INFINITIES = {
    "max_pool_asymmetric": lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                                       ((0, 0), (1, 0), (0, 2), (0, 0))),
    "min_pool_padded": lambda x: lax.reduce_window(x, jnp.inf, lax.min, (1, 2, 2, 1), (1, 1, 1, 1),
                                                   ((0, 0), (1, 1), (0, 1), (0, 0))),
    "max_over_empty_axis": lambda x: jnp.max(x[:, :0], axis=1, initial=-jnp.inf) + x[:, 0],
}


# name -> (function, its named inputs, whether it must be bit-exact)
EXTRA = {**{f"starts_{n}": (f, {"x": _DATA, "i": start}, True) for n, (f, start) in STARTS.items()},
         **{f"infinity_{n}": (f, {"x": _POOL}, False) for n, f in INFINITIES.items()}}


@pytest.fixture(scope="module")
def extra_exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("webgpu_forms")
    return {name: noxla.export_tfjs(fun, *inputs.values(), path=str(root / name))
            for name, (fun, inputs, _) in EXTRA.items()}


@pytest.mark.parametrize("name", sorted(INFINITIES))
def test_the_run_time_infinity_is_a_weight(name, extra_exported):
    ops = [n["op"] for n in _nodes(extra_exported[f"infinity_{name}"])]
    assert "IsFinite" not in ops and "Reciprocal" not in ops, ops  # 1 / sum(0 * |x|), made at run time


def _extra_matches(name, path, run) -> None:
    fun, inputs, exact = EXTRA[name]
    expected = np.asarray(jax.jit(fun)(*inputs.values()))
    (actual,) = run(path, inputs).values()
    if exact:
        np.testing.assert_array_equal(np.asarray(actual), expected, err_msg=name)
    else:
        np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("backend", ["cpu", "wasm"])
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_starts_and_infinities_match_jax_on_node(name, backend, extra_exported, tfjs_runner):
    _extra_matches(name, extra_exported[name], lambda path, inputs: tfjs_runner.run(path, inputs, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", CHROMIUM_BACKENDS)
def test_starts_and_infinities_match_jax_in_chromium(backend, extra_exported, browser_runner):
    browser = chromium(browser_runner, backend)
    for name in sorted(EXTRA):
        _extra_matches(name, extra_exported[name], lambda path, inputs: browser.run(path, inputs, backend))
