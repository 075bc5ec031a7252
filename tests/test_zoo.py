"""Every zoo model exports to every format and matches JAX in every runtime."""
import pytest
import tensorflow as tf

import noxla
from limitations.engine import check_jaxpr
from limitations.targets import RUNTIMES
from noxla.front.tracing import trace
from noxla.runtimes.verify import jax_outputs
from tests import zoo
from tests.differential import assert_matches

MODELS = zoo.build()
pytestmark = pytest.mark.slow

# float32 models: max abs error <= 1e-5 relative to the output's scale, in every runtime.
TOLERANCE = dict(atol=1e-5, rtol=0.0)


@pytest.fixture(scope="module")
def programs():
    return {}


def _program(programs, model, batch):
    key = (model.name, batch)
    if key not in programs:
        args = model.inputs(batch)
        programs[key] = (trace(model.fun, args), args, jax_outputs(model.fun, args))
    return programs[key]


# Known failures, each with its reason; strict, so a fix shows up as an unexpected pass.
# (The zoo Llama on TF.js's WebGPU backend was one until its repeated KV heads stopped being a
# broadcast, lowering_rules/patterns/grouped_query.py: that backend read the broadcast synchronously, which
# Chromium's WebGPU refuses.)
KNOWN_FAILURES: dict = {}


def _zoo_params():
    return [pytest.param(name, runtime, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[name, runtime], strict=True)
                         if (name, runtime) in KNOWN_FAILURES else ())
            for name in sorted(MODELS) for runtime in RUNTIMES]


@pytest.mark.parametrize("name,runtime", _zoo_params())
def test_zoo_model_matches_jax(name, runtime, runtimes, programs):
    runtimes.require(runtime)
    model = MODELS[name]
    program, args, expected = _program(programs, model, batch=2)
    # The check accepts every zoo model for the runtime's target (TF.js on WebGL for chromium_webgl: the
    # demo page would otherwise refuse to run it there).
    report = check_jaxpr(program.closed_jaxpr, RUNTIMES[runtime])
    assert report.ok, report.format()
    actual = runtimes.run(runtime, model.fun, program, args)
    assert_matches(expected, actual, program.out_names, where=f"{name} [{runtime}]", **TOLERANCE)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_saved_model_round_trip(name, tmp_path):
    model = MODELS[name]
    args = model.inputs(2)
    path = noxla.export_saved_model(model.fun, *args, path=str(tmp_path / "sm"))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    program = trace(model.fun, args)
    outs = serve(**{n: tf.constant(a) for n, a in zip(program.in_names, args)})
    assert_matches(jax_outputs(model.fun, args), [outs[n].numpy() for n in program.out_names],
                   program.out_names, where=f"{name} [SavedModel]", **TOLERANCE)


# The fused builtins a model's default export must use, and its most ops (batch 1), as measured
# when the fused lowerings landed (tools/op_census.py): a regression guard for issue 8's goal of
# no more ops than the official JAX -> TFLite path.
FUSED_OPS = {
    "cnn": ({"AVERAGE_POOL_2D", "MAX_POOL_2D", "FULLY_CONNECTED", "LOG_SOFTMAX"}, 7),
    "mlp": ({"FULLY_CONNECTED"}, 2),
    "mobilenet_block": ({"DEPTHWISE_CONV_2D", "CONV_2D"}, 2),
    "resnet_block": ({"CONV_2D"}, 3),
    # 64 since its embedding lookup is one GATHER again (the flattened one is for WebGPU only).
    "transformer_encoder": ({"SOFTMAX", "BATCH_MATMUL", "FULLY_CONNECTED", "GELU", "MEAN"}, 64),
    "mobilenet_v2": ({"DEPTHWISE_CONV_2D", "CONV_2D", "FULLY_CONNECTED"}, 17),
    "unet": ({"MAX_POOL_2D", "CONV_2D", "TRANSPOSE_CONV"}, 12),
    "vae_decoder": ({"CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"}, 6),
    # 15 ops of model, and LOG's guard against XNNPACK's AVX2 LOG kernel (which clamps x above
    # ~2^127.5): x > 2^64 is scaled by 2^-64 first (GREATER, MUL, SELECT) and its log offset added
    # back (SELECT, ADD), so finite inputs get JAX's log on every CPU (lowering_rules/elementwise.py).
    "log_mel_audio_classifier": ({"MAX_POOL_2D", "CONV_2D", "GATHER"}, 20),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_tflite_uses_builtins_only(name, tmp_path):
    from noxla.runtimes import tflite_op_names
    model = MODELS[name]
    path = noxla.export_tflite(model.fun, *model.inputs(1), path=str(tmp_path / "m.tflite"))
    ops = tflite_op_names(path)
    assert ops and not [op for op in ops if op.startswith("Flex") or op == "CUSTOM"], ops
    fused, most = FUSED_OPS.get(name, (set(), len(ops)))
    assert fused <= set(ops) and len(ops) <= most, f"{name}: {len(ops)} ops (at most {most}), {sorted(set(ops))}"


@pytest.fixture(scope="module")
def polymorphic_exports(tmp_path_factory):
    """One batch-polymorphic export per model and format, shared by the batch sizes."""
    root = tmp_path_factory.mktemp("zoo_poly")
    cache = {}

    def get(name):
        if name not in cache:
            model = MODELS[name]
            example = model.inputs(1)
            poly = model.polymorphic_shapes
            cache[name] = {
                "tflite": noxla.export_tflite(model.fun, *example, path=str(root / f"{name}.tflite"),
                                              polymorphic_shapes=poly),
                "tfjs": noxla.export_tfjs(model.fun, *example, path=str(root / f"{name}_js"), polymorphic_shapes=poly),
                "saved_model": noxla.export_saved_model(model.fun, *example, path=str(root / f"{name}_sm"),
                                                        polymorphic_shapes=poly),
            }
        return cache[name]
    return get


@pytest.mark.parametrize("batch", [1, 3, 17])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_batch_polymorphic_in_every_format(name, batch, polymorphic_exports, tfjs_runner):
    from noxla.runtimes import run_tflite
    model = MODELS[name]
    paths = polymorphic_exports(name)
    args = model.inputs(batch, seed=batch)
    expected = jax_outputs(model.fun, args)
    program = trace(model.fun, args)
    named = dict(zip(program.in_names, args))
    serve = tf.saved_model.load(paths["saved_model"]).signatures["serving_default"]
    results = {
        "SavedModel": {k: v.numpy() for k, v in serve(**{k: tf.constant(v) for k, v in named.items()}).items()},
        "tflite": run_tflite(paths["tflite"], named),
        "tfjs_cpu": tfjs_runner.run(paths["tfjs"], named, "cpu"),
        "tfjs_wasm": tfjs_runner.run(paths["tfjs"], named, "wasm"),
    }
    for runtime, outs in results.items():
        assert_matches(expected, [outs[n] for n in program.out_names], program.out_names,
                       where=f"{name} batch={batch} [{runtime}]", **TOLERANCE)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_tflite_signature_has_dynamic_batch(name, polymorphic_exports):
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=polymorphic_exports(name)["tflite"])
    for detail in interpreter.get_input_details():
        assert detail["shape_signature"][0] == -1, detail


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_tfjs_signature_has_dynamic_batch(name, polymorphic_exports):
    import json
    import os
    with open(os.path.join(polymorphic_exports(name)["tfjs"], "model.json")) as f:
        inputs = json.load(f)["signature"]["inputs"]
    assert inputs and all(info["tensorShape"]["dim"][0]["size"] == "-1" for info in inputs.values()), inputs
