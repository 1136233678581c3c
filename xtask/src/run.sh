#!/usr/bin/env bash
# Runs the specdec GPU test binaries in bin/, one after another.
# Written by `cargo xtask test-gpu --bundle DIR`; needs no Rust toolchain.
#
#   ./run.sh [--sanitize] [TEST ARGS...]
#
# Each binary runs as `BIN --test-threads=1 TEST ARGS...`, or with --sanitize under
# `compute-sanitizer --tool memcheck --error-exitcode 1 --require-cuda-init no`
# ($COMPUTE_SANITIZER overrides where compute-sanitizer is). Output is shown and kept in
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

wrapper=() # what runs before each binary
shown=()   # how that is printed
if [ "$sanitize" = 1 ]; then
  sanitizer="${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
  if [ ! -x "$sanitizer" ]; then
    echo "run.sh: --sanitize needs compute-sanitizer (CUDA toolkit): not on PATH nor at $sanitizer; set COMPUTE_SANITIZER" >&2
    exit 2
  fi
  # `--require-cuda-init no`: binaries whose tests never touch CUDA are not errors. But then
  # compute-sanitizer exits 0 whatever such a binary returned, so a small shell between the
  # two records the binary's own exit status in a file (compute-sanitizer follows children).
  status_file="$(mktemp)"
  trap 'rm -f "$status_file"' EXIT
  wrapper=("$sanitizer" --tool memcheck --error-exitcode 1 --require-cuda-init no
    /bin/sh -c '"$@"; s=$?; echo $s >"$0"; exit $s' "$status_file")
  shown=("$sanitizer" --tool memcheck --error-exitcode 1 --require-cuda-init no)
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
  if [ "$sanitize" = 1 ]; then : >"$status_file"; fi
  echo
  printf '$'
  printf ' %q' ${shown[@]+"${shown[@]}"} "$bin" --test-threads=1 ${args[@]+"${args[@]}"}
  printf '\n'
  "${cmd[@]}" 2>&1 | tee "$logs/$name.log"
  status=${PIPESTATUS[0]}
  if [ "$sanitize" = 1 ] && [ "$status" -eq 0 ]; then
    own="$(cat "$status_file" 2>/dev/null)"
    status="${own:-1}"
  fi
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
