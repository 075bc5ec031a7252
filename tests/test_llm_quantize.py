"""Quantized LLM exports (noxla.llm.quantize, LiteRT's quantizer): int8 and int4 weights per
channel and int4 blockwise, in the .tflite's signature runners and in LiteRT-LM's engine, against
float JAX.

Bounds. The tiny Llama's random weights are chaotic by design (tests/tiny_llama.init_params: each
layer moves the residual stream far from the token's embedding, so that greedy decoding does not
repeat one token): once quantization flips one near-tie, the free-running continuations share
nothing, and how many leading tokens agree swings with the prompt (measured over 8 prompts:
int8 0 to 32, int4 0 to 4). So the bound is on teacher forcing (tiny_llama.forced_tokens: the file
fed JAX's 32 greedy tokens predicts each next one), which scores every step on its own:
- int8 (per-channel, a step of 1/127 of each output channel's largest weight): measured 30 to 32
  of 32 over 8 prompts; bound 28. A wrong scale, axis or table is near chance (1 in 96).
- int4 in blocks of 32 (a step 18x coarser, 1/7 of each block's largest weight): measured 10 to 21
  of 32; bound 8, still 250x chance, and far from what a broken embedding or scale gives. int4 per
  channel (this model's channels have 32 to 64 inputs, so about as fine): the same bound.
The free-running greedy tokens are then checked exactly where they must hold: they agree with JAX
up to the first teacher-forced disagreement (the same computation until then), and LiteRT-LM's
engine generates the signature runners' tokens (the same kernels on the same file).
"""
from __future__ import annotations

import functools
import os
import sys

import jax
import numpy as np
import pytest

from tests import tiny_llama

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import llm_graph  # noqa: E402  (tools/llm_graph.py: the census of a signature's weights)

CONFIG = tiny_llama.Config()
CACHE, MAX_NEW, BOS, EOS = 48, 32, 1, 2
PROMPTS = ([BOS, 17, 42, 5, 9], [BOS, 60, 7, 33, 21, 8, 70], [BOS, 33, 8, 61])
FORCED_BOUND = {"int8": 28, "int4": 8, "int4_b32": 8}


def _layout():
    from noxla.llm import CacheLayout
    return CacheLayout(CONFIG.layers, CONFIG.kv_heads, CONFIG.head_dim, CACHE)


def _step(params, tokens, input_pos, mask, kv_cache):
    return tiny_llama.step(CONFIG, params, tokens, input_pos, mask, kv_cache)


@functools.lru_cache(maxsize=None)
def _jax_greedy(prompt: tuple, eos: int = -1) -> list[int]:
    """JAX's greedy tokens (each prompt length compiles the generation loop once)."""
    tokens, count = _generate()(np.asarray(prompt, np.int32), np.int32(eos))
    return [int(t) for t in np.asarray(tokens)[:int(count)]]


@functools.lru_cache(maxsize=None)
def _generate():
    return jax.jit(functools.partial(tiny_llama.generate, CONFIG, tiny_llama.init_params(CONFIG), max_new=MAX_NEW,
                                     cache_length=CACHE))


