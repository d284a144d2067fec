#!/usr/bin/env bash
# eacgm's own CPU time per recorded event: decoding, the session's figures, the SQLite rows, the
# Perfetto slices and the end-of-run work (indexes, summary) — everything user space does for a
# call once the ring buffer hands it over, as the job's neighbour on the same CPUs.
#
#   sudo bench/event_cost.sh [-n ROUNDS] [-c CALLS] [-b BUILD] VARIANT...
#   VARIANT: LABEL=EACGM_BINARY[,FLAG...]    e.g.  old=/tmp/eacgm-old  new=build/eacgm
#
# Each round records simgpu's cuda_calls making CALLS cudaStreamSynchronize calls on the
# simulated runtime (2 µs per call), and the same with 10 calls, once per variant, in turn. The
# agent's CPU time is what the session's summary.json says (overhead.agent_cpu_s, the recorder's
# own user + system time); the difference between the two runs over CALLS - 10 is the CPU time
# per event, start-up and teardown cancelling out. Prints per variant the median over the rounds,
# every round, the events dropped, and each variant's median against the first's.
set -euo pipefail
# The simulated runtime alone, as the figures in docs/PERFORMANCE.md were taken: by default it
# also runs each call through the simulated driver, which adds a traced driver call to every one.
export SIMGPU_RUNTIME_USES_DRIVER=0
rounds=5 calls=300000 build=build
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
  echo "event_cost: name at least one LABEL=EACGM_BINARY[,FLAG...] variant" >&2
  exit 2
fi
lib=$build/simgpu/lib/libcudart.so.13
cuda_calls=$build/simgpu/bin/cuda_calls
for f in "$lib" "$cuda_calls"; do
  [ -e "$f" ] || { echo "event_cost: $f not found (build simgpu first)" >&2; exit 2; }
done
export SIMGPU_RULES="latency cudaStreamSynchronize 2us"
scratch=$(mktemp -d /tmp/event_cost.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

# agent_cpu_s and events.dropped of one recording of N calls.
record() {
  local n=$1
  shift
  rm -rf "$scratch/session"
  "$@" -q -o "$scratch/session" -- "$cuda_calls" --lib "$lib" --sequence sync-loop --count "$n" \
    >/dev/null 2>"$scratch/stderr" || { cat "$scratch/stderr" >&2; return 1; }
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
print(s["overhead"]["agent_cpu_s"], s["events"]["dropped"])' "$scratch/session/summary.json"
}

declare -A per_event dropped
for ((round = 1; round <= rounds; round++)); do
  for variant in "$@"; do
    label=${variant%%=*}
    IFS=, read -r -a cmd <<<"${variant#*=}"
    read -r big lost < <(record "$calls" "${cmd[0]}" record "${cmd[@]:1}")
    read -r small _ < <(record 10 "${cmd[0]}" record "${cmd[@]:1}")
    us=$(python3 -c "print(f'{($big - $small) / ($calls - 10) * 1e6:.3f}')")
    per_event[$label]="${per_event[$label]:-} $us"
    dropped[$label]=$((${dropped[$label]:-0} + lost))
    echo "round $round $label: ${us} µs/event (agent CPU ${big} s for $calls calls, ${small} s for 10)"
  done
done
first=""
for variant in "$@"; do
  label=${variant%%=*}
  python3 - "$label" "${dropped[$label]}" "$first" ${per_event[$label]} <<'EOF'
import statistics, sys
label, lost, first = sys.argv[1], sys.argv[2], sys.argv[3]
values = [float(v) for v in sys.argv[4:]]
median = statistics.median(values)
against = f", {median / float(first):.2f}x the first" if first else ""
print(f"{label}: median {median:.3f} µs/event over {len(values)} rounds "
      f"(min {min(values):.3f}, max {max(values):.3f}), {lost} events dropped{against}")
EOF
  if [ -z "$first" ]; then
    first=$(python3 -c "import statistics, sys; print(statistics.median(float(v) for v in sys.argv[1:]))" ${per_event[$label]})
  fi
done
