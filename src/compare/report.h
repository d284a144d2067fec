// What `eacgm compare` prints: text for people (regressions first, the costliest first, then
// improvements, then how many metrics did not change) or JSON for tools.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/human_text.h"
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

}  // namespace eacgm::compare
