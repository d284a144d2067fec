// The Prometheus text exposition format (version 0.0.4), written by hand: a
// family's HELP and TYPE lines, then its samples with escaped label values.
// Also the fixed-bucket latency histogram `eacgm serve` keeps instead of
// every duration, so its memory does not grow with the number of calls.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eacgm {

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// Label values may hold anything: backslash, double quote and newline are escaped.
std::string escape_label_value(std::string_view value);
// HELP text: backslash and newline are escaped.
std::string escape_help(std::string_view text);
// A sample value: integers exactly, others shortest round-trip, +Inf/-Inf/NaN.
std::string format_value(double value);

// Latency buckets from 1 µs to 10 s (1-2.5-5 per decade): CUDA API calls take
// microseconds, collectives milliseconds, a straggling step seconds.
class LatencyHistogram {
 public:
  static constexpr size_t kBuckets = 22;  // finite upper bounds; +Inf is implicit
  static std::span<const double> bounds_s();

  void observe(uint64_t duration_ns);
  uint64_t count() const { return count_; }
  uint64_t sum_ns() const { return sum_ns_; }
  // Observations <= bounds_s()[i] (cumulative, as exposed).
  uint64_t cumulative(size_t i) const;

 private:
  std::array<uint64_t, kBuckets + 1> counts_{};  // per bucket, last is (10 s, +Inf)
  uint64_t count_ = 0;
  uint64_t sum_ns_ = 0;
};

class Exposition {
 public:
  // Starts a metric family; every sample until the next family belongs to it.
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, double value);
  // name_bucket{...,le=...}, name_sum and name_count of one histogram.
  void histogram(std::string_view name, const Labels& labels, const LatencyHistogram& h);
  const std::string& text() const { return text_; }

 private:
  void write_labels(const Labels& labels, std::string_view le = {});
  std::string text_;
};

// A label's values, bounded: the first `limit` distinct names keep their own
// series, every later one is counted as "other".
class BoundedNames {
 public:
  explicit BoundedNames(size_t limit) : limit_(limit) {}
  std::string_view admit(std::string_view name);

 private:
  size_t limit_;
  std::set<std::string, std::less<>> names_;
};

}  // namespace eacgm
