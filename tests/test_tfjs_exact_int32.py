"""TF.js's int32 arithmetic (noxla/writers/tfjs/exact_int32.py): products split where they may pass 2^53,
one Mul where the graph bounds them; Abs as Maximum(x, 0 - x); a quotient from the exact remainder
where its float32 form may be off, one FloorDiv where the ranges bound it. The values are the rule
cases' (mul:i32_wide, square:i32_wide, abs:i32_wide, div:i32_wide, rem:i32_wide)."""
import json
import os

import jax
import numpy as np

import noxla


def _int_ops(path: str) -> list[str]:
    with open(os.path.join(path, "model.json")) as f:
        nodes = json.load(f)["modelTopology"]["node"]
    return [n["op"] for n in nodes if n.get("attr", {}).get("T") == {"type": "DT_INT32"} and n["op"] != "Identity"]


def test_a_product_of_two_words_is_split(tmp_path):
    x = np.array([2 ** 31 - 1, 7], np.int32)
    path = noxla.export_tfjs(lambda a, b: a * b, x, x, path=str(tmp_path / "words"))
    assert sorted(_int_ops(path)) == ["AddV2", "FloorDiv", "FloorMod", "Mul", "Mul", "Mul", "Sub"]


def test_a_bounded_product_stays_one_mul(tmp_path):
    # A bool as int32 times 2^30, and a word times a stride: both below 2^53.
    x = np.array([3, -5], np.int32)
    path = noxla.export_tfjs(lambda a: (a > 0).astype(np.int32) * np.int32(1 << 30) + a * np.int32(4096), x,
                             path=str(tmp_path / "bounded"))
    assert _int_ops(path).count("Mul") == 2 and "FloorMod" not in _int_ops(path), _int_ops(path)


def test_an_int32_abs_is_a_maximum(tmp_path):
    path = noxla.export_tfjs(lambda a: abs(a), np.array([3, -5], np.int32), path=str(tmp_path / "abs"))
    assert sorted(_int_ops(path)) == ["Maximum", "Sub"], _int_ops(path)


def _all_ops(path: str) -> list[str]:
    with open(os.path.join(path, "model.json")) as f:
        return [n["op"] for n in json.load(f)["modelTopology"]["node"]]


def test_a_quotient_of_words_is_computed_from_the_remainder(tmp_path):
    x = np.array([2 ** 31 - 1, -7], np.int32)
    ops = _all_ops(noxla.export_tfjs(lambda a, b: a // b, x, x, path=str(tmp_path / "words")))
    assert "FloorDiv" not in ops and ops.count("Round") == 2, ops  # the estimate and its correction


def test_a_quotient_the_ranges_bound_stays_one_floordiv(tmp_path):
    # A remainder by 1000 divided by 7 (below 2^24), and a word's high half (a multiple of 2^16
    # divided by 2^16: float32 holds it exactly), as the 64-bit and unsigned limb arithmetic splits words.
    x = np.array([2 ** 31 - 1, -7], np.int32)
    small = _all_ops(noxla.export_tfjs(lambda a: (a % 1000) // 7, x, path=str(tmp_path / "small")))
    halves = _all_ops(noxla.export_tfjs(lambda a: (a & np.int32(-65536)) // 65536, x, path=str(tmp_path / "halves")))
    assert "Round" not in small and "FloorDiv" in small, small
    assert "Round" not in halves and "FloorDiv" in halves, halves


def test_an_integer_remainder_divides_nothing(tmp_path):
    # lax.rem is the floored remainder moved to the dividend's sign: no quotient to get wrong.
    x = np.array([2 ** 31 - 1, -7], np.int32)
    ops = _all_ops(noxla.export_tfjs(lambda a, b: jax.lax.rem(a, b), x, x, path=str(tmp_path / "rem")))
    assert "FloorMod" in ops and "FloorDiv" not in ops and "Mul" not in ops, ops


def test_a_product_of_words_over_an_axis_is_a_tree_and_of_small_values_one_prod(tmp_path):
    x = np.array([[2 ** 31 - 1, 3, -5, 7, 11], [1, 2, 3, 4, 5]], np.int32)
    words = _all_ops(noxla.export_tfjs(lambda a: jax.numpy.prod(a, axis=1), x, path=str(tmp_path / "words")))
    small = _all_ops(noxla.export_tfjs(lambda a: jax.numpy.prod(a % 8, axis=1), x, path=str(tmp_path / "small")))
    assert "Prod" not in words and words.count("FloorMod") == 3, words  # three levels, each product split
    assert small.count("Prod") == 1, small  # 7^5 < 2^53


def test_an_argmax_divided_by_a_width_stays_one_floordiv(tmp_path):
    # A keypoint's row from its flat argmax: the ranges bound the index by the axis (through the
    # Min over positions that JAX's first-index argmax is written as), so no exact form is needed.
    heat = np.zeros((2, 48 * 64, 17), np.float32)
    ops = _all_ops(noxla.export_tfjs(lambda h: jax.numpy.argmax(h, axis=1) // 64, heat, path=str(tmp_path / "kp")))
    assert ops.count("FloorDiv") == 1 and "Round" not in ops, ops
