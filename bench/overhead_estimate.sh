#!/usr/bin/env bash
# How close summary.json's overhead.estimated_added_s comes to the time tracing really added:
# simgpu's cuda_calls makes CALLS cudaStreamSynchronize calls on a private copy of NVIDIA's
# libcudart.so.13, untraced and under `eacgm record`, in interleaved rounds; the added time is
# the difference of the loop's own elapsed time (cuda_calls measures it), the estimate is what
# eacgm said. Prints per round both and their ratio, then the medians.
#
#   sudo bench/overhead_estimate.sh [-n ROUNDS] [-c CALLS] [-b BUILD] [-- EACGM_FLAGS...]
set -euo pipefail
# The simulated runtime alone, as the figures in docs/PERFORMANCE.md were taken: by default it
# also runs each call through the simulated driver, which adds a traced driver call to every one.
export SIMGPU_RUNTIME_USES_DRIVER=0
rounds=5 calls=200000 build=build
while getopts "n:c:b:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    c) calls=$OPTARG ;;
    b) build=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
lib=/usr/local/cuda/lib64/libcudart.so.13
cuda_calls=$build/simgpu/bin/cuda_calls
for f in "$lib" "$cuda_calls" "$build/eacgm"; do
  [ -e "$f" ] || { echo "overhead_estimate: $f is missing" >&2; exit 2; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/lib"
cp "$(readlink -f "$lib")" "$dir/lib/libcudart.so.13"  # private: no other process's calls
loop() { "$@" "$cuda_calls" --lib "$dir/lib/libcudart.so.13" --sequence sync-loop \
  --count "$calls" 2>/dev/null | sed -n 's/.*elapsed_ns=\([0-9]*\).*/\1/p'; }

echo "round  untraced_ms  traced_ms  added_ms  estimated_ms  estimated/added"
for r in $(seq "$rounds"); do
  bare=$(loop)
  traced=$(loop "$build/eacgm" record -q -o "$dir/s" "$@" --)
  est=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["overhead"]["estimated_added_s"] or 0)' "$dir/s/summary.json")
  awk -v r="$r" -v b="$bare" -v t="$traced" -v e="$est" 'BEGIN {
    added = (t - b) / 1e6; printf "%5d  %11.1f  %9.1f  %8.1f  %12.1f  %15.2f\n",
    r, b / 1e6, t / 1e6, added, e * 1e3, (added > 0 ? e * 1e3 / added : 0) }'
done | tee "$dir/rows"
sort -k6 -n "$dir/rows" | awk '{v[NR]=$6; a[NR]=$4; e[NR]=$5} END {
  m = int((NR + 1) / 2); printf "median estimated/added: %.2f (%d rounds)\n", v[m], NR }'
