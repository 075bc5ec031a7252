import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from noxla.runtimes import TfjsRunner  # noqa: E402
from tests.differential import Runtimes  # noqa: E402


@pytest.fixture(scope="session")
def tfjs_runner():
    # No skip when Node or the npm packages are missing: the README's test command installs
    # them, and a TF.js result that silently disappears would prove nothing.
    runner = TfjsRunner()
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def runtimes(tfjs_runner, tmp_path_factory):
    return Runtimes(str(tmp_path_factory.mktemp("exports")), tfjs_runner)
