#include "slo/rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "layers/layer.h"

namespace eacgm::slo {
namespace {

// Whether serve exports per-API call latency for the layer named so: every layer serve can trace
// that has calls (not the python layer, which it never traces, nor the gpu layer's NVML readings;
// docs/SERVE.md).
bool serve_has_call_series(std::string_view layer_name) {
  const std::optional<Layer> layer = layer_from_name(layer_name);
  if (!layer) return false;
  const LayerInfo& info = layer_info(*layer);
  return info.not_in_serve.empty() && info.source != LayerSource::kUserSpace;
}

// A YAML double-quoted scalar: every string written to the file goes through here, so API names,
// comms and PromQL's own quotes cannot break the document.
std::string yaml_quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// A PromQL label matcher value: a double-quoted string with Go's escapes.
std::string label_value(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Shortest text that reads back as the same double (PromQL takes 6.2e-06).
std::string number(double v) { return fmt::format("{}", v); }

std::string duration(double seconds) { return fmt::format("{:.0f}s", std::max(1.0, seconds)); }

struct Rule {
  std::string alert, expr, slo, summary, description;
  bool wait = true;  // use `for:` (a one-off event such as a hang fires at once)
};

// One line of the comment block: an objective and why it has no rule.
std::string unexpressed(const Objective& o, std::string_view why) {
  return fmt::format("#   {} (threshold {}): {}\n", objective_id(o.key),
                     format_value(o.threshold, o.unit), why);
}

}  // namespace

std::string render_rules(const Slo& slo, const RulesOptions& options) {
  std::vector<Rule> rules;
  std::string comments;
  const std::string range = duration(options.range_s);

  // serve's call histograms carry no process, only layer and API: one rule per API, at the
  // loosest of its process roles' thresholds, over each node's traced processes together.
  struct Latency {
    double threshold = 0;
    std::vector<std::string> processes;
  };
  std::map<std::pair<std::string, std::string>, Latency> latency;

  for (const Objective& o : slo.objectives) {
    const ObjectiveKey& k = o.key;
    if (k.phase == Phase::kStartup) {
      comments += unexpressed(o,
                              "a start-up baseline: serve's series do not say how long a process "
                              "has run");
      continue;
    }
    if (tail_latency_percentile(k.metric)) {
      if (!serve_has_call_series(k.layer)) {
        comments += unexpressed(o, "serve has no per-function series for this layer");
        continue;
      }
      Latency& l = latency[{k.layer, k.what}];
      l.threshold = std::max(l.threshold, o.threshold);
      l.processes.push_back(k.process);
    } else if (k.metric == kDeviceMemory) {
      std::string selector;
      if (k.process.starts_with("rank:")) {
        selector = fmt::format("eacgm_process_device_memory_bytes{{rank={}}}",
                               label_value(k.process.substr(5)));
      } else if (k.process.starts_with("comm:")) {
        // serve labels processes by pid; their command name is on eacgm_process_info.
        selector = fmt::format(
            "eacgm_process_device_memory_bytes * on (instance, pid) group_left "
            "eacgm_process_info{{comm={}}}",
            label_value(k.process.substr(5)));
      } else {
        comments += unexpressed(o,
                                "serve's labels cannot tell a worker from the process it works "
                                "for");
        continue;
      }
      rules.push_back(
          {"EacgmSloDeviceMemory",
           fmt::format("max by (instance, job_id, pid) ({}) > {}", selector, number(o.threshold)),
           objective_id(k), fmt::format("Device memory of {} above its SLO", k.process),
           fmt::format("{} has held more device memory than {} for {} ({}).", k.process,
                       format_value(o.threshold, o.unit), duration(options.for_s), o.rule)});
    } else if (k.metric == kGpuUtilization || k.metric == kGpuMemory) {
      const std::string device = k.what.starts_with("device ") ? k.what.substr(7) : k.what;
      const bool util = k.metric == kGpuUtilization;
      // serve's readings are in base units: utilisation as a ratio, not a percentage.
      const double threshold = util ? o.threshold / 100 : o.threshold;
      std::string expr = fmt::format("avg_over_time(eacgm_gpu_{}{{device={}}}[{}]) {} {}",
                                     util ? "util_ratio" : "memory_used_bytes", label_value(device),
                                     range, util ? "<" : ">", number(threshold));
      // An idle GPU is not a job running below its baseline: only while serve traces something.
      if (util) expr = fmt::format("({}) and on (instance) (eacgm_processes_traced > 0)", expr);
      rules.push_back(
          {util ? "EacgmSloGpuUtilization" : "EacgmSloGpuMemory", expr, objective_id(k),
           fmt::format("GPU {} {} {} its SLO", device, k.metric, util ? "below" : "above"),
           fmt::format("GPU {}'s {} stayed {} {} for {} ({}).", device, k.metric,
                       util ? "below" : "above", format_value(o.threshold, o.unit),
                       duration(options.for_s), o.rule)});
    } else if (k.metric == kAnomalyRate) {
      Rule r;
      r.alert = "EacgmSloAnomaly";
      r.slo = objective_id(k);
      r.wait = false;
      if (o.threshold <= 0) {
        // The healthy runs had none: any one is a violation. serve's counter of a kind appears
        // with its first anomaly (so rate() would miss that one); the gauge of the latest
        // anomaly's time does not.
        r.expr = fmt::format(
            "time() - max by (instance, job_id, rank, pid) "
            "(eacgm_anomaly_timestamp_seconds{{kind={},layer={}}}) < {}",
            label_value(k.what), label_value(k.layer), number(options.range_s));
        r.description = fmt::format("A {} {} anomaly in the last {}; the healthy runs had none.",
                                    k.layer, k.what, duration(options.range_s));
      } else {
        r.expr = fmt::format(
            "sum by (instance) (rate(eacgm_anomalies_total{{kind={},layer={}}}[{}])) > {}",
            label_value(k.what), label_value(k.layer), range, number(o.threshold));
        r.description = fmt::format("{} {} anomalies more often than {} ({}).", k.layer, k.what,
                                    format_value(o.threshold, o.unit), o.rule);
      }
      r.summary = fmt::format("{} {} anomalies above their SLO", k.layer, k.what);
      rules.push_back(std::move(r));
    } else if (k.metric == kCallRate) {
      comments += unexpressed(o,
                              "serve's call counters carry no process; a node-wide rate mixes "
                              "jobs and reads 0 between them");
    } else if (k.metric == kCallShare) {
      comments += unexpressed(o,
                              "serve's call counters carry no process; a node-wide share mixes "
                              "the job's processes with each other and with other jobs");
    } else if (k.metric == kSelfTime) {
      comments += unexpressed(o,
                              "serve's latency histograms hold each operator's whole time, not "
                              "its self time");
    } else if (k.metric == kEventRate) {
      comments += unexpressed(o, "serve exports no count of these events");
    } else if (k.metric == kCollectiveLateness) {
      comments += unexpressed(o,
                              "serve exports each rank's wait per collective, not its lateness "
                              "(eacgm cluster names the straggler across nodes)");
    } else {
      comments += unexpressed(o, "no serve metric");
    }
  }
  for (const auto& [api, l] : latency) {
    const auto& [layer, name] = api;
    const int p = slo.windows.latency_percentile;
    rules.push_back(
        {"EacgmSloLatency",
         fmt::format("histogram_quantile({}, sum by (instance, le) "
                     "(rate(eacgm_call_duration_seconds_bucket{{layer={},api={}}}[{}]))) > {}",
                     number(p / 100.0), label_value(layer), label_value(name), range,
                     number(l.threshold / 1e9)),
         fmt::format("steady/p{}_latency/{}/{}", p, layer, name),
         fmt::format("p{} latency of {} {} above its SLO", p, layer, name),
         fmt::format("The p{} latency of {} {} on this node stayed above {} for {} (the loosest "
                     "threshold of {}; serve's buckets are 1-2.5-5 per decade, so the p{} is "
                     "interpolated within one).",
                     p, layer, name, format_value(l.threshold, "ns"), duration(options.for_s),
                     fmt::join(l.processes, ", "), p)});
  }
  std::stable_sort(rules.begin(), rules.end(),
                   [](const Rule& a, const Rule& b) { return a.alert < b.alert; });

  std::string out = fmt::format(
      "# Prometheus alerting rules for the SLOs of {}, written by `eacgm slo rules`\n"
      "# over the metrics of `eacgm serve` (docs/SERVE.md, docs/SLO.md).\n"
      "# Fitted from {} healthy run(s): {}.\n"
      "# Check with: promtool check rules FILE\n",
      options.source, slo.runs.size(), fmt::join(slo.runs, ", "));
  if (!comments.empty()) {
    out += "#\n# Objectives with no rule here (hold runs to them with `eacgm slo check`):\n";
    out += comments;
  }
  out += "groups:\n  - name: eacgm-slo\n    rules:\n";
  if (rules.empty()) out += "      []\n";
  for (const Rule& r : rules) {
    out += fmt::format("      - alert: {}\n        expr: {}\n", r.alert, yaml_quoted(r.expr));
    if (r.wait) out += fmt::format("        for: {}\n", duration(options.for_s));
    out += fmt::format("        labels:\n          severity: warning\n          slo: {}\n",
                       yaml_quoted(r.slo));
    out += fmt::format("        annotations:\n          summary: {}\n          description: {}\n",
                       yaml_quoted(r.summary), yaml_quoted(r.description));
  }
  return out;
}

}  // namespace eacgm::slo
