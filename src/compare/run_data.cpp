#include "compare/run_data.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>

#include "analysis/window_analyzer.h"
#include "common/sqlite_handles.h"
#include "compare/rank_test.h"
#include "session/kernels.h"

namespace eacgm::compare {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMinWindowNs = 50'000'000;
constexpr uint64_t kMaxWindowNs = 1'000'000'000;
constexpr uint64_t kWindowsPerShortestRun = 20;

double column_or_nan(sqlite3_stmt* s, int i) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, i);
}

uint64_t column_u64(sqlite3_stmt* s, int i) {
  return static_cast<uint64_t>(std::max<int64_t>(sqlite3_column_int64(s, i), 0));
}

std::string column_text(sqlite3_stmt* s, int i) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return text ? text : "";
}

// Each row of an optional table of the session (a layer's: gpu samples, collectives, Python
// functions). A session without the table (an older one, or one recorded without the layer) has
// none; that is not an error, layers are optional.
template <typename OnRow>
void each_row(const std::string& dir, const char* sql, OnRow on_row) {
  SqliteDb db;
  const std::string path = dir + "/events.sqlite";
  if (sqlite3_open_v2(path.c_str(), &db.db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return;
  (void)sqlite_each_row(db.db, sql, on_row);
}

std::vector<GpuReading> read_gpu_samples(const std::string& dir) {
  std::vector<GpuReading> out;
  each_row(dir,
           "SELECT device, ts_ns, util_pct, memory_used_bytes, power_w, temperature_c, "
           "sm_clock_mhz FROM gpu_samples ORDER BY id",
           [&](sqlite3_stmt* s) {
             GpuReading r;
             r.device = sqlite3_column_int(s, 0);
             r.ts_ns = column_u64(s, 1);
             r.util_pct = column_or_nan(s, 2);
             r.memory_used_bytes = column_or_nan(s, 3);
             r.power_w = column_or_nan(s, 4);
             r.temperature_c = column_or_nan(s, 5);
             r.sm_clock_mhz = column_or_nan(s, 6);
             out.push_back(r);
           });
  return out;
}

std::vector<CollectiveEntry> read_collectives(const std::string& dir) {
  std::vector<CollectiveEntry> out;
  each_row(dir,
           "SELECT c.pid, k.comm, k.rank, k.seq, c.start_ns FROM collectives k "
           "JOIN calls c ON c.id = k.call_id",
           [&](sqlite3_stmt* s) {
             CollectiveEntry e;
             e.pid = static_cast<uint32_t>(sqlite3_column_int64(s, 0));
             e.comm = column_text(s, 1);
             e.rank = sqlite3_column_int(s, 2);
             e.seq = column_u64(s, 3);
             e.start_ns = column_u64(s, 4);
             out.push_back(std::move(e));
           });
  return out;
}

std::vector<PythonFunctionTime> read_python_functions(const std::string& dir) {
  std::vector<PythonFunctionTime> out;
  each_row(dir, "SELECT function, samples, self_ns FROM python_functions", [&](sqlite3_stmt* s) {
    PythonFunctionTime f;
    f.function = column_text(s, 0);
    f.samples = column_u64(s, 1);
    f.self_ns = column_u64(s, 2);
    out.push_back(std::move(f));
  });
  return out;
}

// The windows of one run: [start + i * window, start + (i + 1) * window), the last one possibly
// shorter (but at least half a window: a shorter tail is left out).
class Windows {
 public:
  Windows(uint64_t start_ns, uint64_t end_ns, uint64_t window_ns)
      : start_(start_ns), window_(window_ns) {
    const uint64_t span = end_ns > start_ns ? end_ns - start_ns : 0;
    count_ = span / window_;
    tail_ = span % window_;
    if (tail_ >= window_ / 2) {
      ++count_;
    } else {
      tail_ = 0;
    }
    if (count_ == 0) {  // a run shorter than half a window: one window of its own length
      count_ = 1;
      tail_ = std::max<uint64_t>(span, 1);
    }
  }
  size_t count() const { return count_; }
  // The window holding `t_ns`, or -1 past the last one.
  std::ptrdiff_t of(uint64_t t_ns) const {
    const uint64_t i = t_ns <= start_ ? 0 : (t_ns - start_) / window_;
    return i < count_ ? static_cast<std::ptrdiff_t>(i) : -1;
  }
  double seconds(size_t i) const {
    const bool last_short = tail_ > 0 && i + 1 == count_;
    return static_cast<double>(last_short ? tail_ : window_) / 1e9;
  }
  uint64_t start_of(size_t i) const { return start_ + i * window_; }

 private:
  uint64_t start_, window_, count_ = 0, tail_ = 0;
};

// The calls of one (process, layer, name) in one run, or the collectives of one rank.
struct CallSlot {
  std::vector<uint32_t> counts;                     // per window
  std::vector<std::pair<uint32_t, double>> values;  // (window, value): a duration, a bandwidth
  uint64_t calls = 0, total_ns = 0;
};

void add_value(CallSlot& slot, std::ptrdiff_t w, uint64_t ns, double value) {
  ++slot.calls;
  slot.total_ns += ns;
  if (w < 0) return;
  if (!slot.counts.empty()) ++slot.counts[static_cast<size_t>(w)];
  slot.values.emplace_back(static_cast<uint32_t>(w), value);
}

// Per-window medians of `values` (any window with a value has one).
std::vector<double> window_medians(std::vector<std::pair<uint32_t, double>> values) {
  std::sort(values.begin(), values.end());
  std::vector<double> out, group;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    group.clear();
    while (j < values.size() && values[j].first == values[i].first) {
      group.push_back(values[j].second);
      ++j;
    }
    out.push_back(median(group));
    i = j;
  }
  return out;
}

// The windows in which a process key's processes made calls: a rate or a memory figure means
// something only while the process runs (a run spends a moment starting the job before its first
// call and ending it after the last, and those zeros would only blur the comparison). The first
// and the last active window are cut off when there are enough others: the process started or
// stopped in them, so their rates are partial.
struct Active {
  size_t first = std::numeric_limits<size_t>::max(), last = 0;
  void add(size_t w) {
    first = std::min(first, w);
    last = std::max(last, w);
  }
  std::pair<size_t, size_t> range() const {  // [begin, end)
    if (first > last) return {0, 0};
    if (last - first + 1 > 4) return {first + 1, last};
    return {first, last + 1};
  }
};

std::vector<double> window_rates(const std::vector<uint32_t>& counts, const Windows& windows,
                                 const Active& active) {
  const auto [begin, end] = active.range();
  std::vector<double> out;
  for (size_t i = begin; i < end; ++i) out.push_back(counts[i] / windows.seconds(i));
  return out;
}

// Percent of the process key's calls in each active window.
std::vector<double> window_shares(const std::vector<uint32_t>& counts,
                                  const std::vector<uint32_t>& totals, const Active& active) {
  const auto [begin, end] = active.range();
  std::vector<double> out;
  for (size_t i = begin; i < end; ++i) {
    if (totals[i] > 0) out.push_back(100.0 * counts[i] / totals[i]);
  }
  return out;
}

// A process's key as compare matches it across runs: its rank, or its command name, and whether it
// is a worker of another (entity_key, the same key the window detectors use).
std::string process_key(const RecordedSession& s, uint32_t pid) {
  auto it = s.processes.find(pid);
  return entity_key(it == s.processes.end() ? EntityInfo{} : it->second);
}

void measure_calls(const LoadedRun& run, const Windows& windows, RunData& out) {
  const RecordedSession& s = *run.session;
  // Each process key is held once, whatever number of processes share it (a rank's DataLoader
  // workers, workers started again each epoch), and every pid points at it: the slots below are
  // keyed by its address, so that they pool the calls of all those processes.
  std::set<std::string> key_names;
  std::map<uint32_t, const std::string*> keys;
  auto key_of = [&](uint32_t pid) -> const std::string& {
    auto [it, fresh] = keys.try_emplace(pid, nullptr);
    if (fresh) it->second = &*key_names.insert(process_key(s, pid)).first;
    return *it->second;
  };
  // Names are interned in the session, so their addresses identify them.
  using SlotKey = std::tuple<const std::string*, Layer, const char*>;
  std::map<SlotKey, CallSlot> calls, self, kernels, bandwidth;
  auto slot = [&](std::map<SlotKey, CallSlot>& in, const SlotKey& key) -> CallSlot& {
    auto [it, fresh] = in.try_emplace(key);
    if (fresh) it->second.counts.assign(windows.count(), 0);
    return it->second;
  };
  auto add = [](CallSlot& slot, std::ptrdiff_t w, uint64_t ns) {
    add_value(slot, w, ns, static_cast<double>(ns));
  };
  // NCCL calls made between ncclGroupStart and ncclGroupEnd return at once and move their bytes
  // at ncclGroupEnd: their durations say nothing of a bandwidth. Open groups per thread (calls
  // arrive in the order they returned, and these do not nest in one another).
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> open_groups;
  // Self time: calls arrive in the order they returned, children before their parent, so the
  // time of the calls nested directly in a call at depth d is what its depth-d+1 children added
  // since the previous call at depth d on the thread returned.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<uint64_t>> nested;
  // Device memory per process and window: the highest outstanding total, and where it stood at
  // the window's last call (a window without calls holds what the previous one ended with).
  struct Memory {
    std::vector<int64_t> peak, last;
    std::vector<bool> seen;
    uint64_t events = 0;
  };
  std::map<uint32_t, Memory> memory;

  std::map<std::string, Active> active;
  std::map<std::string, CallSlot> totals;  // every call of a process key
  const bool places = s.places.size() == s.calls.size();
  for (size_t i = 0; i < s.calls.size(); ++i) {
    const CallSample& c = s.calls[i];
    const std::string& key = key_of(c.pid);
    const std::ptrdiff_t w = windows.of(c.start_ns);
    if (w >= 0) active[key].add(static_cast<size_t>(w));
    add(slot(calls, {&key, c.layer, c.name.data()}), w, c.duration_ns);
    {
      CallSlot& all = totals[key];
      if (all.counts.empty()) all.counts.assign(windows.count(), 0);
      ++all.calls;
      all.total_ns += c.duration_ns;
      if (w >= 0) ++all.counts[static_cast<size_t>(w)];
    }

    if (c.layer == Layer::kNccl) {
      uint32_t& groups = open_groups[{c.pid, places ? s.places[i].tid : 0}];
      if (!c.failed && c.name == "ncclGroupStart") ++groups;
      if (c.name == "ncclGroupEnd" && groups > 0) --groups;  // failed or not, the group is over
      // Bytes per ns are GB/s.
      if (c.bytes > 0 && c.duration_ns > 0 && groups == 0) {
        add_value(slot(bandwidth, {&key, c.layer, c.name.data()}), w, c.duration_ns,
                  static_cast<double>(c.bytes) / static_cast<double>(c.duration_ns));
      }
    }

    Memory& m = memory[c.pid];
    if (m.peak.empty()) {
      m.peak.assign(windows.count(), 0);
      m.last.assign(windows.count(), 0);
      m.seen.assign(windows.count(), false);
    }
    if (c.memory_event) ++m.events;
    if (w >= 0) {
      const auto wi = static_cast<size_t>(w);
      m.peak[wi] = m.seen[wi] ? std::max(m.peak[wi], c.outstanding_bytes) : c.outstanding_bytes;
      m.last[wi] = c.outstanding_bytes;
      m.seen[wi] = true;
    }

    if (!places) continue;
    const CallPlace& p = s.places[i];
    std::vector<uint64_t>& sums = nested[{c.pid, p.tid}];
    if (sums.size() < p.depth + 2) sums.resize(p.depth + 2, 0);
    const uint64_t children = sums[p.depth + 1];
    sums[p.depth + 1] = 0;
    sums[p.depth] += c.duration_ns;
    if (c.layer == Layer::kTorch) {
      add(slot(self, {&key, c.layer, c.name.data()}), w,
          c.duration_ns - std::min(c.duration_ns, children));
    }
    if (!p.kernel.empty()) add(slot(kernels, {&key, c.layer, p.kernel.data()}), w, c.duration_ns);
  }

  auto emit = [&](const std::map<SlotKey, CallSlot>& in, std::string_view latency,
                  std::string_view share) {
    for (const auto& [k, slot] : in) {
      const auto& [process, layer, name] = k;
      // Kernels by the name people read (`gemm_fwd(int*)`), as in the report and summary.json.
      MetricKey key{*process, std::string(layer_name(layer)),
                    latency == kLaunchLatency ? demangled_kernel_name(name) : std::string(name),
                    std::string(latency)};
      RunValues lat{window_medians(slot.values), slot.calls, slot.total_ns};
      out.metrics[key] = std::move(lat);
      if (share.empty()) continue;
      key.metric = share;
      out.metrics[key] =
          RunValues{window_shares(slot.counts, totals[*process].counts, active[*process]),
                    slot.calls, slot.total_ns};
    }
  };
  emit(calls, kLatency, kShare);
  emit(self, kSelfTime, "");
  emit(kernels, kLaunchLatency, kLaunchShare);
  emit(bandwidth, kBandwidth, "");
  for (const auto& [key, all] : totals) {
    out.metrics[{key, "all", "all calls", std::string(kPace)}] =
        RunValues{window_rates(all.counts, windows, active[key]), all.calls, all.total_ns};
  }

  // Device memory of each process key: the sum of its processes' window peaks (workers of one
  // rank share a key), for the keys whose processes allocated or freed device memory.
  std::map<std::string, std::pair<std::vector<double>, uint64_t>> by_key;
  for (auto& [pid, m] : memory) {
    if (m.events == 0) continue;
    auto end = s.process_end_ns.find(pid);
    auto& [values, events] = by_key[key_of(pid)];
    values.resize(windows.count(), 0);
    events += m.events;
    int64_t carry = 0;
    for (size_t w = 0; w < windows.count(); ++w) {
      if (end != s.process_end_ns.end() && windows.start_of(w) >= end->second) carry = 0;
      const int64_t peak = m.seen[w] ? std::max(carry, m.peak[w]) : carry;
      values[w] += static_cast<double>(std::max<int64_t>(peak, 0));
      if (m.seen[w]) carry = m.last[w];
    }
  }
  for (auto& [key, v] : by_key) {
    const auto [begin, end] = active[key].range();
    RunValues values{{}, v.second, 0};
    for (size_t w = begin; w < end; ++w) values.windows.push_back(v.first[w]);
    out.metrics[{key, "memory", "device memory", std::string(kMemoryPeak)}] = std::move(values);
  }
}

// Each rank's lateness into the collectives of its communicators (collective_arrivals). A
// collective's lateness values fall in the window of its earliest entry, so that one collective's
// ranks are judged in the same window.
void measure_collectives(const LoadedRun& run, const Windows& windows, RunData& out) {
  std::map<uint32_t, std::string> keys;
  std::map<std::string, CallSlot> lateness;
  for (const CollectiveArrival& a : collective_arrivals(run.collectives)) {
    auto [key, fresh] = keys.try_emplace(a.entry->pid);
    if (fresh) key->second = process_key(*run.session, a.entry->pid);
    add_value(lateness[key->second], windows.of(a.earliest_ns), a.lateness_ns,
              static_cast<double>(a.lateness_ns));
  }
  for (const auto& [key, slot] : lateness) {
    out.metrics[{key, "nccl", "all collectives", std::string(kLateness)}] =
        RunValues{window_medians(slot.values), slot.calls, slot.total_ns};
  }
}

// The share of each Python function in the run's sampled time (its self time over all functions'
// self time): python_functions keeps whole-run figures only, so it is one value per run, for the
// whole job (the table does not say which process ran a function).
void measure_python(const LoadedRun& run, RunData& out) {
  uint64_t total_ns = 0;
  for (const PythonFunctionTime& f : run.python) total_ns += f.self_ns;
  if (total_ns == 0) return;
  for (const PythonFunctionTime& f : run.python) {
    const double share = 100.0 * static_cast<double>(f.self_ns) / static_cast<double>(total_ns);
    out.metrics[{"job", "python", f.function, std::string(kPythonShare)}] =
        RunValues{{share}, f.samples, f.self_ns};
  }
}

void measure_gpu(const LoadedRun& run, const Windows& windows, RunData& out) {
  struct Reading {
    std::string_view metric;
    double GpuReading::*field;
  };
  static constexpr Reading kReadings[] = {{kGpuUtil, &GpuReading::util_pct},
                                          {kGpuMemory, &GpuReading::memory_used_bytes},
                                          {kGpuPower, &GpuReading::power_w},
                                          {kGpuTemperature, &GpuReading::temperature_c},
                                          {kGpuClock, &GpuReading::sm_clock_mhz}};
  // (device, reading) -> per window (sum, samples)
  std::map<std::pair<int, size_t>, std::vector<std::pair<double, uint64_t>>> sums;
  for (const GpuReading& r : run.gpu) {
    const std::ptrdiff_t w = windows.of(r.ts_ns);
    if (w < 0) continue;
    for (size_t i = 0; i < std::size(kReadings); ++i) {
      const double v = r.*kReadings[i].field;
      if (std::isnan(v)) continue;
      auto& per_window = sums[{r.device, i}];
      per_window.resize(windows.count(), {0.0, 0});
      per_window[static_cast<size_t>(w)].first += v;
      ++per_window[static_cast<size_t>(w)].second;
    }
  }
  for (const auto& [k, per_window] : sums) {
    RunValues values;
    for (const auto& [sum, n] : per_window) {
      if (n == 0) continue;
      values.windows.push_back(sum / static_cast<double>(n));
      values.count += n;
    }
    out.metrics[{"job", "gpu", fmt::format("device {}", k.first),
                 std::string(kReadings[k.second].metric)}] = std::move(values);
  }
}

// Whole-run figures from summary.json: the os layer's MAP_POPULATE mappings, mmaps and signals,
// and the anomalies by kind, as counts; bytes mapped a second, the mean ioctl latency per device,
// the device memory held at the end and whether the job ended abnormally, as one value per run.
void measure_summary(const LoadedRun& run, RunData& out) {
  const nlohmann::json& summary = run.summary;
  if (!summary.is_object()) return;
  const RecordedSession& s = *run.session;
  auto key_of_text = [&](const std::string& pid_text) {
    char* end = nullptr;
    const unsigned long pid = std::strtoul(pid_text.c_str(), &end, 10);
    return process_key(s, static_cast<uint32_t>(pid));
  };
  auto add_events = [&](const std::string& process, const std::string& layer,
                        const std::string& what, std::string_view metric, uint64_t n) {
    out.metrics[{process, layer, what, std::string(metric)}].count += n;
  };
  // Per-run values summed over the processes of a key (workers of one rank share it), with the
  // calls (mappings, ioctls, allocations) behind them; the ioctl mean divides by the calls.
  struct Sum {
    double value = 0;
    uint64_t count = 0;
  };
  std::map<MetricKey, Sum> sums;
  const nlohmann::json os = summary.value("/layers/os"_json_pointer, nlohmann::json());
  if (os.is_object() && os.value("status", "") == "active") {
    if (const auto mmap = os.find("mmap"); mmap != os.end() && mmap->is_object()) {
      for (const auto& [pid, st] : mmap->items()) {
        if (!st.is_object()) continue;
        const std::string key = key_of_text(pid);
        add_events(key, "os", "MAP_POPULATE mmaps", kEventRate,
                   st.value("/populate/count"_json_pointer, uint64_t{0}));
        add_events(key, "os", "mmaps", kEventRate, st.value("mmaps", uint64_t{0}));
        // Bytes are no independent events (one mapping may be a GiB): not a Poisson count.
        Sum& bytes = sums[{key, "os", "mmaps", std::string(kMmapBytesRate)}];
        bytes.value += st.value("bytes_mapped", 0.0);
        bytes.count += st.value("mmaps", uint64_t{0});
      }
    }
    // layers.os.ioctl.processes: {pid: {device: {count, total_ns, ...}}}.
    const nlohmann::json ioctl =
        os.value("/ioctl/processes"_json_pointer, nlohmann::json::object());
    for (const auto& [pid, devices] : ioctl.items()) {
      if (!devices.is_object()) continue;
      const std::string key = key_of_text(pid);
      for (const auto& [device, st] : devices.items()) {
        if (!st.is_object()) continue;
        Sum& ns = sums[{key, "os", device, std::string(kIoctlLatency)}];
        ns.value += st.value("total_ns", 0.0);
        ns.count += st.value("count", uint64_t{0});
      }
    }
    if (const auto signals = os.find("signals"); signals != os.end() && signals->is_array()) {
      for (const auto& sig : *signals) {
        if (!sig.is_object()) continue;
        add_events(process_key(s, sig.value("pid", 0u)), "os",
                   fmt::format("signal {}", sig.value("name", "?")), kEventRate, 1);
      }
    }
  }
  if (const auto anomalies = summary.find("anomalies");
      anomalies != summary.end() && anomalies->is_array()) {
    for (const auto& a : *anomalies) {
      if (!a.is_object()) continue;
      const auto pid = a.find("pid");
      const std::string process = pid != a.end() && pid->is_number_unsigned()
                                      ? process_key(s, pid->get<uint32_t>())
                                      : "job";
      add_events(process, a.value("layer", "?"), a.value("kind", "?"), kAnomalyRate, 1);
    }
  }
  // memory.outstanding_device_bytes: {pid: bytes}. The calls behind it are the allocations and
  // frees the device memory peak of the same key counted.
  const nlohmann::json outstanding =
      summary.value("/memory/outstanding_device_bytes"_json_pointer, nlohmann::json::object());
  for (const auto& [pid, bytes] : outstanding.items()) {
    if (!bytes.is_number()) continue;
    const std::string key = key_of_text(pid);
    Sum& held = sums[{key, "memory", "device memory", std::string(kMemoryAtEnd)}];
    held.value += bytes.get<double>();
    const auto peak = out.metrics.find({key, "memory", "device memory", std::string(kMemoryPeak)});
    held.count = peak == out.metrics.end() ? 0 : peak->second.count;
  }
  for (const auto& [key, sum] : sums) {
    double value = sum.value;
    if (key.metric == kMmapBytesRate) value = out.seconds > 0 ? sum.value / out.seconds : 0;
    if (key.metric == kIoctlLatency) {
      if (sum.count == 0) continue;  // no mean of no calls
      value = sum.value / static_cast<double>(sum.count);
    }
    out.metrics[key] = RunValues{{value}, sum.count, 0};
  }

  if (const auto code = summary.find("exit_code"); code != summary.end() && code->is_number()) {
    out.end.exit_code = code->get<int>();
  }
  if (const auto procs = summary.find("processes"); procs != summary.end() && procs->is_array()) {
    for (const auto& p : *procs) {
      const auto exit = p.find("exit");
      if (!p.is_object() || exit == p.end() || !exit->is_object()) continue;
      const auto code = exit->find("code");
      const auto signal = exit->find("signal");
      const bool abnormal = (code != exit->end() && code->is_number() && code->get<int>() != 0) ||
                            (signal != exit->end() && !signal->is_null());
      if (!abnormal) continue;
      out.end.causes.push_back(fmt::format("{}: {}", process_key(s, p.value("pid", 0u)),
                                           exit->value("cause", "ended abnormally")));
    }
  }
  // Lost either way: a full ring buffer, or records this eacgm could not decode.
  out.events_dropped = summary.value("/events/dropped"_json_pointer, uint64_t{0}) +
                       summary.value("/events/undecodable"_json_pointer, uint64_t{0});
  // Known only from a summary: a crashed recorder's session says nothing of how the job ended.
  out.metrics[{"job", "job", "exit", std::string(kAbnormalRuns)}] =
      RunValues{{ended_abnormally(out.end) ? 100.0 : 0.0}, 1, 0};
}

}  // namespace

