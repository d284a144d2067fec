#include "report/layer_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "analysis/session_db.h"

namespace eacgm::report {

TimeBins::TimeBins(uint64_t start, uint64_t end) : start_ns(start) {
  const uint64_t span = end > start ? end - start : 1;
  // At least a millisecond a bin: a session of a few milliseconds is not cut finer than that.
  bin_ns = std::max<uint64_t>(span / kBins + (span % kBins != 0), 1'000'000);
  count = std::max<uint64_t>((span + bin_ns - 1) / bin_ns, 1);
}

std::ptrdiff_t TimeBins::of(uint64_t ns) const {
  if (ns < start_ns) return -1;
  const uint64_t i = (ns - start_ns) / bin_ns;
  return i < count ? static_cast<std::ptrdiff_t>(i) : static_cast<std::ptrdiff_t>(count) - 1;
}

double TimeBins::mid_s(size_t i) const {
  return (static_cast<double>(i) + 0.5) * static_cast<double>(bin_ns) / 1e9;
}

std::vector<double> TimeBins::mids() const {
  std::vector<double> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = mid_s(i);
  return out;
}

std::string process_label(const RecordedSession& session, uint32_t pid) {
  auto it = session.processes.find(pid);
  if (it == session.processes.end()) return fmt::format("pid {}", pid);
  const EntityInfo& p = it->second;
  std::string who = p.rank ? fmt::format("rank {}", *p.rank) : p.comm;
  if (!p.role.empty() && p.role != "rank") who += fmt::format(" {}", p.role);
  return fmt::format("{} (pid {})", who, pid);
}

std::vector<Series> busiest(std::vector<std::pair<double, Series>> weighted, bool sum_rest,
                            const std::string& rest_name) {
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

std::vector<Series> rates_by_name(std::vector<std::pair<std::string, std::vector<double>>> counts,
                                  const TimeBins& bins, const std::string& rest_name) {
  std::vector<std::pair<double, Series>> weighted;
  for (auto& [name, per_bin] : counts) {
    double total = 0;
    for (double& v : per_bin) {
      total += v;
      v /= bins.bin_s();
    }
    weighted.push_back({total, Series{std::move(name), bins.mids(), std::move(per_bin)}});
  }
  return busiest(std::move(weighted), true, rest_name);
}

std::string LayerPage::process_label(uint32_t pid) const {
  return report::process_label(recording_.session, pid);
}

LineChart LayerPage::chart(std::string title, std::string y_label) const {
  LineChart c;
  c.title = std::move(title);
  c.y_label = std::move(y_label);
  c.x_min = 0;
  c.x_max = recording_.x_max_s;
  c.markers = markers_;
  return c;
}

void LayerPage::add_section(std::string id, std::string heading, std::string html) {
  sections_.push_back({std::move(id), std::move(heading), std::move(html)});
}

void LayerPage::add_table(std::string heading, const Table& table) {
  if (table.rows.empty()) return;
  tables_.emplace_back(std::move(heading), table_html(table));
}

}  // namespace eacgm::report
