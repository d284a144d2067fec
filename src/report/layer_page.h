// What a layer draws its own part of `eacgm report` with. The page (session_report.cpp) draws what
// every layer's calls share — calls and latency over time, device memory, the costliest APIs, the
// kernels — and asks each layer's LayerInfo::html_report for the rest: the os layer's events and
// mappings, the GPU's readings, torch's operators, Python's functions. A layer's hook reads the
// recording through a LayerPage and hands back sections and tables; it never builds a page.
#pragma once

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "report/html_page.h"
#include "report/svg_chart.h"

namespace eacgm {
struct RecordedSession;
namespace compare {
struct LoadedRun;
}
}  // namespace eacgm

namespace eacgm::report {

// Lines a chart draws before the rest are summed into one: more are not readable.
constexpr size_t kMaxSeries = 8;
// Rows a table of "where the time goes" shows: its costliest.
constexpr size_t kTableRows = 25;

// The session cut into equal bins of time, in seconds since it began: the x axis of every chart
// over time, so that an anomaly sits at one place in all of them.
struct TimeBins {
  static constexpr size_t kBins = 160;
  uint64_t start_ns = 0;
  uint64_t bin_ns = 1;
  size_t count = 1;

  TimeBins(uint64_t start, uint64_t end);
  // The bin of a time; the last for a time after the end, -1 for one before the start.
  std::ptrdiff_t of(uint64_t ns) const;
  double mid_s(size_t i) const;
  double bin_s() const { return static_cast<double>(bin_ns) / 1e9; }
  std::vector<double> mids() const;
};

// "rank 1 (pid 4242)", "python worker (pid 4250)": a process as every table and legend names it.
std::string process_label(const RecordedSession& session, uint32_t pid);

// Keeps the `kMaxSeries - 1` largest series by weight and, with `sum_rest`, sums the rest into one
// named `rest_name`, so that a job of 64 ranks draws a readable chart. Series of equal weight keep
// their order, and so their colours, from run to run.
std::vector<Series> busiest(std::vector<std::pair<double, Series>> weighted, bool sum_rest,
                            const std::string& rest_name);

// Counts per bin, by name, as a chart of rates: each bin's count over its length, the busiest
// kMaxSeries - 1 kept and the rest summed into `rest_name`.
std::vector<Series> rates_by_name(std::vector<std::pair<std::string, std::vector<double>>> counts,
                                  const TimeBins& bins, const std::string& rest_name);

// One layer's view of the recording, and where its part of the page goes.
class LayerPage {
 public:
  struct Recording {
    const compare::LoadedRun& run;
    const RecordedSession& session;
    sqlite3* database;
    const TimeBins& bins;
    double x_max_s;
  };
  LayerPage(Recording recording, nlohmann::json layer_summary, std::vector<Marker> markers)
      : recording_(recording), summary_(std::move(layer_summary)), markers_(std::move(markers)) {}

  const compare::LoadedRun& run() const { return recording_.run; }
  const RecordedSession& session() const { return recording_.session; }
  // events.sqlite, for the layer's own tables.
  sqlite3* database() const { return recording_.database; }
  const TimeBins& bins() const { return recording_.bins; }
  // summary.json's `layers.<name>` object: empty when the session has none.
  const nlohmann::json& summary() const { return summary_; }
  std::string process_label(uint32_t pid) const;

  // A chart over the session's time, with the page's x range and the layer's anomalies marked.
  LineChart chart(std::string title, std::string y_label) const;

  // A section of its own, after the charts every layer shares; `id` names it in the table of
  // contents (and for the browser test).
  void add_section(std::string id, std::string heading, std::string html);
  // A table of the page's "Where the time goes", after the APIs by time spent in them.
  void add_table(std::string heading, const Table& table);

  struct Section {
    std::string id, heading, html;
  };
  const std::vector<Section>& sections() const { return sections_; }
  const std::vector<std::pair<std::string, std::string>>& tables() const { return tables_; }

 private:
  Recording recording_;
  const nlohmann::json summary_;
  std::vector<Marker> markers_;
  std::vector<Section> sections_;
  std::vector<std::pair<std::string, std::string>> tables_;  // heading, html
};

}  // namespace eacgm::report
