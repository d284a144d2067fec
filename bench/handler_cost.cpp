// handler_cost: where the cost of eacgm's call handlers goes. Runs the sync-loop workload under
// bench/handler_steps.bpf.c, a copy of eacgm's entry/return handlers cut into steps (see there),
// from the empty pair up to the full handlers, with and without ring buffer wakeups, in
// interleaved rounds. A reader thread drains the ring buffer as fast as it can. Run as root.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_skeletons.h"
#include "probes/probe_link.h"
#include "workload.h"

namespace {

namespace fs = std::filesystem;
using eacgm::Error;
using eacgm::ProbeLink;
using eacgm::Result;
using eacgm::bench::median;
using eacgm::bench::Run;

constexpr uint64_t kNoWakeup = 1;  // BPF_RB_NO_WAKEUP

struct Config {
  const char* name;
  int step;  // -1: untraced
  uint64_t submit_flags = 0;
  uint64_t wakeup_bytes = 0;
};

constexpr Config kConfigs[] = {
    {"untraced", -1},
    {"0 empty pair", 0},
    {"1 +targets lookup", 1},
    {"2 +call stack", 2},
    {"3 +stack-arg read", 3},
    {"4 +ringbuf, no wakeup", 4, kNoWakeup},
    {"4 +ringbuf, wake at 1MiB", 4, 0, 1 << 20},
    {"4 +ringbuf, wakeup", 4, 0},
};

// IRQ work interrupts so far, all CPUs: a ring buffer wakeup from BPF is one.
uint64_t irq_work_interrupts() {
  std::ifstream in("/proc/interrupts");
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    if (name != "IWI:") continue;
    uint64_t total = 0;
    for (uint64_t n; words >> n;) total += n;
    return total;
  }
  return 0;
}

struct StepRun {
  Run run;
  double irq_work_per_call = 0;
};

