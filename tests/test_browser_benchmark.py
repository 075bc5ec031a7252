"""tools/browser_benchmark.py's arguments, its ratio and verdict, and the report it writes (no
browsers: the results are made up here, the measuring itself runs only in the tool)."""
import pytest

from tools import browser_benchmark as bb


def test_arguments_default_to_every_model_on_wasm_only():
    args = bb.parse_args([])
    assert (args.models, args.webgpu, args.rounds, args.out) == (None, False, 9, bb.DEFAULT_OUT)
    args = bb.parse_args(["--models", "cnn,mlp", "--rounds", "3", "--webgpu", "--out", "x.md"])
    assert (args.models, args.webgpu, args.rounds, args.out) == ("cnn,mlp", True, 3, "x.md")


def test_zero_rounds_is_refused():
    with pytest.raises(SystemExit):
        bb.parse_args(["--rounds", "0"])


def test_ratio_to_best_is_against_the_fastest_other_path():
    # LiteRT.js / TF.js 0.2 and / ORT 0.8: ORT is the faster other path, so the ratio is 0.8.
    assert bb.ratio_to_best({"TF.js wasm": 0.2, "ORT-web wasm": 0.8}) == (0.8, "ORT-web wasm")
    assert bb.ratio_to_best({}) == (None, None)


def test_batch_mean_not_median():
    # 0.1 ms clamped timer: three runs read 0, 0, 0.1 -> median 0, mean 1/30.
    assert bb.per_run_ms({"ms": 0.0, "times": [0.0, 0.0, 0.1]}) == pytest.approx(0.1 / 3)
    assert bb.per_run_ms({"ms": 2.0}) == 2.0


def test_report_rows_verdicts_and_failures(tmp_path):
    results = {
        "fast": {"ms": {"LiteRT.js wasm": 0.5, "TF.js wasm": 2.0, "ORT-web wasm": 1.0},
                 "errors": {"LiteRT.js wasm": 1e-7, "TF.js wasm": 2e-7, "ORT-web wasm": 3e-7},
                 "notes": {}, "ratios": {"TF.js wasm": 0.25, "ORT-web wasm": 0.5}},
        "slow": {"ms": {"LiteRT.js wasm": 1.5, "TF.js wasm": 2.0, "ORT-web wasm": 1.0},
                 "errors": {"LiteRT.js wasm": 1e-7, "TF.js wasm": 2e-7, "ORT-web wasm": 3e-7},
                 "notes": {}, "ratios": {"TF.js wasm": 0.75, "ORT-web wasm": 1.5}},
        "no_onnx": {"ms": {"LiteRT.js wasm": 0.5, "TF.js wasm": 2.0}, "errors": {"LiteRT.js wasm": 1e-7},
                    "notes": {"ORT-web wasm": "jax2onnx: NotImplementedError: a | b"},
                    "ratios": {"TF.js wasm": 0.25}},
    }
    out = tmp_path / "r.md"
    bb.write_report(str(out), results, bb.WASM_PATHS, "nice -n 10 python tools/browser_benchmark.py", "env", 9)
    text = out.read_text()
    assert "Command: `nice -n 10 python tools/browser_benchmark.py`" in text and "in 9 rounds" in text
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| model")}
    assert set(rows) == {"fast", "slow", "no_onnx"}
    assert rows["fast"][1:4] == ["0.500", "2.000", "1.000"] and rows["fast"][-2:] == ["0.500", "yes |"]
    assert rows["slow"][-2:] == ["1.500", "no |"]
    # the failure is recorded in the ORT cell (a "|" in it would break the table)
    assert rows["no_onnx"][3] == "jax2onnx: NotImplementedError: a / b"
    assert rows["no_onnx"][-1] == "partly (not all paths timed) |"
    assert "- no_onnx, ORT-web wasm: jax2onnx: NotImplementedError: a | b" in text  # in full below
    header = next(line for line in text.splitlines() if line.startswith("| model"))
    assert header.count("|") == len(rows["fast"]) + 1


