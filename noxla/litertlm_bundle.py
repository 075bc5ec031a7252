"""LiteRT-LM's builder and engine, run in a venv of their own.

``litert-lm-builder`` 0.18.1's generated protos need protobuf >= 6.31, while the project's stack
(TensorFlow 2.19, held back by tensorflowjs 4.22) keeps protobuf 5.29: both cannot import in one
process. So the builder (and LiteRT-LM's Python engine, used to check a bundle) run in a venv
created on first use under ~/.cache/noxla-litertlm (or $NOXLA_LITERTLM_VENV), and this file is
the script they run there: it imports only the standard library at the top, so the venv's python
runs it by path, and noxla's side talks to it through a JSON file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

VENV_PACKAGES = ("litert-lm-builder==0.18.1", "litert-lm-api==0.18.1")


class BundleError(RuntimeError):
    pass


def venv_python() -> str:
    """The venv's python, creating the venv when it is missing (a minute or two, once)."""
    root = os.environ.get("NOXLA_LITERTLM_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "noxla-litertlm", "venv")
    python = os.path.join(root, "bin", "python")
    if os.path.exists(python):
        return python
    print(f"creating the LiteRT-LM builder venv in {root} (once, a minute or two) ...", file=sys.stderr, flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", root], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *VENV_PACKAGES], check=True)
    except subprocess.CalledProcessError as e:
        raise BundleError(f"could not create the LiteRT-LM venv in {root}: {e}") from e
    return python


def call(command: str, request: dict, timeout: float = 600) -> dict:
    """Run ``command`` ("build" or "generate") of this script in the venv; its JSON reply."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="noxla-litertlm-") as scratch:
        request_path, reply_path = os.path.join(scratch, "request.json"), os.path.join(scratch, "reply.json")
        with open(request_path, "w") as f:
            json.dump(request, f)
        done = subprocess.run([venv_python(), os.path.abspath(__file__), command, request_path, reply_path],
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


# --------------------------------------------------------------------------- run inside the venv

def _build(request: dict) -> dict:
    from litert_lm_builder import litertlm_builder as lb
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
