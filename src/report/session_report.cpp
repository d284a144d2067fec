#include "report/session_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "analysis/session_db.h"
#include "common/json_fields.h"
#include "common/sqlite_handles.h"
#include "compare/report.h"
#include "compare/run_data.h"
#include "report/html_page.h"
#include "report/svg_chart.h"

namespace eacgm::report {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Lines a chart draws before the rest are summed into one: more are not readable.
constexpr size_t kMaxSeries = 8;
// Time is cut into this many bins for the charts over time.
constexpr size_t kTimeBins = 160;
// Collectives are drawn in at most this many columns, communicators at most this many.
constexpr size_t kHeatColumns = 120;
constexpr size_t kMaxCommunicators = 4;
constexpr size_t kTableRows = 25;

// The session cut into equal bins of time, in seconds since it began.
struct TimeBins {
  uint64_t start_ns = 0;
  uint64_t bin_ns = 1;
  size_t count = 1;

  TimeBins(uint64_t start, uint64_t end) : start_ns(start) {
    const uint64_t span = end > start ? end - start : 1;
    bin_ns = std::max<uint64_t>(span / kTimeBins + (span % kTimeBins != 0), 1'000'000);
    count = std::max<uint64_t>((span + bin_ns - 1) / bin_ns, 1);
  }
  std::ptrdiff_t of(uint64_t ns) const {
    if (ns < start_ns) return -1;
    const uint64_t i = (ns - start_ns) / bin_ns;
    return i < count ? static_cast<std::ptrdiff_t>(i) : static_cast<std::ptrdiff_t>(count) - 1;
  }
  double mid_s(size_t i) const {
    return (static_cast<double>(i) + 0.5) * static_cast<double>(bin_ns) / 1e9;
  }
  double bin_s() const { return static_cast<double>(bin_ns) / 1e9; }
  std::vector<double> mids() const {
    std::vector<double> out(count);
    for (size_t i = 0; i < count; ++i) out[i] = mid_s(i);
    return out;
  }
};

double seconds_since(uint64_t ns, uint64_t start_ns) {
  return ns > start_ns ? static_cast<double>(ns - start_ns) / 1e9 : 0;
}

std::string process_label(const RecordedSession& s, uint32_t pid) {
  auto it = s.processes.find(pid);
  if (it == s.processes.end()) return fmt::format("pid {}", pid);
  const EntityInfo& p = it->second;
  std::string who = p.rank ? fmt::format("rank {}", *p.rank) : p.comm;
  if (!p.role.empty() && p.role != "rank") who += fmt::format(" {}", p.role);
  return fmt::format("{} (pid {})", who, pid);
}

// A command line as a table shows it: a launcher's can be kilobytes (ids, paths). Cut where a
// character begins, never inside one.
std::string shortened(std::string text) {
  size_t cut = 200;
  if (text.size() <= cut) return text;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "…";
}

double median_of(std::vector<double>& v) {
  if (v.empty()) return kNaN;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// Keeps the `kMaxSeries - 1` largest series by `weight` and sums the rest into one, so that a job
// of 64 ranks draws a readable chart.
std::vector<Series> busiest(std::vector<std::pair<double, Series>> weighted, bool sum_rest,
                            const std::string& rest_name) {
  // Stable: series of equal weight keep their order (and so their colours) from run to run.
  std::stable_sort(weighted.begin(), weighted.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Series> out;
  for (size_t i = 0; i < weighted.size(); ++i) {
    Series& s = weighted[i].second;
    if (i + 1 < kMaxSeries || weighted.size() == kMaxSeries) {
      out.push_back(std::move(s));
    } else if (sum_rest) {
      if (out.size() < kMaxSeries) out.push_back({rest_name, s.x, std::vector<double>(s.y.size())});
      for (size_t k = 0; k < s.y.size(); ++k) {
        if (std::isfinite(s.y[k])) out.back().y[k] += s.y[k];
      }
    }
  }
  return out;
}

// An anomaly of summary.json as the charts mark it.
struct AnomalyMark {
  double t_s = 0;
  std::string kind, layer, label;
};

std::vector<Marker> markers_where(const std::vector<AnomalyMark>& anomalies,
                                  const std::function<bool(const AnomalyMark&)>& keep) {
  std::vector<Marker> out;
  for (const AnomalyMark& a : anomalies) {
    if (keep(a)) out.push_back({a.t_s, a.label});
  }
  return out;
}

class SessionPage {
 public:
  SessionPage(const compare::LoadedRun& run, std::string dir)
      : run_(run),
        s_(*run.session),
        summary_(run.summary.is_object() ? run.summary : json::object()),
        bins_(s_.start_ns, s_.end_ns),
        dir_(std::move(dir)),
        page_(fmt::format("eacgm report: {}", dir_)) {
    for (const json& a : json_array(summary_, "anomalies")) {
      if (!a.is_object()) continue;
      anomalies_.push_back(
          {json_number<double>(a, "t_s"), json_string(a, "kind", "?"), json_string(a, "layer", "?"),
           fmt::format("[{}] {}", json_string(a, "kind", "?"), json_string(a, "message", ""))});
    }
    x_max_ = seconds_since(s_.end_ns, s_.start_ns);
  }

  Result<std::string> build(sqlite3* db) {
    facts();
    anomaly_section();
    // The ranks against each other first: in a job of many ranks, the one view that names one.
    collectives_section();
    for (Layer layer : all_layers()) layer_section(layer);
    memory_section();
    if (auto r = os_section(db); !r) return r.error();
    gpu_section();
    tables_section();
    processes_section();
    return page_.render();
  }

 private:
  LineChart chart(std::string title, std::string y_label) const {
    LineChart c;
    c.title = std::move(title);
    c.y_label = std::move(y_label);
    c.x_min = 0;
    c.x_max = x_max_;
    return c;
  }

  void facts() {
    std::vector<std::string> command;
    for (const json& w : json_array(summary_, "command")) {
      if (w.is_string()) command.push_back(w.get<std::string>());
    }
    page_.add_fact("session", html_escape(dir_));
    if (!command.empty())
      page_.add_fact("command", html_escape(fmt::format("{}", fmt::join(command, " "))));
    page_.add_fact("duration", html_escape(fmt::format("{:.2f} s", x_max_)));
    if (!run_.summary.is_object()) {
      page_.add_fact("summary",
                     "none: the recorder did not finish (summary.json is missing), so anomalies, "
                     "exit causes and the tables below are not known; the charts come from the "
                     "events it wrote");
      return;
    }
    const json exit = summary_.value("exit_code", json());
    page_.add_fact("exit", html_escape(exit.is_number() ? fmt::format("code {}", exit.get<int>())
                                                        : std::string("unknown")));
    // Undecodable records are lost like dropped ones: said only when there were any.
    const json events = json_object(summary_, "events");
    const uint64_t undecodable = json_number<uint64_t>(events, "undecodable");
    page_.add_fact("events",
                   html_escape(fmt::format(
                       "{} recorded, {} dropped{}", json_number<uint64_t>(events, "recorded"),
                       json_number<uint64_t>(events, "dropped"),
                       undecodable ? fmt::format(", {} undecodable", undecodable) : "")));
    std::vector<std::string> active;
    const json layers = json_object(summary_, "layers");
    for (const auto& [name, layer] : layers.items()) {
      if (layer.is_object() && json_string(layer, "status", "") == "active") active.push_back(name);
    }
    page_.add_fact("layers traced", html_escape(fmt::format("{}", fmt::join(active, ", "))));
    const json overhead = json_object(summary_, "overhead");
    if (overhead.contains("estimated_slowdown_pct")) {
      page_.add_fact("tracing cost",
                     html_escape(fmt::format(
                         "about {:.2f} s added to the job ({:.1f} % slower), estimated by eacgm",
                         json_number<double>(overhead, "estimated_added_s"),
                         json_number<double>(overhead, "estimated_slowdown_pct"))));
    }
    page_.add_fact("anomalies", html_escape(std::to_string(anomalies_.size())));
  }

  void anomaly_section() {
    if (!run_.summary.is_object()) return;
    Table t{{"at", "kind", "layer", "process", "what", "suggestion"}, {}, {}, "anomalies"};
    for (const json& a : json_array(summary_, "anomalies")) {
      if (!a.is_object()) continue;
      const json pid = a.value("pid", json());
      t.rows.push_back(
          {number_cell(fmt::format("{:.2f} s", json_number<double>(a, "t_s")),
                       json_number<double>(a, "t_s")),
           text_cell(json_string(a, "kind", "?")), text_cell(json_string(a, "layer", "?")),
           text_cell(pid.is_number_unsigned() ? process_label(s_, pid.get<uint32_t>())
                                              : std::string("the job")),
           text_cell(json_string(a, "message", "")), text_cell(json_string(a, "suggestion", ""))});
    }
    page_.add_section("anomalies", "Anomalies",
                      t.rows.empty() ? "<p class=\"note\">None: no detector fired.</p>"
                                     : "<p class=\"note\">Each is marked on the charts below "
                                       "where it happened (dashed red line; hover for its "
                                       "text).</p>" +
                                           table_html(t));
  }

  // Calls a second per process, and the median latency of the layer's costliest APIs.
  void layer_section(Layer layer) {
    std::map<uint32_t, std::vector<double>> per_process;
    std::map<std::string_view, std::vector<std::vector<double>>> durations;  // api -> bin -> ns
    std::map<std::string_view, double> api_total;
    for (const CallSample& c : s_.calls) {
      if (c.layer != layer) continue;
      const std::ptrdiff_t b = bins_.of(c.start_ns);
      if (b < 0) continue;
      auto& counts = per_process[c.pid];
      if (counts.empty()) counts.assign(bins_.count, 0);
      counts[static_cast<size_t>(b)] += 1;
      auto& d = durations[c.name];
      if (d.empty()) d.resize(bins_.count);
      d[static_cast<size_t>(b)].push_back(static_cast<double>(c.duration_ns));
      api_total[c.name] += static_cast<double>(c.duration_ns);
    }
    if (per_process.empty()) return;
    const std::string name(layer_name(layer));
    const auto here = [&](const AnomalyMark& a) { return a.layer == name; };

    LineChart calls = chart(fmt::format("{} calls a second, per process", name), "calls/s");
    std::vector<std::pair<double, Series>> weighted;
    for (auto& [pid, counts] : per_process) {
      double total = 0;
      for (double& v : counts) {
        total += v;
        v /= bins_.bin_s();
      }
      weighted.push_back({total, Series{process_label(s_, pid), bins_.mids(), std::move(counts)}});
    }
    calls.series = busiest(std::move(weighted), true, "other processes");
    calls.markers = markers_where(anomalies_, here);

    LineChart latency =
        chart(fmt::format("{} latency: the median call of its costliest APIs", name), "latency");
    latency.log_y = true;
    latency.y_format = unit_formatter("ns");
    weighted.clear();
    for (auto& [api, by_bin] : durations) {
      std::vector<double> medians(bins_.count, kNaN);
      for (size_t b = 0; b < by_bin.size(); ++b) medians[b] = median_of(by_bin[b]);
      weighted.push_back(
          {api_total[api], Series{std::string(api), bins_.mids(), std::move(medians)}});
    }
    latency.series = busiest(std::move(weighted), false, "");
    latency.markers = calls.markers;
    page_.add_section(fmt::format("layer-{}", name), fmt::format("{} layer over time", name),
                      line_chart(calls) + line_chart(latency));
  }

  // Outstanding device memory per process: its highest level in each bin, held until it changes.
  void memory_section() {
    std::map<uint32_t, std::vector<double>> level;
    std::set<uint32_t> allocating;
    for (const CallSample& c : s_.calls) {
      if (c.memory_event) allocating.insert(c.pid);
    }
    if (allocating.empty()) return;
    for (const CallSample& c : s_.calls) {
      if (!allocating.contains(c.pid)) continue;
      const std::ptrdiff_t b = bins_.of(c.start_ns + c.duration_ns);
      if (b < 0) continue;
      auto& v = level[c.pid];
      if (v.empty()) v.assign(bins_.count, kNaN);
      double& cell = v[static_cast<size_t>(b)];
      const auto bytes = static_cast<double>(std::max<int64_t>(c.outstanding_bytes, 0));
      cell = std::isfinite(cell) ? std::max(cell, bytes) : bytes;
    }
    LineChart mem = chart("Device memory outstanding, per process", "bytes");
    mem.steps = true;
    mem.y_format = unit_formatter("bytes");
    std::vector<std::pair<double, Series>> weighted;
    for (auto& [pid, v] : level) {
      // Carried forward while the process lives; nothing after it exited.
      const auto end = s_.process_end_ns.find(pid);
      const std::ptrdiff_t last_bin = end == s_.process_end_ns.end()
                                          ? static_cast<std::ptrdiff_t>(bins_.count)
                                          : bins_.of(end->second) + 1;
      double carry = kNaN, peak = 0;
      for (size_t b = 0; b < v.size(); ++b) {
        if (std::isfinite(v[b])) carry = v[b];
        v[b] = static_cast<std::ptrdiff_t>(b) < last_bin ? carry : kNaN;
        if (std::isfinite(v[b])) peak = std::max(peak, v[b]);
      }
      weighted.push_back({peak, Series{process_label(s_, pid), bins_.mids(), std::move(v)}});
    }
    mem.series = busiest(std::move(weighted), false, "");
    mem.markers = markers_where(
        anomalies_, [](const AnomalyMark& a) { return a.kind == "leak" || a.kind == "oom_kill"; });
    page_.add_section("memory", "Device memory", line_chart(mem));
  }

  // Each communicator's collectives: how late each rank entered, against the first to enter.
  void collectives_section() {
    std::map<std::string_view, std::vector<const compare::CollectiveArrival*>> comms;
    const std::vector<compare::CollectiveArrival> arrivals =
        compare::collective_arrivals(run_.collectives);
    for (const compare::CollectiveArrival& a : arrivals) comms[a.entry->comm].push_back(&a);
    if (comms.empty()) return;
    std::vector<std::pair<size_t, std::string_view>> busiest_comms;
    for (const auto& [id, list] : comms) busiest_comms.emplace_back(list.size(), id);
    std::sort(busiest_comms.rbegin(), busiest_comms.rend());
    const size_t shown = std::min(busiest_comms.size(), kMaxCommunicators);
    std::string html;
    for (size_t i = 0; i < shown; ++i) {
      html += communicator_html(busiest_comms[i].second, comms[busiest_comms[i].second]);
    }
    if (comms.size() > shown) {
      html += fmt::format(
          "<p class=\"note\">{} more communicators not shown (the {} with the most collectives "
          "are).</p>",
          comms.size() - shown, shown);
    }
    page_.add_section("collectives", "NCCL collectives: how late each rank arrives", html);
  }

  // A heatmap of ranks by collective number (columns of several collectives when there are
  // many), and each rank's lateness figures.
  std::string communicator_html(std::string_view id,
                                const std::vector<const compare::CollectiveArrival*>& arrivals) {
    uint64_t first_seq = std::numeric_limits<uint64_t>::max(), last_seq = 0;
    for (const auto* a : arrivals) {
      first_seq = std::min(first_seq, a->entry->seq);
      last_seq = std::max(last_seq, a->entry->seq);
    }
    const uint64_t span = last_seq - first_seq + 1;
    const auto columns = static_cast<size_t>(std::min<uint64_t>(span, kHeatColumns));
    struct RankRow {
      uint32_t pid = 0;
      std::vector<double> sum, n;
      std::vector<double> lateness;
      uint64_t last = 0;
    };
    std::map<int, RankRow> ranks;
    for (const auto* a : arrivals) {
      RankRow& r = ranks[a->entry->rank];
      r.pid = a->entry->pid;
      if (r.sum.empty()) {
        r.sum.assign(columns, 0);
        r.n.assign(columns, 0);
      }
      const auto col = static_cast<size_t>((a->entry->seq - first_seq) * columns / span);
      const auto late = static_cast<double>(a->lateness_ns);
      r.sum[col] += late;
      r.n[col] += 1;
      r.lateness.push_back(late);
      if (a->last) ++r.last;
    }
    Heatmap map;
    map.title = fmt::format("communicator {} ({} ranks): lateness of each rank at each collective",
                            id.substr(0, 16), ranks.size());
    map.x_label = "collective number";
    map.x_first = static_cast<double>(first_seq);
    map.x_last = static_cast<double>(last_seq + 1);
    map.value_label = "later";
    map.value_format = unit_formatter("ns");
    Table t{{"rank", "process", "collectives", "median lateness", "p99 lateness", "last to arrive"},
            {},
            {},
            "ranks"};
    for (auto& [rank, r] : ranks) {
      map.rows.push_back(fmt::format("rank {} (pid {})", rank, r.pid));
      std::vector<double> cells(columns, kNaN);
      for (size_t c = 0; c < columns; ++c) {
        if (r.n[c] > 0) cells[c] = r.sum[c] / r.n[c];
      }
      map.values.push_back(std::move(cells));
      const size_t n = r.lateness.size();
      std::sort(r.lateness.begin(), r.lateness.end());
      const double p50 = r.lateness[n / 2];
      const double p99 = r.lateness[std::min(n - 1, n * 99 / 100)];
      const double share = 100.0 * static_cast<double>(r.last) / static_cast<double>(n);
      t.rows.push_back({number_cell(std::to_string(rank), rank),
                        text_cell(process_label(s_, r.pid)),
                        number_cell(std::to_string(n), static_cast<double>(n)),
                        number_cell(compare::format_value(p50, "ns"), p50),
                        number_cell(compare::format_value(p99, "ns"), p99),
                        number_cell(fmt::format("{:.0f} %", share), share)});
    }
    return heatmap(map) + table_html(t);
  }

  // The os layer's events a second, by kind (mmaps, MAP_POPULATE, signals, ioctls...).
  Result<void> os_section(sqlite3* db) {
    auto rows = sqlite_rows(db, "SELECT kind, ts_ns FROM os_events WHERE ts_ns IS NOT NULL");
    if (!rows)
      return Error{fmt::format("{}: cannot read its os events: {}", dir_, rows.error().message)};
    std::map<std::string, std::vector<double>> by_kind;
    for (const auto& r : *rows) {
      if (!r[0] || !r[1]) continue;
      const std::ptrdiff_t b = bins_.of(std::stoull(*r[1]));
      if (b < 0) continue;
      auto& v = by_kind[*r[0]];
      if (v.empty()) v.assign(bins_.count, 0);
      v[static_cast<size_t>(b)] += 1;
    }
    if (by_kind.empty()) return {};
    LineChart os = chart("os layer: events a second, by kind", "events/s");
    std::vector<std::pair<double, Series>> weighted;
    for (auto& [kind, v] : by_kind) {
      double total = 0;
      for (double& x : v) {
        total += x;
        x /= bins_.bin_s();
      }
      weighted.push_back({total, Series{kind, bins_.mids(), std::move(v)}});
    }
    os.series = busiest(std::move(weighted), true, "other kinds");
    os.markers = markers_where(anomalies_, [](const AnomalyMark& a) { return a.layer == "os"; });
    page_.add_section("layer-os", "os layer over time", line_chart(os));
    return {};
  }

  void gpu_section() {
    if (run_.gpu.empty()) return;
    struct Reading {
      const char* title;
      const char* unit;
      double compare::GpuReading::*field;
    };
    static constexpr Reading kReadings[] = {
        {"GPU utilization", "%", &compare::GpuReading::util_pct},
        {"GPU memory used", "bytes", &compare::GpuReading::memory_used_bytes},
        {"GPU power", "W", &compare::GpuReading::power_w},
        {"GPU temperature", "C", &compare::GpuReading::temperature_c},
        {"GPU SM clock", "MHz", &compare::GpuReading::sm_clock_mhz}};
    std::string html;
    for (const Reading& r : kReadings) {
      std::map<int, std::pair<std::vector<double>, std::vector<double>>> sums;  // device -> sum, n
      for (const compare::GpuReading& g : run_.gpu) {
        const double v = g.*r.field;
        const std::ptrdiff_t b = bins_.of(g.ts_ns);
        if (std::isnan(v) || b < 0) continue;
        auto& [sum, n] = sums[g.device];
        if (sum.empty()) {
          sum.assign(bins_.count, 0);
          n.assign(bins_.count, 0);
        }
        sum[static_cast<size_t>(b)] += v;
        n[static_cast<size_t>(b)] += 1;
      }
      if (sums.empty()) continue;
      LineChart c = chart(r.title, r.unit);
      c.y_format = unit_formatter(r.unit);
      for (auto& [device, sn] : sums) {
        // Only the bins with a reading: NVML is sampled more slowly than the bins are cut, and the
        // line joins one reading to the next.
        Series series{fmt::format("GPU {}", device), {}, {}};
        for (size_t b = 0; b < bins_.count; ++b) {
          if (sn.second[b] == 0) continue;
          series.x.push_back(bins_.mid_s(b));
          series.y.push_back(sn.first[b] / sn.second[b]);
        }
        c.series.push_back(std::move(series));
      }
      c.markers = markers_where(anomalies_, [](const AnomalyMark& a) { return a.layer == "gpu"; });
      html += line_chart(c);
    }
    if (!html.empty()) page_.add_section("gpu", "GPU readings (NVML)", html);
  }

  // The costliest APIs of every layer, the torch operators by self time, the kernels, and the
  // Python functions, from summary.json.
  void tables_section() {
    const json layers = json_object(summary_, "layers");
    std::string html;
    {
      Table t{{"API", "layer", "calls", "errors", "total time", "p50", "p99"}, {}, {}, "apis"};
      std::vector<std::tuple<uint64_t, std::string, std::string, json>> rows;
      for (const auto& [layer, state] : layers.items()) {
        if (!state.is_object()) continue;
        const json calls = json_object(state, "calls");
        for (const auto& [api, st] : calls.items()) {
          if (st.is_object())
            rows.emplace_back(json_number<uint64_t>(st, "total_ns"), api, layer, st);
        }
      }
      std::sort(rows.begin(), rows.end(),
                [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
      for (const auto& [total, api, layer, st] : rows) {
        if (t.rows.size() == kTableRows) break;
        const auto ns = [&](const char* key) {
          const auto v = static_cast<double>(json_number<uint64_t>(st, key));
          return number_cell(compare::format_value(v, "ns"), v);
        };
        const auto count = json_number<uint64_t>(st, "count");
        const auto errors = json_number<uint64_t>(st, "errors");
        t.rows.push_back({text_cell(api), text_cell(layer),
                          number_cell(std::to_string(count), static_cast<double>(count)),
                          number_cell(std::to_string(errors), static_cast<double>(errors)),
                          ns("total_ns"), ns("p50_ns"), ns("p99_ns")});
        t.bars.push_back(static_cast<double>(total));
      }
      if (!t.rows.empty()) html += "<h3>APIs by time spent in them</h3>" + table_html(t);
    }
    {
      Table t{{"operator", "calls", "self time", "total time", "p50"}, {}, {}, "operators"};
      std::vector<std::pair<uint64_t, std::string>> order;
      const json calls = json_object(json_object(layers, "torch"), "ops");  // torch's call table
      for (const auto& [op, st] : calls.items()) {
        if (st.is_object()) order.emplace_back(json_number<uint64_t>(st, "self_ns"), op);
      }
      std::sort(order.rbegin(), order.rend());
      for (const auto& [self, op] : order) {
        if (t.rows.size() == kTableRows) break;
        const json& st = calls[op];
        const auto total = static_cast<double>(json_number<uint64_t>(st, "total_ns"));
        const auto p50 = static_cast<double>(json_number<uint64_t>(st, "p50_ns"));
        const auto count = json_number<uint64_t>(st, "count");
        t.rows.push_back({text_cell(op),
                          number_cell(std::to_string(count), static_cast<double>(count)),
                          number_cell(compare::format_value(static_cast<double>(self), "ns"),
                                      static_cast<double>(self)),
                          number_cell(compare::format_value(total, "ns"), total),
                          number_cell(compare::format_value(p50, "ns"), p50)});
        t.bars.push_back(static_cast<double>(self));
      }
      if (!t.rows.empty()) html += "<h3>PyTorch operators by self time</h3>" + table_html(t);
    }
    {
      Table t{{"kernel", "layer", "launches", "errors", "launch time", "p50", "p99"},
              {},
              {},
              "kernels"};
      std::vector<std::tuple<uint64_t, std::string, json>> rows;
      const json kernels = json_object(summary_, "kernels");
      for (const auto& [layer, k] : kernels.items()) {
        if (!k.is_object()) continue;
        for (const json& row : json_array(k, "by_launches")) {
          if (row.is_object())
            rows.emplace_back(json_number<uint64_t>(row, "total_ns"), layer, row);
        }
      }
      std::sort(rows.begin(), rows.end(),
                [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
      for (const auto& [total, layer, row] : rows) {
        if (t.rows.size() == kTableRows) break;
        const auto ns = [&](const char* key) {
          const auto v = static_cast<double>(json_number<uint64_t>(row, key));
          return number_cell(compare::format_value(v, "ns"), v);
        };
        const auto launches = json_number<uint64_t>(row, "launches");
        const auto errors = json_number<uint64_t>(row, "errors");
        t.rows.push_back({text_cell(json_string(
                              row, "name", "(unnamed: no name was registered for these launches)")),
                          text_cell(layer),
                          number_cell(std::to_string(launches), static_cast<double>(launches)),
                          number_cell(std::to_string(errors), static_cast<double>(errors)),
                          ns("total_ns"), ns("p50_ns"), ns("p99_ns")});
        t.bars.push_back(static_cast<double>(launches));
      }
      if (!t.rows.empty()) html += "<h3>GPU kernels by launches</h3>" + table_html(t);
    }
    {
      // As the text summary counts them: idle waits (a worker blocked on its queue) left out.
      Table t{{"Python function", "self time", "total time", "threads"}, {}, {}, "functions"};
      std::vector<std::tuple<uint64_t, uint64_t, std::string, uint64_t>> rows;
      const json functions = json_object(json_object(layers, "python"), "functions");
      for (const auto& [name, f] : functions.items()) {
        if (!f.is_object()) continue;
        const auto get = [&f](const char* key) { return json_number<uint64_t>(f, key); };
        const uint64_t self = get("self_ns") - std::min(get("self_ns"), get("idle_self_ns"));
        const uint64_t total = get("total_ns") - std::min(get("total_ns"), get("idle_total_ns"));
        if (total > 0) rows.emplace_back(self, total, name, get("threads"));
      }
      std::sort(rows.rbegin(), rows.rend());
      for (const auto& [self, total, name, threads] : rows) {
        if (t.rows.size() == kTableRows) break;
        t.rows.push_back({text_cell(name),
                          number_cell(compare::format_value(static_cast<double>(self), "ns"),
                                      static_cast<double>(self)),
                          number_cell(compare::format_value(static_cast<double>(total), "ns"),
                                      static_cast<double>(total)),
                          number_cell(std::to_string(threads), static_cast<double>(threads))});
        t.bars.push_back(static_cast<double>(self));
      }
      if (!t.rows.empty())
        html += "<h3>Python functions by self time (sampled)</h3>" + table_html(t);
    }
    if (!html.empty()) page_.add_section("top", "Where the time goes", html);
    mappings_section(layers);
  }

  // The os layer's mappings per process (seed 000: an upgrade that multiplied MAP_POPULATE
  // mappings). summary.json keeps them as counts per process, not as timed events, so they are a
  // table, not a chart.
  void mappings_section(const json& layers) {
    Table t{{"process", "mmaps", "munmaps", "bytes mapped", "MAP_POPULATE", "MAP_POPULATE peak/s"},
            {},
            {},
            "mappings"};
    const json mmap = json_object(json_object(layers, "os"), "mmap");
    for (const auto& [pid_text, m] : mmap.items()) {
      if (!m.is_object()) continue;
      const auto pid = static_cast<uint32_t>(std::strtoul(pid_text.c_str(), nullptr, 10));
      const json populate = json_object(m, "populate");
      const auto count = [](const json& j, const char* key) {
        const auto v = json_number<uint64_t>(j, key);
        return number_cell(std::to_string(v), static_cast<double>(v));
      };
      const auto bytes = static_cast<double>(json_number<uint64_t>(m, "bytes_mapped"));
      const double peak = json_number<double>(populate, "peak_per_s");
      t.rows.push_back({text_cell(process_label(s_, pid)), count(m, "mmaps"), count(m, "munmaps"),
                        number_cell(compare::format_value(bytes, "bytes"), bytes),
                        count(populate, "count"), number_cell(fmt::format("{:.0f}", peak), peak)});
      t.bars.push_back(static_cast<double>(json_number<uint64_t>(populate, "count")));
    }
    if (!t.rows.empty()) {
      page_.add_section("mappings", "Memory mappings (os layer)", table_html(t));
    }
  }

  void processes_section() {
    Table t{{"pid", "process", "role", "command", "ended"}, {}, {}, "processes"};
    for (const json& p : json_array(summary_, "processes")) {
      if (!p.is_object()) continue;
      const auto pid = json_number<uint32_t>(p, "pid");
      std::vector<std::string> cmdline;
      for (const json& w : json_array(p, "cmdline")) {
        if (w.is_string()) cmdline.push_back(w.get<std::string>());
      }
      const json exit = p.value("exit", json());
      t.rows.push_back(
          {number_cell(std::to_string(pid), pid), text_cell(process_label(s_, pid)),
           text_cell(json_string(p, "role", "")),
           text_cell(shortened(fmt::format("{}", fmt::join(cmdline, " ")))),
           text_cell(exit.is_object() ? json_string(exit, "cause", "?") : "still running")});
    }
    if (!t.rows.empty()) page_.add_section("processes", "Processes", table_html(t));
  }

  const compare::LoadedRun& run_;
  const RecordedSession& s_;
  const json summary_;
  const TimeBins bins_;
  const std::string dir_;
  HtmlPage page_;
  std::vector<AnomalyMark> anomalies_;
  double x_max_ = 0;
};

}  // namespace

Result<std::string> session_report_html(const std::string& dir) {
  auto run = compare::read_run(dir);
  if (!run) return run.error();
  auto database = open_session_directory(dir);
  if (!database) return database.error();
  return SessionPage(*run, dir).build((*database)->handle());
}

}  // namespace eacgm::report
