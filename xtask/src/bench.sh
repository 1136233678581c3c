#!/usr/bin/env bash
# Runs the specdec GPU benchmark (gpu-bench), then the PyTorch baseline
# (torch_baseline.py), on a GPU machine. Written by `cargo xtask bench-gpu --bundle DIR`;
# needs no Rust toolchain.
#
#   ./bench.sh [--no-torch | --torch-only] [-- TORCH_BASELINE ARGS...]
#
# Writes bench.json, bench.md, torch.json, bench.log and torch.log to
# ${OUT:-<this directory>}. Then, where the workspace is:
#   cargo xtask bench-report <the directory holding bench.json and torch.json>
# The baseline runs with ${PYTHON:-python3}; if that has no torch with CUDA, it is
# skipped with a warning. Exits non-zero if either step failed.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/cuda-libs.sh"
out="${OUT:-$here}"
python="${PYTHON:-python3}"

specdec=1
torch=1
torch_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-torch) torch=0 ;;
    --torch-only) specdec=0 ;;
    --) shift; torch_args=("$@"); break ;;
    *) echo "bench.sh: unknown argument $1 (usage: bench.sh [--no-torch | --torch-only] [-- TORCH ARGS...])" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"

failed=0
specdec_result="not run"
torch_result="not run"
if [ "$specdec" = 1 ]; then
  echo "\$ OUT=$out $here/gpu-bench"
  OUT="$out" "$here/gpu-bench" 2>&1 | tee "$out/bench.log"
  status=${PIPESTATUS[0]}
  if [ "$status" -eq 0 ]; then specdec_result="ok"; else specdec_result="FAILED (exit $status)"; failed=1; fi
fi
if [ "$torch" = 1 ]; then
  if "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "\$ $python $here/torch_baseline.py --out $out ${torch_args[*]+${torch_args[*]}}"
    "$python" "$here/torch_baseline.py" --out "$out" ${torch_args[@]+"${torch_args[@]}"} 2>&1 | tee "$out/torch.log"
    status=${PIPESTATUS[0]}
    if [ "$status" -eq 0 ]; then torch_result="ok"; else torch_result="FAILED (exit $status)"; failed=1; fi
  else
    echo "bench.sh: warning: $python has no torch with CUDA; skipping the PyTorch baseline" >&2
    torch_result="skipped (no torch with CUDA)"
  fi
fi

echo
echo "specdec benchmark: $specdec_result"
echo "PyTorch baseline:  $torch_result"
echo "results in $out; report: cargo xtask bench-report <that directory, fetched>"
[ "$failed" -eq 0 ]
