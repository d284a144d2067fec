#!/usr/bin/env bash
# eacgm serve's memory over a long-ish run (docs/PERFORMANCE.md): RSS of the agent while RUNS
# jobs run in turn, in a cgroup of their own that serve is limited to. Flat RSS = bounded state
# (histograms, released processes).
#   sudo bench/serve_memory.sh [BUILD_DIR=build] [RUNS=10] [CALLS=1000000] [JOB=cuda]
# JOB=cuda: each job is one process making CALLS traced CUDA calls (simulated libcudart, latency
#   0); serve traces the cuda and nccl layers.
# JOB=nccl: each job is the simulated 4-rank NCCL job (tests/fixtures/simgpu) running CALLS
#   steps (an all-reduce each, a broadcast every 10th, 4 KiB); serve traces the cuda, nccl and os
#   layers, so the collective tracker (per-rank lateness, communicators) and the os layer's
#   per-process records (mappings, exits) of five processes a job are kept and released.
set -euo pipefail
# The simulated runtime alone, as the figures in docs/PERFORMANCE.md were taken: by default it
# also runs each call through the simulated driver, which adds a traced driver call to every one.
export SIMGPU_RUNTIME_USES_DRIVER=0
B=$(realpath "${1:-build}")
runs=${2:-10}
calls=${3:-1000000}
job=${4:-cuda}
port=19500
lib=$B/simgpu/lib/libcudart.so.13
case $job in
  cuda) layers=cuda,nccl ;;
  nccl) layers=cuda,nccl,os ;;
  *) echo "JOB is cuda or nccl, not '$job'" >&2; exit 2 ;;
esac
cg=$(awk '$3=="cgroup2"{print $2; exit}' /proc/mounts)/eacgm-serve-memory-$$
mkdir "$cg"
"$B/eacgm" serve --listen 127.0.0.1:$port --cgroup "$cg" --layers $layers 2>/dev/null &
serve=$!
trap 'kill -TERM $serve 2>/dev/null; wait $serve 2>/dev/null; rmdir "$cg"' EXIT
sleep 2
rss() { awk '/VmRSS/{print $2}' /proc/$serve/status; }
metric() { curl -s 127.0.0.1:$port/metrics | awk -v m="$1" '$1 ~ "^"m {s+=$2} END{print s+0}'; }
echo "start rss_kb=$(rss)"
for i in $(seq 1 "$runs"); do
  if [ "$job" = cuda ]; then
    # Joins the cgroup, maps libcudart, waits 3 s (serve finds it: a process that mapped nothing
    # yet when a scan saw it is looked at again 2 s later), then becomes cuda_calls.
    SIMGPU_RULES="latency * 0" sh -c "echo \$\$ > $cg/cgroup.procs; exec /usr/bin/python3.11 -c '
import ctypes, os, time
ctypes.CDLL(\"$lib\"); time.sleep(3)
os.execv(\"$B/simgpu/bin/cuda_calls\", [\"cuda_calls\", \"--lib\", \"$lib\", \"--sequence\", \"sync-loop\", \"--count\", \"$calls\"])'" >/dev/null
  else
    # The same with both libraries mapped; then the launcher, whose ranks serve follows from
    # their fork.
    SIMGPU_RULES="latency * 0" sh -c "echo \$\$ > $cg/cgroup.procs; exec /usr/bin/python3.11 -c '
import ctypes, os, time
ctypes.CDLL(\"$B/simgpu/lib/libnccl.so.2\"); ctypes.CDLL(\"$lib\"); time.sleep(3)
os.execv(\"$B/simgpu/bin/simnccl_job\", [\"simnccl_job\", \"--ranks\", \"4\", \"--steps\", \"$calls\", \"--bytes\", \"4096\"])'" >/dev/null
  fi
  sleep 3  # the processes are released 2 s after they exit
  echo "run $i calls_total=$(metric eacgm_calls_total) processes_traced=$(metric eacgm_processes_traced)" \
       "dropped=$(metric eacgm_events_dropped_total) anomalies=$(metric eacgm_anomalies_total)" \
       "rss_kb=$(rss)"
done
