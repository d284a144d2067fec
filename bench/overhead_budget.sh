#!/usr/bin/env bash
# What --overhead-budget holds: simgpu's simtrain (one rank, STEPS steps of STEP_US of host work,
# 5 x REPEAT launches, a copy, a memset and a sync, all of which a budget may trace part of the
# time, and 3 allocations and 3 frees, always traced) run untraced, traced, and traced under each
# budget, in interleaved rounds. Per run: the step loop's wall time (simtrain measures it), the
# slowdown against the untraced run of the same round, and what eacgm said (the traced share and
# its own estimate of the slowdown). Then the medians per variant.
#
#   sudo bench/overhead_budget.sh [-n ROUNDS] [-s STEPS] [-u STEP_US] [-r REPEAT] [-b BUILD]
#                                 [BUDGET%...]
set -euo pipefail
# The simulated runtime alone, as the figures in docs/PERFORMANCE.md were taken: by default it
# also runs each call through the simulated driver, which adds a traced driver call to every one.
export SIMGPU_RUNTIME_USES_DRIVER=0
rounds=5 steps=5000 step_us=1000 repeat=20 build=build
while getopts "n:s:u:r:b:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    s) steps=$OPTARG ;;
    u) step_us=$OPTARG ;;
    r) repeat=$OPTARG ;;
    b) build=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
budgets=("$@")
[ ${#budgets[@]} -gt 0 ] || budgets=(5% 10%)
simtrain=$build/simgpu/bin/simtrain
for f in "$simtrain" "$build/eacgm"; do
  [ -e "$f" ] || { echo "overhead_budget: $f is missing" >&2; exit 2; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
job=("$simtrain" --ranks 1 --steps "$steps" --step-us "$step_us" --launch-repeat "$repeat")
loop_us() { sed -n 's/^simtrain rank=.* loop_us=\([0-9]*\).*/\1/p'; }
said() {  # traced share and estimated slowdown from the last session's summary
  python3 -c 'import json, sys
b = json.load(open(sys.argv[1]))["overhead"]["budget"] or {}
o = json.load(open(sys.argv[1]))["overhead"]
print("%.3f %.2f %.2f" % (b.get("traced_fraction", 1), b.get("estimated_slowdown_pct", -1),
                          o.get("estimated_slowdown_pct") or -1))' "$dir/s/summary.json"
}

echo "round  variant   loop_ms  slowdown_pct  traced_fraction  budget_estimate_pct  overhead_estimate_pct"
for r in $(seq "$rounds"); do
  bare=$("${job[@]}" | loop_us)
  awk -v r="$r" -v b="$bare" 'BEGIN { printf "%5d  %-8s %8.1f  %12s  %15s  %19s  %21s\n",
                                        r, "untraced", b / 1000, "-", "-", "-", "-" }'
  for variant in none "${budgets[@]}"; do
    flags=()
    [ "$variant" = none ] || flags=(--overhead-budget "$variant")
    t=$("$build/eacgm" record -q -o "$dir/s" --layers cuda "${flags[@]}" -- "${job[@]}" \
      2>>"$dir/eacgm.log" | loop_us)
    read -r frac est oest < <(said)
    awk -v r="$r" -v v="$variant" -v b="$bare" -v t="$t" -v f="$frac" -v e="$est" -v o="$oest" \
      'BEGIN { printf "%5d  %-8s %8.1f  %12.2f  %15s  %19s  %21.2f\n", r, (v == "none" ? "traced" : v),
               t / 1000, 100 * (t - b) / b, f, (e < 0 ? "-" : e), o }'
  done
done | tee "$dir/rows"
echo
echo "medians over $rounds rounds:"
median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); printf "%s", v[m] }'; }
for variant in traced "${budgets[@]}"; do
  col() { awk -v v="$variant" -v c="$1" '$2 == v { print $c }' "$dir/rows"; }
  [ -n "$(col 4)" ] || continue
  printf "  %-8s slowdown %s %% (%s..%s), traced share %s, eacgm's estimate %s %%\n" "$variant" \
    "$(col 4 | median)" "$(col 4 | sort -g | head -1)" "$(col 4 | sort -g | tail -1)" \
    "$(col 5 | median)" "$(col 7 | median)"
done
