#include "cli/numeric_flags.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "layers/torch/torch_ops.h"

namespace eacgm {

CLI::Validator bounded(double lo, double hi, const std::string& unit) {
  // fmt's shortest round-trip form: 0.1, 86400, 3600000 (never %f's 309 digits).
  const std::string range = fmt::format("{} to {} {}", lo, hi, unit);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0' || std::isnan(value)) {
          return fmt::format("'{}' is not a number; expected {}", text, range);
        }
        // Infinity and overflow (1e999 reads as infinity) fail here too.
        if (!(value >= lo && value <= hi)) {
          return fmt::format("{} is out of range; expected {}", text, range);
        }
        return {};
      },
      fmt::format("in [{}, {}]", lo, hi), "bounded");
}

CLI::Validator torch_ops_filter() {
  return CLI::Validator(
      [](std::string& spec) -> std::string {
        auto filter = TorchOpFilter::parse(spec);
        return filter ? std::string() : filter.error().message;
      },
      "default|all|REGEX", "torch-ops");
}

CLI::Validator overhead_budget_percent() {
  const CLI::Validator range = bounded(kMinOverheadBudgetPct, kMaxOverheadBudgetPct, "percent");
  return CLI::Validator(
      [range](std::string& text) -> std::string {
        if (text.ends_with('%')) text.pop_back();
        return range(text);
      },
      fmt::format("a percentage in [{}, {}]", kMinOverheadBudgetPct, kMaxOverheadBudgetPct),
      "percent");
}

}  // namespace eacgm
