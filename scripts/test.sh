#!/usr/bin/env bash
# Installs, builds and runs the whole test suite in one ctest run: unit tests (built with
# ASan/UBSan), bpf and e2e tests (real BPF programs, as root), the
# GMM checks against scikit-learn, and the .deb's install test. Needs root for the bpf, e2e and
# package tests: as root it runs them directly, otherwise through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/as_root.sh
bash scripts/install-deps.sh
# -g1 (line tables) instead of RelWithDebInfo's -g: the same code, a third less compile time.
bash scripts/build.sh build -DEACGM_SANITIZE_UNIT_TESTS=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
# The bpf/e2e tests hold one lock among themselves (tests/CMakeLists.txt); -j lets the unit and
# GMM tests run beside them.
cd build && as_root ctest --output-on-failure --timeout 600 -j"$(nproc)"
