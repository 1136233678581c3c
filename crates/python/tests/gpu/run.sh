#!/usr/bin/env bash
# The Python package's tests on a machine with an NVIDIA GPU and the machine's own Python
# (PyTorch, NumPy, SciPy): unpacks the wheels in WHEEL_DIR (the package's, and pytest's with
# its dependencies; no pip or network needed) into a scratch directory put first on
# PYTHONPATH, then runs tests/ (the CPU tests) and tests/gpu/.
#   run.sh WHEEL_DIR [PYTEST ARGS...]
set -euo pipefail
wheels=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
for wheel in "$wheels"/*.whl; do
  python3 -m zipfile -e "$wheel" "$site"
done
cd "$here/.."
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -p no:cacheprovider -v . gpu "$@"