def _leading(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    from noxla import llm
    params = tiny_llama.init_params(CONFIG)  # the weights _generate runs
    root = tmp_path_factory.mktemp("llmq")
    paths = {mode: llm.export_tflite(_step, params, str(root / f"{mode or 'float'}.tflite"), layout=_layout(),
                                     prefill_lengths=(8,), quantize=mode)
             for mode in (None, "int8", "int4", "int4_b32")}
    return paths


def _weights(path: str) -> dict:
    """{buffer: (tensor type name, bytes, the signatures reading it)} of the weights of
    FULLY_CONNECTED and of the embedding lookup (GATHER in float, EMBEDDING_LOOKUP quantized)."""
    from noxla.writers.tflite.flatbuffer.schema import read_model_file, schema
    model = read_model_file(path)
    weight_input = {schema.BuiltinOperator.FULLY_CONNECTED: 1, schema.BuiltinOperator.EMBEDDING_LOOKUP: 1,
                    schema.BuiltinOperator.GATHER: 0}
    type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    out = {}
    for signature in model.signatureDefs:
        graph = model.subgraphs[signature.subgraphIndex]
        for op in graph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            index = weight_input.get(max(code.builtinCode, code.deprecatedBuiltinCode))
            tensor = graph.tensors[op.inputs[index]] if index is not None else None
            data = model.buffers[tensor.buffer].data if tensor is not None else None
            if data is not None and len(data):
                kind, size, readers = out.setdefault(tensor.buffer, (type_names[tensor.type], len(data), set()))
                readers.add(signature.signatureKey.decode())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["int8", "int4", "int4_b32"])
def test_quantized_llm_in_signature_runners_against_jax(exports, mode):
    from ai_edge_litert.interpreter import Interpreter

    from noxla import llm
    paths = exports
    path, layout = paths[mode], _layout()
    float_signatures = Interpreter(model_path=paths[None]).get_signature_list()
    assert Interpreter(model_path=path).get_signature_list() == float_signatures
    weights, float_weights = _weights(path), _weights(paths[None])
    stored = {"int8": "INT8", "int4": "INT4", "int4_b32": "INT4"}[mode]
    # Every weight quantized (the embedding too, no float copy of it left), each stored once as in
    # the float file: the tied embedding's one buffer feeds both signatures' lookups and decode's
    # logits, and prefill reads decode's copies of the layers' weights.
    assert {kind for kind, _, _ in weights.values()} == {stored}, weights
    assert sorted(len(r) for _, _, r in weights.values()) == sorted(len(r) for _, _, r in float_weights.values())
    # The mode's granularity, in the decode signature's projections and its embedding lookup alike.
    granularity = {"int8": "per-channel", "int4": "per-channel", "int4_b32": "blockwise(32)"}[mode]
    forms = {kind.split(" (")[0] for kind in llm_graph.census(path)["forms"]
             if kind.startswith(("FULLY_CONNECTED", "EMBEDDING_LOOKUP"))}
    assert forms == {f"FULLY_CONNECTED {stored} {granularity}", f"EMBEDDING_LOOKUP {stored} {granularity}"}, forms
    float_bytes, stored_bytes = (sum(n for _, n, _ in w.values()) for w in (float_weights, weights))
    assert stored_bytes * {"int8": 4, "int4": 8, "int4_b32": 8}[mode] == float_bytes, (stored_bytes, float_bytes)
    float_size, size = os.path.getsize(paths[None]), os.path.getsize(path)
    print(f"{mode}: {size} bytes, float {float_size}; weights {stored_bytes} bytes, float {float_bytes}")
    # The file shrinks by the weights' savings, less the scales the quantizer adds (for int8 one
    # float32 scale and one int64 zero point per output channel: an eighth of the savings with
    # this tiny model's 16 to 96 channels of 32 to 64 inputs; for int4 one per block of 32).
    assert float_size - size >= 0.75 * (float_bytes - stored_bytes), (float_size, size)
    forced_counts = []
    for prompt in PROMPTS:
        expected = _jax_greedy(tuple(prompt))
        assert len(set(expected)) >= 8, f"degenerate greedy decoding: {expected}"
        forced = tiny_llama.forced_tokens(path, prompt, expected, layout)
        forced_counts.append(sum(a == b for a, b in zip(forced, expected)))
        free = llm.greedy_tokens(path, prompt, MAX_NEW, layout)
        # The same computation as the forced run until its first disagreement.
        assert _leading(free, expected) == _leading(forced, expected), (free, forced, expected)
        print(f"{mode} {prompt}: {forced_counts[-1]}/{MAX_NEW} forced, {_leading(free, expected)} leading")
    assert min(forced_counts) >= FORCED_BOUND[mode], forced_counts


