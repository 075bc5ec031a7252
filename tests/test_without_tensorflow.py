"""noxla with TensorFlow absent (issue 41: TensorFlow becomes the ``noxla[tf]`` extra): in a fresh
process where ``import tensorflow`` fails, as in a venv without it, every zoo model exports to
.tflite and TF.js through noxla's own writers and computes JAX's result in LiteRT and TF.js; what
needs TensorFlow (``convert``, a SavedModel, an export the writers do not cover) is refused with
``TensorFlowMissing``, an ImportError naming the extra, and nothing is written."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run first in the child: ``import tensorflow`` (and of any submodule) raises ModuleNotFoundError,
# and importlib.util.find_spec("tensorflow") is None, as where it is not installed.
_BLOCK = "import sys; sys.modules['tensorflow'] = None\n"


def _run(tmp_path, body: str) -> str:
    script = _BLOCK + textwrap.dedent(f"""
        sys.path.insert(0, {ROOT!r})
        import numpy as np, jax
        import noxla
        from noxla import api
        from noxla.errors import TensorFlowMissing
    """) + textwrap.dedent(body) + "\nassert sys.modules['tensorflow'] is None\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=ROOT, NOXLA_TFLITE_GRAPH="1"), timeout=900)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.stdout[-2000:], proc.stderr[-4000:])
    return proc.stdout


@pytest.mark.slow
def test_every_zoo_model_exports_and_matches_jax_without_tensorflow(tmp_path):
    out = _run(tmp_path, f"""
        from noxla.runtimes import TfjsRunner, run_tflite
        from noxla.front.tracing import trace
        from tests import zoo
        runner = TfjsRunner()
        for name, model in zoo.build().items():
            args = model.inputs(1)
            program = trace(model.fun, tuple(args))
            named = dict(zip(program.in_names, args))
            expected = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(model.fun)(*args))]
            steps = []
            tflite = noxla.export_tflite(model.fun, *args, path={str(tmp_path)!r} + f"/{{name}}.tflite",
                                         on_step=lambda step, s: steps.append(step))
            tfjs = noxla.export_tfjs(model.fun, *args, path={str(tmp_path)!r} + f"/{{name}}_tfjs")
            ran = [("litert", run_tflite(tflite, named)), ("tfjs wasm", runner.run(tfjs, named, "wasm"))]
            for runtime, outs in ran:
                for n, e in zip(program.out_names, expected):
                    np.testing.assert_allclose(outs[n], e, rtol=1e-4, atol=1e-5, err_msg=f"{{name}} {{runtime}} {{n}}")
            print(name, steps[0])
        runner.close()
    """)
    assert out.count("\n") >= 13, out


def test_what_needs_tensorflow_says_so_and_writes_nothing(tmp_path):
    _run(tmp_path, f"""
        import os
        f = lambda x: jax.numpy.sin(x) * 2
        x = np.ones((2, 3), np.float32)
        assert noxla.check(f, x).ok
        # TF.js's check reads noxla's graph's ops, with no TensorFlow to lower through
        assert noxla.check(f, x, target="tfjs").ok and noxla.check(f, x, target="tfjs-webgl").ok
        report = noxla.check(lambda v: abs(v), np.ones(3, np.int16), target="tfjs")
        assert not report.ok and "int16" in report.format(), report.format()
        for call in (lambda: noxla.convert(f),
                     lambda: noxla.export_saved_model(f, x, path={str(tmp_path / "sm")!r})):
            try:
                call()
            except TensorFlowMissing as e:
                assert isinstance(e, ImportError) and 'noxla[tf]' in str(e), e
            else:
                raise AssertionError("no TensorFlowMissing")
        assert not os.path.exists({str(tmp_path / "sm")!r})
        # bfloat16 inside a program (a rounding): both formats from noxla's graph, equal to JAX
        # bit for bit (NaN, overflow to infinity, ties to even).
        from noxla.front.tracing import trace
        from noxla.runtimes import TfjsRunner, run_tflite
        rounded = lambda x: x.astype(jax.numpy.bfloat16).astype(np.float32) * 2
        v = np.float32([[1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5], [3.3895314e38, 1e-3, np.nan]])
        program = trace(rounded, (v,))
        api.export(rounded, (v,), tflite={str(tmp_path / "bf16.tflite")!r}, tfjs={str(tmp_path / "bf16_tfjs")!r})
        expected = np.asarray(jax.jit(rounded)(v))
        runner = TfjsRunner()
        feed = {{program.in_names[0]: v}}
        for outs in (run_tflite({str(tmp_path / "bf16.tflite")!r}, feed),
                     runner.run({str(tmp_path / "bf16_tfjs")!r}, feed, "wasm")):
            np.testing.assert_array_equal(outs[program.out_names[0]].view(np.uint32)[~np.isnan(v)],
                                          expected.view(np.uint32)[~np.isnan(v)])
            assert np.isnan(outs[program.out_names[0]][np.isnan(v)]).all()
        runner.close()
        # strict (IEEE-exact lowerings): both formats from the graph
        written = api.export(f, (x,), tflite={str(tmp_path / "st.tflite")!r}, tfjs={str(tmp_path / "st_tfjs")!r},
                             strict=True).written
        assert set(written) == {{"tflite", "tfjs"}}, written
        # Several signatures through the graph, without TensorFlow
        g = lambda x: x @ np.ones((3, 2), np.float32)
        path = noxla.export_tflite({{"a": (g, (x,)), "b": (g, (x[:1],))}}, path={str(tmp_path / "s.tflite")!r})
        assert os.path.exists(path)
    """)
