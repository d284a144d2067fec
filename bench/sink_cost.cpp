// What every recorded call costs in eacgm's own process after it left the ring buffer: the
// SQLite row and the Perfetto slice (the reader's per-event work, see docs/PERFORMANCE.md). Runs
// synthetic CUDA calls (a launch, an async copy, a sync, in turn, on four threads) through both
// sinks and prints the median time per call over several runs. No BPF, no root: for instruction
// counts that do not depend on the machine's load, run it under
//   valgrind --tool=callgrind build/bench/sink_cost 50000 1
//   sink_cost [CALLS=200000] [RUNS=5] [KEEP_DIR]
// KEEP_DIR: the last run's events.sqlite and trace stay there, for timing readers
// (bench/sqlite_page_size.sh).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "sinks/perfetto_writer.h"
#include "sinks/sqlite_writer.h"

namespace {

const eacgm::ProbeSpec* cuda_spec(std::string_view symbol) {
  for (const eacgm::ProbeSpec& spec : eacgm::probe_table(eacgm::Layer::kCuda)) {
    if (spec.symbol == symbol) return &spec;
  }
  fmt::print(stderr, "sink_cost: {} is not in the CUDA probe table\n", symbol);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t calls = argc > 1 ? std::stoul(argv[1]) : 200000;
  const int runs = argc > 2 ? std::stoi(argv[2]) : 5;
  const std::string keep_dir = argc > 3 ? argv[3] : "";
  const eacgm::ProbeSpec* specs[] = {cuda_spec("cudaLaunchKernel"), cuda_spec("cudaMemcpyAsync"),
                                     cuda_spec("cudaStreamSynchronize")};
  std::vector<double> per_call_ns, finish_per_call_ns;
  for (int run = 0; run < runs; ++run) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / fmt::format("eacgm-sink-cost-{}", getpid());
    std::filesystem::create_directories(dir);
    auto sqlite = eacgm::SqliteWriter::open((dir / "events.sqlite").string());
    auto perfetto = eacgm::PerfettoWriter::open((dir / "trace.perfetto-trace").string());
    if (!sqlite || !perfetto) {
      fmt::print(stderr, "sink_cost: cannot open the sinks in {}\n", dir.string());
      return 1;
    }
    eacgm::Session session;
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < calls; ++i) {
      eacgm::CallRecord call;
      call.pid = 100;
      call.tid = 100 + static_cast<uint32_t>(i % 4);
      call.spec = specs[i % 3];
      call.func_id = static_cast<uint32_t>(i % 3);
      call.start_ns = 1'000'000'000 + i * 5'000;
      call.duration_ns = 2'000 + i % 1'000;
      // Grid, block, shared memory, stream; dst, src, count, kind, stream; stream.
      call.raw.args = {0x7f0000001000 + i * 64,
                       0x100000080,
                       0x100000001,
                       0x7c0000000000 + i,
                       128,
                       0x5500000000,
                       4096,
                       0};
      (*sqlite)->on_call(call);
      (*perfetto)->on_call(call);
    }
    const double elapsed_ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    per_call_ns.push_back(elapsed_ns / static_cast<double>(calls));
    // The end of the run (indexes, making the database one file) is paid per call too.
    const auto finish_start = std::chrono::steady_clock::now();
    if (auto r = (*sqlite)->finish(session); !r) fmt::print(stderr, "{}\n", r.error().message);
    if (auto r = (*perfetto)->finish(session); !r) fmt::print(stderr, "{}\n", r.error().message);
    finish_per_call_ns.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - finish_start)
            .count() /
        static_cast<double>(calls));
    if (!keep_dir.empty() && run + 1 == runs) {
      std::filesystem::remove_all(keep_dir);
      std::filesystem::copy(dir, keep_dir, std::filesystem::copy_options::recursive);
    }
    std::filesystem::remove_all(dir);
  }
  std::sort(per_call_ns.begin(), per_call_ns.end());
  std::sort(finish_per_call_ns.begin(), finish_per_call_ns.end());
  fmt::print(
      "calls={} runs={} sqlite+perfetto per call: median {:.0f} ns (min {:.0f}, max {:.0f}); "
      "finishing, per call: median {:.0f} ns (min {:.0f}, max {:.0f})\n",
      calls, runs, per_call_ns[per_call_ns.size() / 2], per_call_ns.front(), per_call_ns.back(),
      finish_per_call_ns[finish_per_call_ns.size() / 2], finish_per_call_ns.front(),
      finish_per_call_ns.back());
  return 0;
}
