#include "session/session.h"

#include <algorithm>
#include <cmath>

#include "session/percentile.h"

namespace eacgm {

uint64_t CallStats::percentile_ns(double p) const {
  return nearest_rank_percentile(durations_ns, p);
}

std::string_view layer_status_name(LayerStatus status) {
  switch (status) {
    case LayerStatus::kActive:
      return "active";
    case LayerStatus::kUnavailable:
      return "unavailable";
    case LayerStatus::kDisabled:
      return "disabled";
  }
  return "disabled";
}

ProcessInfo& Session::process(uint32_t pid) {
  ProcessInfo& info = processes[pid];
  info.pid = pid;
  return info;
}

namespace {

bool is_worker(const Session& session, const ProcessInfo& p) {
  const ProcessInfo* parent = p.ppid ? session.find_process(p.ppid) : nullptr;
  if (!parent || p.rank != parent->rank) return false;
  if (p.forked) return !p.execed;
  return !p.cmdline.empty() && p.cmdline == parent->cmdline && p.comm == parent->comm;
}

}  // namespace

std::string_view process_role(const Session& session, const ProcessInfo& p) {
  if (is_worker(session, p)) return "worker";
  if (p.rank) return "rank";
  for (const auto& [pid, child] : session.processes) {
    if (child.ppid == p.pid && child.rank && !is_worker(session, child)) return "launcher";
  }
  return "main";
}

const ProcessInfo* Session::find_process(uint32_t pid) const {
  auto it = processes.find(pid);
  return it == processes.end() ? nullptr : &it->second;
}

void Session::add_call(const CallRecord& call) {
  LayerState& layer = layers[call.layer()];
  // Found without building a string: this runs for every recorded call.
  auto it = layer.calls.find(call.name());
  if (it == layer.calls.end())
    it = layer.calls.emplace(std::string(call.name()), CallStats{}).first;
  CallStats& stats = it->second;
  if (duty_cycled && !stats.sampled) stats.sampled = may_duty_cycle(*call.spec);
  ++stats.count;
  stats.total_ns += call.duration_ns;
  stats.self_ns += call.duration_ns;
  if (call.layer() == Layer::kTorch) {
    kernels.on_torch_op(call);
    stats.self_ns -=
        torch_nesting.children_ns(call.tid, call.start_ns, call.duration_ns, call.depth);
  }
  if (keep_durations) stats.durations_ns.push_back(call.duration_ns);
  if (keep_durations) kernels.add_launch(call, call.kernel);
  kernels.on_call(call);
  if (call.failed()) {
    ++stats.errors;
    ++stats.errors_by_code[call.raw.ret];
    return;  // a failed call moved no bytes and changed no memory
  }
  stats.bytes += call.bytes();

  const ProbeSpec& spec = *call.spec;
  switch (spec.memory) {
    case MemoryEffect::kDeviceAlloc:
      device_memory[call.pid].on_alloc(call.raw.out_value, call.bytes());
      break;
    case MemoryEffect::kDeviceFree:
      device_memory[call.pid].on_free(call.raw.word(spec.memory_ptr_slot));
      break;
    case MemoryEffect::kNone:
    case MemoryEffect::kHostAlloc:
    case MemoryEffect::kHostFree:
      break;
  }
}

void DeviceMemory::on_alloc(uint64_t ptr, uint64_t bytes) {
  // A pointer handed out twice means we missed its free (e.g. an API we do not trace released
  // it): replace rather than double count.
  if (auto it = live.find(ptr); it != live.end()) {
    outstanding_bytes -= static_cast<int64_t>(it->second);
  }
  live[ptr] = bytes;
  outstanding_bytes += static_cast<int64_t>(bytes);
  peak_bytes = std::max(peak_bytes, outstanding_bytes);
}

void DeviceMemory::on_free(uint64_t ptr) {
  if (ptr == 0) return;
  if (auto it = live.find(ptr); it != live.end()) {
    outstanding_bytes -= static_cast<int64_t>(it->second);
    live.erase(it);
  } else {
    ++unmatched_frees;
  }
}

}  // namespace eacgm
