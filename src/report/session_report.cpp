#include "report/session_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "analysis/session_db.h"
#include "common/json_fields.h"
#include "compare/report.h"
#include "compare/run_data.h"
#include "layers/layer.h"
#include "report/html_page.h"
#include "report/layer_page.h"
#include "report/svg_chart.h"

namespace eacgm::report {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Collectives are drawn in at most this many columns, communicators at most this many.
constexpr size_t kHeatColumns = 120;
constexpr size_t kMaxCommunicators = 4;

double seconds_since(uint64_t ns, uint64_t start_ns) {
  return ns > start_ns ? static_cast<double>(ns - start_ns) / 1e9 : 0;
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
    // Each layer's own sections, then its tables among those of where the time goes.
    std::vector<std::pair<std::string, std::string>> layer_tables;
    for (const LayerInfo* layer : layer_registry()) {
      if (!layer->html_report) continue;
      const std::string name(layer->name);
      LayerPage part(
          {run_, s_, db, bins_, x_max_}, json_object(json_object(summary_, "layers"), name.c_str()),
          markers_where(anomalies_, [&](const AnomalyMark& a) { return a.layer == name; }));
      if (auto r = layer->html_report(part); !r) return r.error();
      for (const LayerPage::Section& section : part.sections())
        page_.add_section(section.id, section.heading, section.html);
      layer_tables.insert(layer_tables.end(), part.tables().begin(), part.tables().end());
    }
    tables_section(layer_tables);
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
    std::vector<std::pair<std::string, std::vector<double>>> counts;
    for (auto& [pid, per_bin] : per_process) counts.emplace_back(process_label(s_, pid), per_bin);
    calls.series = rates_by_name(std::move(counts), bins_, "other processes");
    calls.markers = markers_where(anomalies_, here);

    LineChart latency =
        chart(fmt::format("{} latency: the median call of its costliest APIs", name), "latency");
    latency.log_y = true;
    latency.y_format = unit_formatter("ns");
    std::vector<std::pair<double, Series>> weighted;
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
    // Named by the layer whose calls are the collectives (the registry's), like its charts.
    const std::optional<Layer> layer = collective_layer();
    page_.add_section(
        "collectives",
        fmt::format("{} collectives: how late each rank arrives", layer ? layer_name(*layer) : ""),
        html);
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
      t.rows.push_back(
          {number_cell(std::to_string(rank), rank), text_cell(process_label(s_, r.pid)),
           number_cell(std::to_string(n), static_cast<double>(n)),
           number_cell(format_value(p50, "ns"), p50), number_cell(format_value(p99, "ns"), p99),
           number_cell(fmt::format("{:.0f} %", share), share)});
    }
    return heatmap(map) + table_html(t);
  }

  // The costliest APIs of every layer, the layers' own tables (operators, Python functions), and
  // the kernels, from summary.json.
  void tables_section(const std::vector<std::pair<std::string, std::string>>& layer_tables) {
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
          return number_cell(format_value(v, "ns"), v);
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
    for (const auto& [heading, table] : layer_tables) {
      html += fmt::format("<h3>{}</h3>{}", html_escape(heading), table);
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
          return number_cell(format_value(v, "ns"), v);
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
    if (!html.empty()) page_.add_section("top", "Where the time goes", html);
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
