"""The anchor side of tools/llm_benchmark.py, run by path inside other venvs (standard library only
at the top, so any venv's python runs it; each command reads a JSON request and writes a JSON reply):

    <litert-torch venv>/bin/python tools/llm_bench_anchor.py checkpoint REQUEST REPLY
        a transformers LlamaConfig of the benchmark's shapes with the JAX model's weights copied
        from REQUEST's .npz, saved as a HF checkpoint (safetensors + a tokenizer) as a user has
        one; also PyTorch's own greedy tokens, which check that the copy is the same model.
    <litert-torch venv>/bin/python tools/llm_bench_anchor.py export REQUEST REPLY
        litert-torch's export_hf of that checkpoint, float32 or with REQUEST's quantization recipe
        (an ai_edge_quantizer.recipe name, export_hf's ``quantization_recipe``), in a fresh process
        so that its time and peak memory include the imports, as a user's run has them.
    <LiteRT-LM venv>/bin/python tools/llm_bench_anchor.py engine REQUEST REPLY
        prefill and decode timings of several .litertlm bundles in LiteRT-LM's engine, the bundles
        alternating round by round, and each one's greedy text.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time


def checkpoint(request: dict) -> dict:
    import numpy as np
    import torch
    import transformers
    c = request["config"]
    weights = dict(np.load(request["weights"]))
    config = transformers.LlamaConfig(
        vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["ffn"], num_hidden_layers=c["layers"],
        num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"],
        rms_norm_eps=request["rms_norm_eps"], rope_theta=c["rope_theta"],
        rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
        tie_word_embeddings=True, max_position_embeddings=request["cache_length"], attention_bias=False,
        mlp_bias=False, bos_token_id=request["bos"], eos_token_id=request["eos"], pad_token_id=0,
        torch_dtype="float32")
    model = transformers.LlamaForCausalLM(config).eval()
    # The JAX model multiplies x @ W; torch's Linear stores W transposed.
    names = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
             "wo": "self_attn.o_proj", "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj", "w_down": "mlp.down_proj"}
    state = {"model.embed_tokens.weight": weights["embed"], "model.norm.weight": weights["final_norm"]}
    for i in range(c["layers"]):
        for ours, theirs in names.items():
            state[f"model.layers.{i}.{theirs}.weight"] = weights[f"layers/{i}/{ours}"].T
        state[f"model.layers.{i}.input_layernorm.weight"] = weights[f"layers/{i}/attn_norm"]
        state[f"model.layers.{i}.post_attention_layernorm.weight"] = weights[f"layers/{i}/mlp_norm"]
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"weights do not fit: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.save_pretrained(request["output"])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=request["tokenizer"], bos_token="<bos>",
                                                     eos_token="<eos>", pad_token="<pad>", unk_token="<pad>")
    tokenizer.save_pretrained(request["output"])
    if not request["max_new"]:  # --export-only: transformers refuses to generate no tokens
        return {"torch_tokens": []}
    with torch.no_grad():
        out = model.generate(torch.tensor([request["prompt"]]), max_new_tokens=request["max_new"], do_sample=False,
                             eos_token_id=request["eos"], pad_token_id=0)
    return {"torch_tokens": out[0, len(request["prompt"]):].tolist()}


def export(request: dict) -> dict:
    start = time.perf_counter()
    from litert_torch.generative.export_hf import export as export_hf
    imported = time.perf_counter()
    # keep_temporary_files: the .tflite stays beside the bundle, for LiteRT's signature runners
    # (quantized: model_quantized.tflite, beside the float model.tflite it was made from).
    export_hf.export(request["checkpoint"], request["output"], prefill_lengths=[request["prefill"]],
                     cache_length=request["cache_length"], quantization_recipe=request.get("recipe", "none"),
                     bundle_litert_lm=request["bundle"], keep_temporary_files=True)
    return {"import_s": imported - start, "export_s": time.perf_counter() - imported}


def engine(request: dict) -> dict:
    """Per bundle: median prefill ms and decode ms per token over rounds (bundles alternate
    within a round), the per-round ratios to the first bundle, and the greedy text."""
    import litert_lm
    threads = request["threads"]
    engines = {name: litert_lm.Engine(path, backend=litert_lm.Backend.CPU(thread_count=threads),
                                      max_num_tokens=request["max_num_tokens"],
                                      activation_data_type=litert_lm.ActivationDataType.FLOAT32)
               for name, path in request["models"].items()}

    def one_run(name):
        session = engines[name].create_session(
            apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1, temperature=0.0),
            max_output_tokens=request["max_output_tokens"])
        start = time.perf_counter()
        session.run_prefill([request.get("prompts", {}).get(name, request["prompt"])])
        prefilled = time.perf_counter()
        texts = list(session.run_decode().texts)
        return prefilled - start, time.perf_counter() - prefilled, "".join(texts)
    runs: dict = {name: [] for name in engines}
    texts = {name: one_run(name)[2] for name in engines}  # warm-up
    order = list(engines)
    for r in range(request["rounds"]):
        for name in (order if r % 2 == 0 else order[::-1]):
            runs[name].append(one_run(name))
    reply = {}
    for name, rs in runs.items():
        tokens = max(1, len(re.findall(r"t\d+", texts[name])))  # the words t{id}
        reply[name] = {"prefill_ms": 1e3 * statistics.median(r[0] for r in rs),
                       "decode_ms_per_token": 1e3 * statistics.median(r[1] for r in rs) / tokens,
                       "decode_s": [r[1] for r in rs], "tokens": tokens, "text": texts[name]}
    return reply


if __name__ == "__main__":
    command, request_path, reply_path = sys.argv[1:4]
    with open(request_path) as f:
        request = json.load(f)
    reply = {"checkpoint": checkpoint, "export": export, "engine": engine}[command](request)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_anchor import peak_mb
    reply["peak_mb"] = peak_mb()  # this process's own peak (llm_benchmark.measured_run says why)
    with open(reply_path, "w") as f:
        json.dump(reply, f)
