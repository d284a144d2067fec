#include "report/compare_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "compare/report.h"
#include "report/html_page.h"
#include "report/svg_chart.h"

namespace eacgm::report {
namespace {

// Changes drawn a side: beyond these the table still lists every one.
constexpr size_t kMaxDrawn = 12;

std::string runs_text(const std::vector<std::string>& dirs) {
  return fmt::format("{} run{}: {}", dirs.size(), dirs.size() == 1 ? "" : "s",
                     fmt::join(dirs, ", "));
}

Table changes_table(const std::vector<compare::Change>& changes, const std::string& css_class) {
  Table t{{"layer", "what", "process", "metric", "base", "candidate", "ratio", "confidence",
           "share of the job's time"},
          {},
          {},
          css_class};
  for (const compare::Change& c : changes) {
    const double confidence = 100 * (1 - c.p);
    t.rows.push_back(
        {text_cell(c.key.layer), text_cell(c.key.what), text_cell(c.key.process),
         text_cell(c.key.metric), number_cell(format_value(c.base, c.info.unit), c.base),
         number_cell(format_value(c.candidate, c.info.unit), c.candidate),
         number_cell(compare::ratio_text(c.ratio), std::isinf(c.ratio) ? 1e300 : c.ratio),
         number_cell(compare::confidence_text(c.p), confidence),
         c.time_share
             ? number_cell(fmt::format("{:+.2f} %", 100 * *c.time_share), 100 * *c.time_share)
             : text_cell("-")});
  }
  return t;
}

std::string drawn(const std::vector<compare::Change>& changes,
                  const std::vector<compare::RunData>& base,
                  const std::vector<compare::RunData>& candidate) {
  std::string html;
  for (size_t i = 0; i < changes.size() && i < kMaxDrawn; ++i) {
    const compare::Change& c = changes[i];
    // What the test compared: every window of every run, or one value a run.
    const std::vector<double> b = compare::pooled_samples(base, c.key, c.info);
    const std::vector<double> k = compare::pooled_samples(candidate, c.key, c.info);
    const std::string unit_of_sample =
        c.info.sampling == compare::Sampling::kWindows ? "window" : "run";
    double lo = INFINITY, hi = 0;
    for (const auto* v : {&b, &k}) {
      for (double x : *v) {
        if (x > 0) lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
    }
    // Latencies a decade apart or more read better on a log axis.
    const bool log = c.info.unit == "ns" && std::isfinite(lo) && hi / lo > 20;
    html += distributions(
        fmt::format("{} {} [{}] {}: {} -> {} ({})", c.key.layer, c.key.what, c.key.process,
                    c.key.metric, format_value(c.base, c.info.unit),
                    format_value(c.candidate, c.info.unit), compare::ratio_text(c.ratio)),
        {{fmt::format("base ({} {}s)", b.size(), unit_of_sample), b},
         {fmt::format("candidate ({} {}s)", k.size(), unit_of_sample), k}},
        unit_formatter(c.info.unit), log);
  }
  if (changes.size() > kMaxDrawn) {
    html += fmt::format("<p class=\"note\">The first {} are drawn; the table lists all {}.</p>",
                        kMaxDrawn, changes.size());
  }
  return html;
}

Table presence_table(const std::vector<compare::Presence>& list, const std::string& css_class) {
  Table t{{"layer", "what", "process", "calls", "a second"}, {}, {}, css_class};
  for (const compare::Presence& p : list) {
    t.rows.push_back({text_cell(p.layer), text_cell(p.what), text_cell(p.process),
                      number_cell(std::to_string(p.calls), static_cast<double>(p.calls)),
                      number_cell(fmt::format("{:.1f}", p.per_s), p.per_s)});
  }
  return t;
}

}  // namespace

std::string compare_report_html(const compare::Comparison& c,
                                const std::vector<compare::RunData>& base,
                                const std::vector<compare::RunData>& candidate) {
  HtmlPage page("eacgm compare");
  page.add_fact("base", html_escape(runs_text(c.base_dirs)));
  page.add_fact("candidate", html_escape(runs_text(c.candidate_dirs)));
  page.add_fact("windows", html_escape(fmt::format("{:.2f} s", c.window_s)));
  page.add_fact("verdict",
                c.regressions.empty()
                    ? std::string("<span class=\"verdict-improvement\">no regression</span>")
                    : fmt::format("<span class=\"verdict-regression\">{} regression{}</span>",
                                  c.regressions.size(), c.regressions.size() == 1 ? "" : "s"));
  page.add_fact("also",
                html_escape(fmt::format("{} improvements, {} unchanged, {} with too few calls or "
                                        "events to judge",
                                        c.improvements.size(), c.unchanged, c.too_few)));
  const std::string how =
      "<p class=\"note\">Each chart shows what the test compared: the base runs' values and the "
      "candidate runs' on one axis, one dot a window (or a run), the box from the first to the "
      "third quartile, the thick line at the median.</p>";
  if (!c.regressions.empty()) {
    page.add_section("regressions", "Regressions: slower, more often, bigger",
                     table_html(changes_table(c.regressions, "regressions")) + how +
                         drawn(c.regressions, base, candidate));
  }
  if (!c.improvements.empty()) {
    page.add_section("improvements", "Improvements",
                     table_html(changes_table(c.improvements, "improvements")) + how +
                         drawn(c.improvements, base, candidate));
  }
  if (!c.only_in_base.empty() || !c.only_in_candidate.empty()) {
    std::string html;
    if (!c.only_in_base.empty()) {
      html += "<h3>Only in the base runs</h3>" +
              table_html(presence_table(c.only_in_base, "only-in-base"));
    }
    if (!c.only_in_candidate.empty()) {
      html += "<h3>Only in the candidate runs</h3>" +
              table_html(presence_table(c.only_in_candidate, "only-in-candidate"));
    }
    page.add_section("presence", "Seen on one side only", html);
  }
  if (!c.notes.empty()) {
    std::string html = "<ul class=\"notes\">";
    for (const std::string& n : c.notes) html += "<li>" + html_escape(n) + "</li>";
    page.add_section("notes", "Notes", html + "</ul>");
  }
  return page.render();
}

}  // namespace eacgm::report
