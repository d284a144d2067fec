#!/usr/bin/env bash
# What eacgm's call handlers cost inside the kernel, per call, between builds or flag sets: the
# run time the kernel itself measures for each BPF program (kernel.bpf_stats_enabled), in
# interleaved rounds. Where probe_overhead's end-to-end times swing by ±15 % between runs on a
# noisy machine, these exclude the uprobe traps, the traced process and eacgm's user space.
#
#   sudo bench/bpf_stats_ab.sh [-n ROUNDS] [-b BUILD] VARIANT...
#   VARIANT: LABEL=EACGM_BINARY[,FLAG...]    e.g.  old=/tmp/eacgm-old  new=build/eacgm
#            cuda=build/eacgm,--layers,cuda
#
# Each round records simgpu's cuda_calls making 1.5 M cudaStreamSynchronize calls on the
# simulated runtime (2 us each: ~200 k calls/s, which eacgm records whole) once per variant, and
# reads the run count and run time of the programs named call_entry and call_return over 2 s in
# the middle of the run. The kernel's own accounting adds two clock reads to every program run:
# ~68 ns per run on this project's machine (an empty program, measured the same way), included in
# the figures printed.
set -euo pipefail
# The simulated runtime alone, as the figures in docs/PERFORMANCE.md were taken: by default it
# also runs each call through the simulated driver, which adds a traced driver call to every one.
export SIMGPU_RUNTIME_USES_DRIVER=0
rounds=3 build=build
while getopts "n:b:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    b) build=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
  echo "bpf_stats_ab: name at least one LABEL=EACGM_BINARY[,FLAG...] variant" >&2
  exit 2
fi
command -v bpftool >/dev/null || { echo "bpf_stats_ab: bpftool not found" >&2; exit 2; }
cuda_calls=$build/simgpu/bin/cuda_calls lib=$build/simgpu/lib/libcudart.so.13
for f in "$cuda_calls" "$lib"; do
  [ -e "$f" ] || { echo "bpf_stats_ab: $f not found" >&2; exit 2; }
done
scratch=$(mktemp -d /tmp/bpf_stats_ab.XXXXXX)
was=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -qw kernel.bpf_stats_enabled=$was; rm -rf "$scratch"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1

# Per program named call_entry or call_return: run time per run between two `bpftool prog show`s.
per_run() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
before = {p["id"]: p for p in json.load(open(sys.argv[1]))}
for p in json.load(open(sys.argv[2])):
    a = before.get(p["id"])
    if a is None or p.get("name") not in ("call_entry", "call_return"):
        continue
    runs = p.get("run_cnt", 0) - a.get("run_cnt", 0)
    if runs > 1000:
        print(p["name"], f"{(p['run_time_ns'] - a.get('run_time_ns', 0)) / runs:.1f}")
EOF
}

for ((round = 1; round <= rounds; round++)); do
  for variant in "$@"; do
    label=${variant%%=*}
    IFS=, read -r -a cmd <<<"${variant#*=}"
    rm -rf "$scratch/session"
    SIMGPU_RULES='latency cudaStreamSynchronize 2us' "${cmd[0]}" record -q "${cmd[@]:1}" \
      -o "$scratch/session" -- "$cuda_calls" --lib "$lib" --sequence sync-loop --count 1500000 \
      >/dev/null 2>&1 &
    sleep 2.5
    bpftool -j prog show >"$scratch/before.json"
    sleep 2
    bpftool -j prog show >"$scratch/after.json"
    wait
    echo "$label $(per_run "$scratch/before.json" "$scratch/after.json" | tr '\n' ' ')"
  done
done >"$scratch/runs"
python3 - "$scratch/runs" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    words = line.split()
    label, values = words[0], dict(zip(words[1::2], map(float, words[2::2])))
    if "call_entry" in values and "call_return" in values:
        runs.setdefault(label, []).append((values["call_entry"], values["call_return"]))
for label, r in runs.items():
    med = lambda xs: statistics.median(xs)
    print(f"{label:12s} entry {med(e for e, _ in r):6.1f}  return {med(x for _, x in r):6.1f}  "
          f"pair {med(e + x for e, x in r):6.1f} ns per call (median of {len(r)}; "
          f"pairs: {' '.join(f'{e + x:.0f}' for e, x in r)})")
EOF
