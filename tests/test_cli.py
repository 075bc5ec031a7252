"""The `noxla` command, run as a user would."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from limitations.table import TABLE_PATH

pytestmark = pytest.mark.slow


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def noxla(*args, cwd):
    # The checkout under test comes first, whichever checkout the editable install points at.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "noxla.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def test_export_with_no_function_exports_and_verifies_the_builtin_example(tmp_path):
    result = noxla("export", "--tflite", "ex.tflite", "--tfjs", "ex_js", "--saved-model", "ex_sm", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # The .tflite and the TF.js model from noxla's graph (the default), the SavedModel through TensorFlow.
    for step in ("[trace]", "[lower+write (graph tflite)]", "[lower (noxla's graph, no TensorFlow)]",
                 "[write tfjs ex_js]", "[write ex.tflite]", "[convert+write saved_model ex_sm]", "[verify]"):
        assert step in result.stdout
    assert (tmp_path / "ex.tflite").is_file() and (tmp_path / "ex_js" / "model.json").is_file()
    assert (tmp_path / "ex_sm" / "saved_model.pb").is_file()
    errors = [line for line in result.stdout.splitlines() if "max error vs JAX" in line]
    assert len(errors) == 4, result.stdout  # SavedModel, TFLite, TF.js cpu and wasm
    assert all(float(line.split(": ")[1].split()[0]) < 1e-5 for line in errors), errors
    assert_only_our_output(result)


# What TF, XLA, absl and the converters print on their own (C++ log lines, Python warnings).
FOREIGN = re.compile(r"^[IWEF]\d{4} |^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|WARNING: All log messages|absl|"
                     r"computation placer|cuda|cuDNN|cuBLAS|oneDNN|MLIR|output_format|Warning:|warn\(")


def assert_only_our_output(result):
    foreign = [line for line in (result.stdout + result.stderr).splitlines() if FOREIGN.search(line)]
    assert not foreign, "lines that are not noxla's:\n" + "\n".join(foreign[:20])


def test_export_refuses_to_overwrite_without_force(tmp_path):
    (tmp_path / "ex.tflite").write_bytes(b"keep me")
    result = noxla("export", "--tfjs", "ex_js", "--tflite", "ex.tflite", "--no-verify", cwd=tmp_path)
    assert result.returncode == 1 and "--force" in result.stderr
    assert (tmp_path / "ex.tflite").read_bytes() == b"keep me"
    assert not (tmp_path / "ex_js").exists()  # refused before any output was written
    assert noxla("export", "--tflite", "ex.tflite", "--no-verify", "--force", cwd=tmp_path).returncode == 0


def test_export_int8_calibrates_on_the_representative_data_file(tmp_path):
    import numpy as np
    result = noxla("export", "--tflite", "q.tflite", "--quantize", "int8", "--no-verify", cwd=tmp_path)
    assert result.returncode == 1 and "needs representative_data" in result.stderr, result.stderr
    assert not (tmp_path / "q.tflite").exists()
    np.savez(tmp_path / "samples.npz", np.random.default_rng(1).normal(size=(8, 1, 28, 28, 1)).astype(np.float32))
    result = noxla("export", "--tflite", "q.tflite", "--quantize", "int8", "--representative-data", "samples.npz",
                   cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    error, = [line for line in result.stdout.splitlines() if "max error vs JAX" in line and "[tflite]" in line]
    assert float(error.split(": ")[1].split()[0]) < 0.1, error  # int8 activations: about 1e-2
    assert (tmp_path / "q.tflite").stat().st_size < 20_000  # the float CNN: 38 KiB


USER_MODULE = textwrap.dedent("""
    import jax.numpy as jnp
    import numpy as np

    W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)

    def predict(x, tokens):
        return jnp.tanh(x @ W).sum(axis=1) + tokens.sum(axis=1)

    def narrow(x):  # TF.js computes float16 inside a model now, int16 still not
        return (x.astype(jnp.int16) * 2).astype(jnp.float32)
