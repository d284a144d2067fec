#!/usr/bin/env bash
# What the python layer costs a Python job (docs/PERFORMANCE.md): wall time of a call-heavy
# pure-Python workload (N calls of a small function, with 8 threads idle in Event.wait) run
#   plain, under `eacgm record --layers python` (sampling at 99 Hz, the default), and with
#   --python-calls (USDT function__return on every call),
# RUNS times each, interleaved; prints the medians and the ratios to plain. Then what tagging
# each CUDA call with its Python line costs: a ctypes loop of cudaMalloc/cudaFree
# pairs on the simulated runtime (latency 0) under --layers cuda and under
# --layers cuda,python.
#   sudo bench/python_overhead.sh [BUILD_DIR=build] [RUNS=5] [CALLS=2000000] [PYTHON=/usr/bin/python3.11]
set -euo pipefail
# The simulated runtime alone, as the figures in docs/PERFORMANCE.md were taken: by default it
# also runs each call through the simulated driver, which adds a traced driver call to every one.
export SIMGPU_RUNTIME_USES_DRIVER=0
B=$(realpath "${1:-build}")
runs=${2:-5}
calls=${3:-2000000}
python=${4:-/usr/bin/python3.11}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/job.py" <<PY
import threading, time
stop = threading.Event()
idle = [threading.Thread(target=stop.wait) for _ in range(8)]
for t in idle: t.start()
def f(i):
    return i + 1
t0 = time.perf_counter()
x = 0
for i in range($calls):
    x = f(x)
print(time.perf_counter() - t0)
stop.set()
PY
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
: > "$tmp/plain"; : > "$tmp/sampled"; : > "$tmp/counted"
for _ in $(seq 1 "$runs"); do
  "$python" "$tmp/job.py" >> "$tmp/plain"
  "$B/eacgm" record -q -o "$tmp/s1" --layers python -- "$python" "$tmp/job.py" 2>/dev/null >> "$tmp/sampled"
  "$B/eacgm" record -q -o "$tmp/s2" --layers python --python-calls -- "$python" "$tmp/job.py" 2>/dev/null >> "$tmp/counted"
done
p=$(median < "$tmp/plain"); s=$(median < "$tmp/sampled"); c=$(median < "$tmp/counted")
count=$(python3 -c "import json;print(json.load(open('$tmp/s2/summary.json'))['layers']['python']['functions']['job.py:f']['count'])")
echo "calls=$calls runs=$runs python=$python"
echo "plain_s=$p sampled_s=$s counted_s=$c"
awk -v p="$p" -v s="$s" -v c="$c" -v n="$calls" 'BEGIN{printf "sampled/plain=%.3f counted/plain=%.3f usdt_ns_per_call=%.0f\n", s/p, c/p, (c-p)/n*1e9}'
echo "job.py:f count under --python-calls: $count (expected $calls)"

pairs=$((calls / 20))
cat > "$tmp/cuda.py" <<PY
import ctypes, time
lib = ctypes.CDLL("$B/simgpu/lib/libcudart.so.13")
ptr = ctypes.c_void_p()
t0 = time.perf_counter()
for _ in range($pairs):
    lib.cudaMalloc(ctypes.byref(ptr), 256)
    lib.cudaFree(ptr)
print(time.perf_counter() - t0)
PY
: > "$tmp/cuda_only"; : > "$tmp/cuda_python"
for _ in $(seq 1 "$runs"); do
  SIMGPU_RULES="latency * 0" "$B/eacgm" record -q -o "$tmp/c1" --layers cuda -- "$python" "$tmp/cuda.py" 2>/dev/null >> "$tmp/cuda_only"
  SIMGPU_RULES="latency * 0" "$B/eacgm" record -q -o "$tmp/c2" --layers cuda,python -- "$python" "$tmp/cuda.py" 2>/dev/null >> "$tmp/cuda_python"
done
a=$(median < "$tmp/cuda_only"); b=$(median < "$tmp/cuda_python")
tagged=$(python3 -c "import sqlite3; print(sqlite3.connect('$tmp/c2/events.sqlite').execute('SELECT count(*) FROM calls WHERE py_line IS NOT NULL').fetchone()[0])")
echo "cuda calls=$((2 * pairs)) cuda_only_s=$a cuda_python_s=$b tagged=$tagged"
awk -v a="$a" -v b="$b" -v n="$((2 * pairs))" 'BEGIN{printf "attribution_ns_per_call=%.0f ratio=%.3f\n", (b-a)/n*1e9, b/a}'
