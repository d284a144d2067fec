#include "serve/exposition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace eacgm {

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Counters are integers; print them exactly, never as 1.2e+07.
  if (value == std::trunc(value) && std::fabs(value) < 9.007199254740992e15) {
    return fmt::format("{}", static_cast<int64_t>(value));
  }
  return fmt::format("{}", value);
}

std::span<const double> LatencyHistogram::bounds_s() {
  static constexpr std::array<double, kBuckets> kBounds = {
      1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
      5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0};
  return kBounds;
}

void LatencyHistogram::observe(uint64_t duration_ns) {
  // Bounds in integer ns, so a duration exactly on a bound falls in that bucket (le = <=).
  static const std::array<uint64_t, kBuckets> kBoundsNs = [] {
    std::array<uint64_t, kBuckets> ns{};
    for (size_t i = 0; i < kBuckets; ++i)
      ns[i] = static_cast<uint64_t>(std::llround(bounds_s()[i] * 1e9));
    return ns;
  }();
  const size_t i = static_cast<size_t>(
      std::lower_bound(kBoundsNs.begin(), kBoundsNs.end(), duration_ns) - kBoundsNs.begin());
  ++counts_[i];
  ++count_;
  sum_ns_ += duration_ns;
}

uint64_t LatencyHistogram::cumulative(size_t i) const {
  uint64_t n = 0;
  for (size_t k = 0; k <= i && k < counts_.size(); ++k) n += counts_[k];
  return n;
}

void Exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name, type);
}

void Exposition::write_labels(const Labels& labels, std::string_view le) {
  if (labels.empty() && le.empty()) return;
  text_ += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) text_ += ',';
    first = false;
    text_ += fmt::format("{}=\"{}\"", key, escape_label_value(value));
  }
  if (!le.empty()) text_ += fmt::format("{}le=\"{}\"", first ? "" : ",", le);
  text_ += '}';
}

void Exposition::sample(std::string_view name, const Labels& labels, double value) {
  text_ += name;
  write_labels(labels);
  text_ += ' ';
  text_ += format_value(value);
  text_ += '\n';
}

void Exposition::histogram(std::string_view name, const Labels& labels, const LatencyHistogram& h) {
  uint64_t cumulative = 0;
  const auto bounds = LatencyHistogram::bounds_s();
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative = h.cumulative(i);
    text_ += fmt::format("{}_bucket", name);
    write_labels(labels, format_value(bounds[i]));
    text_ += fmt::format(" {}\n", cumulative);
  }
  text_ += fmt::format("{}_bucket", name);
  write_labels(labels, "+Inf");
  text_ += fmt::format(" {}\n", h.count());
  sample(fmt::format("{}_sum", name), labels, static_cast<double>(h.sum_ns()) / 1e9);
  sample(fmt::format("{}_count", name), labels, static_cast<double>(h.count()));
}

std::string_view BoundedNames::admit(std::string_view name) {
  if (auto it = names_.find(name); it != names_.end()) return *it;
  if (names_.size() >= limit_) return "other";
  return *names_.emplace(name).first;
}

}  // namespace eacgm