bool ended_abnormally(const RunEnd& end) {
  return (end.exit_code && *end.exit_code != 0) || !end.causes.empty();
}

MetricInfo metric_info(std::string_view metric) {
  if (metric == kShare || metric == kLaunchShare) return {"%", true, Sampling::kWindows, false};
  if (metric == kPace) return {"/s", true, Sampling::kWindows, false};
  if (metric == kMemoryPeak) return {"bytes", true, Sampling::kWindows, true};
  if (metric == kGpuUtil) return {"%", false, Sampling::kWindows, true};
  if (metric == kGpuMemory) return {"bytes", true, Sampling::kWindows, true};
  if (metric == kGpuPower) return {"W", true, Sampling::kWindows, true};
  if (metric == kGpuTemperature) return {"C", true, Sampling::kWindows, true};
  if (metric == kGpuClock) return {"MHz", false, Sampling::kWindows, true};
  if (metric == kEventRate || metric == kAnomalyRate) return {"/s", true, Sampling::kEvents, false};
  if (metric == kBandwidth) return {"GB/s", false, Sampling::kWindows, true};
  if (metric == kLateness) return {"ns", true, Sampling::kWindows, true, CostFloor::kLateness};
  // A function absent from a run's samples had 0 % of them: judged when either side has samples.
  if (metric == kPythonShare) return {"%", true, Sampling::kRuns, false};
  if (metric == kMemoryAtEnd) return {"bytes", true, Sampling::kRuns, false};
  if (metric == kMmapBytesRate) return {"bytes/s", true, Sampling::kRuns, false};
  if (metric == kIoctlLatency) return {"ns", true, Sampling::kRuns, true};
  if (metric == kAbnormalRuns) return {"%", true, Sampling::kOutcomes, false};
  // Latency, self time, launch latency.
  return {"ns", true, Sampling::kWindows, true, CostFloor::kCallTime};
}

