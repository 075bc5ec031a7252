"""The benchmark's interleaved latency measurement and first exports taking turns, its real-size
models, the light import of the TF.js converter and of TensorFlow (without Keras), the zero-pad
lowerings the real-size CNNs need and the attention scale the real-size transformers need."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_interleaved_ratio_is_the_median_of_per_round_ratios():
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from benchmark import interleaved
    # A machine whose speed changes every round: path "a" always costs twice "b" in the same round.
    rounds, calls = iter(range(10**6)), []

    def timer(cost):
        def time_batch(k):
            calls.append(k)
            slowdown = 1 + (next(rounds) // 2 % 7)  # both paths of a round see the same slowdown
            return cost * slowdown
        return time_batch
    ms, ratios = interleaved({"a": timer(2.0), "b": timer(1.0)}, rounds=9, batch_ms=10.0, warmup_ms=0)
    assert ratios[("a", "b")] == pytest.approx(2.0) and ratios[("b", "a")] == pytest.approx(0.5)
    assert calls[2:] == [10] * 18  # one run each to estimate, then batches lasting 10 ms of "b"
    assert ms["a"] > ms["b"]


def test_first_exports_take_turns_and_report_medians():
    """Each path's fresh processes alternate with the others' (the order reversed every other
    round), so that a slow spell of the machine falls on every path; times and peaks are medians."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from bench_exports import first_exports
    order, seconds = [], iter([5.0, 1.0, 9.0, 2.0, 7.0, 3.0])

    def export(path):
        def run():
            order.append(path)
            first = next(seconds)
            return {"tflite_first_s": first, "tflite_exporter_s": first / 2, "tflite_peak_mb": first * 100}
        return run
    results = first_exports({"noxla": export("noxla"), "litert": export("litert")}, runs=3)
    assert order == ["noxla", "litert", "litert", "noxla", "noxla", "litert"]
    assert results["noxla"]["tflite_first_s"] == 5.0 and results["litert"]["tflite_first_s"] == 3.0
    assert results["litert"]["tflite_peak_mb"] == 300.0


