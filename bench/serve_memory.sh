#!/usr/bin/env bash
# eacgm serve's memory over a long-ish run (docs/PERFORMANCE.md): RSS of the agent while RUNS
# processes in turn each make CALLS traced CUDA calls (simulated libcudart, latency 0), in a cgroup
# of their own that serve is limited to. Flat RSS = bounded state (histograms, released processes).
#   sudo bench/serve_memory.sh [BUILD_DIR=build] [RUNS=10] [CALLS=1000000]
set -euo pipefail
B=$(realpath "${1:-build}")
runs=${2:-10}
calls=${3:-1000000}
port=19500
lib=$B/simgpu/lib/libcudart.so.13
cg=$(awk '$3=="cgroup2"{print $2; exit}' /proc/mounts)/eacgm-serve-memory-$$
mkdir "$cg"
"$B/eacgm" serve --listen 127.0.0.1:$port --cgroup "$cg" --layers cuda,nccl 2>/dev/null &
serve=$!
trap 'kill -TERM $serve 2>/dev/null; wait $serve 2>/dev/null; rmdir "$cg"' EXIT
sleep 2
rss() { awk '/VmRSS/{print $2}' /proc/$serve/status; }
metric() { curl -s 127.0.0.1:$port/metrics | awk -v m="$1" '$1 ~ "^"m {s+=$2} END{print s+0}'; }
echo "start rss_kb=$(rss)"
for i in $(seq 1 "$runs"); do
  # Joins the cgroup, maps libcudart, waits a second (serve finds it), then becomes cuda_calls.
  SIMGPU_RULES="latency * 0" sh -c "echo \$\$ > $cg/cgroup.procs; exec /usr/bin/python3.11 -c '
import ctypes, os, time
ctypes.CDLL(\"$lib\"); time.sleep(1)
os.execv(\"$B/simgpu/bin/cuda_calls\", [\"cuda_calls\", \"--lib\", \"$lib\", \"--sequence\", \"sync-loop\", \"--count\", \"$calls\"])'" >/dev/null
  sleep 3  # the process is released 2 s after it exits
  echo "run $i calls_total=$(metric eacgm_calls_total) processes_traced=$(metric eacgm_processes_traced)" \
       "dropped=$(metric eacgm_events_dropped_total) rss_kb=$(rss)"
done
