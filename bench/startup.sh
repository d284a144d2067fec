#!/usr/bin/env bash
# What eacgm's own start and end cost a job: wall time of `eacgm record -- /bin/true` and of
# `eacgm attach -d 1` to an idle Python process, N rounds each; prints median, min and max.
#
#   sudo bench/startup.sh [-n ROUNDS] [-b BUILD]
#
# `record -- /bin/true` is all start-up (loading the BPF programs, probing the libraries on the
# search path) and teardown (releasing the links); `attach -d 1` less 1 s is the same for attach;
# with Debian's python3-torch, also what recording adds to `python3.11 -c "import torch"`.
set -euo pipefail
rounds=10 build=build
while getopts "n:b:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    b) build=$OPTARG ;;
    *) exit 2 ;;
  esac
done
eacgm=$build/eacgm
[ -x "$eacgm" ] || { echo "startup: no $eacgm; build first (scripts/build.sh)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"; [ -n "${job:-}" ] && kill "$job" 2>/dev/null' EXIT

seconds() { date +%s.%N; }
stats() {  # median min max of the numbers on stdin
  sort -n | awk '{v[NR]=$1} END {printf "median %.3f s  min %.3f  max %.3f  (%d runs)\n",
    v[int((NR+1)/2)], v[1], v[NR], NR}'
}

"$eacgm" record -q -o "$out/warm" -- /bin/true >/dev/null 2>&1  # page cache, trap cost cache
for _ in $(seq "$rounds"); do
  t0=$(seconds)
  "$eacgm" record -q -o "$out/s" -- /bin/true >/dev/null 2>&1
  awk -v a="$t0" -v b="$(seconds)" 'BEGIN { print b - a }'
done | stats | sed 's/^/record -- \/bin\/true:  /'

python3 -c 'import time
while True: time.sleep(0.01)' &
job=$!
sleep 0.3
for _ in $(seq "$rounds"); do
  t0=$(seconds)
  "$eacgm" attach -q -p "$job" -d 1 -o "$out/a" >/dev/null 2>&1
  awk -v a="$t0" -v b="$(seconds)" 'BEGIN { print b - a }'
done | stats | sed 's/^/attach -d 1 (python):  /'

# What `record` adds to a PyTorch job's start: `import torch` untraced and recorded, interleaved.
if /usr/bin/python3.11 -c 'import torch' 2>/dev/null; then
  for _ in $(seq "$rounds"); do
    t0=$(seconds)
    /usr/bin/python3.11 -c 'import torch'
    t1=$(seconds)
    "$eacgm" record -q -o "$out/t" -- /usr/bin/python3.11 -c 'import torch' >/dev/null 2>&1
    awk -v a="$t0" -v b="$t1" -v c="$(seconds)" 'BEGIN { print (c - b) - (b - a) }'
  done | stats | sed 's/^/import torch, added:  /'
fi
