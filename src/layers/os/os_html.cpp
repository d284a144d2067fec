#include "layers/os/os_html.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>

#include "analysis/session_db.h"
#include "common/human_text.h"
#include "common/json_fields.h"
#include "common/sqlite_handles.h"

namespace eacgm {
namespace {

using nlohmann::json;
using report::Table;

// Its events a second, by kind (mmaps, MAP_POPULATE, signals, ioctls...), from events.sqlite.
Result<void> events_over_time(report::LayerPage& page) {
  auto rows =
      sqlite_rows(page.database(), "SELECT kind, ts_ns FROM os_events WHERE ts_ns IS NOT NULL");
  if (!rows) {
    return Error{
        fmt::format("{}: cannot read its os events: {}", page.session().dir, rows.error().message)};
  }
  std::map<std::string, std::vector<double>> by_kind;
  for (const auto& r : *rows) {
    if (!r[0] || !r[1]) continue;
    const std::ptrdiff_t b = page.bins().of(std::stoull(*r[1]));
    if (b < 0) continue;
    auto& v = by_kind[*r[0]];
    if (v.empty()) v.assign(page.bins().count, 0);
    v[static_cast<size_t>(b)] += 1;
  }
  if (by_kind.empty()) return {};
  report::LineChart chart = page.chart("os layer: events a second, by kind", "events/s");
  chart.series =
      report::rates_by_name({by_kind.begin(), by_kind.end()}, page.bins(), "other kinds");
  page.add_section("layer-os", "os layer over time", report::line_chart(chart));
  return {};
}

// Its mappings per process (seed 000: an upgrade that multiplied MAP_POPULATE mappings).
// summary.json keeps them as counts per process, not as timed events, so they are a table, not a
// chart.
void mappings(report::LayerPage& page) {
  Table t{{"process", "mmaps", "munmaps", "bytes mapped", "MAP_POPULATE", "MAP_POPULATE peak/s"},
          {},
          {},
          "mappings"};
  const json mmap = json_object(page.summary(), "mmap");
  for (const auto& [pid_text, m] : mmap.items()) {
    if (!m.is_object()) continue;
    const auto pid = static_cast<uint32_t>(std::strtoul(pid_text.c_str(), nullptr, 10));
    const json populate = json_object(m, "populate");
    const auto count = [](const json& j, const char* key) {
      const auto v = json_number<uint64_t>(j, key);
      return report::number_cell(std::to_string(v), static_cast<double>(v));
    };
    const auto bytes = static_cast<double>(json_number<uint64_t>(m, "bytes_mapped"));
    const double peak = json_number<double>(populate, "peak_per_s");
    t.rows.push_back({report::text_cell(page.process_label(pid)), count(m, "mmaps"),
                      count(m, "munmaps"), report::number_cell(format_value(bytes, "bytes"), bytes),
                      count(populate, "count"),
                      report::number_cell(fmt::format("{:.0f}", peak), peak)});
    t.bars.push_back(static_cast<double>(json_number<uint64_t>(populate, "count")));
  }
  if (!t.rows.empty()) {
    page.add_section("mappings", "Memory mappings (os layer)", report::table_html(t));
  }
}

}  // namespace

Result<void> os_html_report(report::LayerPage& page) {
  if (auto r = events_over_time(page); !r) return r;
  mappings(page);
  return {};
}

}  // namespace eacgm
