#include "session/kernels.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "layers/python/python_profile.h"
#include "session/percentile.h"
#include "session/session.h"

namespace eacgm {

uint64_t KernelStats::percentile_ns(double p) const {
  return nearest_rank_percentile(durations_ns, p);
}

void KernelTable::name_handle(uint32_t pid, uint64_t handle, std::string name) {
  if (handle == 0 || name.empty()) return;
  // A handle reused for another kernel (a module unloaded, another loaded): the newest holds.
  names_[{pid, handle}] = &*interned_.insert(std::move(name)).first;
}

void KernelTable::on_call(const CallRecord& call) {
  const ProbeSpec& spec = *call.spec;
  if (spec.alias_slot == kNoSlot || call.failed()) return;
  auto it = names_.find({call.pid, call.raw.word(spec.alias_slot)});
  if (it != names_.end() && call.raw.out_value != 0)
    names_[{call.pid, call.raw.out_value}] = it->second;
}

const std::string* KernelTable::kernel_of(const CallRecord& call) const {
  if (call.spec->kernel_slot == kNoSlot) return nullptr;
  auto it = names_.find({call.pid, call.raw.word(call.spec->kernel_slot)});
  return it == names_.end() ? nullptr : it->second;
}

void KernelTable::add_launch(const CallRecord& call, const std::string* kernel) {
  if (call.spec->kernel_slot == kNoSlot) return;
  const std::pair<Layer, std::string> id{call.layer(), kernel ? *kernel : std::string()};
  auto it = stats_.find(id);
  if (it == stats_.end()) {
    if (stats_.size() >= kMaxKernels) {
      ++unlisted_;
      return;
    }
    it = stats_.emplace(id, KernelStats{}).first;
  }
  KernelStats& k = it->second;
  std::vector<PendingLaunch>& pending = pending_[call.tid];
  if (pending.size() >= kMaxPendingPerThread) {
    // No operator ever closed around these (the torch layer is off, or the launches come from
    // outside PyTorch): forget the older half.
    pending.erase(pending.begin(), pending.begin() + kMaxPendingPerThread / 2);
  }
  pending.push_back({call.start_ns, &k});
  ++k.launches;
  k.total_ns += call.duration_ns;
  k.durations_ns.push_back(call.duration_ns);
  ++k.pids[call.pid];
  if (call.failed()) {
    ++k.errors;
    return;
  }
  // The shape as the row's grid and block arguments show it.
  std::string grid, block;
  for (const DecodedArg& arg : call.decoded_args()) {
    if (arg.name == "grid" || arg.name == "gridDim") grid = arg.text;
    if (arg.name == "block" || arg.name == "blockDim") block = arg.text;
  }
  // Bounded: a kernel launched with ever new shapes keeps its first 32.
  if (!grid.empty()) {
    std::string shape = fmt::format("grid {} block {}", grid, block);
    if (k.shapes.size() < 32 || k.shapes.contains(shape)) ++k.shapes[shape];
  }
  if (call.py_site) {
    std::string site = fmt::format("{} line {}", call.py_site->function, call.py_site->line);
    if (k.sites.size() < 32 || k.sites.contains(site)) ++k.sites[site];
  }
}

void KernelTable::on_torch_op(const CallRecord& op) {
  auto it = pending_.find(op.tid);
  if (it == pending_.end()) return;
  std::vector<PendingLaunch>& pending = it->second;
  const uint64_t end_ns = op.start_ns + op.duration_ns;
  std::string name(op.name());
  std::erase_if(pending, [&](const PendingLaunch& p) {
    if (p.start_ns >= op.start_ns && p.start_ns <= end_ns) {
      if (p.kernel->torch_ops.size() < 32 || p.kernel->torch_ops.contains(name)) {
        ++p.kernel->torch_ops[name];
      }
      return true;
    }
    // An outermost operator has ended: a launch before it that no operator claimed was made
    // outside every operator.
    return op.depth == 0 && p.start_ns < end_ns;
  });
}

std::string demangled_kernel_name(std::string_view mangled) {
  if (!mangled.starts_with("_Z")) return std::string(mangled);
  int status = 0;
  const std::string owned(mangled);
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(owned.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : owned;
}

}  // namespace eacgm
