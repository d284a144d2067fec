#!/usr/bin/env bash
# Configures and builds eacgm: build.sh [DIR] [CMAKE_CONFIGURE_ARGS...].
# Set BUILD_TARGET to build one target instead of all. Warnings are errors here, as in CI; a plain
# `cmake` build (a user's or a packager's) only warns.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
# Ninja for a new build directory: it compiles a target's sources while the libraries it links
# are still being built, which keeps both CPUs of a small machine busy. A directory configured
# before keeps its generator (CMake refuses to switch).
generator=()
if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEACGM_WERROR=ON "$@" \
  >/dev/null
cmake --build "$dir" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
