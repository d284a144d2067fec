#!/usr/bin/env bash
# What serve's notice of new processes costs the machine's other processes: every process that is
# not traced runs eacgm's program at ld.so's rendezvous (at start-up and at each dlopen), which
# walks the loader's list of objects for a traced library (bpf/core.bpf.c). Times, in interleaved
# rounds with serve stopped and running: SPAWNS starts of /bin/true, and 5 Python start-ups that
# import numpy and a few C extension modules (dozens of dlopens each). Prints the median of each
# and their ratio.
#
#   sudo bench/serve_notice.sh [-n ROUNDS] [-s SPAWNS] [-b BUILD]
set -euo pipefail
rounds=5 spawns=300 build=build
while getopts "n:s:b:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    s) spawns=$OPTARG ;;
    b) build=$OPTARG ;;
    *) exit 2 ;;
  esac
done
eacgm=$build/eacgm
[ -x "$eacgm" ] || { echo "serve_notice: no $eacgm; build first (scripts/build.sh)" >&2; exit 2; }
python=/usr/bin/python3.11
"$python" -c 'import numpy' 2>/dev/null || { echo "serve_notice: needs $python with numpy" >&2; exit 2; }
out=$(mktemp -d)
serve_pid=
trap '[ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; rm -rf "$out"' EXIT

seconds() { date +%s.%N; }
timed() {  # wall seconds of "$@"
  local t0
  t0=$(seconds)
  "$@" >/dev/null 2>&1
  awk -v a="$t0" -v b="$(seconds)" 'BEGIN { printf "%.4f\n", b - a }'
}
spawn() { for _ in $(seq "$spawns"); do /bin/true; done; }
imports() {
  for _ in 1 2 3 4 5; do "$python" -c 'import numpy, sqlite3, ssl, json, decimal, ctypes'; done
}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

for _ in $(seq "$rounds"); do
  timed spawn >>"$out/spawn.off"
  timed imports >>"$out/imports.off"
  "$eacgm" serve --listen 127.0.0.1:0 --layers cuda,driver,nccl,torch >"$out/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 100); do grep -q 'eacgm: serving' "$out/serve.log" && break; sleep 0.1; done
  grep -q 'eacgm: serving' "$out/serve.log" || { cat "$out/serve.log" >&2; exit 1; }
  timed spawn >>"$out/spawn.on"
  timed imports >>"$out/imports.on"
  kill -INT "$serve_pid"
  wait "$serve_pid" || true
  serve_pid=
done
for what in spawn imports; do
  off=$(median <"$out/$what.off") on=$(median <"$out/$what.on")
  awk -v w="$what" -v a="$off" -v b="$on" -v n="$spawns" -v r="$rounds" 'BEGIN {
    label = (w == "spawn") ? n " x /bin/true" : "5 x python3.11 imports"
    printf "%-24s untraced %.3f s  serve running %.3f s  ratio %.3f  (medians of %d)\n",
      label, a, b, b / a, r }'
done
