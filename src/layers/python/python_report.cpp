#include "layers/python/python_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/human_text.h"

namespace eacgm {

// The python layer: where the threads that work spend their time. A function's time is summed
// over the threads that ran it; the time threads spent idle (waiting on a queue, a condition or
// a selector for work to be handed to them) is left out, or idle workers outrank the hotspot.
std::vector<std::string> python_report_lines(const Session& session, const LayerState& state) {
  std::vector<std::string> lines;
  const auto line = [&lines](std::string text) { lines.push_back(std::move(text)); };
  const nlohmann::json functions = state.extra.value("functions", nlohmann::json::object());
  struct Row {
    uint64_t self_ns, total_ns, threads;
    std::string_view name;
    const nlohmann::json* f;
  };
  std::vector<Row> rows;
  uint64_t idle_ns = 0;
  for (const auto& item : functions.items()) {
    // Not a structured binding: clang (the fuzzer's compiler) cannot capture one.
    const std::string& name = item.key();
    const nlohmann::json& f = item.value();
    const auto get = [&f](const char* key) { return f.value(key, uint64_t{0}); };
    const uint64_t self = get("self_ns") - std::min(get("self_ns"), get("idle_self_ns"));
    const uint64_t total = get("total_ns") - std::min(get("total_ns"), get("idle_total_ns"));
    idle_ns += get("idle_self_ns");
    if (total > 0) rows.push_back({self, total, get("threads"), name, &f});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.self_ns, a.total_ns, a.name) > std::tie(b.self_ns, b.total_ns, b.name);
  });
  line(fmt::format("\n[python] {} interpreter(s), {} samples at {} Hz",
                   state.extra.value("interpreters", nlohmann::json::array()).size(),
                   state.extra.value("samples", 0), state.extra.value("sample_rate_hz", 0.0)));
  for (const nlohmann::json& p : state.extra.value("startup", nlohmann::json::array())) {
    line(fmt::format("  start-up: pid {} spent {:.2f} s importing modules", p.value("pid", 0),
                     p.value("import_s", 0.0)));
  }
  if (const uint64_t rejected = state.extra.value("samples_rejected", uint64_t{0})) {
    line(
        fmt::format("  {} samples dropped: their stacks ran through memory the interpreter had "
                    "just freed",
                    rejected));
  }
  if (rows.empty()) {
    line("  no Python code sampled at work");
    return lines;
  }
  rows.resize(std::min<size_t>(rows.size(), 10));
  std::vector<std::string_view> names;
  for (const Row& r : rows) names.push_back(r.name);
  const size_t width = name_width(names, 40);
  line(fmt::format("  {:<{}} {:>11} {:>11} {:>7} {:>9}", "function (top 10 by self time)", width,
                   "self", "total", "threads", "calls"));
  bool summed = false;
  const auto wall_ns = static_cast<uint64_t>(session.duration_s() * 1e9);
  for (const Row& r : rows) {
    summed = summed || (r.threads > 1 && r.total_ns > wall_ns);
    line(fmt::format(
        "  {:<{}} {:>11} {:>11} {:>7} {:>9}", r.name, width, human_ns(r.self_ns),
        human_ns(r.total_ns), r.threads,
        r.f->contains("count") ? std::to_string(r.f->value("count", uint64_t{0})) : "-"));
  }
  line(fmt::format(
      "  times are summed over the threads that ran each function{}; {} of idle "
      "waits (queue gets, condition waits, selectors) left out",
      summed ? " (so a total can exceed the session's wall time)" : "", human_ns(idle_ns)));
  return lines;
}

}  // namespace eacgm
