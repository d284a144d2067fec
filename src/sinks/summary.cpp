#include "sinks/summary.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/human_text.h"
#include "common/json_text.h"

namespace eacgm {
namespace {

// The kernels with the most launches and the most launch time, per layer: a job may launch
// thousands of distinct kernels (every SQLite row has them all); the summary keeps the top.
constexpr size_t kTopKernels = 20;

std::vector<const std::pair<const std::pair<Layer, std::string>, KernelStats>*> top_kernels(
    const KernelTable& kernels, Layer layer, bool by_time) {
  std::vector<const std::pair<const std::pair<Layer, std::string>, KernelStats>*> rows;
  for (const auto& entry : kernels.stats()) {
    if (entry.first.first == layer) rows.push_back(&entry);
  }
  std::stable_sort(rows.begin(), rows.end(), [by_time](const auto* a, const auto* b) {
    return by_time ? a->second.total_ns > b->second.total_ns
                   : a->second.launches > b->second.launches;
  });
  if (rows.size() > kTopKernels) rows.resize(kTopKernels);
  return rows;
}

nlohmann::json kernel_json(const std::string& mangled, const KernelStats& k) {
  using nlohmann::json;
  json shapes = json::object(), sites = json::object(), pids = json::object();
  for (const auto& [shape, n] : k.shapes) shapes[shape] = n;
  for (const auto& [site, n] : k.sites) sites[site] = n;
  json ops = json::object();
  for (const auto& [op, n] : k.torch_ops) ops[op] = n;
  for (const auto& [pid, n] : k.pids) pids[std::to_string(pid)] = n;
  return {{"name", mangled.empty() ? json(nullptr) : json(demangled_kernel_name(mangled))},
          {"mangled", mangled.empty() ? json(nullptr) : json(mangled)},
          {"launches", k.launches},
          {"errors", k.errors},
          {"total_ns", k.total_ns},
          {"p50_ns", k.percentile_ns(50)},
          {"p99_ns", k.percentile_ns(99)},
          {"shapes", std::move(shapes)},
          {"python", std::move(sites)},
          {"torch_ops", std::move(ops)},
          {"pids", std::move(pids)}};
}

nlohmann::json kernels_json(const KernelTable& kernels) {
  using nlohmann::json;
  json out = {{"distinct", kernels.stats().size()},
              {"names_known", kernels.names_known()},
              {"unlisted_launches", kernels.unlisted()}};
  for (const LayerInfo* info : layer_registry()) {
    if (!info->launches_kernels) continue;
    const Layer layer = info->id;
    json by_launches = json::array(), by_time = json::array();
    for (const auto* e : top_kernels(kernels, layer, false)) {
      by_launches.push_back(kernel_json(e->first.second, e->second));
    }
    for (const auto* e : top_kernels(kernels, layer, true)) {
      by_time.push_back(kernel_json(e->first.second, e->second));
    }
    if (by_launches.empty()) continue;
    out[std::string(layer_name(layer))] = {{"by_launches", std::move(by_launches)},
                                           {"by_time", std::move(by_time)}};
  }
  return out;
}

}  // namespace

nlohmann::json summary_json(const Session& s) {
  using nlohmann::json;
  json out;
  out["version"] = s.version;
  out["command"] = s.command;
  out["exit_code"] = s.exit_code ? json(*s.exit_code) : json(nullptr);
  out["duration_s"] = s.duration_s();
  out["interrupted"] = s.interrupted;
  out["events"] = {{"recorded", s.events_recorded},
                   {"dropped", s.events_dropped},
                   {"undecodable", s.events_undecodable}};
  // Whether every output was written in full; what a failed write (a full disk) cost, if not.
  out["complete"] = s.lost.empty();
  json lost = json::array();
  for (const OutputLoss& l : s.lost) {
    lost.push_back({{"output", l.output},
                    {"calls", l.calls},
                    {"calls_lost", l.calls_lost},
                    {"error", l.error}});
  }
  out["lost"] = std::move(lost);
  out["clock"] = {{"domain", "CLOCK_MONOTONIC"}, {"realtime_offset_ns", s.realtime_offset_ns}};
  out["overhead"] = s.overhead.to_json(s.duration_s());
  out["window_workers"] = s.window_workers;
  if (!s.attached_pids.empty()) out["attached_pids"] = s.attached_pids;

  json processes = json::array();
  for (const auto& [pid, p] : s.processes) {
    json proc = {{"pid", pid},
                 {"ppid", p.ppid},
                 {"comm", p.comm},
                 {"cmdline", p.cmdline},
                 {"rank", p.rank ? json(*p.rank) : json(nullptr)},
                 {"role", process_role(s, p)}};
    if (p.exit) {
      proc["exit"] = {{"code", p.exit->code ? json(*p.exit->code) : json(nullptr)},
                      {"signal", p.exit->signal ? json(*p.exit->signal) : json(nullptr)},
                      {"core_dumped", p.exit->core_dumped},
                      {"cause", p.exit->cause},
                      {"sender", p.exit->sender ? json{{"pid", p.exit->sender->pid},
                                                       {"comm", p.exit->sender->comm}}
                                                : json(nullptr)}};
    } else {
      proc["exit"] = nullptr;  // still running when the session ended
    }
    if (!p.flight_recorder.empty()) proc["flight_recorder"] = p.flight_recorder;
    processes.push_back(std::move(proc));
  }
  out["processes"] = std::move(processes);

  json layers = json::object();
  for (const auto& [layer, state] : s.layers) {
    json l = {{"status", layer_status_name(state.status)}};
    if (!state.reason.empty()) l["reason"] = state.reason;
    if (state.status == LayerStatus::kActive && layer_info(layer).calls_key.empty()) {
      for (const auto& [key, value] : state.extra.items()) l[key] = value;  // no call table
    } else if (state.status == LayerStatus::kActive) {
      l["libraries"] = state.libraries;
      l["loaded_by_job"] = state.loaded_by_job;
      json calls = json::object();
      for (const auto& [name, st] : state.calls) {
        json c = {{"count", st.count},
                  {"errors", st.errors},
                  {"total_ns", st.total_ns},
                  {"p50_ns", st.percentile_ns(50)},
                  {"p99_ns", st.percentile_ns(99)},
                  {"bytes", st.bytes}};
        if (!st.errors_by_code.empty()) {
          json by_code = json::object();
          for (auto [code, n] : st.errors_by_code) by_code[status_name(layer, code)] = n;
          c["errors_by_code"] = std::move(by_code);
        }
        if (layer_info(layer).self_time) c["self_ns"] = st.self_ns;
        if (st.sampled && state.traced_fraction && *state.traced_fraction > 0) {
          // Seen only while traced: what the whole session would have counted, said as such.
          c["sampled"] = true;
          const double scale = state.count_scale.value_or(1 / *state.traced_fraction);
          c["estimated_count"] = std::llround(static_cast<double>(st.count) * scale);
        }
        calls[name] = std::move(c);
      }
      l[layer_info(layer).calls_key] = std::move(calls);
      if (!state.inner_calls.empty()) {
        json inner = json::object();
        for (const auto& [name, n] : state.inner_calls) inner[name] = n;
        l["inner_calls"] = std::move(inner);
      }
      for (const auto& [key, value] : state.extra.items()) l[key] = value;
      if (state.traced_fraction) l["traced_fraction"] = *state.traced_fraction;
    }
    layers[std::string(layer_name(layer))] = std::move(l);
  }
  out["layers"] = std::move(layers);

  json outstanding = json::object();
  json peak = json::object();
  for (const auto& [pid, mem] : s.device_memory) {
    outstanding[std::to_string(pid)] = mem.outstanding_bytes;
    peak[std::to_string(pid)] = mem.peak_bytes;
  }
  out["memory"] = {{"outstanding_device_bytes", std::move(outstanding)},
                   {"peak_device_bytes", std::move(peak)}};
  out["kernels"] = kernels_json(s.kernels);
  json anomalies = json::array();
  for (const Anomaly& a : s.anomalies) anomalies.push_back(anomaly_json(a));
  out["anomalies"] = std::move(anomalies);
  return out;
}

nlohmann::json anomaly_json(const Anomaly& a) {
  using nlohmann::json;
  return {{"kind", a.kind},
          {"layer", layer_name(a.layer)},
          {"pid", a.pid ? json(*a.pid) : json(nullptr)},
          {"rank", a.rank ? json(*a.rank) : json(nullptr)},
          {"t_s", a.t_s},
          {"score", a.score},
          {"evidence", a.evidence},
          {"message", a.message},
          {"suggestion", a.suggestion}};
}

std::string describe_loss(const OutputLoss& loss) {
  if (loss.calls == 0) return loss.error;
  return fmt::format("{} of its {} calls are missing ({})", loss.calls_lost, loss.calls,
                     loss.error);
}

void reserve_summary(const std::string& path) {
  const int fd = ::open((path + ".tmp").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // Blocks allocated, size left at 0: the reservation is invisible until the summary is written.
  // Smaller when the disk has little room; none where the file system cannot (best effort).
  for (off_t bytes : {off_t{1} << 20, off_t{256} << 10, off_t{64} << 10, off_t{16} << 10}) {
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, bytes) == 0 || errno != ENOSPC) break;
  }
  close(fd);
}