def _engine_tokens(bundle: str, prompt: list[int]) -> list[int]:
    from noxla.writers.litertlm import bundle as litertlm_bundle
    assert prompt[0] == BOS  # the bundle's start token, which the engine prepends itself
    reply = litertlm_bundle.call("generate", {"model": bundle, "prompt": " ".join(f"t{t}" for t in prompt[1:]),
                                              "max_num_tokens": CACHE, "max_output_tokens": MAX_NEW})
    return tiny_llama.token_ids("".join(reply["texts"]))


def _runner_tokens(path: str, prompt: list[int]) -> list[int]:
    """The signature runners' greedy tokens as the engine shows them: stopped at EOS, which it
    does not print."""
    from noxla import llm
    return [t for t in llm.greedy_tokens(path, prompt, MAX_NEW, _layout(), stop_tokens=[EOS]) if t != EOS]


def _quantized_weights(model) -> dict:
    """{signature: sorted (type, shape, bytes, scale, zero point, axis, (block size, scales' type,
    shape and bytes))} of an unpacked model's integer tensors, names left out (each export numbers
    its tensors its own way)."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    integer = (schema.TensorType.INT8, schema.TensorType.INT4)
    out = {}
    for signature in model.signatureDefs:
        graph = model.subgraphs[signature.subgraphIndex]
        rows = []
        for t in graph.tensors:
            if t.type not in integer or t.buffer == 0 or model.buffers[t.buffer].data is None:
                continue
            q, blocks = t.quantization, None
            if q.details is not None:
                s = graph.tensors[q.details.scales]
                scales = np.asarray(model.buffers[s.buffer].data).tobytes()
                blocks = (q.details.blockSize, s.type, tuple(s.shape), scales)
            rows.append((t.type, tuple(t.shape), np.asarray(model.buffers[t.buffer].data, np.uint8).tobytes(),
                         None if q.scale is None else np.asarray(q.scale).tobytes(),
                         None if q.zeroPoint is None else np.asarray(q.zeroPoint).tobytes(), q.quantizedDimension,
                         blocks))
        out[signature.signatureKey] = sorted(rows, key=repr)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_weights_quantized_as_written_equal_the_quantizers_own(exports, mode):
    """noxla.llm quantizes weight by weight as it writes the file (noxla.writers.tflite.flatbuffer.quantize_weights, so
    that a 1B model never exists as a float .tflite); the quantizer run on the whole float file
    gives the expected weights: the same tensors, bytes, scales and blocks in every signature."""
    from noxla.llm import quantize as llm_quantize
    from noxla.writers.tflite.flatbuffer.schema import read_model, read_model_file
    with open(exports[None], "rb") as f:
        expected = _quantized_weights(read_model(
            llm_quantize.quantize_tflite(f.read(), mode)))
    got = _quantized_weights(read_model_file(exports[mode]))
    assert set(got) == set(expected) == {b"prefill_8", b"decode"}
    for key, rows in expected.items():
        assert rows, key
        assert got[key] == rows, key


@pytest.mark.slow
def test_int8_bundle_in_litertlm_generates_the_signature_runners_tokens(exports, tmp_path):
    from noxla.writers.litertlm import bundle as litertlm_bundle
    paths = exports
    tokenizer = tiny_llama.word_level_tokenizer(tmp_path / "tokenizer.json", CONFIG.vocab)
    metadata = tmp_path / "llm_metadata.textproto"
    metadata.write_text(litertlm_bundle.metadata_textproto(BOS, [EOS], CACHE))
    bundle = str(tmp_path / "int8.litertlm")
    litertlm_bundle.call("build", {"tflite": paths["int8"], "metadata": str(metadata), "tokenizer": tokenizer,
                                   "output": bundle})
    prompt = list(PROMPTS[0])
    generated = _engine_tokens(bundle, prompt)
    assert generated == _runner_tokens(paths["int8"], prompt)
    expected = _jax_greedy(tuple(prompt), EOS)
    print(f"int8 in LiteRT-LM: {_leading(generated, expected)}/{MAX_NEW} leading tokens = JAX's")


@pytest.mark.slow
def test_cli_int4_litertlm_generates_the_signature_runners_tokens(exports, tmp_path):
    """export_litertlm's quantize, through the CLI: the int4 bundle it writes decodes in LiteRT-LM
    as the int4 .tflite of export_tflite does in the signature runners (the quantizer is
    deterministic, so both files hold the same weights)."""
    from noxla.cli import main
    paths = exports
    tokenizer = tiny_llama.word_level_tokenizer(tmp_path / "tokenizer.json", CONFIG.vocab)
    bundle = str(tmp_path / "int4.litertlm")
    assert main(["llm-export", "tests.test_llm:tiny_decoder", "--litertlm", bundle, "--tokenizer", tokenizer,
                 "--start-token", str(BOS), "--stop-token", str(EOS), "--prefill", "8", "--quantize", "int4"]) == 0
    prompt = list(PROMPTS[0])
    generated = _engine_tokens(bundle, prompt)
    assert generated == _runner_tokens(paths["int4"], prompt)
    expected = _jax_greedy(tuple(prompt), EOS)
    print(f"int4 in LiteRT-LM: {_leading(generated, expected)}/{MAX_NEW} leading tokens = JAX's")


def test_bad_llm_quantize_mode_is_refused_before_any_work(tmp_path):
    from noxla import llm
    from noxla.errors import QuantizationError

    def step(*args):
        raise AssertionError("traced before the mode was checked")
    for export in (functools.partial(llm.export_tflite, step, {}, str(tmp_path / "m.tflite")),
                   functools.partial(llm.export_litertlm, step, {}, str(tmp_path / "m.litertlm"),
                                     tokenizer=str(tmp_path / "missing.json"), start_token=BOS, stop_tokens=[EOS])):
        with pytest.raises(QuantizationError, match=r"quantize='int3'.*'int8'.*'int4'.*blockwise"):
            export(layout=_layout(), quantize="int3")
    assert not os.listdir(tmp_path)


def _builtin_counts(data: bytes) -> dict:
    from noxla.writers.tflite.flatbuffer.schema import read_model, schema
    model = read_model(data)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    counts: dict = {}
    for graph in model.subgraphs:
        for op in graph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            name = names[max(code.builtinCode, code.deprecatedBuiltinCode)]
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.slow
def test_embedding_lookup_rewrite_computes_the_gathers_rows(tmp_path):
    """Only a GATHER of whole rows of a constant table becomes EMBEDDING_LOOKUP, and the float
    model computes exactly JAX's values after the rewrite (before any quantization)."""
    import jax.numpy as jnp

    import noxla
    from noxla.runtimes import run_tflite
    from noxla.writers.tflite.flatbuffer import quantize_weights as llm_quantize_weights
    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model_file
    table = np.random.default_rng(0).standard_normal((10, 6)).astype(np.float32)

    def f(ids, x):
        return {"rows": jnp.take(table, ids, axis=0), "columns": jnp.take(table, ids % 6, axis=1),
                "of_input": jnp.take(x, ids, axis=0)}
    ids, x = np.array([3, 0, 9, 3], np.int32), np.ones((10, 2), np.float32)
    path = noxla.export_tflite(f, ids, x, path=str(tmp_path / "m.tflite"))
    model = read_model_file(path)
    llm_quantize_weights.embedding_lookups(model)
    data = model_bytes(model)
    before, after = _builtin_counts(open(path, "rb").read()), _builtin_counts(data)
    assert after.get("EMBEDDING_LOOKUP") == 1 and after["GATHER"] == before["GATHER"] - 1, (before, after)
    got = run_tflite(data, {"ids": ids, "x": x})
    for name, want in f(ids, x).items():
        np.testing.assert_array_equal(got[name], np.asarray(want), err_msg=name)


