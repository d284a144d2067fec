#!/usr/bin/env bash
# The cross-node alerting rules (deploy/prometheus/eacgm-rules.yml) through promtool: the rules
# parse, the static-target config that loads them is valid (it names the rules file relative to
# itself), and tests/prometheus/eacgm-rules.test.yml's scenarios fire exactly the alerts they
# expect. Needs no network and no eacgm build. Exit 77 (CTest: skipped) without promtool
# (Debian: apt-get install prometheus).
# Usage: run.sh   (from anywhere; paths are the repository's)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

promtool=$(command -v promtool || true)
if [ -z "$promtool" ]; then
  echo "skipped: promtool is not installed (Debian: apt-get install prometheus)" >&2
  exit 77
fi
"$promtool" --version 2>&1 | sed -n 1p

"$promtool" check rules deploy/prometheus/eacgm-rules.yml
# Reads eacgm-rules.yml through the config's rule_files, relative to the config's directory.
# prometheus-kubernetes.yml is not checked: Debian's promtool has no Kubernetes discovery.
"$promtool" check config deploy/prometheus/prometheus.yml
# rule_files in the test file are relative to the test file.
"$promtool" test rules tests/prometheus/eacgm-rules.test.yml
