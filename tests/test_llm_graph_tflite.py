"""noxla.llm's decoders written by noxla's graph (the default, noxla.pipeline.graph_signatures): the
tiny Llama's .tflite and .litertlm, float and quantized (int8, int4, int4_b32), exported in a fresh
process that imports no TensorFlow, against TF's path's export of the same decoder: no more
operators per signature, the same greedy tokens in LiteRT's signature runners and in LiteRT-LM's
engine (float), each signature equal to JAX, and the quantized files held to test_llm_quantize's
teacher-forcing bounds. Quantized tokens are not compared with TF's path's: the graph folds an
RMSNorm weight into the projections that TF's path keeps as a MUL, so its quantized weights differ
(the float files give the same tokens)."""
from __future__ import annotations

import collections
import functools
import json
import os
import subprocess
import sys
from unittest import mock

import jax
import numpy as np
import pytest

from tests import tiny_llama
from tests.test_llm_quantize import FORCED_BOUND

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = tiny_llama.Config()
CACHE, MAX_NEW, BOS, EOS = 48, 32, 1, 2
PROMPTS = ([BOS, 17, 42, 5, 9], [BOS, 60, 7, 33, 21, 8, 70], [BOS, 33, 8, 61])
MODES = ("float", "int8", "int4", "int4_b32")


def _layout():
    from noxla.llm import CacheLayout
    return CacheLayout(CONFIG.layers, CONFIG.kv_heads, CONFIG.head_dim, CACHE)


def _step(params, tokens, input_pos, mask, kv_cache):
    return tiny_llama.step(CONFIG, params, tokens, input_pos, mask, kv_cache)


@functools.lru_cache(maxsize=None)
def _jax_greedy(prompt: tuple) -> list[int]:
    generate = jax.jit(functools.partial(tiny_llama.generate, CONFIG, tiny_llama.init_params(CONFIG),
                                         max_new=MAX_NEW, cache_length=CACHE))
    tokens, count = generate(np.asarray(prompt, np.int32), np.int32(-1))
    return [int(t) for t in np.asarray(tokens)[:int(count)]]


# The exports in a fresh process, by default: each mode's .tflite and the
# float .litertlm, with their steps, and whether TensorFlow was imported.
_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from noxla import llm
from tests import tiny_llama
BOS, EOS, CONFIG = {bos}, {eos}, tiny_llama.Config()
def _layout():
    return llm.CacheLayout(CONFIG.layers, CONFIG.kv_heads, CONFIG.head_dim, {cache})
def _step(params, tokens, input_pos, mask, kv_cache):
    return tiny_llama.step(CONFIG, params, tokens, input_pos, mask, kv_cache)
params, out = tiny_llama.init_params(CONFIG), {{}}
for mode in {modes!r}:
    steps = []
    llm.export_tflite(_step, params, f"{{sys.argv[1]}}/{{mode}}.tflite", layout=_layout(), prefill_lengths=(8,),
                      quantize=None if mode == "float" else mode, on_step=lambda name, s: steps.append(name))
    out[mode] = steps
steps = []
tokenizer = tiny_llama.word_level_tokenizer(f"{{sys.argv[1]}}/tokenizer.json", CONFIG.vocab)
llm.export_litertlm(_step, params, f"{{sys.argv[1]}}/float.litertlm", tokenizer=tokenizer, layout=_layout(),
                    start_token=BOS, stop_tokens=[EOS], prefill_lengths=(8,),
                    on_step=lambda name, s: steps.append(name))
