#!/usr/bin/env bash
# What a C++ exception thrown through a traced PyTorch operator costs under the torch layer
# (docs/PERFORMANCE.md): the job pauses at the start of unwinding while eacgm puts back the
# return addresses the return probes replaced (src/layers/torch/torch.bpf.c on_unwind_start). Times, in the
# job, N calls of torch.mm on shapes that do not fit (each raises c10::Error, caught in Python)
# and N calls that succeed, run plain and under `eacgm record --layers torch --torch-ops mm`,
# RUNS times each, interleaved; prints the medians per call and what tracing adds.
#   sudo bench/torch_exceptions.sh [BUILD_DIR=build] [RUNS=5] [N=2000] [PYTHON=/usr/bin/python3.11]
set -euo pipefail
B=$(realpath "${1:-build}")
runs=${2:-5}
n=${3:-2000}
python=${4:-/usr/bin/python3.11}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/job.py" <<PY
import time, torch
a, b, bad = torch.randn(16, 32), torch.randn(32, 8), torch.randn(7, 8)
for _ in range(50):  # warm up both paths
    torch.mm(a, b)
    try: torch.mm(a, bad)
    except RuntimeError: pass
t0 = time.perf_counter()
for _ in range($n):
    try: torch.mm(a, bad)
    except RuntimeError: pass
t1 = time.perf_counter()
for _ in range($n):
    torch.mm(a, b)
t2 = time.perf_counter()
print((t1 - t0) / $n * 1e6, (t2 - t1) / $n * 1e6)
PY
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
: > "$tmp/plain"; : > "$tmp/traced"
for _ in $(seq 1 "$runs"); do
  "$python" "$tmp/job.py" >> "$tmp/plain"
  "$B/eacgm" record -q -o "$tmp/s" --layers torch --torch-ops mm -- "$python" "$tmp/job.py" \
    2>/dev/null >> "$tmp/traced"
done
unwound=$(python3 -c "import json;print(json.load(open('$tmp/s/summary.json'))['layers']['torch']['calls_unwound'])")
pt=$(cut -d' ' -f1 < "$tmp/plain" | median); pok=$(cut -d' ' -f2 < "$tmp/plain" | median)
tt=$(cut -d' ' -f1 < "$tmp/traced" | median); tok=$(cut -d' ' -f2 < "$tmp/traced" | median)
echo "n=$n runs=$runs python=$python"
echo "throwing mm, us per call: plain $pt traced $tt; succeeding mm: plain $pok traced $tok"
awk -v pt="$pt" -v tt="$tt" -v pok="$pok" -v tok="$tok" 'BEGIN{
  printf "added per throwing call: %.1f us (x%.2f); per succeeding call: %.1f us (x%.2f)\n",
    tt - pt, tt / pt, tok - pok, tok / pok}'
echo "calls_unwound in the last traced run: $unwound (expected $((n + 50)))"