Result<void> write_summary(const Session& session, const std::string& path) {
  const std::string tmp = path + ".tmp";
  const std::string text = json_text(summary_json(session), 2) + '\n';
  // Not truncated on open: the blocks reserve_summary() allocated are written in place, and cut
  // to the summary's size after.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error{fmt::format("cannot write {}: {}", tmp, std::strerror(errno))};
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      close(fd);
      return Error{fmt::format("cannot write {}: {}", tmp, std::strerror(err))};
    }
    done += static_cast<size_t>(n);
  }
  if (ftruncate(fd, static_cast<off_t>(text.size())) != 0 || close(fd) != 0) {
    return Error{fmt::format("cannot write {}: {}", tmp, std::strerror(errno))};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error{fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(errno))};
  }
  return {};
}

namespace {

// A launching layer's kernels, most launched first (the summary also lists them by time).
template <typename Line>
void kernel_report(const KernelTable& kernels, Layer layer, Line& line) {
  const auto rows = top_kernels(kernels, layer, false);
  if (rows.empty()) return;
  std::vector<std::string> names;
  for (const auto* e : rows) {
    names.push_back(e->first.second.empty() ? "(name not seen)"
                                            : demangled_kernel_name(e->first.second));
  }
  const size_t width = name_width({names.begin(), names.end()}, 24);
  line(fmt::format("  {:<{}} {:>9} {:>7} {:>11} {:>11}", "kernel (top by launches)", width,
                   "launches", "errors", "p50", "p99"));
  for (size_t i = 0; i < rows.size(); ++i) {
    const KernelStats& k = rows[i]->second;
    std::string name = names[i].size() > width ? names[i].substr(0, width - 3) + "..." : names[i];
    line(fmt::format("  {:<{}} {:>9} {:>7} {:>11} {:>11}", name, width, k.launches, k.errors,
                     human_ns(k.percentile_ns(50)), human_ns(k.percentile_ns(99))));
  }
}

// A layer's calls made inside a call of the layer built on it (the driver calls the CUDA runtime
// makes): one line, most made first, since they are that call's own work and counted there.
template <typename Line>
void inner_calls_report(const std::map<std::string, uint64_t, std::less<>>& inner, Line& line) {
  std::vector<std::pair<uint64_t, std::string_view>> by_count;
  uint64_t total = 0;
  for (const auto& [name, n] : inner) {
    by_count.emplace_back(n, name);
    total += n;
  }
  std::stable_sort(by_count.begin(), by_count.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  constexpr size_t kShown = 5;
  std::vector<std::string> shown;
  for (size_t i = 0; i < std::min(kShown, by_count.size()); ++i)
    shown.push_back(fmt::format("{} {}", by_count[i].second, by_count[i].first));
  line(fmt::format("  {} calls made inside traced runtime calls (counted there, not below): {}{}",
                   total, fmt::join(shown, ", "),
                   by_count.size() > kShown
                       ? fmt::format(" and {} more API{}", by_count.size() - kShown,
                                     by_count.size() - kShown > 1 ? "s" : "")
                       : ""));
}

}  // namespace

std::string text_report(const Session& s) {
  std::string out;
  auto line = [&out](std::string_view text) {
    out += text;
    out += '\n';
  };
  line(fmt::format("eacgm session: {:.2f} s, {} events recorded, {} dropped{}", s.duration_s(),
                   s.events_recorded, s.events_dropped, s.interrupted ? " (interrupted)" : ""));
  if (s.events_dropped > 0) {
    line(fmt::format(
        "  WARNING: {} events were lost (ring buffer full); counts are low by that much",
        s.events_dropped));
  }
  for (const OutputLoss& l : s.lost) {
    line(fmt::format("  WARNING: {} is incomplete: {}", l.output, describe_loss(l)));
  }
  line("  " + s.overhead.report_line(s.duration_s()));
  // Silence about a process the window detectors never judged would read as "healthy".
  std::vector<std::string> unjudged;
  for (const nlohmann::json& w : s.window_workers) {
    if (!w.is_object() || w.value("scored_windows", size_t{1}) > 0) continue;
    const size_t windows = w.value("windows", size_t{0});
    unjudged.push_back(fmt::format(
        "pid {}{} ({})", w.value("pid", 0u),
        w.contains("rank") && w["rank"].is_number() ? fmt::format(" rank {}", w["rank"].get<int>())
                                                    : "",
        windows == 0 ? "calls within its first second" : fmt::format("{} windows", windows)));
  }
  if (!unjudged.empty()) {
    const size_t shown = std::min<size_t>(unjudged.size(), 5);
    line(fmt::format(
        "  not judged by the window detectors (too short for a warm-up baseline): {}{}; `eacgm "
        "analyze DIR --model M` judges every second after a process's first against healthy runs",
        fmt::join(unjudged.begin(), unjudged.begin() + static_cast<long>(shown), ", "),
        unjudged.size() > shown ? fmt::format(" and {} more", unjudged.size() - shown) : ""));
  }
  for (const auto& [layer, state] : s.layers) {
    if (state.status != LayerStatus::kActive) {
      line(fmt::format("\n[{}] {}{}", layer_name(layer), layer_status_name(state.status),
                       state.reason.empty() ? "" : ": " + state.reason));
      continue;
    }
    if (const auto own_lines = layer_info(layer).report_lines) {
      for (std::string& text : own_lines(s, state)) line(std::move(text));
      continue;
    }
    const size_t libraries = state.libraries.size();
    if (!state.loaded_by_job) {
      // Probed on the search path before the job started, never mapped: nothing was traced.
      line(fmt::format("\n[{}] probes ready for {} {}; the job never loaded {}", layer_name(layer),
                       libraries, libraries == 1 ? "library" : "libraries",
                       libraries == 1 ? "it" : "any of them"));
      continue;
    }
    line(fmt::format("\n[{}] {} {} traced", layer_name(layer), libraries,
                     libraries == 1 ? "library" : "libraries"));
    if (const uint64_t unwound = state.extra.value("calls_unwound", uint64_t{0}); unwound > 0) {
      line(fmt::format("  {} calls left by a C++ exception, not by a return: not timed", unwound));
    }
    if (!state.inner_calls.empty()) inner_calls_report(state.inner_calls, line);
    if (state.calls.empty()) {
      if (state.inner_calls.empty()) line("  no calls");
      continue;
    }
    // Costliest first: calls that nest (torch operators) by self time (an operator's total holds
    // the operators it calls), every other API by total time.
    const bool by_self = layer_info(layer).self_time;
    std::vector<std::pair<std::string_view, const CallStats*>> by_cost;
    std::vector<std::string_view> names;
    for (const auto& [name, st] : state.calls) {
      by_cost.emplace_back(name, &st);
      names.push_back(name);
    }
    const auto cost = [by_self](const CallStats* st) {
      return by_self ? st->self_ns : st->total_ns;
    };
    std::stable_sort(by_cost.begin(), by_cost.end(), [&cost](const auto& a, const auto& b) {
      return cost(a.second) > cost(b.second);
    });
    const size_t width = name_width(names, 24);
    line(fmt::format("  {:<{}} {:>9} {:>7} {:>11} {:>11} {:>11} {:>11}{}",
                     by_self ? "operator" : "api", width, "count", "errors", "total", "p50", "p99",
                     "bytes", by_self ? fmt::format(" {:>11}", "self") : ""));
    for (const auto& [name, st] : by_cost) {
      line(fmt::format("  {:<{}} {:>9} {:>7} {:>11} {:>11} {:>11} {:>11}{}", name, width, st->count,
                       st->errors, human_ns(st->total_ns), human_ns(st->percentile_ns(50)),
                       human_ns(st->percentile_ns(99)), st->bytes ? human_bytes(st->bytes) : "-",
                       by_self ? fmt::format(" {:>11}", human_ns(st->self_ns)) : ""));
      const CallStats& stats = *st;
      for (auto [code, n] : stats.errors_by_code) {
        line(fmt::format("      {} x {} ({})", n, status_name(layer, code), code));
      }
    }
    if (layer_info(layer).launches_kernels) kernel_report(s.kernels, layer, line);
  }
  if (!s.device_memory.empty()) {
    line("\ndevice memory outstanding at end (peak):");
    for (const auto& [pid, mem] : s.device_memory) {
      const ProcessInfo* p = s.find_process(pid);
      line(fmt::format("  pid {:<8} {:<16} {:>11} ({})", pid, p ? p->comm : "?",
                       human_bytes(static_cast<double>(mem.outstanding_bytes)),
                       human_bytes(static_cast<double>(mem.peak_bytes))));
    }
  }
  if (!s.anomalies.empty()) {
    line(fmt::format("\nanomalies ({}):", s.anomalies.size()));
    for (const Anomaly& a : s.anomalies) {
      line(fmt::format("  [{}] {} at {:.1f} s: {}", a.kind, layer_name(a.layer), a.t_s, a.message));
      if (!a.suggestion.empty()) line(fmt::format("      suggestion: {}", a.suggestion));
    }
  }
  line("\nprocesses:");
  for (const auto& [pid, p] : s.processes) {
    line(fmt::format("  pid {:<8} {:<16}{} {}{}", pid, p.comm,
                     p.rank ? fmt::format(" rank {}", *p.rank) : "",
                     p.exit ? p.exit->cause : "still running",
                     p.flight_recorder.empty() ? "" : " (last events: " + p.flight_recorder + ")"));
  }
  return out;
}

}  // namespace eacgm
