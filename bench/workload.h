// What the benchmarks share: running simgpu's `cuda_calls --sequence sync-loop` (N calls of
// cudaStreamSynchronize(NULL) timed between two clock reads, so start-up is not measured),
// reading its result, and medians.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace eacgm::bench {

inline constexpr const char* kFunction = "cudaStreamSynchronize";
inline constexpr const char* kNvidiaLib = "/usr/local/cuda/lib64/libcudart.so.13";
// The driver's counterpart, in NVIDIA's own stub of libcuda (it returns 34, no driver, at once).
inline constexpr const char* kDriverFunction = "cuStreamSynchronize";
inline constexpr const char* kNvidiaDriverStub = "/usr/local/cuda/lib64/stubs/libcuda.so";

// One run of `procs` concurrent sync-loops.
struct Run {
  std::vector<double> ns_per_call;  // one per process
  double calls_per_s = 0;           // all processes together: sum of count / elapsed
  uint64_t recorded = 0;            // calls that reached user space, where that is counted
  uint64_t dropped = 0;             // failed ring buffer reservations, where that is counted
};

// `procs` sync-loops of `calls` calls each of `function` (shaped like cudaStreamSynchronize) in
// `lib`. Several are started by one shell, so that a tracer following the shell's children sees
// all of them.
std::vector<std::string> sync_loop_argv(const std::string& cuda_calls, const std::string& lib,
                                        int procs, long long calls,
                                        const std::string& function = kFunction);

// Runs argv to completion and returns its stdout. Its stderr goes to `err_path` and is quoted if
// the command fails. `on_spawn`, if given, is called with the command's pid before the command
// starts.
Result<std::string> run_command(const std::vector<std::string>& argv,
                                const std::filesystem::path& err_path,
                                const std::function<void(pid_t)>& on_spawn = {});

// The "sync-loop count=N elapsed_ns=T ns_per_call=X errors=E" lines of `procs` processes.
Result<Run> parse_sync_loops(const std::string& out, int procs, long long calls);

// File offset of `function` in `lib`, for attaching a uprobe.
Result<uint64_t> function_offset(const std::string& lib, const std::string& function);

// A scratch directory under /tmp, removed on destruction, holding a private copy of the library
// under test. Uprobes bind to a file's inode, so the copy keeps probes that something else attaches
// to the installed library (a test suite running alongside) out of the benchmark's runs.
class Scratch {
 public:
  static Result<std::unique_ptr<Scratch>> create(const std::string& lib);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& lib() const { return lib_; }  // the private copy

 private:
  Scratch() = default;
  std::filesystem::path dir_;
  std::string lib_;
};

double median(std::vector<double> v);

std::string read_file(const std::filesystem::path& path);

}  // namespace eacgm::bench
