// `eacgm slo rules`: the objectives of an SLO file as Prometheus alerting rules over the metrics
// `eacgm serve` exports (docs/SERVE.md), so that the fleet is held to the baselines a CI gate holds
// single runs to. Objectives serve has no metric for are listed as comments, with the reason.
#pragma once

#include <string>

#include "slo/slo.h"

namespace eacgm::slo {

// The rule file's text (YAML, for `promtool check rules`). `source` names the SLO file in its
// header. `for_s` is how long a condition must hold before an alert fires; `range_s` the range of
// its rate() and avg_over_time() (both 5 min by default: long enough to smooth a scrape or two).
struct RulesOptions {
  std::string source;
  double for_s = 300;
  double range_s = 300;
};
std::string render_rules(const Slo& slo, const RulesOptions& options);

}  // namespace eacgm::slo
