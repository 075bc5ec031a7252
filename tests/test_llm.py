"""LLMs: a whole greedy generation loop exported as one program, and noxla.llm's decode-step
contract (prefill_N and decode signatures, KV cache in and out) against JAX's greedy tokens."""
from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

import noxla
from noxla.runtimes import run_tflite
from tests import tiny_llama

PROMPT = np.array([3, 17, 42, 5, 9], np.int32)
MAX_NEW, CACHE = 16, 32


@pytest.fixture(scope="module")
def generation():
    """The generation program and its inputs, with an EOS that JAX's own greedy run meets midway
    (the first token not seen before, from the sixth on), so the loop's early stop is exercised."""
    config = tiny_llama.Config()
    params = tiny_llama.init_params(config)
    generate = functools.partial(tiny_llama.generate, config, params, max_new=MAX_NEW, cache_length=CACHE)

    def generate_until(prompt, eos):
        return generate(prompt, eos)
    free_run, _ = jax.jit(generate_until)(PROMPT, np.int32(-1))
    free_run = np.asarray(free_run)
    assert len(set(free_run.tolist())) >= 8, f"degenerate greedy decoding: {free_run}"
    eos = np.int32(next(t for i, t in enumerate(free_run) if i >= 5 and t not in free_run[:i]))
    tokens, count = (np.asarray(x) for x in generate_until(PROMPT, eos))
    assert 5 < count < MAX_NEW and tokens[count - 1] == eos
    return generate_until, (PROMPT, eos), (tokens, count)


def _assert_tokens(actual, expected, where):
    np.testing.assert_array_equal(np.asarray(actual[0]), expected[0], err_msg=where)
    assert int(actual[1]) == int(expected[1]), where


@pytest.mark.slow
def test_greedy_generation_loop_in_tf(generation):
    fun, args, expected = generation
    _assert_tokens(noxla.convert(fun)(*args), expected, "TF")


@pytest.mark.slow
def test_greedy_generation_loop_in_tflite(generation, tmp_path):
    fun, args, expected = generation
    path = noxla.export_tflite(fun, *args, path=str(tmp_path / "generate.tflite"))
    outs = run_tflite(path, {"prompt": args[0], "eos": args[1]})
    _assert_tokens((outs["output_0"], outs["output_1"]), expected, "TFLite")


@pytest.mark.slow
def test_greedy_generation_loop_in_tfjs(generation, tmp_path, tfjs_runner):
    fun, args, expected = generation
    path = noxla.export_tfjs(fun, *args, path=str(tmp_path / "generate_tfjs"))
    for backend in ("cpu", "wasm"):
        outs = tfjs_runner.run(path, {"prompt": args[0], "eos": args[1]}, backend=backend)
        _assert_tokens((outs["output_0"], outs["output_1"]), expected, f"TF.js {backend}")
