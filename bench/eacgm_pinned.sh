#!/usr/bin/env bash
# `eacgm` with a CPU of its own: eacgm on CPU 1, the command it runs on CPU 0. A stand-in for the
# eacgm binary in the other benchmarks (probe_overhead --eacgm, record_ab.sh), to tell what
# eacgm's user space takes from the traced process on a machine with few CPUs.
#
#   EACGM_PINNED_BIN=build/eacgm bench/eacgm_pinned.sh record [FLAGS...] -- CMD [ARGS...]
set -euo pipefail
bin=${EACGM_PINNED_BIN:-$(dirname "$0")/../build/eacgm}
args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  args+=("$1")
  shift
done
[ $# -gt 0 ] || { echo "eacgm_pinned: no -- CMD given" >&2; exit 2; }
shift
exec taskset -c 1 "$bin" "${args[@]}" -- taskset -c 0 "$@"
