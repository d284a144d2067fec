#include "analysis/features.h"

#include <algorithm>
#include <array>

namespace eacgm {
namespace {

constexpr std::array<std::string_view, kWindowFeatureCount> kNames = {
    "call_rate",
    "launch_rate",
    "launch_latency_log_ns",
    "sync_latency_log_ns",
    "busy_share",
    "copy_mib_per_s",
    "device_memory_floor_mib",
    "device_memory_floor_slope_mib_per_s",
    "nccl_latency_log_ns",
    "nccl_bandwidth_gb_per_s",
    "error_rate"};

constexpr double kMiB = 1048576.0;

}  // namespace

std::span<const std::string_view> window_feature_names() { return kNames; }

std::optional<int> window_feature_index(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

int worse_direction(int feature) {
  switch (feature) {
    case kCallRate:
    case kLaunchRate:
    case kCopyRate:
    case kCollectiveBandwidth:
      return -1;
    case kBusyShare:
      return 0;
    default:
      return 1;
  }
}

double feature_min_scale(int feature, double typical_value) {
  const double relative = 0.05 * std::abs(typical_value);
  switch (feature) {
    case kLaunchLatency:
    case kSyncLatency:
    case kCollectiveLatency:
      return 0.1;  // logs: about 10 % of the latency
    case kBusyShare:
      // The share of time inside traced calls moves with the machine's load as the calls'
      // durations do: on 2 vCPUs a healthy CPU training job's went from 27 % to 37 % for seconds
      // (docs/PERFORMANCE.md, real workloads).
      return std::max(0.02, 3 * relative);
    case kDeviceMemory:
    case kDeviceMemorySlope:
      return std::max(1.0, relative);  // MiB: a step's allocations come and go
    case kErrorRate:
      return 0.5;
    default:  // rates and bandwidths: a busy machine moves them by 10 % without any fault
      return std::max(1e-3, 2 * relative);
  }
}

double median(std::vector<double> values) {
  if (values.empty()) return kNaN;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double median_absolute_deviation(std::span<const double> values, double center) {
  std::vector<double> d;
  d.reserve(values.size());
  for (double v : values) d.push_back(std::abs(v - center));
  return median(std::move(d));
}

double ApiWindow::median_log_duration() const { return median(log_durations); }

void WindowAggregator::start_next(Open& open) const {
  ++open.index;
  open.previous_floor = open.floor;
  open.floor = open.outstanding;
  open.calls = open.launches = open.errors = open.busy_ns = open.copy_bytes = 0;
  open.collective_bytes = open.collective_ns = open.syncs = open.collectives = 0;
  open.launch_log_sum = open.sync_log_sum = open.collective_log_sum = 0;
  open.apis.clear();
}

Window WindowAggregator::emit(uint32_t pid, Open& open) const {
  Window w;
  w.pid = pid;
  w.index = open.index;
  w.start_ns = open.origin_ns + static_cast<uint64_t>(open.index) * width_ns_;
  w.end_ns = w.start_ns + width_ns_;
  const double seconds = static_cast<double>(width_ns_) / 1e9;
  auto mean_or_nan = [](double sum, uint64_t n) { return n ? sum / static_cast<double>(n) : kNaN; };
  w.features.assign(kWindowFeatureCount, kNaN);
  w.features[kCallRate] = static_cast<double>(open.calls) / seconds;
  w.features[kLaunchRate] = static_cast<double>(open.launches) / seconds;
  w.features[kLaunchLatency] = mean_or_nan(open.launch_log_sum, open.launches);
  w.features[kSyncLatency] = mean_or_nan(open.sync_log_sum, open.syncs);
  w.features[kBusyShare] = static_cast<double>(open.busy_ns) / static_cast<double>(width_ns_);
  w.features[kCopyRate] = static_cast<double>(open.copy_bytes) / kMiB / seconds;
  w.features[kDeviceMemory] = static_cast<double>(open.floor) / kMiB;
  w.features[kDeviceMemorySlope] =
      static_cast<double>(open.floor - open.previous_floor) / kMiB / seconds;
  w.features[kCollectiveLatency] = mean_or_nan(open.collective_log_sum, open.collectives);
  if (open.collective_ns > 0) {
    w.features[kCollectiveBandwidth] =
        static_cast<double>(open.collective_bytes) / static_cast<double>(open.collective_ns);
  }
  w.features[kErrorRate] = static_cast<double>(open.errors) / seconds;
  w.apis = std::move(open.apis);
  return w;
}

void WindowAggregator::add(const CallSample& call) {
  auto [it, fresh] = open_.try_emplace(call.pid);
  Open& open = it->second;
  if (fresh) {
    open.origin_ns = call.end_ns();
    open.outstanding = open.floor = open.previous_floor = call.outstanding_bytes;
  }
  // Calls that end past the open window first complete it (and any empty ones in between).
  while (call.end_ns() >= open.origin_ns + static_cast<uint64_t>(open.index + 1) * width_ns_) {
    ready_.push_back(emit(call.pid, open));
    start_next(open);
  }
  ++open.calls;
  open.busy_ns += call.duration_ns;
  open.outstanding = call.outstanding_bytes;
  open.floor = std::min(open.floor, call.outstanding_bytes);
  if (call.failed) ++open.errors;
  const double log_duration = log_ns(call.duration_ns);
  ApiWindow& api = open.apis[call.name];
  api.layer = call.layer;
  api.log_durations.push_back(log_duration);
  switch (call.api_class) {
    case ApiClass::kLaunch:
      ++open.launches;
      open.launch_log_sum += log_duration;
      break;
    case ApiClass::kSync:
      ++open.syncs;
      open.sync_log_sum += log_duration;
      break;
    case ApiClass::kCopy:
      open.copy_bytes += call.bytes;
      break;
    case ApiClass::kCollective:
      ++open.collectives;
      open.collective_log_sum += log_duration;
      open.collective_bytes += call.bytes;
      open.collective_ns += call.duration_ns;
      break;
    default:
      break;
  }
}

void WindowAggregator::end_process(uint32_t pid, uint64_t end_ns) {
  ends_.try_emplace(pid, end_ns);
}

std::vector<Window> WindowAggregator::close(uint64_t now_ns) {
  for (auto& [pid, open] : open_) {
    const auto ended = ends_.find(pid);
    for (;;) {
      const uint64_t end = open.origin_ns + static_cast<uint64_t>(open.index + 1) * width_ns_;
      if (ended != ends_.end() && end > ended->second) break;  // never complete: dropped
      if (end + grace_ns_ > now_ns) break;
      ready_.push_back(emit(pid, open));
      start_next(open);
    }
  }
  // Windows whose process ended before them are not emitted; completed ones are, even if they
  // were completed by add() before the process's end was known.
  std::vector<Window> out;
  out.swap(ready_);
  std::erase_if(out, [this](const Window& w) {
    const auto ended = ends_.find(w.pid);
    return ended != ends_.end() && w.end_ns > ended->second;
  });
  std::stable_sort(out.begin(), out.end(),
                   [](const Window& a, const Window& b) { return a.end_ns < b.end_ns; });
  return out;
}

std::vector<Window> WindowAggregator::finish(uint64_t end_ns) {
  for (const auto& [pid, open] : open_) {
    auto [it, fresh] = ends_.try_emplace(pid, end_ns);
    if (!fresh) it->second = std::min(it->second, end_ns);
  }
  return close(std::numeric_limits<uint64_t>::max());
}

}  // namespace eacgm