def test_real_size_models_join_the_zoo_by_default_and_none_leaves_them_out():
    assert bb.parse_args([]).real == ",".join(bb.REAL_DEFAULT)
    assert "vae_decoder_64" in bb.REAL_DEFAULT
    assert bb.parse_args(["--real", "none"]).real == "none"
    with pytest.raises(SystemExit):
        bb.build_models(["mlp", "no_such_model"])


def test_the_stride_2_same_vae_form_is_one_fused_transpose_conv_per_upsampling(tmp_path):
    """The form issue 40 measured LiteRT.js slowest on: each biased, ReLU'd stride-2 SAME
    lax.conv_transpose is one TRANSPOSE_CONV (bias and ReLU fused, no PAD/SLICE around it, which
    XNNPACK delegates whole), and the file computes what JAX does on LiteRT."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from noxla.api import export
    from noxla.runtimes.verify import jax_outputs, relative_error
    from tools import real_models
    model = real_models.build(["vae_decoder_64"], tiny=True)["vae_decoder_64"]
    path = str(tmp_path / "vae.tflite")
    export(model.fun, model.example, tflite=path, overwrite=True)
    interpreter = Interpreter(path)
    ops = [op["op_name"] for op in interpreter._get_ops_details()]
    assert ops == ["FULLY_CONNECTED", "RESHAPE", "TRANSPOSE_CONV", "TRANSPOSE_CONV", "CONV_2D", "LOGISTIC"], ops
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], model.example[0])
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert relative_error(np.asarray(jax_outputs(model.fun, model.example)[0]), got) < 1e-5


def _perturbed_copy(path: str, out: str) -> str:
    """``path`` with one weight negated: the largest in magnitude of the first CONV_2D's kernel (what
    a wrong sign or index in a writer would do to one value)."""
    import numpy as np

    from noxla.writers.tflite.flatbuffer.schema import model_bytes, read_model_file, schema
    model = read_model_file(path)
    graph = model.subgraphs[0]
    convs = [op for op in graph.operators
             if max(model.operatorCodes[op.opcodeIndex].builtinCode,
                    model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode) == schema.BuiltinOperator.CONV_2D]
    buffer = model.buffers[graph.tensors[convs[0].inputs[1]].buffer]
    kernel = np.frombuffer(bytes(buffer.data), np.float32).copy()
    kernel[np.argmax(np.abs(kernel))] *= -1
    buffer.data = kernel.view(np.uint8)
    with open(out, "wb") as f:
        f.write(model_bytes(model))
    return out


@pytest.mark.slow
def test_keras_real_models_compute_o1_logits_so_that_a_wrong_weight_fails_the_check(tmp_path):
    """The Keras CNNs' BatchNormalization statistics keep activations alive (tools/real_models.py
    _calibrate_batch_norms), and they return logits: JAX's outputs are O(1), so the benchmark's
    check (error / max(1, max |JAX|) against TOLERANCE) passes the export and fails the same file
    with one weight negated. With Keras's initial statistics and its softmax the outputs were all
    1e-3 +- 1e-10, and that file passed the check too."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from noxla.api import export
    from noxla.runtimes.verify import jax_outputs, relative_error
    from tools import real_models

    def run(path):
        interpreter = Interpreter(path)
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], model.example[0])
        interpreter.invoke()
        return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    model = real_models.build(["keras_mobilenet_v3_small"], tiny=True)["keras_mobilenet_v3_small"]
    expected = np.asarray(jax_outputs(model.fun, model.example)[0])
    assert 0.3 < np.max(np.abs(expected)) < 30 and np.std(expected) > 0.1, (np.max(np.abs(expected)), np.std(expected))
    path = str(tmp_path / "m.tflite")
    export(model.fun, model.example, tflite=path, overwrite=True)
    right = relative_error(expected, run(path))
    wrong = relative_error(expected, run(_perturbed_copy(path, str(tmp_path / "wrong.tflite"))))
    print(f"max |JAX| {np.max(np.abs(expected)):.3g}, std {np.std(expected):.3g}; error {right:.2e}, "
          f"with one weight negated {wrong:.2e}")
    assert right < bb.TOLERANCE["wasm"] < wrong / 10, (right, wrong)