out["litertlm"] = steps
print(json.dumps({{"steps": out, "tensorflow": "tensorflow" in sys.modules}}))
"""


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    from noxla import llm
    graph_dir, tf_dir = tmp_path_factory.mktemp("graph"), tmp_path_factory.mktemp("tf")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=ROOT, modes=MODES, bos=BOS, eos=EOS, cache=CACHE),
                           str(graph_dir)], capture_output=True, text=True,
                          env={**{k: v for k, v in os.environ.items() if k != "NOXLA_TFLITE_GRAPH"},
                               "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    params = tiny_llama.init_params(CONFIG)
    tokenizer = tiny_llama.word_level_tokenizer(tf_dir / "tokenizer.json", CONFIG.vocab)
    steps = []
    with mock.patch.dict(os.environ, {"NOXLA_TFLITE_GRAPH": "0"}):   # TF's path, in this process
        tf_paths = {mode: llm.export_tflite(_step, params, str(tf_dir / f"{mode}.tflite"), layout=_layout(),
                                            prefill_lengths=(8,), quantize=None if mode == "float" else mode,
                                            on_step=lambda name, s: steps.append(name))
                    for mode in MODES}
        assert steps.count("convert tflite decode") >= len(MODES) and not any("graph" in s for s in steps), steps
        tf_paths["litertlm"] = llm.export_litertlm(_step, params, str(tf_dir / "float.litertlm"),
                                                   tokenizer=tokenizer, layout=_layout(), start_token=BOS,
                                                   stop_tokens=[EOS], prefill_lengths=(8,))
    graph_paths = {mode: str(graph_dir / f"{mode}.tflite") for mode in MODES}
    graph_paths["litertlm"] = str(graph_dir / "float.litertlm")
    return report, graph_paths, tf_paths


def test_exports_through_the_graph_import_no_tensorflow(exports):
    report, _, _ = exports
    assert not report["tensorflow"], "an LLM export through the graph imported TensorFlow"
    for mode, steps in report["steps"].items():
        assert "lower+write decode (graph tflite)" in steps and "lower+write prefill_8 (graph tflite)" in steps, \
            (mode, steps)
        assert not any(s.startswith("convert tflite") for s in steps), (mode, steps)
        assert ("rewrite" in steps) == (mode not in ("float", "litertlm")), (mode, steps)


def _operators(path: str) -> dict:
    from noxla.writers.tflite.flatbuffer.schema import read_model_file
    model = read_model_file(path)
    return {s.signatureKey.decode(): collections.Counter(
        model.operatorCodes[op.opcodeIndex].builtinCode for op in model.subgraphs[s.subgraphIndex].operators)
        for s in model.signatureDefs}


@pytest.mark.parametrize("mode", MODES)
def test_no_more_operators_than_tf_paths_per_signature(exports, mode):
    _, graph_paths, tf_paths = exports
    graph, tf = _operators(graph_paths[mode]), _operators(tf_paths[mode])
    assert set(graph) == set(tf) == {"prefill_8", "decode"}
    for key in graph:
        # The cache write is one DYNAMIC_UPDATE_SLICE per cache, as on TF's path (no PAD + SELECT).
        from noxla.writers.tflite.flatbuffer.schema import schema
        writes = schema.BuiltinOperator.DYNAMIC_UPDATE_SLICE
        assert graph[key][writes] == tf[key][writes] == 2 * CONFIG.layers, (key, graph[key], tf[key])
        assert sum(graph[key].values()) <= sum(tf[key].values()), (key, graph[key], tf[key])
        # RMSNorm's mean a SUM, as on TF's path (lowering_rules/patterns/fusion.py's ``mean``: LiteRT-LM ran
        # the decode step's MEANs slower), and the softmax's reshapes gone as there.
        mean, reshape = schema.BuiltinOperator.MEAN, schema.BuiltinOperator.RESHAPE
        assert not graph[key][mean] and graph[key][schema.BuiltinOperator.SUM] == tf[key][schema.BuiltinOperator.SUM]
        assert graph[key][reshape] <= tf[key][reshape], (key, graph[key][reshape], tf[key][reshape])


def test_float_greedy_tokens_equal_tf_paths_and_jax(exports):
    from noxla import llm
    _, graph_paths, tf_paths = exports
    for prompt in PROMPTS:
        expected = _jax_greedy(tuple(prompt))
        assert len(set(expected)) >= 8, f"degenerate greedy decoding: {expected}"
        graph = llm.greedy_tokens(graph_paths["float"], prompt, MAX_NEW, _layout())
        assert graph == llm.greedy_tokens(tf_paths["float"], prompt, MAX_NEW, _layout()) == expected, prompt


def test_float_signatures_equal_jax(exports):
    """Each signature on inputs unlike the examples (a filled cache, a run-time position past the
    prompt), against JAX."""
    from ai_edge_litert.interpreter import Interpreter

    from noxla import llm
    _, graph_paths, _ = exports
    layout, rng = _layout(), np.random.default_rng(7)
    runner = Interpreter(model_path=graph_paths["float"]).get_signature_runner
    step = jax.jit(functools.partial(_step, tiny_llama.init_params(CONFIG)))
    for key, length, start in (("prefill_8", 8, 5), ("decode", 1, 30)):
        positions = np.arange(start, start + length, dtype=np.int32)
        tokens = rng.integers(0, CONFIG.vocab, (1, length)).astype(np.int32)
        cache = [tuple((0.5 * rng.standard_normal(x.shape)).astype(np.float32) for x in pair)
                 for pair in layout.empty()]
        mask = llm.causal_mask(positions, CACHE)
        got = runner(key)(tokens=tokens, input_pos=positions, mask=mask,
                          **dict(zip(llm.cache_names(layout), (x for pair in cache for x in pair))))
        logits, new_cache = step(tokens, positions, mask, cache)
        want = dict(zip(llm.cache_names(layout), (np.asarray(x) for pair in new_cache for x in pair)))
        if key == "decode":
            want["logits"] = np.asarray(logits)[:, -1:]
        assert set(got) == set(want), key
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=f"{key}: {name}")


@pytest.mark.parametrize("mode", ["int8", "int4", "int4_b32"])
def test_quantized_teacher_forced_tokens_within_test_llm_quantizes_bounds(exports, mode):
    from noxla import llm
    _, graph_paths, _ = exports
    forced_counts = []
    for prompt in PROMPTS:
        expected = _jax_greedy(tuple(prompt))
        forced = tiny_llama.forced_tokens(graph_paths[mode], prompt, expected, _layout())
        forced_counts.append(sum(a == b for a, b in zip(forced, expected)))
        free = llm.greedy_tokens(graph_paths[mode], prompt, MAX_NEW, _layout())
        first = next((i for i, (a, b) in enumerate(zip(forced, expected)) if a != b), len(expected))
        assert free[:first] == expected[:first], (free, forced, expected)
    assert min(forced_counts) >= FORCED_BOUND[mode], forced_counts


def test_litertlm_engine_generates_tf_paths_tokens(exports):
    _, graph_paths, tf_paths = exports
    words = [17, 42, 5, 9]
    expected = [t for t in _jax_greedy((BOS, *words)) if t != EOS]
    graph = tiny_llama.engine_greedy(graph_paths["litertlm"], words, MAX_NEW, CACHE)
    assert graph == tiny_llama.engine_greedy(tf_paths["litertlm"], words, MAX_NEW, CACHE) == expected


@pytest.mark.slow
@pytest.mark.parametrize("family", ["nnx", "keras-llama", "keras-gemma"])
def test_nnx_and_keras_hub_decoders_through_the_graph_equal_tf_paths(family, tmp_path, monkeypatch):
    """The Flax NNX Llama and keras-hub's Llama and Gemma (sliding window, soft-caps) written by the
    graph: no more operators per signature and the same greedy tokens as TF's path's export.
    (keras-hub imports TensorFlow itself, so here the graph's export is checked by its steps.)"""
    from noxla import llm
    if family == "nnx":
        from tests import tiny_nnx_llama
        model, kwargs = tiny_nnx_llama.Llama(CONFIG), {"layout": _layout()}
    else:
        from tests.test_llm_keras import _backbone
        model, kwargs = _backbone(family.split("-")[1]), {"cache_length": CACHE}
    paths = {}
    for graph in ("1", "0"):
        monkeypatch.setenv("NOXLA_TFLITE_GRAPH", graph)
        steps = []
        paths[graph] = llm.export_tflite(model, str(tmp_path / f"{graph}.tflite"), prefill_lengths=(8,),
                                         on_step=lambda name, s, steps=steps: steps.append(name), **kwargs)
        assert ("lower+write decode (graph tflite)" in steps) == (graph == "1"), steps
        assert any(s.startswith("convert tflite") for s in steps) == (graph == "0"), steps
    ops = {graph: _operators(path) for graph, path in paths.items()}
    for key in ops["0"]:
        assert sum(ops["1"][key].values()) <= sum(ops["0"][key].values()), (key, ops["1"][key], ops["0"][key])
    layout = _layout()
    for prompt in PROMPTS:
        graph = llm.greedy_tokens(paths["1"], prompt, MAX_NEW, layout)
        assert len(set(graph)) >= 6, f"degenerate greedy decoding: {graph}"
        assert graph == llm.greedy_tokens(paths["0"], prompt, MAX_NEW, layout), prompt
