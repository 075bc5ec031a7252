"""LiteRT-LM's builder and engine (``pip install "noxla[llm]"``: litert-lm-builder, litert-lm-api).

They share noxla's environment: with TensorFlow 2.21 and protobuf 6+ the builder's generated protos
import beside TF's (TF 2.19 with tensorflowjs 4.22 kept protobuf 5.29, and they ran in a venv of
their own made on first use). A bundle is built in this process; the engine runs in a child
process of the same Python, so that a native crash or a hang in it (a model it cannot run) is
reported as an error instead of ending the caller. This file is also the script that child runs:
it imports only the standard library at the top, and talks JSON through files.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys


class BundleError(RuntimeError):
    pass


def _require(module: str, package: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise BundleError(f"LiteRT-LM's {package} is not installed ({e}); install it with "
                          f"pip install \"noxla[llm]\" (or pip install {package})") from e


def require_builder() -> None:
    """Raise ``BundleError`` naming the package to install if the builder is missing."""
    _require("litert_lm_builder.litertlm_builder", "litert-lm-builder")


def engine_python() -> str:
    """The Python that runs LiteRT-LM's engine: this one, once its package imports here."""
    import importlib.util
    if importlib.util.find_spec("litert_lm") is None:
        _require("litert_lm", "litert-lm-api")
    return sys.executable


def call(command: str, request: dict, timeout: float = 600) -> dict:
    """Run ``command`` ("build" or "generate"); its JSON reply. A build runs here, a generation
    in a child process (see the module's docstring)."""
    if command == "build":
        return _build(request)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="noxla-litertlm-") as scratch:
        request_path, reply_path = os.path.join(scratch, "request.json"), os.path.join(scratch, "reply.json")
        with open(request_path, "w") as f:
            json.dump(request, f)
        done = subprocess.run([engine_python(), os.path.abspath(__file__), command, request_path, reply_path],
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not os.path.exists(reply_path):
            raise BundleError(f"LiteRT-LM {command} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        with open(reply_path) as f:
            return json.load(f)


def metadata_textproto(start_token: int, stop_tokens, max_num_tokens: int) -> str:
    """LiteRT-LM's LlmMetadata for a generic decoder, as a textproto."""
    stops = "".join(f"stop_tokens {{ token_ids {{ ids: {int(t)} }} }}\n" for t in stop_tokens)
    return (f"start_token {{ token_ids {{ ids: {int(start_token)} }} }}\n{stops}"
            f"max_num_tokens: {int(max_num_tokens)}\nllm_model_type {{ generic_model {{}} }}\n")


# --------------------------------------------------------------------------- the work

def _build(request: dict) -> dict:
    lb = _require("litert_lm_builder.litertlm_builder", "litert-lm-builder")
    builder = lb.LitertLmFileBuilder()
    builder.add_system_metadata(lb.Metadata(key="Authors", value="noxla", dtype=lb.DType.STRING))
    builder.add_llm_metadata(request["metadata"])
    builder.add_tflite_model(request["tflite"], lb.TfLiteModelType.PREFILL_DECODE)
    tokenizer = request["tokenizer"]
    if tokenizer.endswith((".json", ".zlib")):
        builder.add_hf_tokenizer(tokenizer)
    else:
        builder.add_sentencepiece_tokenizer(tokenizer)
    with open(request["output"], "wb") as f:
        builder.build(f)
    return {"written": request["output"]}


def _generate(request: dict) -> dict:
    """Greedy generation in LiteRT-LM's engine: the texts it decodes after ``prompt``."""
    import litert_lm
    # float32 activations: the engine's CPU default may compute in float16, and greedy tokens
    # then drift from a float32 reference within a few steps.
    engine = litert_lm.Engine(request["model"], backend=litert_lm.Backend.CPU(thread_count=1),
                              max_num_tokens=request["max_num_tokens"],
                              activation_data_type=litert_lm.ActivationDataType.FLOAT32)
    session = engine.create_session(
        apply_prompt_template=False,
        sampler_config=litert_lm.SamplerConfig(top_k=1, temperature=0.0),
        max_output_tokens=request["max_output_tokens"])
    session.run_prefill([request["prompt"]])
    return {"texts": list(session.run_decode().texts)}


if __name__ == "__main__":
    command, request_path, reply_path = sys.argv[1:4]
    with open(request_path) as f:
        request = json.load(f)
    reply = {"build": _build, "generate": _generate}[command](request)
    with open(reply_path, "w") as f:
        json.dump(reply, f)