// Loads the handlers at `config.step`, attaches them, runs the workload with its pid in the
// target set and a reader draining the ring buffer.
Result<StepRun> run_step(const Config& config, const std::string& lib, uint64_t offset,
                         const std::string& cuda_calls, long long calls, const fs::path& dir) {
  const std::vector<std::string> argv = eacgm::bench::sync_loop_argv(cuda_calls, lib, 1, calls);
  const fs::path err_path = dir / "stderr.txt";
  StepRun result;
  if (config.step < 0) {
    auto out = eacgm::bench::run_command(argv, err_path);
    if (!out) return out.error();
    auto run = eacgm::bench::parse_sync_loops(*out, 1, calls);
    if (!run) return run.error();
    result.run = std::move(*run);
    return result;
  }

  std::unique_ptr<eacgm_handler_steps, decltype(&eacgm_handler_steps__destroy)> skel(
      eacgm_handler_steps__open(), eacgm_handler_steps__destroy);
  if (!skel) return Error{"cannot open the handler_steps BPF program"};
  skel->rodata->step = static_cast<uint32_t>(config.step);
  skel->rodata->submit_flags = config.submit_flags;
  skel->rodata->wakeup_bytes = config.wakeup_bytes;
  const auto type = static_cast<bpf_attach_type>(eacgm::kBpfTraceUprobeMulti);
  bpf_program__set_expected_attach_type(skel->progs.step_entry, type);
  bpf_program__set_expected_attach_type(skel->progs.step_return, type);
  if (eacgm_handler_steps__load(skel.get()) != 0) {
    return Error{"cannot load the handler_steps BPF program"};
  }
  const uint64_t offsets[] = {offset};
  const uint64_t cookies[] = {0};
  std::vector<ProbeLink> links;
  for (auto [prog, ret] :
       {std::pair{skel->progs.step_entry, false}, std::pair{skel->progs.step_return, true}}) {
    auto link = ProbeLink::uprobe_multi(bpf_program__fd(prog), lib, offsets, cookies, ret);
    if (!link) return link.error();
    links.push_back(std::move(*link));
  }

  uint64_t recorded = 0;
  std::unique_ptr<ring_buffer, decltype(&ring_buffer__free)> ring(
      ring_buffer__new(
          bpf_map__fd(skel->maps.events),
          [](void* ctx, void*, size_t) {
            ++*static_cast<uint64_t*>(ctx);
            return 0;
          },
          &recorded, nullptr),
      ring_buffer__free);
  if (!ring) return Error{"cannot open the ring buffer"};
  // Polls with a short timeout, then consumes: with BPF_RB_NO_WAKEUP nothing wakes it up.
  std::atomic<bool> stop = false;
  std::thread reader([&] {
    while (!stop.load()) {
      ring_buffer__poll(ring.get(), 10);
      ring_buffer__consume(ring.get());
    }
  });
  const int targets_fd = bpf_map__fd(skel->maps.targets);
  const uint64_t irq_work_before = irq_work_interrupts();
  auto out = eacgm::bench::run_command(argv, err_path, [targets_fd](pid_t pid) {
    const uint32_t tgid = static_cast<uint32_t>(pid);
    const uint8_t one = 1;
    bpf_map_update_elem(targets_fd, &tgid, &one, BPF_ANY);
  });
  const uint64_t irq_work = irq_work_interrupts() - irq_work_before;
  stop = true;
  reader.join();
  links.clear();
  ring_buffer__consume(ring.get());
  if (!out) return out.error();
  auto run = eacgm::bench::parse_sync_loops(*out, 1, calls);
  if (!run) return run.error();
  result.run = std::move(*run);
  result.run.recorded = recorded;
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<uint64_t> drops(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
  const uint32_t zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.drops), &zero, drops.data()) == 0) {
    for (uint64_t n : drops) result.run.dropped += n;
  }
  result.irq_work_per_call = static_cast<double>(irq_work) / static_cast<double>(calls);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::string lib = eacgm::bench::kNvidiaLib;
  std::string cuda_calls = EACGM_BENCH_CUDA_CALLS;
  long long calls = 200000;
  int runs = 5;
  CLI::App app{
      "Cost of each part of eacgm's call handlers, on top of a bare uprobe pair (run as "
      "root; see docs/PERFORMANCE.md)"};
  app.add_option("--lib", lib, "CUDA runtime to call")->capture_default_str();
  app.add_option("--calls", calls, "calls per run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--runs", runs, "interleaved rounds (medians are over these)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--cuda-calls", cuda_calls, "simgpu's cuda_calls binary")->capture_default_str();
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "print every run");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    fmt::print(stderr, "handler_cost: run as root (it loads BPF programs)\n");
    return 2;
  }
  auto scratch = eacgm::bench::Scratch::create(lib);
  if (!scratch) {
    fmt::print(stderr, "handler_cost: {}\n", scratch.error().message);
    return 1;
  }
  const std::string& copy = (*scratch)->lib();
  auto offset = eacgm::bench::function_offset(copy, eacgm::bench::kFunction);
  if (!offset) {
    fmt::print(stderr, "handler_cost: {}\n", offset.error().message);
    return 1;
  }

  constexpr size_t kCount = std::size(kConfigs);
  std::vector<std::vector<StepRun>> results(kCount);
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      const size_t c = (i + static_cast<size_t>(r)) % kCount;
      auto step = run_step(kConfigs[c], copy, *offset, cuda_calls, calls, (*scratch)->dir());
      if (!step) {
        fmt::print(stderr, "handler_cost: {}: {}\n", kConfigs[c].name, step.error().message);
        return 1;
      }
      if (verbose) {
        fmt::print(stderr, "{}: {:.1f} ns/call, {} recorded, {} dropped\n", kConfigs[c].name,
                   step->run.ns_per_call.front(), step->run.recorded, step->run.dropped);
      }
      results[c].push_back(std::move(*step));
    }
  }

  fmt::print(
      "handler_cost: {} in a copy of {}, {} calls per run, median of {} interleaved rounds\n",
      eacgm::bench::kFunction, lib, calls, runs);
  fmt::print("  {:<24} {:>9} {:>9} {:>7} {:>9} {:>8} {:>8}\n", "handlers", "ns/call", "added",
             "/bare+", "step", "irqwork", "complete");
  double base = 0, bare = 0;            // untraced and empty pair: the first two rows
  std::map<int, double> first_of_step;  // for 'step': the change from the step before
  for (size_t c = 0; c < kCount; ++c) {
    std::vector<double> ns, irq;
    int complete = 0;
    for (const StepRun& s : results[c]) {
      ns.push_back(s.run.ns_per_call.front());
      irq.push_back(s.irq_work_per_call);
      complete += s.run.recorded == static_cast<uint64_t>(calls) && s.run.dropped == 0;
    }
    const double m = median(ns);
    const Config& config = kConfigs[c];
    if (config.step < 0) base = m;
    if (config.step == 0) bare = m;
    const std::string added = config.step >= 0 ? fmt::format("{:+.1f}", m - base) : "";
    const std::string ratio =
        config.step >= 0 ? fmt::format("{:.3f}", (m - base) / (bare - base)) : std::string();
    first_of_step.emplace(config.step, m);
    const std::string delta =
        config.step > 0 ? fmt::format("{:+.1f}", m - first_of_step[config.step - 1]) : "";
    const std::string done =
        config.step == 4 ? fmt::format("{}/{}", complete, runs) : std::string();
    fmt::print("  {:<24} {:>9.1f} {:>9} {:>7} {:>9} {:>8.3f} {:>8}\n", config.name, m, added, ratio,
               delta, median(irq), done);
  }
  fmt::print(
      "  added: over untraced. /bare+: added / the empty pair's added. step: change from the\n"
      "  first row of the step before. irqwork: IRQ work interrupts per call. complete: runs\n"
      "  that recorded every call.\n");
  return 0;
}
