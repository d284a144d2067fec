#include "layers/python/python_html.h"

#include <algorithm>
#include <tuple>

#include "common/human_text.h"
#include "common/json_fields.h"

namespace eacgm {

// As the text summary counts them: idle waits (a worker blocked on its queue) left out, so that a
// DataLoader worker waiting for work does not rank first.
Result<void> python_html_report(report::LayerPage& page) {
  using report::number_cell;
  report::Table t{{"Python function", "self time", "total time", "threads"}, {}, {}, "functions"};
  std::vector<std::tuple<uint64_t, uint64_t, std::string, uint64_t>> rows;
  const nlohmann::json functions = json_object(page.summary(), "functions");
  for (const auto& item : functions.items()) {
    // Named, not a structured binding: clang (the fuzzer's compiler) cannot capture one.
    const nlohmann::json& f = item.value();
    if (!f.is_object()) continue;
    const auto get = [&f](const char* key) { return json_number<uint64_t>(f, key); };
    const uint64_t self = get("self_ns") - std::min(get("self_ns"), get("idle_self_ns"));
    const uint64_t total = get("total_ns") - std::min(get("total_ns"), get("idle_total_ns"));
    if (total > 0) rows.emplace_back(self, total, item.key(), get("threads"));
  }
  std::sort(rows.rbegin(), rows.rend());
  for (const auto& [self, total, name, threads] : rows) {
    if (t.rows.size() == report::kTableRows) break;
    t.rows.push_back(
        {report::text_cell(name),
         number_cell(format_value(static_cast<double>(self), "ns"), static_cast<double>(self)),
         number_cell(format_value(static_cast<double>(total), "ns"), static_cast<double>(total)),
         number_cell(std::to_string(threads), static_cast<double>(threads))});
    t.bars.push_back(static_cast<double>(self));
  }
  page.add_table("Python functions by self time (sampled)", t);
  return {};
}

}  // namespace eacgm
