#!/usr/bin/env bash
# The suite's second leg: the newest supported stack (Python 3.13, the newest JAX, TF, flax and
# keras-hub that pip resolves), beside the first leg's full suite on the oldest (Python 3.11, JAX 0.10.2).
# It runs the fast loop, the zoo in every runtime, the multi-signature and LLM exports, a sample of
# JAX's own primitive harnesses and the wheel installed outside the checkout (about 10 minutes on 2 cores).
#
# The Python 3.13 is $NOXLA_PYTHON313, else python3.13 on PATH, else the one ../shared/tools/python313.sh
# makes on this project's machines (Debian 12 has none; that script's venv takes the packages). Otherwise
# packages go into a venv at $NOXLA_VENV313 (default ~/.cache/noxla-py313), made on first use and
# updated on each run.
set -euo pipefail
cd "$(dirname "$0")/.."
py=
if [ -n "${NOXLA_PYTHON313:-}" ]; then base=$NOXLA_PYTHON313
elif python3.13 -c "" 2>/dev/null; then base=python3.13  # a pyenv shim may name one it cannot run
elif [ -f ../shared/tools/python313.sh ]; then py=$(bash ../shared/tools/python313.sh | tail -n 1)  # a venv already
else echo "no Python 3.13 found: set NOXLA_PYTHON313 to one" >&2; exit 1; fi
if [ -z "$py" ]; then
  venv=${NOXLA_VENV313:-$HOME/.cache/noxla-py313}
  [ -x "$venv/bin/python" ] || "$base" -m venv "$venv"
  py=$venv/bin/python
fi
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q -e ".[test]"
"$py" - <<'PY'
import sys, jax, numpy, tensorflow as tf
assert sys.version_info[:2] == (3, 13), sys.version
print(f"Python {sys.version.split()[0]}, JAX {jax.__version__}, TF {tf.__version__}, numpy {numpy.__version__}")
PY
"$py" -m pytest -n 2 -m "not slow" -p no:cacheprovider
"$py" -m pytest -n 2 -p no:cacheprovider tests/test_zoo.py tests/test_multi_signature.py tests/test_llm.py \
  tests/test_llm_keras.py tests/test_llm_quantize.py tests/test_packaging.py tests/test_batched_modules.py \
  tests/test_tfjs_writer_tf.py tests/test_tflite_bfloat16.py \
  "tests/test_jax_harnesses.py::test_harness_sample_in_tflite_and_tfjs"
