#!/usr/bin/env bash
# Installs, builds, and records the bundled demo: a two-rank "training job"
# on the simulated CUDA runtime (tests/fixtures/simgpu), each rank leaking
# 1 MiB of device memory per step, which eacgm names. The session lands in ./demo-session.
# Recording loads BPF programs, so that step runs as root (directly, or through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/as_root.sh
bash scripts/install-deps.sh
bash scripts/build.sh build
as_root build/eacgm record -o demo-session -- build/simgpu/bin/simtrain --ranks 2 --steps 200 \
  --leak-bytes 1048576
