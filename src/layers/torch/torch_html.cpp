#include "layers/torch/torch_html.h"

#include <algorithm>

#include "common/human_text.h"
#include "common/json_fields.h"

namespace eacgm {

// By self time: an operator's total holds the operators it calls, so totals would rank the
// outermost (aten::linear over the aten::addmm it runs) first.
Result<void> torch_html_report(report::LayerPage& page) {
  using report::number_cell;
  report::Table t{{"operator", "calls", "self time", "total time", "p50"}, {}, {}, "operators"};
  std::vector<std::pair<uint64_t, std::string>> order;
  const nlohmann::json ops = json_object(page.summary(), "ops");  // torch's call table
  for (const auto& [op, st] : ops.items()) {
    if (st.is_object()) order.emplace_back(json_number<uint64_t>(st, "self_ns"), op);
  }
  std::sort(order.rbegin(), order.rend());
  for (const auto& [self, op] : order) {
    if (t.rows.size() == report::kTableRows) break;
    const nlohmann::json& st = ops[op];
    const auto total = static_cast<double>(json_number<uint64_t>(st, "total_ns"));
    const auto p50 = static_cast<double>(json_number<uint64_t>(st, "p50_ns"));
    const auto count = json_number<uint64_t>(st, "count");
    t.rows.push_back(
        {report::text_cell(op), number_cell(std::to_string(count), static_cast<double>(count)),
         number_cell(format_value(static_cast<double>(self), "ns"), static_cast<double>(self)),
         number_cell(format_value(total, "ns"), total), number_cell(format_value(p50, "ns"), p50)});
    t.bars.push_back(static_cast<double>(self));
  }
  page.add_table("PyTorch operators by self time", t);
  return {};
}

}  // namespace eacgm