@pytest.mark.slow
def test_quantizing_past_the_quantizers_inline_size(tmp_path):
    """Past 256 KiB of quantized weights the quantizer writes them after the flatbuffer (offset
    buffers), as with any real LLM; the result still loads, is smaller by the weights' savings and
    computes JAX's values to within int8's step (a 4096 x 96 table: 1.5 MiB, 384 KiB in int8)."""
    import jax.numpy as jnp

    import noxla
    from noxla.llm import quantize as llm_quantize
    from noxla.runtimes import run_tflite
    rng = np.random.default_rng(1)
    table = rng.standard_normal((4096, 96)).astype(np.float32)
    weight = (rng.standard_normal((96, 64)) / 8).astype(np.float32)

    def f(ids):
        return jnp.take(table, ids, axis=0) @ weight
    ids = np.array([5, 4095, 0, 977], np.int32)
    path = noxla.export_tflite(f, ids, path=str(tmp_path / "m.tflite"))
    with open(path, "rb") as fh:
        data = llm_quantize.quantize_tflite(fh.read(), "int8")
    # A quarter of the float bytes, plus a scale and a zero point (12 bytes) per row of 96.
    assert len(data) < (0.25 + 12 / (4 * 96) + 0.02) * os.path.getsize(path)
    want = np.asarray(f(ids))
    (got,) = run_tflite(data, {"ids": ids}).values()
    # Per-channel int8: each weight within half a step of 1/127 of its row's largest; the 96-term
    # sums stay within a few percent of the output's scale.
    assert np.max(np.abs(got - want)) <= 0.05 * np.max(np.abs(want)), np.max(np.abs(got - want))


