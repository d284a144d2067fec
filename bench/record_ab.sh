#!/usr/bin/env bash
# A/B of what `eacgm record` costs a traced call, between builds or flag sets,
# in interleaved rounds (drift on a noisy machine hits every variant alike).
#
#   sudo bench/record_ab.sh [-n ROUNDS] [-c CALLS] [-b BUILD] VARIANT...
#   VARIANT: LABEL=EACGM_BINARY[,FLAG...]    e.g.  old=/tmp/eacgm-old  new=build/eacgm
#            cuda=build/eacgm,--layers,cuda  default=build/eacgm
#
# Each round records simgpu's cuda_calls making CALLS cudaStreamSynchronize calls on a private
# copy of NVIDIA's libcudart.so.13 (see docs/PERFORMANCE.md: probes others attach to the
# installed file would fire here too) once per variant; prints per variant the median ns/call
# that cuda_calls measured, every run, and the events dropped.
set -euo pipefail
# The simulated runtime alone, as the figures in docs/PERFORMANCE.md were taken: by default it
# also runs each call through the simulated driver, which adds a traced driver call to every one.
export SIMGPU_RUNTIME_USES_DRIVER=0
rounds=10 calls=200000 build=build
while getopts "n:c:b:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    c) calls=$OPTARG ;;
    b) build=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
  echo "record_ab: name at least one LABEL=EACGM_BINARY[,FLAG...] variant" >&2
  exit 2
fi
lib=/usr/local/cuda/lib64/libcudart.so.13
cuda_calls=$build/simgpu/bin/cuda_calls
for f in "$lib" "$cuda_calls"; do
  [ -e "$f" ] || { echo "record_ab: $f not found" >&2; exit 2; }
done
scratch=$(mktemp -d /tmp/record_ab.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cp "$lib" "$scratch/libcudart.so.13"
for ((round = 1; round <= rounds; round++)); do
  for variant in "$@"; do
    label=${variant%%=*}
    IFS=, read -r -a cmd <<<"${variant#*=}"
    rm -rf "$scratch/session"
    ns=$("${cmd[0]}" record -q "${cmd[@]:1}" -o "$scratch/session" -- "$cuda_calls" \
      --lib "$scratch/libcudart.so.13" --sequence sync-loop --count "$calls" 2>/dev/null |
      sed -n 's/.*ns_per_call=\([0-9.]*\).*/\1/p')
    dropped=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['events']['dropped'])" \
      "$scratch/session/summary.json")
    echo "$label $ns $dropped"
  done
done >"$scratch/runs"
python3 - "$scratch/runs" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, ns, dropped = line.split()
    runs.setdefault(label, []).append((float(ns), int(dropped)))
for label, r in runs.items():
    ns = sorted(x for x, _ in r)
    print(f"{label:12s} median {statistics.median(ns):8.1f} ns/call over {len(ns)} runs; "
          f"dropped {sum(d for _, d in r)} in all; runs: {' '.join(f'{x:.0f}' for x in ns)}")
EOF
