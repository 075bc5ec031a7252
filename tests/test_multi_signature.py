"""Several signatures in one file: a hand-written decoder's prefill and decode steps in one .tflite
(run by LiteRT's signature runners) and one SavedModel, against JAX."""
from __future__ import annotations

import os

import jax
import numpy as np
import pytest

import noxla
from noxla.errors import ExportError
from tests import tiny_llama

# The embedding and MLP weights are large enough (64 KiB and more) to be the weights that
# the signatures share while lowering (noxla.front.interpreter.WEIGHT_BYTES); the norms stay Consts.
CONFIG = tiny_llama.Config(layers=2, vocab=512, hidden=64, ffn=256)
CACHE = 16
PARAMS = tiny_llama.init_params(CONFIG)


def prefill(tokens, input_pos, mask, kv_cache):
    logits, cache = tiny_llama.step(CONFIG, PARAMS, tokens, input_pos, mask, kv_cache)
    return {"last_logits": logits[:, -1], "kv_cache": cache}


def decode(tokens, input_pos, mask, kv_cache):
    logits, cache = tiny_llama.step(CONFIG, PARAMS, tokens, input_pos, mask, kv_cache)
    return {"logits": logits, "kv_cache": cache}


def _inputs(tokens, start):
    positions = np.arange(start, start + tokens.shape[1], dtype=np.int32)
    return (tokens, positions, np.asarray(tiny_llama.causal_mask(positions, CACHE)),
            [tuple(np.asarray(x) for x in layer) for layer in tiny_llama.empty_cache(CONFIG, CACHE)])


def _named(fun, args) -> dict:
    """The inputs by the names an export gives them (parameter names and pytree paths)."""
    from noxla.front.tracing import trace
    program = trace(fun, args)
    return dict(zip(program.in_names, jax.tree_util.tree_leaves(args)))


def _expected(fun, args) -> dict:
    from noxla.front.tracing import trace
    program = trace(fun, args)
    return dict(zip(program.out_names, (np.asarray(x) for x in jax.tree_util.tree_leaves(fun(*args)))))


@pytest.fixture(scope="module")
def examples():
    prefill_args = _inputs(np.array([[3, 17, 42, 5, 9, 11, 2, 60]], np.int32), 0)
    cache = jax.tree_util.tree_map(np.asarray, prefill(*prefill_args)["kv_cache"])
    decode_args = (np.array([[7]], np.int32), np.array([8], np.int32),
                   np.asarray(tiny_llama.causal_mask(np.array([8]), CACHE)), cache)
    return {"prefill_8": (prefill, prefill_args), "decode": (decode, decode_args)}


@pytest.mark.slow
def test_two_signatures_run_in_litert_signature_runners_and_share_weights(examples, tmp_path):
    from ai_edge_litert.interpreter import Interpreter
    path = noxla.export_tflite(examples, path=str(tmp_path / "decoder.tflite"))
    interpreter = Interpreter(model_path=path)
    assert set(interpreter.get_signature_list()) == {"prefill_8", "decode"}
    for key, (fun, args) in examples.items():
        runner = interpreter.get_signature_runner(key)
        outs = runner(**_named(fun, args))
        expected = _expected(fun, args)
        assert set(outs) == set(expected), key
        for name, value in expected.items():
            np.testing.assert_allclose(outs[name], value, atol=2e-4, rtol=1e-4, err_msg=f"{key}: {name}")
    # The weights are stored once: the two-signature file is smaller than the two single-signature
    # files together by (nearly) the weights' size. Each signature keeps its own ops and tables.
    weight_bytes = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(PARAMS))
    singles = [os.path.getsize(noxla.export_tflite(fun, *args, path=str(tmp_path / f"{key}.tflite")))
               for key, (fun, args) in examples.items()]
    merged = os.path.getsize(path)
    assert merged <= sum(singles) - 0.95 * weight_bytes, (merged, singles, weight_bytes)


@pytest.mark.slow
def test_two_signatures_in_one_saved_model(examples, tmp_path):
    import tensorflow as tf
    path = noxla.export_saved_model(examples, path=str(tmp_path / "decoder"))
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"prefill_8", "decode"}
    for key, (fun, args) in examples.items():
        outs = loaded.signatures[key](**_named(fun, args))
        for name, value in _expected(fun, args).items():
            np.testing.assert_allclose(outs[name].numpy(), value, atol=2e-4, rtol=1e-4, err_msg=f"{key}: {name}")


def test_several_signatures_refuse_example_args_after_the_dict(tmp_path):
    examples = {"double": (lambda x: 2 * x, (np.ones(3, np.float32),))}
    with pytest.raises(ExportError, match="in the dict"):
        noxla.export_tflite(examples, np.zeros(3), path=str(tmp_path / "x.tflite"))
    with pytest.raises(ExportError, match="static shapes"):
        noxla.export_tflite(examples, path=str(tmp_path / "x.tflite"), polymorphic_shapes=["(b,)"])
    with pytest.raises(ExportError, match="function, example_args"):
        noxla.export_tflite({"decode": decode}, path=str(tmp_path / "x.tflite"))
    assert not os.path.exists(tmp_path / "x.tflite")


def test_several_signatures_take_the_single_function_preflight_once_for_every_output(tmp_path):
    """export_signatures runs the preflight every export runs (noxla.pipeline.preflight.preflight_signatures):
    each signature traced once, however many outputs, and checked for every output's target before
    any output is lowered or written."""
    from noxla.pipeline.tf_path import export_signatures
    steps = []
    examples = {"double": (lambda x: 2 * x, (np.ones(3, np.float32),)),
                "half": (lambda x: x / 2, (np.ones(3, np.float32),))}
    written = export_signatures(examples, tflite=str(tmp_path / "m.tflite"), saved_model=str(tmp_path / "m_sm"),
                                on_step=lambda name, seconds: steps.append(name) if seconds is None else None)
    assert set(written) == {"tflite", "saved_model"}
    assert [s for s in steps if s.startswith("trace")] == ["trace double", "trace half"]
    first_lowering = next(i for i, s in enumerate(steps) if s.startswith("lower"))
    assert all(i < first_lowering for i, s in enumerate(steps) if s.startswith("trace"))


def test_an_unknown_export_option_is_a_type_error(tmp_path):
    """One options object (noxla.pipeline.preflight.ExportOptions) from the public keywords: a misspelt one
    is refused, not filtered away on the way down."""
    from noxla.pipeline.tf_path import export
    for call in (lambda: noxla.api.export(lambda x: x, (np.ones(2, np.float32),), tflite=str(tmp_path / "a"),
                                          tflite_targt="litertjs"),
                 lambda: export(lambda x: x, (np.ones(2, np.float32),), tflite=str(tmp_path / "a"), strcit=True)):
        with pytest.raises(TypeError, match="unexpected keyword"):
            call()
    assert not os.listdir(tmp_path)
