#!/usr/bin/env bash
# How long CI takes: a clean clone of HEAD, `bash .ci/run` in it as CI runs it, timed; then where
# the time went: the build (the total less ctest's own run) and ctest's ten slowest tests.
# Usage: bench/suite_time.sh [RUNS]   (root, or a user with sudo; the packages installed already
# make it the figure of a CI run on a prepared machine). Clones land in /tmp and are removed.
set -euo pipefail
runs=${1:-1}
top=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
for ((i = 1; i <= runs; i++)); do
  clone=$(mktemp -d /tmp/eacgm-suite-XXXXXX)
  git clone -q "$top" "$clone"
  start=$(date +%s.%N)
  if (cd "$clone" && bash .ci/run >"$clone.log" 2>&1); then status=passed; else status=FAILED; fi
  total=$(echo "$(date +%s.%N) - $start" | bc)
  ctest_s=$(sed -n 's/^Total Test time (real) = *\([0-9.]*\) sec.*/\1/p' "$clone.log" | tail -1)
  printf 'run %d: %s, total %.0f s, ctest %.0f s, the rest (install check, configure, build) %.0f s\n' \
    "$i" "$status" "$total" "${ctest_s:-0}" "$(echo "$total - ${ctest_s:-0}" | bc)"
  echo "  slowest tests (s):"
  sort -k3 -g -r "$clone/build/Testing/Temporary/CTestCostData.txt" 2>/dev/null |
    awk 'NF == 3 && n++ < 10 {printf "    %7.1f  %s\n", $3, $1}' || true
  [ "$status" = passed ] || echo "  log: $clone.log"
  [ "$status" = passed ] && rm -f "$clone.log"
  rm -rf "$clone"
done
