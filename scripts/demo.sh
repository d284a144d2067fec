#!/usr/bin/env bash
# Installs, builds, and records the bundled demo: a two-rank "training job"
# on the simulated CUDA runtime (tests/fixtures/simgpu), one rank leaking
# device memory. The session lands in ./demo-session.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
exec build/eacgm record -o demo-session -- build/simgpu/bin/simtrain --ranks 2 --steps 50 --leak-bytes 1048576
