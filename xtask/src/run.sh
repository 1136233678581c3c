#!/usr/bin/env bash
# Runs the specdec GPU test binaries in bin/, one after another.
# Written by `cargo xtask test-gpu --bundle DIR`; needs no Rust toolchain.
#
#   ./run.sh [--sanitize] [TEST ARGS...]
#
# Each binary runs as `BIN --test-threads=1 TEST ARGS...`, or with --sanitize as
# `compute-sanitizer --tool memcheck --error-exitcode 1 --require-cuda-init no BIN ...`
# ($COMPUTE_SANITIZER overrides where compute-sanitizer is; `--require-cuda-init no`
# lets binaries whose tests never touch CUDA pass). Output is shown and kept in
# ${OUT:-<this directory>}/logs/<binary>.log. A failing binary does not stop the run.
# Ends with one line per binary (ok / FAILED) and `N passed, N failed` counting
# binaries; exits non-zero if any failed.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
logs="${OUT:-$here}/logs"

sanitize=0
args=()
for arg in "$@"; do
  if [ "$arg" = "--sanitize" ]; then sanitize=1; else args+=("$arg"); fi
done

wrapper=()
if [ "$sanitize" = 1 ]; then
  sanitizer="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
  if [ ! -x "$sanitizer" ]; then
    echo "run.sh: --sanitize needs compute-sanitizer (CUDA toolkit): not on PATH nor at $sanitizer; set COMPUTE_SANITIZER" >&2
    exit 2
  fi
  wrapper=("$sanitizer" --tool memcheck --error-exitcode 1 --require-cuda-init no)
fi

bins=("$here"/bin/*)
if [ ! -e "${bins[0]}" ]; then
  echo "run.sh: no test binaries in $here/bin" >&2
  exit 2
fi
mkdir -p "$logs"

results=()
passed=0
failed=0
for bin in "${bins[@]}"; do
  name="$(basename "$bin")"
  cmd=(${wrapper[@]+"${wrapper[@]}"} "$bin" --test-threads=1 ${args[@]+"${args[@]}"})
  echo
  echo "\$ ${cmd[*]}"
  "${cmd[@]}" 2>&1 | tee "$logs/$name.log"
  status=${PIPESTATUS[0]}
  if [ "$status" -eq 0 ]; then
    results+=("ok      $name")
    passed=$((passed + 1))
  else
    results+=("FAILED  $name (exit $status; log: $logs/$name.log)")
    failed=$((failed + 1))
  fi
done

echo
printf '%s\n' "${results[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
