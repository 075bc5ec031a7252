import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow imports Keras, which fixes its backend then: keras-hub models (tests/test_llm_keras.py)
# export from JAX's only, so it is chosen before anything imports TensorFlow.
os.environ.setdefault("KERAS_BACKEND", "jax")
# Chromium's WebGL runs every op in shaders, small test cases too (noxla/runtimes/tfjs_runner/browser.js): with
# TF.js's default CPU forwarding, ops on small CPU-resident tensors hid WebGL failures.
os.environ.setdefault("NOXLA_WEBGL_NO_CPU_FORWARD", "1")

import hashlib  # noqa: E402
import pathlib  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402


def _cpu_flags() -> bytes:
    try:
        with open("/proc/cpuinfo", "rb") as f:
            return next(line for line in f if line.startswith(b"flags"))
    except (OSError, StopIteration):
        return b""


# JAX's compile of the expected values dominates the slowest rule cases (igamma's is ~4 s), so the
# second run of the loop reads them from JAX's persistent cache. XLA compiles for the host's
# instruction set, so the directory is per CPU feature set: a cache made on an AVX-512 machine is
# never loaded on one without it.
_JAX_CACHE = pathlib.Path(os.environ.get("NOXLA_TEST_JAX_CACHE", pathlib.Path.home() / ".cache/noxla-tests/jax"))
jax.config.update("jax_compilation_cache_dir",
                  str(_JAX_CACHE / hashlib.sha256(_cpu_flags()).hexdigest()[:16]))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

from noxla.runtimes import BrowserRunner, TfjsRunner  # noqa: E402
from tests.differential import Runtimes  # noqa: E402


@pytest.fixture(scope="session")
def tfjs_runner():
    # No skip when Node or the npm packages are missing: the README's test command installs
    # them, and a TF.js result that silently disappears would prove nothing.
    runner = TfjsRunner()
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def browser_runner():
    """One headless Chromium per test process, started by the first test that runs a model in it.

    No skip when Chromium is missing, for the same reason: the README's test command installs it."""
    runner = []
    yield lambda: runner[0] if runner else runner.append(BrowserRunner()) or runner[0]
    for r in runner:
        r.close()


@pytest.fixture(scope="session")
def runtimes(tfjs_runner, browser_runner, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's base is inside the session's own directory, which they share.
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared_tfjs_exports"
    shared.mkdir(exist_ok=True)
    return Runtimes(str(tmp_path_factory.mktemp("exports")), tfjs_runner, browser_runner, str(shared))
