#!/usr/bin/env bash
# Runs the specdec GPU test binaries in bin/, one after another.
# Written by `cargo xtask test-gpu --bundle DIR`; needs no Rust toolchain.
#
#   ./run.sh [--sanitize[=TOOL[,TOOL...]]] [--] [TEST ARGS...]
#
# Each binary runs as `BIN --test-threads=1 TEST ARGS...` (TEST ARGS: a test name filter,
# --exact, --nocapture...; every binary gets them). With --sanitize, each binary runs under
# `compute-sanitizer --tool TOOL --error-exitcode 1 --require-cuda-init no`, one pass over
# every binary per tool: --sanitize alone is memcheck; TOOL is memcheck, racecheck, initcheck
# or synccheck; --sanitize=all is all four. ($COMPUTE_SANITIZER overrides where
# compute-sanitizer is.) A sanitized run fails if the binary fails or the tool reports any
# error. `--` ends run.sh's options: what follows goes to the binaries as it is.
# Sanitized passes export SPECDEC_TEST_SCALE=1 (unless it is set): the statistical
# tests then draw CPU-sized samples, as the sanitizers slow kernels a hundredfold.
#
# Output is shown and kept in ${OUT:-<this directory>}/logs/<binary>.log, or
# logs/<binary>.<tool>.log under a sanitizer. A failing binary does not stop the run.
# Ends with one line per pass and binary (ok / FAILED), a count per tool, and
# `N passed, N failed` counting runs; exits non-zero if any failed.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/cuda-libs.sh"
logs="${OUT:-$here}/logs"
all_tools=(memcheck racecheck initcheck synccheck)

usage() {
  echo "usage: $0 [--sanitize[=TOOL[,TOOL...]]] [--] [TEST ARGS...]  (TOOL: ${all_tools[*]} or all)" >&2
  exit 2
}

tools=() # sanitizer passes; none: one plain pass
args=()
options=1
for arg in "$@"; do
  if [ "$options" = 1 ]; then
    case "$arg" in
      --)
        options=0
        continue
        ;;
      --sanitize)
        tools+=(memcheck)
        continue
        ;;
      --sanitize=*)
        IFS=, read -r -a wanted <<<"${arg#--sanitize=}"
        [ "${#wanted[@]}" -gt 0 ] || usage
        for tool in "${wanted[@]}"; do
          case "$tool" in
            all) tools+=("${all_tools[@]}") ;;
            memcheck | racecheck | initcheck | synccheck) tools+=("$tool") ;;
            *)
              echo "run.sh: unknown sanitizer tool '$tool'" >&2
              usage
              ;;
          esac
        done
        continue
        ;;
    esac
  fi
  args+=("$arg")
done
# Each tool once, in the order given.
passes=()
for tool in ${tools[@]+"${tools[@]}"}; do
  case " ${passes[*]-} " in *" $tool "*) ;; *) passes+=("$tool") ;; esac
done

if [ "${#passes[@]}" -gt 0 ]; then
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
  export SPECDEC_TEST_SCALE="${SPECDEC_TEST_SCALE:-1}"
else
  passes=("") # one pass, no sanitizer
fi

bins=("$here"/bin/*)
if [ ! -e "${bins[0]}" ]; then
  echo "run.sh: no test binaries in $here/bin" >&2
  exit 2
fi
mkdir -p "$logs"

results=()
counts=()
passed=0
failed=0
for tool in "${passes[@]}"; do
  wrapper=() # what runs before each binary
  shown=()   # how that is printed
  if [ -n "$tool" ]; then
    shown=("$sanitizer" --tool "$tool" --error-exitcode 1 --require-cuda-init no)
    wrapper=("${shown[@]}" /bin/sh -c '"$@"; s=$?; echo $s >"$0"; exit $s' "$status_file")
  fi
  label="${tool:-plain}"
  pass_ok=0
  pass_failed=0
  for bin in "${bins[@]}"; do
    name="$(basename "$bin")"
    log="$logs/$name${tool:+.$tool}.log"
    cmd=(${wrapper[@]+"${wrapper[@]}"} "$bin" --test-threads=1 ${args[@]+"${args[@]}"})
    if [ -n "$tool" ]; then : >"$status_file"; fi
    echo
    printf '$'
    printf ' %q' ${shown[@]+"${shown[@]}"} "$bin" --test-threads=1 ${args[@]+"${args[@]}"}
    printf '\n'
    "${cmd[@]}" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    why=""
    if [ -n "$tool" ]; then
      if [ "$status" -eq 0 ]; then
        own="$(cat "$status_file" 2>/dev/null)"
        status="${own:-1}"
      fi
      # Belt and braces: any error the tool summed up fails the run, whatever the exit code.
      if grep -Eq '^========= .*(ERROR SUMMARY: [1-9]|\([1-9][0-9]* errors?)' "$log"; then
        why="; $tool reported errors"
        [ "$status" -ne 0 ] || status=1
      fi
    fi
    if [ "$status" -eq 0 ]; then
      results+=("$(printf '%-10s %-7s %s' "$label" ok "$name")")
      passed=$((passed + 1))
      pass_ok=$((pass_ok + 1))
    else
      results+=("$(printf '%-10s %-7s %s (exit %s%s; log: %s)' "$label" FAILED "$name" "$status" "$why" "$log")")
      failed=$((failed + 1))
      pass_failed=$((pass_failed + 1))
    fi
  done
  counts+=("$label: $pass_ok ok, $pass_failed failed")
done

echo
printf '%s\n' "${results[@]}"
echo
printf '%s\n' "${counts[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