std::vector<CollectiveArrival> collective_arrivals(const std::vector<CollectiveEntry>& entries) {
  std::map<std::pair<std::string_view, uint64_t>, std::vector<const CollectiveEntry*>>
      by_collective;
  for (const CollectiveEntry& e : entries) by_collective[{e.comm, e.seq}].push_back(&e);
  std::vector<CollectiveArrival> out;
  std::vector<int> ranks;
  for (const auto& [id, in] : by_collective) {
    ranks.clear();
    for (const CollectiveEntry* e : in) ranks.push_back(e->rank);
    std::sort(ranks.begin(), ranks.end());
    if (std::unique(ranks.begin(), ranks.end()) - ranks.begin() < 2) continue;
    uint64_t earliest = std::numeric_limits<uint64_t>::max(), latest = 0;
    for (const CollectiveEntry* e : in) {
      earliest = std::min(earliest, e->start_ns);
      latest = std::max(latest, e->start_ns);
    }
    for (const CollectiveEntry* e : in) {
      out.push_back(
          {e, earliest, e->start_ns - earliest, latest > earliest && e->start_ns == latest});
    }
  }
  return out;
}

Result<LoadedRun> load_run(const std::string& dir) {
  auto run = read_run(dir);
  if (run && run->session->calls.empty()) {
    return Error{fmt::format(
        "{}: the session has no traced calls, so there is nothing to compare (was the job traced "
        "with the layers it uses, and did it run?)",
        dir)};
  }
  return run;
}

