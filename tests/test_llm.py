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
MAX_NEW, CACHE = 32, 48


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


# --------------------------------------------------------------------------- noxla.llm

LAYOUT_CONFIG = tiny_llama.Config()
BOS, EOS = 1, 2


def _layout(cache_length=CACHE):
    from noxla.llm import CacheLayout
    c = LAYOUT_CONFIG
    return CacheLayout(c.layers, c.kv_heads, c.head_dim, cache_length)


def _step(params, tokens, input_pos, mask, kv_cache):
    return tiny_llama.step(LAYOUT_CONFIG, params, tokens, input_pos, mask, kv_cache)


def _jax_greedy(params, prompt, max_new):
    tokens, count = jax.jit(functools.partial(tiny_llama.generate, LAYOUT_CONFIG, params, max_new=max_new,
                                              cache_length=CACHE))(np.asarray(prompt, np.int32), np.int32(EOS))
    return [int(t) for t in np.asarray(tokens)[:int(count)]]


@pytest.mark.slow
def test_llm_tflite_greedy_tokens_in_signature_runners_equal_jax(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    from noxla import llm
    params = tiny_llama.init_params(LAYOUT_CONFIG)
    layout = _layout()
    path = llm.export_tflite(_step, params, str(tmp_path / "model.tflite"), layout=layout, prefill_lengths=(4, 8))
    interpreter = Interpreter(model_path=path)
    signatures = interpreter.get_signature_list()
    assert set(signatures) == {"prefill_4", "prefill_8", "decode"}
    cache = llm.cache_names(layout)
    assert sorted(signatures["decode"]["inputs"]) == sorted(["tokens", "input_pos", "mask", *cache])
    assert sorted(signatures["decode"]["outputs"]) == sorted(["logits", *cache])
    assert sorted(signatures["prefill_8"]["outputs"]) == sorted(cache)
    runner = interpreter.get_signature_runner("decode")
    details = runner.get_input_details()
    assert tuple(details["kv_cache_v_1"]["shape"]) == (1, LAYOUT_CONFIG.kv_heads, LAYOUT_CONFIG.head_dim, CACHE)
    assert tuple(details["mask"]["shape"]) == (1, 1, 1, CACHE)
    assert tuple(runner.get_output_details()["logits"]["shape"]) == (1, 1, LAYOUT_CONFIG.vocab)
    for prompt in ([BOS, 17, 42, 5, 9], [BOS, 60, 7, 33, 21, 8, 70, 12, 4]):
        expected = _jax_greedy(params, prompt, MAX_NEW)
        assert len(set(expected)) >= 6, f"degenerate greedy decoding: {expected}"
        assert llm.greedy_tokens(path, prompt, MAX_NEW, layout, stop_tokens=[EOS]) == expected, prompt


@pytest.mark.slow
@pytest.mark.parametrize("buffer_offsets", [False, True], ids=["inline", "buffer-offsets"])
def test_litertlm_engine_generates_jax_greedy_tokens(tmp_path, monkeypatch, buffer_offsets):
    """The bundle in LiteRT-LM's own engine (a child process of this Python, in this environment)
    decodes the same greedy tokens as JAX; also with the .tflite in the
    form of one past 2 GB (the limit lowered: weights after the flatbuffer, noxla.writers.tflite.flatbuffer.large)."""
    from noxla import llm
    from noxla.writers.tflite.flatbuffer import large as large_tflite
    used_offsets = []
    if buffer_offsets:
        monkeypatch.setattr(large_tflite, "FLATBUFFER_LIMIT", large_tflite._TABLES_MARGIN + 1)
        decide = large_tflite.needs_offsets
        monkeypatch.setattr(large_tflite, "needs_offsets",
                            lambda *a: used_offsets.append(decide(*a)) or used_offsets[-1])
    params = tiny_llama.init_params(LAYOUT_CONFIG)
    layout = _layout()
    tokenizer = tiny_llama.word_level_tokenizer(tmp_path / "tokenizer.json", LAYOUT_CONFIG.vocab)
    path = llm.export_litertlm(_step, params, str(tmp_path / "model.litertlm"), tokenizer=tokenizer, layout=layout,
                               start_token=BOS, stop_tokens=[EOS], prefill_lengths=(8,))
    words = [17, 42, 5, 9]
    expected = _jax_greedy(params, [BOS, *words], MAX_NEW)
    generated = tiny_llama.engine_greedy(path, words, MAX_NEW, CACHE)
    assert generated == [t for t in expected if t != EOS], expected
    assert used_offsets == ([True] if buffer_offsets else [])


def test_a_missing_litert_lm_builder_is_named_before_any_export(tmp_path, monkeypatch):
    """Without litert-lm-builder, export_litertlm says which package to install, and writes nothing."""
    import sys

    from noxla import llm
    from noxla.errors import ExportError
    for module in ("litert_lm_builder", "litert_lm_builder.litertlm_builder"):
        monkeypatch.setitem(sys.modules, module, None)  # its import now raises ImportError
    monkeypatch.setattr(llm, "export_tflite", lambda *a, **k: pytest.fail("exported before checking the builder"))
    tokenizer = tiny_llama.word_level_tokenizer(tmp_path / "tokenizer.json", LAYOUT_CONFIG.vocab)
    with pytest.raises(ExportError, match=r"litert-lm-builder.*noxla\[llm\]"):
        llm.export_litertlm(_step, tiny_llama.init_params(LAYOUT_CONFIG), str(tmp_path / "model.litertlm"),
                            tokenizer=tokenizer, layout=_layout(), start_token=BOS, stop_tokens=[EOS])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json"]


def tiny_decoder():
    """For the CLI test: what ``noxla llm-export MODULE:FUNCTION`` loads."""
    return _step, tiny_llama.init_params(LAYOUT_CONFIG), _layout()


@pytest.mark.slow
def test_cli_llm_export_writes_a_tflite_with_jax_greedy_tokens(tmp_path):
    from noxla import llm
    from noxla.cli import main
    path = str(tmp_path / "cli.tflite")
    assert main(["llm-export", "tests.test_llm:tiny_decoder", "--tflite", path, "--prefill", "4"]) == 0
    step, params, layout = tiny_decoder()
    prompt = [BOS, 33, 8, 61]
    assert llm.greedy_tokens(path, prompt, MAX_NEW, layout, stop_tokens=[EOS]) == _jax_greedy(params, prompt, MAX_NEW)


def test_quantized_weights_past_2_gib_are_refused_before_any_work(tmp_path, monkeypatch):
    from noxla import llm
    from noxla.errors import ExportError
    from noxla.writers.tflite.flatbuffer import large as large_tflite
    params = tiny_llama.init_params(LAYOUT_CONFIG)
    weight_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
    monkeypatch.setattr(large_tflite, "FLATBUFFER_LIMIT", weight_bytes - 1)

    def never_traced(*args):
        raise AssertionError("traced")
    with pytest.raises(ExportError, match="at most 2 GiB"):
        llm.export_tflite(never_traced, params, str(tmp_path / "m.tflite"), layout=_layout(), quantize="float16")
    assert not (tmp_path / "m.tflite").exists()


def test_decode_step_attention_has_no_transpose_and_rms_norm_no_reshape(tmp_path):
    """One token's attention as jnp.einsum spells it (the keys' or values' axis first, then a
    transpose) is two BATCH_MATMULs and no TRANSPOSE (linalg.transposed_product; size-1 axes moved
    by Reshapes), and jnp.mean(keepdims=True) is a SUM that keeps the axis, not a MEAN (fusion.mean:
    LiteRT-LM runs it faster): the SmolLM-135M decode step had 90 TRANSPOSEs and 61 RESHAPEs after
    a MEAN, 60 around its softmaxes and 60 copying its caches. Its values against JAX."""
    from ai_edge_litert.interpreter import Interpreter
    rng = np.random.default_rng(3)
    params, c = tiny_llama.init_params(LAYOUT_CONFIG), LAYOUT_CONFIG
    cache = [tuple(rng.standard_normal(x.shape).astype(np.float32) for x in pair)
             for pair in tiny_llama.empty_cache(c, CACHE)]
    pos = np.array([5], np.int32)
    inputs = {"tokens": np.array([[7]], np.int32), "input_pos": pos,
              "mask": np.asarray(tiny_llama.causal_mask(pos, CACHE)), "cache": cache}

    def decode(tokens, input_pos, mask, cache):
        logits, cache = _step(params, tokens, input_pos, mask, cache)
        return {"logits": logits, **{f"{kv}{i}": x for i, pair in enumerate(cache) for kv, x in zip("kv", pair)}}
    path = noxla.export_tflite(decode, *inputs.values(), path=str(tmp_path / "decode.tflite"))
    interpreter = Interpreter(model_path=path)
    shapes = {t["index"]: tuple(t["shape"]) for t in interpreter.get_tensor_details()}
    ops = interpreter._get_ops_details()
    names = [op["op_name"] for op in ops]
    assert names.count("BATCH_MATMUL") == 2 * c.layers and "TRANSPOSE" not in names, names
    means = {op["outputs"][0] for op in ops if op["op_name"] == "SUM"}
    assert len(means) == 2 * c.layers + 1 and all(shapes[m] == (1, 1) for m in means), names
    assert "MEAN" not in names, names
    assert not [op for op in ops if op["op_name"] == "RESHAPE" and op["inputs"][0] in means], names
    # The mask's unit axis (scores reshaped to [kv_heads, group, 1, cache], the mask added, the
    # softmax, reshaped back) is gone: noxla.writers.tflite.flatbuffer.reshapes runs them on [1, kv_heads, group,
    # cache], the products reading the updated caches, not a squeezed copy of them.
    softmaxes = {op["outputs"][0] for op in ops if op["op_name"] == "SOFTMAX"}
    assert len(softmaxes) == c.layers and all(shapes[s][:2] == (1, c.kv_heads) and len(shapes[s]) == 4
                                              for s in softmaxes), names
    assert not [op for op in ops if op["op_name"] == "RESHAPE" and op["inputs"][0] in softmaxes], names
    written = {op["outputs"][0] for op in ops if op["op_name"] == "DYNAMIC_UPDATE_SLICE"}
    assert len(written) == 2 * c.layers, names
    assert all(op["op_name"] == "BATCH_MATMUL" for op in ops if written.intersection(op["inputs"])), names
    runner = interpreter.get_signature_runner()
    feed = {**{k: v for k, v in inputs.items() if k != "cache"},
            **{f"cache_{i}_{j}": x for i, pair in enumerate(cache) for j, x in enumerate(pair)}}
    got, want = runner(**feed), jax.jit(decode)(*inputs.values())
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], np.asarray(value), rtol=1e-5, atol=1e-5, err_msg=name)