@pytest.mark.slow
@pytest.mark.parametrize("graph", ["1", "0"], ids=["graph", "tf_path"])
def test_a_weight_also_read_as_a_float_keeps_its_float_buffer(graph, tmp_path, monkeypatch):
    """One table as a FULLY_CONNECTED weight and as a column GATHER's params (not a lookup of rows,
    so not quantized): the weight gets an int4 buffer of its own and the gather reads the float
    table as before (quantized in place, the file did not even load: a float tensor on int4 bytes).
    TF's converter gives each reader a tensor on the shared buffer; noxla's graph one tensor both read."""
    monkeypatch.setenv("NOXLA_TFLITE_GRAPH", graph)
    import jax.numpy as jnp

    from noxla.pipeline.tf_path import export_signatures
    from noxla.runtimes import run_tflite
    from noxla.writers.tflite.flatbuffer import quantize_weights as llm_quantize_weights
    rng = np.random.default_rng(4)
    table = (rng.standard_normal((128, 128)) / 8).astype(np.float32)

    def f(ids, x):
        return {"columns": jnp.take(table, ids, axis=1), "y": x @ table.T}
    args = (np.array([3, 0, 127], np.int32), rng.standard_normal((2, 128)).astype(np.float32))
    counts = []

    def rewrite(model, stubs):
        counts.append(llm_quantize_weights.quantize_weights(model, stubs, "dynamic_wi4b32_afp32"))
    steps = []
    path = export_signatures({"f": (f, args)}, tflite=str(tmp_path / "m.tflite"), rewrite=rewrite,
                             on_step=lambda name, seconds: steps.append(name))["tflite"]
    assert ("lower+write f (graph tflite)" in steps) == (graph == "1"), steps
    assert counts == [1]
    got, want = run_tflite(path, {"ids": args[0], "x": args[1]}), f(*args)
    np.testing.assert_array_equal(got["columns"], np.asarray(want["columns"]))
    # int4 in blocks of 32: each weight within half a step of 1/7 of its block's largest.
    error = np.max(np.abs(got["y"] - want["y"]))
    assert error <= 0.15 * np.max(np.abs(want["y"])), error
