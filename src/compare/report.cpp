#include "compare/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace eacgm::compare {
namespace {

using nlohmann::ordered_json;

std::string_view test_name(const Change& c) {
  switch (c.info.sampling) {
    case Sampling::kEvents:
      return "poisson-exact";
    case Sampling::kOutcomes:
      return "fisher-exact";
    default:
      return c.exact ? "mann-whitney-exact" : "mann-whitney-normal";
  }
}

ordered_json change_json(const Change& c) {
  ordered_json out;
  out["layer"] = c.key.layer;
  out["what"] = c.key.what;
  out["process"] = c.key.process;
  out["metric"] = c.key.metric;
  out["unit"] = c.info.unit;
  out["base"] = c.base;
  out["candidate"] = c.candidate;
  // JSON has no infinity: a value that was 0 in the base has no ratio.
  out["ratio"] = std::isinf(c.ratio) ? ordered_json(nullptr) : ordered_json(c.ratio);
  out["confidence"] = 1 - c.p;
  out["p_value"] = c.p;
  out["effect"] = c.delta;  // Cliff's delta
  out["test"] = test_name(c);
  out["samples"] = c.info.sampling == Sampling::kWindows ? "windows" : "runs";
  out["base_samples"] = c.base_samples;
  out["candidate_samples"] = c.candidate_samples;
  out["base_count"] = c.base_count;
  out["candidate_count"] = c.candidate_count;
  out["time_share"] = c.time_share ? ordered_json(*c.time_share) : ordered_json(nullptr);
  return out;
}

ordered_json presence_json(const std::vector<Presence>& list) {
  ordered_json out = ordered_json::array();
  for (const Presence& p : list) {
    out.push_back({{"layer", p.layer},
                   {"what", p.what},
                   {"process", p.process},
                   {"calls", p.calls},
                   {"per_s", p.per_s}});
  }
  return out;
}

std::string change_line(const Change& c) {
  std::string line = fmt::format(
      "  {} {} [{}] {}: {} -> {} ({}, confidence {}, effect {:+.2f})", c.key.layer, c.key.what,
      c.key.process, c.key.metric, format_value(c.base, c.info.unit),
      format_value(c.candidate, c.info.unit), ratio_text(c.ratio), confidence_text(c.p), c.delta);
  if (c.time_share) {
    line += fmt::format(", {} {:.2f}% of the time", *c.time_share >= 0 ? "costs" : "saves",
                        100 * std::fabs(*c.time_share));
  }
  return line + "\n";
}

std::string presence_line(const Presence& p) {
  return fmt::format("  {} {} [{}]: {} calls, {:.1f}/s\n", p.layer, p.what, p.process, p.calls,
                     p.per_s);
}

}  // namespace

std::string ratio_text(double ratio) {
  return std::isinf(ratio) ? "new" : fmt::format("x{:.2f}", ratio);
}

std::string confidence_text(double p) {
  // Beyond four nines the digits say nothing a reader can use.
  return p < 1e-4 ? ">99.99%" : fmt::format("{:.2f}%", 100 * (1 - p));
}

ordered_json report_json(const Comparison& c, const Thresholds& t, bool all) {
  ordered_json out;
  ordered_json regressions = ordered_json::array(), improvements = ordered_json::array();
  for (const Change& ch : c.regressions) regressions.push_back(change_json(ch));
  for (const Change& ch : c.improvements) improvements.push_back(change_json(ch));
  out["regressions"] = std::move(regressions);
  out["improvements"] = std::move(improvements);
  out["unchanged"] = c.unchanged;
  out["too_few"] = c.too_few;
  if (all) {
    ordered_json others = ordered_json::array();
    for (const Change& ch : c.others) {
      ordered_json o = change_json(ch);
      o["verdict"] = ch.verdict == Verdict::kTooFew ? "too few" : "unchanged";
      others.push_back(std::move(o));
    }
    out["unchanged_metrics"] = std::move(others);
  }
  out["only_in_base"] = presence_json(c.only_in_base);
  out["only_in_candidate"] = presence_json(c.only_in_candidate);
  out["notes"] = c.notes;
  out["base"] = c.base_dirs;
  out["candidate"] = c.candidate_dirs;
  out["window_s"] = c.window_s;
  out["thresholds"] = {{"alpha", t.alpha},
                       {"min_ratio", t.min_ratio},
                       {"min_effect", t.min_delta},
                       {"min_calls", t.min_calls},
                       {"min_events", t.min_events},
                       {"min_cost", t.min_cost},
                       {"min_call_time_cost", t.min_call_time_cost},
                       {"min_outcome_runs", t.min_outcome_runs}};
  return out;
}

std::string report_text(const Comparison& c, bool all) {
  std::string out = fmt::format(
      "eacgm compare: {} base run{} ({}) vs {} candidate run{} ({}), {:.2f} s windows\n",
      c.base_dirs.size(), c.base_dirs.size() == 1 ? "" : "s", fmt::join(c.base_dirs, ", "),
      c.candidate_dirs.size(), c.candidate_dirs.size() == 1 ? "" : "s",
      fmt::join(c.candidate_dirs, ", "), c.window_s);
  auto section = [&](const std::vector<Change>& list, std::string_view one, std::string_view many) {
    if (list.empty()) return;
    out += fmt::format("{} {}:\n", list.size(), list.size() == 1 ? one : many);
    for (const Change& ch : list) out += change_line(ch);
  };
  if (c.regressions.empty()) out += "no regression\n";
  section(c.regressions, "regression", "regressions");
  section(c.improvements, "improvement", "improvements");
  out += fmt::format("{} unchanged", c.unchanged);
  if (c.too_few > 0) out += fmt::format(", {} with too few calls or events to judge", c.too_few);
  out += "\n";
  if (all) {
    for (const Change& ch : c.others) {
      out +=
          fmt::format("{}{}", ch.verdict == Verdict::kTooFew ? "  (too few)" : "", change_line(ch));
    }
  }
  if (!c.only_in_base.empty()) {
    out += "only in the base runs:\n";
    for (const Presence& p : c.only_in_base) out += presence_line(p);
  }
  if (!c.only_in_candidate.empty()) {
    out += "only in the candidate runs:\n";
    for (const Presence& p : c.only_in_candidate) out += presence_line(p);
  }
  for (const std::string& n : c.notes) out += fmt::format("note: {}\n", n);
  return out;
}

}  // namespace eacgm::compare
