#!/usr/bin/env bash
# Installs everything eacgm needs to build and test, from Debian packages only.
# Used by the README's two commands and by .ci/run, so a fresh machine is proven by CI.
set -euo pipefail
. "$(dirname "$0")/as_root.sh"

packages=(
  # toolchain
  build-essential cmake clang llvm clang-format pkg-config
  # BPF: libbpf headers/library, skeleton generator, ELF and zlib for libbpf
  libbpf-dev bpftool libelf-dev zlib1g-dev
  # libraries we link against
  libcli11-dev nlohmann-json3-dev libfmt-dev libsqlite3-dev
  libprotobuf-dev protobuf-compiler libeigen3-dev
  # eacgm serve's HTTP endpoint and eacgm cluster's Prometheus client (header-only)
  libcpp-httplib-dev
  # the .deb (cpack -G DEB: dpkg-shlibdeps comes with build-essential, CPack needs `file` too)
  file
  # tests and benchmarks (libclang-rt: libFuzzer and the sanitizers for clang, tests/fuzz)
  libgtest-dev libgmock-dev libbenchmark-dev sqlite3 python3-protobuf libclang-rt-14-dev
  # the python with USDT probes, used by tests that need a real interpreter
  python3.11
  # the torch layer's tests: Debian's PyTorch (1.13, CPU) and its libtorch_cpu.so
  python3-torch
  # the GMM checks against scikit-learn (tests/gmm) and their benchmark (bench/gmm)
  python3-sklearn python3-numpy
  # eacgm serve's tests scrape it with a real Prometheus server (tests/bpf/test_serve.py)
  prometheus
  # eacgm report's pages are opened in a real browser by their test (tests/bpf/test_report.py)
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

# tracefs: uprobes are created through it on some code paths and `doctor` reports it.
if ! mountpoint -q /sys/kernel/tracing 2>/dev/null; then
  as_root mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null ||
    echo "install-deps: warning: could not mount tracefs at /sys/kernel/tracing" >&2
fi