Result<LoadedRun> read_run(const std::string& dir) {
  LoadedRun run;
  auto session = load_recorded_session(dir, /*with_places=*/true);
  if (!session) return session.error();
  run.session = std::move(*session);
  const fs::path summary = fs::path(dir) / "summary.json";
  std::error_code ec;
  if (fs::exists(summary, ec)) {
    std::ifstream in(summary);
    run.summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!run.summary.is_object()) {
      return Error{
          fmt::format("{} is not an eacgm session summary (not a JSON object)", summary.string())};
    }
  }
  run.gpu = read_gpu_samples(dir);
  run.collectives = read_collectives(dir);
  run.python = read_python_functions(dir);
  return run;
}

double run_seconds(const LoadedRun& run) {
  const RecordedSession& s = *run.session;
  return s.end_ns > s.start_ns ? static_cast<double>(s.end_ns - s.start_ns) / 1e9 : 0;
}

uint64_t choose_window_ns(const std::vector<const LoadedRun*>& runs) {
  double shortest = std::numeric_limits<double>::infinity();
  for (const LoadedRun* r : runs) shortest = std::min(shortest, run_seconds(*r));
  if (!std::isfinite(shortest)) return kMaxWindowNs;
  const auto share = static_cast<uint64_t>(shortest * 1e9 / kWindowsPerShortestRun);
  return std::clamp(share, kMinWindowNs, kMaxWindowNs);
}

RunData measure_run(const LoadedRun& run, uint64_t window_ns) {
  RunData out;
  out.dir = run.session->dir;
  out.seconds = run_seconds(run);
  const Windows windows(run.session->start_ns, run.session->end_ns, window_ns);
  out.windows = windows.count();
  measure_calls(run, windows, out);
  measure_collectives(run, windows, out);
  measure_gpu(run, windows, out);
  measure_python(run, out);
  measure_summary(run, out);
  return out;
}

}  // namespace eacgm::compare
