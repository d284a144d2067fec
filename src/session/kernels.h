// Kernels by name. A launch names its kernel only by a handle: a host stub (the runtime's
// cudaLaunchKernel `func`) or a CUfunction/CUkernel (the driver's cuLaunchKernel `f`). The calls
// that create handles say which name each has (__cudaRegisterFunction, cuModuleGetFunction,
// cuLibraryGetKernel, cuKernelGetFunction); this table remembers that per process and keeps each
// kernel's launch figures.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "probes/probe_table.h"

namespace eacgm {

struct CallRecord;

struct KernelStats {
  uint64_t launches = 0;
  uint64_t errors = 0;
  uint64_t total_ns = 0;                      // CPU time inside the launch calls
  std::vector<uint64_t> durations_ns;         // every launch's, for exact percentiles
  std::map<std::string, uint64_t> shapes;     // "grid (x,y,z) block (x,y,z)" -> launches
  std::map<std::string, uint64_t> sites;      // the Python line that launched it -> launches
  std::map<std::string, uint64_t> torch_ops;  // the innermost torch operator around it -> launches
  std::map<uint32_t, uint64_t> pids;          // launches per process

  uint64_t percentile_ns(double p) const;
};

class KernelTable {
 public:
  // Most distinct kernels kept with figures; launches of others are counted in `unlisted`.
  static constexpr size_t kMaxKernels = 4096;

  // What a finished call means for names: a naming row's string names a handle, an alias row's
  // out handle is the kernel of its argument. Failed calls name nothing.
  void name_handle(uint32_t pid, uint64_t handle, std::string name);
  void on_call(const CallRecord& call);
  // The name of the kernel a launch call names; nullptr when it is not a launch or unknown.
  const std::string* kernel_of(const CallRecord& call) const;
  // Folds a launch into its kernel's figures (`kernel` from kernel_of, or nullptr: unnamed).
  void add_launch(const CallRecord& call, const std::string* kernel);
  // A torch operator finished: the launches its thread made inside it, not yet claimed by an
  // operator it called, were made by it. (Operators return after what they launched, so each
  // launch waits here for the innermost operator around it.)
  void on_torch_op(const CallRecord& op);

  // By (layer, mangled name); unnamed launches are under "" per layer.
  const std::map<std::pair<Layer, std::string>, KernelStats>& stats() const { return stats_; }
  uint64_t unlisted() const { return unlisted_; }
  size_t names_known() const { return names_.size(); }

 private:
  struct HandleHash {
    size_t operator()(const std::pair<uint32_t, uint64_t>& k) const {
      return std::hash<uint64_t>()(k.second * 0x9e3779b97f4a7c15ull ^ k.first);
    }
  };

  // Names are interned and never freed: calls point to them (CallRecord::kernel) for as long as
  // the session lives, also after a handle is reused for another kernel.
  std::unordered_set<std::string> interned_;
  std::unordered_map<std::pair<uint32_t, uint64_t>, const std::string*, HandleHash> names_;
  std::map<std::pair<Layer, std::string>, KernelStats> stats_;
  uint64_t unlisted_ = 0;
  // Per thread, launches waiting for the operator around them: start time and kernel.
  struct PendingLaunch {
    uint64_t start_ns;
    KernelStats* kernel;
  };
  static constexpr size_t kMaxPendingPerThread = 4096;
  std::unordered_map<uint32_t, std::vector<PendingLaunch>> pending_;
};

// A kernel's name for people: the demangled C++ name, or the name itself when it is not mangled.
std::string demangled_kernel_name(std::string_view mangled);

}  // namespace eacgm