def test_interleaved_both_ways_cancels_a_penalty_on_the_timer_made_first():
    """As LiteRT's interpreters of a large model measured under load: the first made runs 1.2x
    slower. Made in both orders, two copies of one path measure 1.00 against each other."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from benchmark import interleaved_both_ways
    made = []

    def maker(cost):
        def make():
            made.append(cost)
            slowdown = 1.2 if len(made) % 3 == 1 else 1.0  # the first of each three made
            return lambda k: cost * slowdown
        return make
    ms, ratios = interleaved_both_ways({"noxla": maker(1.0), "copy": maker(1.0), "anchor": maker(1.0)}, rounds=8,
                                       batch_ms=10.0, warmup_ms=0)
    assert len(made) == 6  # three timers made twice, the second time in the reverse order
    # First made: noxla in one half, anchor in the other (copy is made second both times).
    assert ratios[("noxla", "anchor")] == pytest.approx(1.0)
    assert ms["noxla"] == pytest.approx(1.1) and ms["copy"] == pytest.approx(1.0)


@pytest.mark.slow
def test_tensorflow_imported_through_noxla_leaves_keras_to_first_use():
    pytest.importorskip("keras", reason="TF loads Keras eagerly only when Keras is installed")
    code = (
        "import sys\n"
        "import noxla.pipeline.tf_path\n"  # the exporters import TF (noxla.api alone no longer does)
        "assert 'tensorflow' in sys.modules\n"
        "assert not [k for k in sys.modules if k.split('.')[0] in ('keras', 'pandas', 'IPython')], 'loaded'\n"
        "assert not [f for f in sys.meta_path if type(f).__module__ == 'noxla.lean_tensorflow'], 'left installed'\n"
        "import keras\n"
        "import tensorflow as tf\n"
        "assert tf.keras.layers.Dense is keras.layers.Dense\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]




@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_keras_zero_pad_folds_into_the_strided_depthwise_convolution(strict, tmp_path):
    """Keras's ZeroPadding2D + VALID strided depthwise conv (MobileNetV3/EfficientNet) exports as one
    DEPTHWISE_CONV_2D with SAME padding, no PAD, in both modes; and still matches JAX."""
    import numpy as np

    import noxla
    from lowering_rules.convolution import keras_zero_padded_conv
    from noxla.runtimes import run_tflite, tflite_op_names
    rng = np.random.default_rng(0)
    x, k = rng.standard_normal((1, 8, 8, 3), np.float32), rng.standard_normal((3, 3, 1, 3), np.float32)
    fun = lambda x: keras_zero_padded_conv((2, 2), groups=3)(x, k)
    path = noxla.export_tflite(fun, x, path=str(tmp_path / "m.tflite"), strict=strict)
    assert tflite_op_names(path) == ["DEPTHWISE_CONV_2D"]
    (got,) = run_tflite(path, {"x": x}).values()
    np.testing.assert_allclose(got, np.asarray(fun(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_zero_pad_is_a_pad_that_xnnpack_takes_in_one_partition(strict, tmp_path):
    """Keras ResNet50's ZeroPadding2D before its max pool: a +0 fill exports as PAD, which XNNPACK
    delegates, so ReLU, pad and pool run in one XNNPACK partition (a PADV2 ran outside XNNPACK and
    split the graph in two); a -0.0 or other fill stays PADV2 (PAD fills with +0.0)."""
    import jax.numpy as jnp
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    from jax import lax

    import noxla
    from noxla.runtimes import run_tflite, tflite_op_names
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 4), np.float32)

    def keras_pool(fill):
        def fun(x):
            padded = lax.pad(jnp.maximum(x, 0.0), np.float32(fill), [(0, 0, 0), (1, 1, 0), (1, 1, 0), (0, 0, 0)])
            return lax.reduce_window(padded, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "VALID")
        return fun
    path = noxla.export_tflite(keras_pool(0.0), x, path=str(tmp_path / "zero.tflite"), strict=strict)
    ops = tflite_op_names(path)
    assert "PAD" in ops and "PADV2" not in ops, ops
    (got,) = run_tflite(path, {"x": x}).values()
    np.testing.assert_array_equal(got, np.asarray(keras_pool(0.0)(x)))
    interpreter = Interpreter(model_path=path, num_threads=1)  # XNNPACK is LiteRT's default
    interpreter.allocate_tensors()
    if not strict:  # strict's exact max (NaN kept) has ops of its own; the partitions are the fast lowering's
        assert [op["op_name"] for op in interpreter._get_ops_details()].count("DELEGATE") == 1
    for fill in (-0.0, 1.5):
        path = noxla.export_tflite(keras_pool(fill), x, path=str(tmp_path / "other.tflite"), strict=strict,
                                   overwrite=True)
        assert "PADV2" in tflite_op_names(path)
        (got,) = run_tflite(path, {"x": x}).values()
        np.testing.assert_array_equal(got, np.asarray(keras_pool(fill)(x)))


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_attention_scale_divides_the_queries_not_the_scores(strict, tmp_path):
    """scores / sqrt(64)-style division by a power of two: the default export multiplies the
    smaller operand (the queries, 40 x 2 x 16) by 1/4, not the 2 x 40 x 40 scores (Whisper-tiny's
    encoder at 1500 tokens: 0.92x the latency); strict keeps JAX's order. Same values either way."""
    import jax.numpy as jnp
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    import noxla
    from noxla.runtimes import run_tflite
    q, k = np.random.default_rng(0).standard_normal((2, 40, 2, 16), np.float32)
    fun = lambda q, k: jnp.einsum("thd,shd->hts", q, k) / np.float32(4.0)
    path = noxla.export_tflite(fun, q, k, path=str(tmp_path / "m.tflite"), strict=strict)
    interpreter = Interpreter(model_path=path)
    shapes = {t["index"]: tuple(t["shape"]) for t in interpreter.get_tensor_details()}
    scaled = [shapes[op["outputs"][0]] for op in interpreter._get_ops_details() if op["op_name"] == "MUL"]
    assert scaled == [(2, 40, 40) if strict else (40, 2, 16)]
    (got,) = run_tflite(path, {"q": q, "k": k}).values()
    np.testing.assert_allclose(got, np.asarray(fun(q, k)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_layer_norm_divides_by_its_sqrt_and_squares_by_a_product(strict, tmp_path):
    """A LayerNorm as BERT writes it, (x - m) * (scale / sqrt(var + eps)) + bias: the TFLite
    converter would turn scale / sqrt into scale * rsqrt (rounded twice) and Square(x - m) into a
    SQUARED_DIFFERENCE beside a second x - m. The export has litert-converter's ops: one SUB, a MUL
    for the square, SQRT and DIV."""
    import jax.numpy as jnp
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    import noxla
    from noxla.runtimes import run_tflite
    rng = np.random.default_rng(0)
    scale, bias = (rng.standard_normal(64).astype(np.float32) for _ in range(2))

    def layer_norm(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * (scale / jnp.sqrt(var + 1e-6)) + bias
    path = noxla.export_tflite(layer_norm, np.ones((16, 64), np.float32), path=str(tmp_path / "ln.tflite"),
                               strict=strict)
    ops = sorted(op["op_name"] for op in Interpreter(model_path=path)._get_ops_details())
    # No RESHAPE: the keep_dims mean's [16, 1] goes through _sqrt_kept's reshape and back, which
    # the converter drops once past the rewrite it blocks.
    # strict writes each mean as JAX computes it, a SUM and its division by 64 (a MUL by 1/64, a
    # power of two: exact), not LiteRT's MEAN (fused means are left out of strict files).
    mean = ["SUM", "MUL"] if strict else ["MEAN"]
    assert ops == sorted([*mean, "SUB", "MUL", *mean, "ADD", "SQRT", "DIV", "MUL", "ADD"]), ops
    # x / sqrt(y) is the runtime's square root (XNNPACK's is within an ulp, not IEEE's) divided
    # exactly; at y = 0 JAX's +-inf (TFLite's RSQRT gives NaN there).
    y = np.abs(rng.standard_normal(1000)).astype(np.float32) * 1e3
    y[:3] = 0.0
    x = rng.standard_normal(1000).astype(np.float32)
    x[:3] = [1.0, -2.0, 0.0]
    fun = lambda x, y: x / jnp.sqrt(y)
    (got,) = run_tflite(noxla.export_tflite(fun, x, y, path=str(tmp_path / "q.tflite"), strict=strict),
                        {"x": x, "y": y}).values()
    (root,) = run_tflite(noxla.export_tflite(jnp.sqrt, y, path=str(tmp_path / "r.tflite"), strict=strict),
                         {"x": y}).values()
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(got, x / root)
    np.testing.assert_array_equal(got[:3], [np.inf, -np.inf, np.nan])


@pytest.mark.slow
def test_real_models_rebuild_the_same_function_from_their_spec_and_weights():
    """What an anchor venv rebuilds (tools/real_models.rebuild) computes what the benchmark measured."""
    import jax
    import numpy as np
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import real_models
    for name, model in real_models.build(list(real_models.BUILDERS), tiny=True).items():
        again = real_models.rebuild(json_round_trip(model.spec), dict(model.weights))
        for a, b in zip(jax.tree_util.tree_leaves(model.fun(*model.example)),
                        jax.tree_util.tree_leaves(again(*model.example))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def json_round_trip(spec: dict) -> dict:
    import json
    return json.loads(json.dumps(spec))


def test_tflite_export_frees_the_lowered_graph_before_the_converter_runs(tmp_path, monkeypatch):
    """The TF graph and its weights are 2-3x the weights' size; the converter's copies come on top."""
    import gc
    import weakref

    import jax.numpy as jnp
    import numpy as np
    from tensorflow.lite.python import convert as tflite_convert

    from noxla.pipeline import tf_path as export_module
    from noxla.runtimes import run_tflite
    lowered, alive_at_conversion = [], []
    serving_function, convert_graphdef = export_module.serving_function, tflite_convert.convert_graphdef

    def recording_serving_function(*args, **kwargs):
        concrete = serving_function(*args, **kwargs)
        lowered.append(weakref.ref(concrete))
        return concrete

    def checking_convert_graphdef(*args, **kwargs):
        gc.collect()
        alive_at_conversion.append([ref() is not None for ref in lowered])
        return convert_graphdef(*args, **kwargs)
    monkeypatch.setattr(export_module, "serving_function", recording_serving_function)
    monkeypatch.setattr(tflite_convert, "convert_graphdef", checking_convert_graphdef)
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    x = np.ones((2, 8), np.float32)
    # The TF path's pipeline (export_tflite writes this program without TF: noxla.writers.tflite).
    path = export_module.export(lambda x: jnp.tanh(x @ w), (x,), tflite=str(tmp_path / "m.tflite")).written["tflite"]
    assert alive_at_conversion == [[False]]
    (out,) = run_tflite(path, {"x": x}).values()
    np.testing.assert_allclose(out, np.tanh(x @ w), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_loop_cost_exports_the_scan_unrolled_and_as_a_while_loop_both_equal_to_jax(tmp_path):
    """tools/loop_cost.py compares two forms of one scan: they must be the forms it names (no loop
    body when unrolled, a WHILE with its body otherwise) and both compute what JAX computes."""
    import numpy as np
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import loop_cost
    from benchmark import tflite_op_counts
    fun, tokens = loop_cost.lstm_classifier(5, 8)
    paths = loop_cost.export_both(fun, tokens, str(tmp_path), "lstm")
    (main_unrolled, bodies_unrolled), (main_loop, bodies_loop) = (tflite_op_counts(paths[form])
                                                                  for form in ("unrolled", "WHILE"))
    assert bodies_unrolled == 0 and bodies_loop > 0 and main_unrolled > main_loop
    for form in ("unrolled", "WHILE"):
        _, out = loop_cost.litert_timer(paths[form], tokens)
        np.testing.assert_allclose(out, np.asarray(fun(tokens)), atol=1e-5)
