#!/usr/bin/env bash
# Installs, builds and runs the whole test suite: unit, bpf and e2e tests on
# the normal build, then the unit tests again under ASan/UBSan.
# Run as root: the bpf and e2e tests load real BPF programs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
(cd build && ctest --output-on-failure --timeout 600)
BUILD_TARGET=eacgm_unit_tests bash scripts/build.sh build-asan -DEACGM_SANITIZE=ON
# The GoogleTest binary itself: the fixture self-tests need the fixture, not built here.
build-asan/tests/eacgm_unit_tests
