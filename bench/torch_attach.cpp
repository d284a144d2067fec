// torch_attach: what probing every ATen operator of libtorch_cpu costs. Times, per round:
// finding and naming the operators (ELF symbols and .rodata schemas), creating the entry and
// return uprobe_multi links over all of them, and destroying them again, through the same Tracer
// `eacgm record` uses. Run as root: torch_attach [--lib PATH] [--rounds N] [--ops all|REGEX].
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "layers/torch/torch_ops.h"
#include "probes/probe_link.h"
#include "probes/tracer.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"time attaching and detaching uprobes on every ATen operator of libtorch_cpu"};
  std::string lib = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13";
  int rounds = 5;
  std::string ops = "all";
  app.add_option("--lib", lib, "the libtorch_cpu to probe");
  app.add_option("--rounds", rounds, "rounds (a fresh Tracer each)")->check(CLI::Range(1, 100));
  app.add_option("--ops", ops, "operators: default, all or a regular expression");
  CLI11_PARSE(app, argc, argv);

  auto filter = eacgm::TorchOpFilter::parse(ops);
  if (!filter) {
    fmt::print(stderr, "torch_attach: {}\n", filter.error().message);
    return 2;
  }
  std::vector<double> naming, attach, detach;
  size_t functions = 0;
  size_t exported = 0;
  bool multi = false;
  for (int round = 0; round < rounds; ++round) {
    // Naming alone, as attach_library does it first.
    auto start = std::chrono::steady_clock::now();
    eacgm::TorchOpTable table;
    auto found = eacgm::torch_library_ops(lib, *filter, table);
    if (!found) {
      fmt::print(stderr, "torch_attach: {}\n", found.error().message);
      return 1;
    }
    naming.push_back(ms_since(start));
    exported = found->exported;

    auto tracer = eacgm::Tracer::open({.layers = {eacgm::Layer::kTorch},
                                       .stop_on_dlopen = false,
                                       .btf_path = {},
                                       .verbose = false,
                                       .torch_ops = *filter},
                                      [](std::span<const std::byte>) {});
    if (!tracer) {
      fmt::print(stderr, "torch_attach: {}\n", tracer.error().message);
      return 1;
    }
    start = std::chrono::steady_clock::now();
    auto attached = (*tracer)->attach_library(eacgm::Layer::kTorch, lib);
    if (!attached || !*attached) {
      fmt::print(stderr, "torch_attach: {}\n",
                 attached ? "nothing attached" : attached.error().message);
      return 1;
    }
    attach.push_back(ms_since(start));
    functions = (*tracer)->libraries().front().functions;
    multi = eacgm::kernel_has_uprobe_multi();
    start = std::chrono::steady_clock::now();
    (*tracer)->detach_probes();
    detach.push_back(ms_since(start));
  }
  fmt::print("{}: {} operators ({} exported entry points), {} links, {} rounds\n", lib, functions,
             exported, multi ? "2 uprobe_multi" : fmt::format("{} single", 2 * functions), rounds);
  fmt::print("median ms: naming {:.1f}, attach (naming included) {:.1f}, detach {:.1f}\n",
             median(naming), median(attach), median(detach));
  fmt::print("max ms:    naming {:.1f}, attach (naming included) {:.1f}, detach {:.1f}\n",
             *std::max_element(naming.begin(), naming.end()),
             *std::max_element(attach.begin(), attach.end()),
             *std::max_element(detach.begin(), detach.end()));
  return 0;
}
