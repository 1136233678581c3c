#!/usr/bin/env bash
# The Python package's GPU tests, on a machine with an NVIDIA GPU, PyTorch and
# NumPy/SciPy: installs the wheel (and pytest, from wheels beside it if the
# machine has no network) into a virtual environment that sees the system's
# torch, then runs tests/ (the CPU tests) and tests/gpu/.
#   run.sh WHEEL_DIR [PYTEST ARGS...]
set -euo pipefail
wheels=$(cd "$1" && pwd); shift
here=$(cd "$(dirname "$0")" && pwd)
venv=${TMPDIR:-/tmp}/specdec-gpu-venv
python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --no-index --find-links "$wheels" specdec pytest
cd "$here/.."
"$venv/bin/python" -m pytest -p no:cacheprovider -v . gpu "$@"