def _signature_ops(path, signature):
    """[(op name, input 0's shape, output 0's shape)] of one signature's subgraph."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    data = open(path, "rb").read()
    model = schema.Model.GetRootAsModel(data, 0)
    names = {v: k for k, v in schema.BuiltinOperator.__dict__.items() if not k.startswith("_")}
    codes = [names[max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())]
             for i in range(model.OperatorCodesLength())]
    key = next(model.SignatureDefs(i) for i in range(model.SignatureDefsLength())
               if model.SignatureDefs(i).SignatureKey().decode() == signature)
    graph = model.Subgraphs(key.SubgraphIndex())
    shape = lambda t: tuple(int(d) for d in graph.Tensors(t).ShapeAsNumpy())  # noqa: E731
    return [(codes[op.OpcodeIndex()], shape(op.Inputs(0)), shape(op.Outputs(0)))
            for op in (graph.Operators(j) for j in range(graph.OperatorsLength()))]


def test_prefill_attention_transposes_the_queries_not_the_scores(tmp_path):
    """A T-token prefill's attention as jnp.einsum spells it: the scores (kv, group, T, cache) come
    from q transposed to (kv, group, T, head_dim) times the keys, not from a product transposed
    (linalg.transposed_product; SmolLM-135M's prefill_16 moved 36,864 elements per layer there,
    now 9,216), and the values' (T, kv, group, head_dim) from p v transposed with head_dim kept
    innermost. Per layer with a live attention: q's and the values' TRANSPOSEs and the two cache
    writes'; the prefill returns only the cache, so the last layer's attention is dead code. The
    cache it writes against JAX's."""
    from ai_edge_litert.interpreter import Interpreter

    from noxla import llm
    c, t = LAYOUT_CONFIG, 8
    params, layout = tiny_llama.init_params(c), _layout()
    path = llm.export_tflite(_step, params, str(tmp_path / "m.tflite"), layout=layout, prefill_lengths=(t,))
    transposes = [(a, b) for name, a, b in _signature_ops(path, f"prefill_{t}") if name == "TRANSPOSE"]
    assert len(transposes) == 4 * (c.layers - 1) + 2, transposes
    assert not [s for s in transposes if CACHE in (*s[0], *s[1])], transposes  # no scores moved
    values = (t, c.kv_heads, c.heads // c.kv_heads, c.head_dim)
    assert [s for s in transposes if s[1] == values] == [
        ((c.kv_heads, c.heads // c.kv_heads, t, c.head_dim), values)] * (c.layers - 1), transposes
    rng = np.random.default_rng(6)
    cache = [tuple((0.5 * rng.standard_normal(x.shape)).astype(np.float32) for x in pair) for pair in layout.empty()]
    pos = np.arange(3, 3 + t, dtype=np.int32)
    tokens, mask = rng.integers(3, c.vocab, (1, t)).astype(np.int32), llm.causal_mask(pos, CACHE)
    want = jax.jit(_step)(params, tokens, pos, mask, cache)[1]
    feed = dict(tokens=tokens, input_pos=pos, mask=mask,
                **dict(zip(llm.cache_names(layout), (x for pair in cache for x in pair))))
    got = Interpreter(model_path=path).get_signature_runner(f"prefill_{t}")(**feed)
    for name, value in zip(llm.cache_names(layout), (x for pair in want for x in pair)):
        np.testing.assert_allclose(got[name], np.asarray(value), rtol=1e-5, atol=1e-5, err_msg=name)


# Weights past weight_stubs.STUB_BYTES (q/k/v 128 x 128, gate/up 128 x 256): every projection
# reading a norm's output is a stand-in, so the norm's weight can be folded into all of them.
FOLD_CONFIG = tiny_llama.Config(vocab=256, hidden=128, layers=2, heads=4, kv_heads=4, head_dim=32, ffn=256)


def _norm_weight_muls(path, signature, hidden) -> int:
    """The MULs of ``signature`` that read a constant of ``hidden`` floats (an RMSNorm's weight)."""
    from noxla.writers.tflite.flatbuffer.schema import schema
    data = open(path, "rb").read()
    model = schema.Model.GetRootAsModel(data, 0)
    codes = [max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(model.OperatorCodesLength())]
    key = next(model.SignatureDefs(i) for i in range(model.SignatureDefsLength())
               if model.SignatureDefs(i).SignatureKey().decode() == signature)
    graph = model.Subgraphs(key.SubgraphIndex())

    def norm_weight(t):
        tensor = graph.Tensors(t)
        buffer = model.Buffers(tensor.Buffer())
        return (buffer.DataLength() > 0 or buffer.Offset() > 1) and int(np.prod(tensor.ShapeAsNumpy())) == hidden
    return sum(1 for j in range(graph.OperatorsLength())
               if codes[graph.Operators(j).OpcodeIndex()] == schema.BuiltinOperator.MUL
               and any(norm_weight(t) for t in graph.Operators(j).InputsAsNumpy()))


def test_rms_norm_weights_fold_into_the_projections_but_not_into_a_tied_embedding(tmp_path):
    """Each RMSNorm's weight ([1, hidden] after the lowering) is folded into the stand-in weights of
    the projections reading the norm (not in strict mode: the converter folds only a rank-1 scale).
    The final norm's stays: its projection's weight is the embedding GATHER's params (tied), and
    scaling it would write the embedding twice. prefill_4 and decode share each scaled weight: the
    file is smaller than the strict one. Decode logits against JAX in both modes."""
    from ai_edge_litert.interpreter import Interpreter

    from noxla import llm
    from noxla.pipeline.tf_path import export_signatures
    c = FOLD_CONFIG
    params = tiny_llama.init_params(c)
    # Not all ones, which the converter would drop: the final norm is then a MUL to keep.
    params["final_norm"] = (1.0 + 0.1 * np.random.default_rng(4).standard_normal(c.hidden)).astype(np.float32)
    layout = llm.CacheLayout(c.layers, c.kv_heads, c.head_dim, CACHE)
    step = functools.partial(tiny_llama.step, c)
    functions = llm.signatures(step, params, layout, (4,))
    paths = {strict: export_signatures(functions, tflite=str(tmp_path / f"strict_{strict}.tflite"),
                                       strict=strict)["tflite"] for strict in (False, True)}
    # Strict: every norm's MUL (the prefill returns only the cache: its last MLP norm is dead code).
    assert _norm_weight_muls(paths[True], "decode", c.hidden) == 2 * c.layers + 1
    assert _norm_weight_muls(paths[True], "prefill_4", c.hidden) == 2 * c.layers - 1
    assert _norm_weight_muls(paths[False], "decode", c.hidden) == 1
    assert _norm_weight_muls(paths[False], "prefill_4", c.hidden) == 0
    sizes = {strict: len(open(path, "rb").read()) for strict, path in paths.items()}
    assert sizes[False] < sizes[True], sizes
    rng = np.random.default_rng(5)
    cache = [tuple((0.5 * rng.standard_normal(x.shape)).astype(np.float32) for x in pair) for pair in layout.empty()]
    pos = np.array([9], np.int32)
    tokens, mask = np.array([[7]], np.int32), llm.causal_mask(pos, CACHE)
    want = np.asarray(jax.jit(step)(params, tokens, pos, mask, cache)[0])
    feed = dict(tokens=tokens, input_pos=pos, mask=mask,
                **dict(zip(llm.cache_names(layout), (x for pair in cache for x in pair))))
    for strict, path in paths.items():
        got = Interpreter(model_path=path).get_signature_runner("decode")(**feed)["logits"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"strict={strict}")
