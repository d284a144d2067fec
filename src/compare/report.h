// What `eacgm compare` prints: text for people (regressions first, the costliest first, then
// improvements, then how many metrics did not change) or JSON for tools.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "compare/compare.h"

namespace eacgm::compare {

// {"regressions": [...], "improvements": [...], "unchanged": N, ...}: docs/COMPARE.md.
// `all`: also every metric that did not change (or had too few calls to judge), with its figures.
nlohmann::ordered_json report_json(const Comparison& c, const Thresholds& t, bool all = false);

std::string report_text(const Comparison& c, bool all = false);

// "x1.41", or "new" for a value that was 0 in the base.
std::string ratio_text(double ratio);
// ">99.99%", or the confidence 1 - p in percent with two decimals.
std::string confidence_text(double p);

// "4.5 us", "12.0/s", "256.0 MiB", "71.2 %": a metric's value in its unit, for people.
std::string format_value(double value, std::string_view unit);

}  // namespace eacgm::compare
