#!/usr/bin/env bash
# Configures and builds eacgm: build.sh [DIR] [CMAKE_CONFIGURE_ARGS...].
# Set BUILD_TARGET to build one target instead of all. Warnings are errors here, as in CI; a plain
# `cmake` build (a user's or a packager's) only warns.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEACGM_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
