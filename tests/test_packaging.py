"""A released noxla is a wheel: installed outside the checkout, it must still export every format.

The rest of the suite imports noxla from the checkout, where every file is at hand, so it cannot
see a file that the wheel leaves out (the TF.js demo page once was: every TF.js export from a
regular install failed). This test builds the wheel from a copy of the working tree, installs it
into a fresh venv outside the checkout (seeing this environment's packages, so TF and JAX are not
installed again; nothing is downloaded) and runs the `noxla` command of that venv from a
directory outside the checkout.
"""
from __future__ import annotations

import glob
import os
import re
import site
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("noxla", "limitations", "lowering_rules")
# Files of the packages that no code reads, so the wheel need not carry them.
NOT_READ_AT_RUN_TIME = {"lowering_rules/README.md": "the guide for writing rules"}
RUNTIMES = ("tf (SavedModel)", "tflite", "tfjs (cpu)", "tfjs (wasm)")


def _run(command, **kwargs):
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, **kwargs)
    assert proc.returncode == 0, f"{command} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _working_tree_files() -> list[str]:
    """The checkout's files as a fresh clone with these edits would have them (tracked and new,
    not ignored), paths relative to the root."""
    out = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT)
    return [p for p in out.split("\0") if p and os.path.isfile(os.path.join(ROOT, p))]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    # A copy, so the build's build/ and *.egg-info stay out of the checkout.
    source = tmp_path_factory.mktemp("source")
    for rel in _working_tree_files():
        os.makedirs(source / os.path.dirname(rel), exist_ok=True)
        with open(os.path.join(ROOT, rel), "rb") as f, open(source / rel, "wb") as g:
            g.write(f.read())
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(dist), str(source)], cwd=str(dist))
    (built,) = glob.glob(str(dist / "noxla-*.whl"))
    return built


@pytest.mark.slow
def test_the_wheel_carries_every_file_of_the_packages(wheel):
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    package_files = {p for p in _working_tree_files() if p.split("/")[0] in PACKAGES and "__pycache__" not in p}
    assert any(not p.endswith(".py") for p in package_files)  # the data files are what this test is about
    missing = sorted(package_files - shipped - set(NOT_READ_AT_RUN_TIME))
    assert not missing, f"the wheel leaves out {missing}: add them to pyproject.toml's package-data"


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_exports_every_format(wheel, tmp_path):
    from noxla.runtimes import node_modules_dir
    modules = node_modules_dir()
    if modules is None:
        pytest.skip("TF.js's verify needs the npm packages (npm ci in the checkout)")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    # This environment's packages (and pip), after the venv's own: a path file naming its
    # site-packages. Not --system-site-packages, which names the base interpreter's, not those of
    # the venv this test may run in. A .pth line that is a path adds it without reading the .pth
    # files there, so an editable install of the checkout is not seen.
    site_packages = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    with open(os.path.join(site_packages, "outer_environment.pth"), "w") as f:
        f.write("\n".join(p for p in site.getsitepackages() if os.path.isdir(p)) + "\n")
    # --no-index: nothing is downloaded.
    _run([python, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--no-index", "-q", wheel])
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NOXLA_NODE_MODULES"] = modules
    where = _run([python, "-c", "import noxla; print(noxla.__file__)"], cwd=str(work), env=env).strip()
    assert where.startswith(str(venv) + os.sep), f"noxla was imported from {where}, not from the wheel"

    out = _run([str(venv / "bin" / "noxla"), "export", "--tflite", "m.tflite", "--tfjs", "m_tfjs",
                "--saved-model", "m_sm"], cwd=str(work), env=env)
    for written in ("m.tflite", "m_tfjs/model.json", "m_tfjs/index.html", "m_sm/saved_model.pb"):
        assert (work / written).is_file(), f"{written} missing after the export:\n{out}"
    errors = dict(re.findall(r"max error vs JAX on random inputs \[(.+?)\]: (\S+)", out))
    assert set(errors) == set(RUNTIMES), out
    for runtime, error in errors.items():
        assert float(error) < 1e-4, f"{runtime}: {error}\n{out}"
