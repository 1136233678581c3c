#!/usr/bin/env bash
# A/B of builds of the specdec GPU benchmark on one GPU: gpu-bench-base (the
# revision named in base.txt), gpu-bench (the working tree it was bundled from) and
# any other gpu-bench-<LABEL> put beside them (variants: another tree's gpu-bench,
# copied in), run alternately, ROUNDS times (default 2), with the same inputs.
# Written by `cargo xtask bench-gpu --bundle DIR --against REV`; needs no Rust toolchain.
#
#   ./ab.sh [ROUNDS] [-- GPU-BENCH ARGS...]      e.g.  ./ab.sh 2 -- --only "rows=1"
#
# Writes ab/<side>-<round>/bench.json and bench.log (sides: base, new, then the
# labels in name order) to ${OUT:-<this directory>}.
# Then, where the workspace is:
#   cargo xtask bench-ab <the directory holding ab/ and base.txt> [--min-change PCT]
# Exits non-zero if any run failed.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/cuda-libs.sh"
out="${OUT:-$here}"
rounds=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  rounds="$1"
  shift
fi
case "$rounds" in
  ''|*[!0-9]*|0) echo "ab.sh: ROUNDS must be a positive integer, not '$rounds' (usage: ab.sh [ROUNDS] [-- GPU-BENCH ARGS...])" >&2; exit 2 ;;
esac
if [ $# -gt 0 ]; then
  if [ "$1" != "--" ]; then
    echo "ab.sh: unknown argument $1 (usage: ab.sh [ROUNDS] [-- GPU-BENCH ARGS...])" >&2
    exit 2
  fi
  shift
fi
mkdir -p "$out"
[ -f "$here/base.txt" ] && [ "$out" != "$here" ] && cp "$here/base.txt" "$out/"

sides=(base new)
for exe in "$here"/gpu-bench-*; do
  label="${exe##*/gpu-bench-}"
  case "$label" in
    base|new|'*') ;;
    *[!A-Za-z0-9_.]*) echo "ab.sh: $exe: a label takes letters, digits, '_' and '.' only" >&2; exit 2 ;;
    *) sides+=("$label") ;;
  esac
done

failed=0
for round in $(seq 1 "$rounds"); do
  for side in "${sides[@]}"; do
    exe="$here/gpu-bench-$side"
    [ "$side" = new ] && exe="$here/gpu-bench"
    dir="$out/ab/$side-$round"
    rm -rf "$dir" && mkdir -p "$dir"
    echo "\$ OUT=$dir $exe $*"
    if ! OUT="$dir" "$exe" "$@" > "$dir/bench.log" 2>&1; then
      echo "ab.sh: $side, round $round failed: see $dir/bench.log" >&2
      failed=1
    fi
  done
done
echo
echo "results in $out/ab; report: cargo xtask bench-ab <that directory's parent, fetched>"
[ "$failed" -eq 0 ]