""")


def test_export_user_function_with_symbolic_batch(tmp_path):
    (tmp_path / "usermodel.py").write_text(USER_MODULE)
    # --strict here (the built-in example covers the default mode): lowered, converted and verified.
    result = noxla("export", "usermodel:predict", "--input", "f32[b,4]", "--input", "i32[b,5]",
                   "--tflite", "m.tflite", "--saved-model", "sm", "--strict", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_only_our_output(result)
    from ai_edge_litert.interpreter import Interpreter
    details = Interpreter(model_path=str(tmp_path / "m.tflite")).get_input_details()
    assert all(d["shape_signature"][0] == -1 for d in details)

    # The CLI and the API share one pipeline: the same run-time checks of the symbolic batch.
    import jax
    import numpy as np

    from noxla.api import export_saved_model
    sys.path.insert(0, str(tmp_path))
    try:
        import usermodel
    finally:
        sys.path.remove(str(tmp_path))
    api_path = export_saved_model(usermodel.predict, jax.ShapeDtypeStruct((1, 4), np.float32),
                                  jax.ShapeDtypeStruct((1, 5), np.int32), path=str(tmp_path / "api_sm"),
                                  polymorphic_shapes=["(b, _)", "(b, _)"])
    cli_asserts, api_asserts = _assert_ops(tmp_path / "sm"), _assert_ops(api_path)
    assert cli_asserts and cli_asserts == api_asserts
    import tensorflow as tf
    serve = tf.saved_model.load(str(tmp_path / "sm")).signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError):  # b = 2 for one input, 3 for the other
        serve(x=tf.zeros((2, 4)), tokens=tf.zeros((3, 5), tf.int32))


def _assert_ops(saved_model_dir) -> int:
    from tensorflow.core.protobuf import saved_model_pb2
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    graph = proto.meta_graphs[0].graph_def
    nodes = [*graph.node, *(n for fn in graph.library.function for n in fn.node_def)]
    return sum(n.op == "Assert" for n in nodes)


def test_check_exit_code_and_report(tmp_path):
    (tmp_path / "usermodel.py").write_text(USER_MODULE)
    clean = noxla("check", "usermodel:predict", "--input", "f32[2,4]", "--input", "i32[2,5]", "--target", "tfjs",
                  cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    rejected = noxla("check", "usermodel:narrow", "--input", "f32[2,4]", "--target", "tfjs", cwd=tmp_path)
    assert rejected.returncode == 1
    assert "int16" in rejected.stdout and "usermodel.py:11" in rejected.stdout, rejected.stdout


def test_bad_input_spec_is_a_usage_error(tmp_path):
    result = noxla("export", "--input", "float[1,2]", cwd=tmp_path)
    assert result.returncode == 2 and "DTYPE[DIMS]" in result.stderr


def test_serve_needs_a_tfjs_export(tmp_path):
    result = noxla("serve", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1 and "has no model.json" in result.stderr and "noxla export --tfjs" in result.stderr


def test_export_verifies_the_demo_page_in_chromium(tmp_path):
    result = noxla("export", "--tfjs", "m_js", "--verify-browser", "--no-verify", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert os.path.exists(tmp_path / "m_js" / "index.html")
    for backend in ("webgl", "wasm", "cpu"):
        row = re.search(rf"\[chromium_{backend}\]: ([0-9.e+-]+)", result.stdout)
        assert row and float(row.group(1)) < 1e-4, result.stdout


def test_limitations_prints_the_packaged_table(tmp_path):
    result = noxla("limitations", cwd=tmp_path)
    with open(TABLE_PATH) as f:
        assert result.returncode == 0 and result.stdout == f.read()
    assert "tensorflow" not in result.stderr


def test_console_script_is_installed():
    from importlib.metadata import entry_points
    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts.get("noxla") == "noxla.cli:main"
    assert os.path.exists(os.path.join(os.path.dirname(sys.executable), "noxla"))


def _cli_calls_in_a_fresh_process(tmp_path, module: str, source: str, *calls: str) -> tuple[str, str]:
    """``calls`` (``cli.main`` argument lists after ``MODULE:f --input ...``, as Python source) run in one
    fresh process beside ``module``.py holding ``source``: (its last line, printing the exit codes and
    whether TensorFlow was imported; all its output)."""
    (tmp_path / f"{module}.py").write_text(source)
    code = ("import sys; from noxla import cli\n"
            f"args = ['{module}:f', '--input', 'f32[2,3]']\n"
            f"codes = [{', '.join(f'cli.main([{c}])' for c in calls)}]\n"
            "print(codes, 'tensorflow' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env=env)
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "", result.stdout + result.stderr


def test_refused_export_and_check_never_import_tensorflow(tmp_path):
    """The CLI runs the export's preflight (noxla.pipeline.preflight) before its exporters: what the check
    refuses is reported without TF's 2 s import, and nothing is written."""
    last, out = _cli_calls_in_a_fresh_process(
        tmp_path, "printing", "import jax\n\n\ndef f(x):\n    jax.debug.print('{}', x)\n    return x\n",
        "'export', *args, '--tflite', 'm.tflite', '--tfjs', 'm_js'", "'check', *args")
    assert last == "[1, 1] False", out
    assert "debug_print" in out
    assert not os.path.exists(tmp_path / "m.tflite") and not os.path.exists(tmp_path / "m_js")


def test_export_verify_and_tfjs_check_of_what_the_graph_writes_never_import_tensorflow(tmp_path):
    """With TensorFlow installed, a .tflite and TF.js export that noxla's graph writes, its verification
    (only the files written are run) and TF.js's check (its op-list backstop reads the graph) leave
    TensorFlow unimported: its 2 s and 450 MB are for what needs it."""
    last, out = _cli_calls_in_a_fresh_process(
        tmp_path, "model", "import jax.numpy as jnp\n\n\ndef f(x):\n    return jnp.tanh(x) * 2.0\n",
        "'export', *args, '--tflite', 'm.tflite', '--tfjs', 'm_js'", "'check', *args, '--target', 'tfjs'",
        "'check', *args, '--target', 'tfjs-webgl'")
    assert last == "[0, 0, 0] False", out
    assert "[tfjs (wasm)]" in out and "[tflite]" in out
    assert os.path.exists(tmp_path / "m.tflite") and os.path.exists(tmp_path / "m_js" / "model.json")


def test_check_takes_the_webgl_sub_target_by_either_spelling():
    from noxla.cli.parser import build_parser
    for name in ("tfjs-webgl", "tfjs_webgl"):
        args = build_parser().parse_args(["check", "m:f", "--input", "i32[4]", "--target", name])
        assert args.target == "tfjs_webgl"


def test_progress_prints_a_note_that_has_no_start_of_its_own():
    """The graph tflite writer says why it hands a program to TensorFlow as a step with a time and no start:
    its text must show, not a bare ' done in 0.00s'."""
    import io

    from noxla.cli.report import Progress
    out = io.StringIO()
    progress = Progress(out)
    progress("trace", None)
    progress("trace", 0.5)
    progress("graph tflite writer: no rule for erf; lowering through TensorFlow", 0.0)
    assert out.getvalue() == ("[trace] ... done in 0.50s\n"
                              "[graph tflite writer: no rule for erf; lowering through TensorFlow]\n")
