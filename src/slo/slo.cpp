#include "slo/slo.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

namespace eacgm::slo {
namespace {

// One healthy value per run, or why there is none worth fitting on.
struct Values {
  std::vector<std::string> runs;
  std::vector<double> values;
  std::vector<uint64_t> counts;
};

std::string slug(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i).starts_with("/s")) {  // `calls/s` -> `calls_per_s`
      out += "_per_s";
      ++i;
    } else if (text[i] == ' ' || text[i] == '/') {
      out += '_';
    } else {
      out += text[i];
    }
  }
  return out;
}

// As compare names what it compares (`cuda cudaLaunchKernel [rank:0] latency`), with the phase.
std::string describe(const ObjectiveKey& k) {
  return fmt::format("{} {} [{}] {} {}", k.layer, k.what, k.process, phase_name(k.phase), k.metric);
}

// What needs `min_calls` calls of one API in every run and phase, named for a skip reason: the
// statistics of an API's own calls. Fewer calls than that make a tail, a median or a per-window
// rate of a few calls, which moves by chance from run to run. Empty for the others (a process's
// calls taken together, readings, whole-run counts).
std::string_view min_calls_for(const ObjectiveKey& k) {
  if (tail_latency_percentile(k.metric)) return "a tail latency";
  if (k.metric == kSelfTime) return "a self time";
  if (k.metric == kCallRate && k.layer != "all") return "an API's call rate";
  if (k.metric == kCallShare) return "a share of calls";
  return {};
}

// Whether an observation over fewer than `min_calls` calls is too little to judge at all: a time
// of a few calls is chance. A rate or share of a few calls is not: an API called less than it was
// is a rate drop, which its objective must see.
bool judged_on_few_calls(const ObjectiveKey& k) {
  return !tail_latency_percentile(k.metric) && k.metric != kSelfTime;
}

nlohmann::ordered_json window_json(Phase phase, const Windows& w) {
  nlohmann::ordered_json j;
  j["phase"] = phase_name(phase);
  switch (phase) {
    case Phase::kStartup:
      j["from_s"] = 0.0;
      j["to_s"] = w.startup_s;
      j["length_s"] = w.startup_window_s;
      break;
    case Phase::kSteady:
      j["from_s"] = w.startup_s;
      j["to_s"] = nullptr;
      j["length_s"] = w.steady_window_s;
      break;
    case Phase::kRun:
      j["from_s"] = 0.0;
      j["to_s"] = nullptr;
      j["length_s"] = nullptr;  // whole-run counts: no windows
      break;
  }
  return j;
}

nlohmann::ordered_json key_json(const ObjectiveKey& k, const Windows& w) {
  nlohmann::ordered_json j;
  j["id"] = objective_id(k);
  j["what"] = k.what;
  j["layer"] = k.layer;
  j["process"] = k.process;
  j["metric"] = k.metric;
  j["window"] = window_json(k.phase, w);
  return j;
}

// Readers of slo.json: each error names the place ("objective 3") and the field.
Result<std::string> get_string(const nlohmann::json& j, const char* field,
                               const std::string& where) {
  const auto it = j.find(field);
  if (it == j.end() || !it->is_string()) {
    return Error{fmt::format("{} has no \"{}\" string", where, field)};
  }
  return it->get<std::string>();
}
Result<double> get_number(const nlohmann::json& j, const char* field, const std::string& where) {
  const auto it = j.find(field);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>())) {
    return Error{fmt::format("{} has no \"{}\" number", where, field)};
  }
  return it->get<double>();
}

Result<ObjectiveKey> read_key(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return Error{fmt::format("{} is not an object", where)};
  ObjectiveKey k;
  const auto window = j.find("window");
  if (window == j.end() || !window->is_object()) {
    return Error{fmt::format("{} has no \"window\" object", where)};
  }
  auto phase_text = get_string(*window, "phase", where + "'s window");
  if (!phase_text) return phase_text.error();
  const auto phase = phase_from_name(*phase_text);
  if (!phase) {
    return Error{
        fmt::format("{} has an unknown phase \"{}\" (startup, steady or run)", where, *phase_text)};
  }
  k.phase = *phase;
  for (auto [field, out] : {std::pair{"process", &k.process}, std::pair{"layer", &k.layer},
                            std::pair{"what", &k.what}, std::pair{"metric", &k.metric}}) {
    auto v = get_string(j, field, where);
    if (!v) return v.error();
    *out = std::move(*v);
  }
  if (!metric_rule(k.metric)) {
    return Error{fmt::format("{} has a metric this eacgm does not know: \"{}\"", where, k.metric)};
  }
  return k;
}

Result<Objective> read_objective(const nlohmann::json& j, const std::string& where) {
  auto key = read_key(j, where);
  if (!key) return key.error();
  Objective o;
  o.key = std::move(*key);
  const MetricRule rule = *metric_rule(o.key.metric);
  auto bound = get_string(j, "bound", where);
  if (!bound) return bound.error();
  if (*bound == "upper") {
    o.bound = Bound::kUpper;
  } else if (*bound == "lower") {
    o.bound = Bound::kLower;
  } else {
    return Error{fmt::format("{} has bound \"{}\" (upper or lower)", where, *bound)};
  }
  auto threshold = get_number(j, "threshold", where);
  if (!threshold) return threshold.error();
  o.threshold = *threshold;
  o.unit = j.value("unit", std::string(rule.unit));
  o.statistic = j.value("statistic", std::string(rule.statistic));
  o.tolerance = j.value("tolerance", rule.tolerance);
  o.rule = j.value("rule", std::string());
  if (const auto e = j.find("evidence"); e != j.end() && e->is_object()) {
    // The evidence is for people reading the file and the report; a hand-edited file may drop it.
    try {
      o.runs = e->value("runs", std::vector<std::string>{});
      o.values = e->value("values", std::vector<double>{});
      o.counts = e->value("counts", std::vector<uint64_t>{});
    } catch (const nlohmann::json::exception&) {
      return Error{fmt::format("{}'s evidence is not lists of runs, values and counts", where)};
    }
  }
  return o;
}

}  // namespace

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kStartup:
      return "startup";
    case Phase::kSteady:
      return "steady";
    case Phase::kRun:
      return "run";
  }
  return "?";
}

std::optional<Phase> phase_from_name(std::string_view name) {
  for (Phase p : {Phase::kStartup, Phase::kSteady, Phase::kRun}) {
    if (phase_name(p) == name) return p;
  }
  return std::nullopt;
}

std::string_view bound_name(Bound bound) { return bound == Bound::kUpper ? "upper" : "lower"; }

std::string tail_latency_metric(int percentile) { return fmt::format("p{} latency", percentile); }

std::optional<int> tail_latency_percentile(std::string_view metric) {
  constexpr std::string_view kSuffix = " latency";
  if (!metric.starts_with('p') || !metric.ends_with(kSuffix)) return std::nullopt;
  const std::string_view digits = metric.substr(1, metric.size() - 1 - kSuffix.size());
  int percentile = 0;
  const auto [end, error] =
      std::from_chars(digits.data(), digits.data() + digits.size(), percentile);
  if (error != std::errc() || end != digits.data() + digits.size() ||
      percentile < kMinLatencyPercentile || percentile > kMaxLatencyPercentile) {
    return std::nullopt;
  }
  return percentile;
}

std::optional<MetricRule> metric_rule(std::string_view metric) {
  // Tolerances: a tail latency and a call rate move with the machine's load (a busier machine
  // made a whole job 20 % slower in COMPARE.md), so half again; memory is deterministic for a
  // given job and input, so a tenth is already a change worth a look; a utilisation reading moves
  // with the job's own phases.
  if (const std::optional<int> percentile = tail_latency_percentile(metric)) {
    return MetricRule{"ns", Bound::kUpper, fmt::format("p{} of the calls", *percentile), 0.5};
  }
  if (metric == kCallRate) {
    return MetricRule{"/s", Bound::kLower, "P10 of the windows' call rates", 0.5};
  }
  // A share does not move with the machine's load, but it moves with the mix of a window's calls
  // (a window holding a data loader's burst): half again, as the rates.
  if (metric == kCallShare) {
    return MetricRule{"%", Bound::kUpper, "P90 of the windows' shares of the process's calls", 0.5};
  }
  // A self time is a latency less that of nested calls: the same tolerance.
  if (metric == kSelfTime) {
    return MetricRule{"ns", Bound::kUpper,
                      "P90 of the windows' median self time, the first and last left out", 0.5};
  }
  if (metric == kDeviceMemory) {
    return MetricRule{"bytes", Bound::kUpper, "P90 of the windows' peaks", 0.1};
  }
  if (metric == kGpuUtilization) {
    return MetricRule{"%", Bound::kLower, "P10 of the windows' mean readings", 0.2};
  }
  if (metric == kGpuMemory) {
    return MetricRule{"bytes", Bound::kUpper, "P90 of the windows' mean readings", 0.1};
  }
  if (metric == kEventRate) {
    return MetricRule{"/s", Bound::kUpper, "events of the whole run per second", 0.5};
  }
  if (metric == kAnomalyRate) {
    return MetricRule{"/s", Bound::kUpper, "anomalies of the whole run per second", 0.5};
  }
  // Both move with the load of the machine and of the network, as a latency does.
  if (metric == kCollectiveLateness) {
    return MetricRule{"ns", Bound::kUpper, "P90 of the windows' median lateness", 0.5};
  }
  if (metric == kNcclBandwidth) {
    return MetricRule{"GB/s", Bound::kLower, "P10 of the windows' median bandwidth", 0.5};
  }
  return std::nullopt;
}

std::string objective_id(const ObjectiveKey& k) {
  return fmt::format("{}/{}/{}/{}/{}", phase_name(k.phase), slug(k.metric), slug(k.layer),
                     slug(k.what), k.process);
}

Slo fit(const std::vector<Observed>& runs, const FitOptions& options) {
  Slo slo;
  slo.options = options;
  slo.windows = options.windows;
  std::set<ObjectiveKey> keys;
  double shortest = std::numeric_limits<double>::infinity();
  for (const Observed& r : runs) {
    slo.runs.push_back(r.dir);
    shortest = std::min(shortest, r.seconds);
    for (const auto& [k, v] : r.values) keys.insert(k);
  }
  for (const ObjectiveKey& key : keys) {
    const MetricRule rule = *metric_rule(key.metric);
    Values v;
    std::string reason;
    for (const Observed& r : runs) {
      const auto it = r.values.find(key);
      if (it == r.values.end()) {
        reason = fmt::format("not seen in {}: an objective needs every healthy run", r.dir);
        break;
      }
      const Observation& o = it->second;
      if (const std::string_view needs = min_calls_for(key);
          !needs.empty() && o.count < options.min_calls) {
        reason = fmt::format("{} calls in {}: {} needs at least {}", o.count, r.dir, needs,
                             options.min_calls);
        break;
      }
      if (key.phase != Phase::kRun && o.windows < options.min_windows) {
        reason = fmt::format("{} windows in {}: a percentile of windows needs at least {}",
                             o.windows, r.dir, options.min_windows);
        break;
      }
      v.runs.push_back(r.dir);
      v.values.push_back(o.value);
      v.counts.push_back(o.count);
    }
    if (reason.empty() && v.values.empty()) reason = "no healthy run";
    const auto [lo, hi] = std::minmax_element(v.values.begin(), v.values.end());
    if (reason.empty() && rule.bound == Bound::kLower && *lo <= 0) {
      reason = "0 in a healthy run: a lower bound of 0 holds nothing";
    }
    // A margin as large as the lowest value (healthy runs that spread more than it, such as a
    // bandwidth that includes waiting for peers on a busy machine) leaves a lower bound at 0,
    // which holds nothing either.
    if (reason.empty() && rule.bound == Bound::kLower &&
        std::max(options.tolerance.value_or(rule.tolerance) * *lo, *hi - *lo) >= *lo) {
      reason = fmt::format(
          "healthy runs from {} to {}: the margin leaves a lower bound of 0, which holds nothing",
          format_value(*lo, rule.unit), format_value(*hi, rule.unit));
    }
    // The same at the other end of a share: no window's share can pass 100 %, so a bound there
    // holds nothing (a process whose calls are mostly one API: a storm of it barely moves its
    // share; its rate and the process's other APIs' rates say more).
    if (reason.empty() && key.metric == kCallShare &&
        *hi + std::max(options.tolerance.value_or(rule.tolerance) * *hi, *hi - *lo) >= 100) {
      reason = fmt::format(
          "healthy runs up to {}: the margin takes an upper bound to 100 % or more, which holds "
          "nothing",
          format_value(*hi, rule.unit));
    }
    if (!reason.empty()) {
      slo.skipped.push_back({key, std::move(reason)});
      continue;
    }
    Objective o;
    o.key = key;
    o.unit = std::string(rule.unit);
    o.bound = rule.bound;
    o.statistic = std::string(rule.statistic);
    o.tolerance = options.tolerance.value_or(rule.tolerance);
    const double worst = rule.bound == Bound::kUpper ? *hi : *lo;
    const double spread = *hi - *lo;
    const double margin = std::max(o.tolerance * std::abs(worst), spread);
    o.threshold = rule.bound == Bound::kUpper ? worst + margin : std::max(0.0, worst - margin);
    o.rule =
        fmt::format("{} healthy value {} {} the larger of {:g}% of it and the spread {}",
                    rule.bound == Bound::kUpper ? "highest" : "lowest", format_value(worst, o.unit),
                    rule.bound == Bound::kUpper ? "plus" : "minus", o.tolerance * 100,
                    format_value(spread, o.unit));
    if (key.metric == kEventRate && std::isfinite(shortest) && shortest > 0) {
      // A handful of events is chance: below min_events over the shortest run, a rate says
      // nothing, so the threshold never goes under that.
      const double floor = static_cast<double>(options.min_events) / shortest;
      if (floor > o.threshold) {
        o.threshold = floor;
        o.rule += fmt::format(", raised to {} ({} events over the shortest run)",
                              format_value(floor, o.unit), options.min_events);
      }
    }
    if (key.metric == kSelfTime && options.min_self_time_ns > o.threshold) {
      o.threshold = options.min_self_time_ns;
      o.rule += fmt::format(", raised to {} (below it, a self time is mostly the probes' cost)",
                            format_value(options.min_self_time_ns, o.unit));
    }
    if (key.metric == kCollectiveLateness && options.min_lateness_ns > o.threshold) {
      o.threshold = options.min_lateness_ns;
      o.rule += fmt::format(", raised to {} (below it, lateness is jitter)",
                            format_value(options.min_lateness_ns, o.unit));
    }
    o.runs = std::move(v.runs);
    o.values = std::move(v.values);
    o.counts = std::move(v.counts);
    slo.objectives.push_back(std::move(o));
  }
  return slo;
}

double excess_ratio(const Objective& o, double observed) {
  const double num = o.bound == Bound::kUpper ? observed : o.threshold;
  const double den = o.bound == Bound::kUpper ? o.threshold : observed;
  if (den <= 0) return std::numeric_limits<double>::infinity();
  return num / den;
}

size_t SessionVerdicts::violated() const {
  return static_cast<size_t>(std::count_if(verdicts.begin(), verdicts.end(), [](const Verdict& v) {
    return v.state == Verdict::State::kViolated;
  }));
}

SessionVerdicts check(const Slo& slo, const Observed& run) {
  SessionVerdicts out;
  out.dir = run.dir;
  out.notes = run.notes;
  for (const Objective& o : slo.objectives) {
    Verdict v;
    v.objective = &o;
    const auto it = run.values.find(o.key);
    if (it == run.values.end()) {
      if (o.key.metric == kCallRate) {
        // A process role that made no call at all, or no call of an API it called in every
        // healthy run, is the worst call rate, not a missing one.
        v.state = Verdict::State::kViolated;
        v.observed = Observation{};
        v.reason = o.key.layer == "all" ? "no calls of this process in this phase"
                                        : "no calls of this API in this phase";
      } else {
        v.state = Verdict::State::kNotJudged;
        v.reason = "not seen in this session";
      }
    } else {
      v.observed = it->second;
      const double x = it->second.value;
      if (!judged_on_few_calls(o.key) && it->second.count < slo.options.min_calls) {
        v.state = Verdict::State::kNotJudged;
        v.reason = fmt::format("{} calls: {} needs at least {}", it->second.count,
                               min_calls_for(o.key), slo.options.min_calls);
      } else if (o.bound == Bound::kUpper ? x > o.threshold : x < o.threshold) {
        v.state = Verdict::State::kViolated;
      }
    }
    out.verdicts.push_back(std::move(v));
  }
  auto rank = [](const Verdict& v) {
    return v.state == Verdict::State::kViolated ? 0 : v.state == Verdict::State::kNotJudged ? 1 : 2;
  };
  std::stable_sort(out.verdicts.begin(), out.verdicts.end(),
                   [&](const Verdict& a, const Verdict& b) {
                     if (rank(a) != rank(b)) return rank(a) < rank(b);
                     if (rank(a) != 0) return false;
                     return excess_ratio(*a.objective, a.observed->value) >
                            excess_ratio(*b.objective, b.observed->value);
                   });
  return out;
}

nlohmann::ordered_json to_json(const Slo& slo) {
  nlohmann::ordered_json j;
  j["version"] = slo.version;
  j["generator"] = "eacgm slo fit";
  j["runs"] = slo.runs;
  j["windows"] = {{"startup_s", slo.windows.startup_s},
                  {"startup_window_s", slo.windows.startup_window_s},
                  {"steady_window_s", slo.windows.steady_window_s},
                  {"latency_percentile", slo.windows.latency_percentile}};
  j["fit"] = {
      {"rule",
       "threshold = the worst healthy value (highest for an upper bound, lowest for a lower one) "
       "moved away by the larger of tolerance x that value and the spread of the healthy values"},
      {"tolerance", slo.options.tolerance ? nlohmann::ordered_json(*slo.options.tolerance)
                                          : nlohmann::ordered_json("per metric")},
      {"min_calls", slo.options.min_calls},
      {"min_windows", slo.options.min_windows},
      {"min_events", slo.options.min_events}};
  j["objectives"] = nlohmann::ordered_json::array();
  for (const Objective& o : slo.objectives) {
    nlohmann::ordered_json e = key_json(o.key, slo.windows);
    // The fields a reader looks for first, in the order the issue names them.
    nlohmann::ordered_json ordered;
    for (const char* field : {"id", "what", "layer", "process", "metric"})
      ordered[field] = e[field];
    ordered["unit"] = o.unit;
    ordered["bound"] = bound_name(o.bound);
    ordered["threshold"] = o.threshold;
    ordered["window"] = e["window"];
    ordered["statistic"] = o.statistic;
    ordered["tolerance"] = o.tolerance;
    ordered["rule"] = o.rule;
    ordered["evidence"] = {{"runs", o.runs}, {"values", o.values}, {"counts", o.counts}};
    j["objectives"].push_back(std::move(ordered));
  }
  j["skipped"] = nlohmann::ordered_json::array();
  for (const Skipped& s : slo.skipped) {
    nlohmann::ordered_json e = key_json(s.key, slo.windows);
    e["reason"] = s.reason;
    j["skipped"].push_back(std::move(e));
  }
  return j;
}

Result<Slo> from_json(const nlohmann::json& j) {
  if (!j.is_object()) return Error{"not an SLO file: not a JSON object"};
  const auto version = j.find("version");
  if (version == j.end()) {
    return Error{"not an SLO file: no \"version\" (write one with eacgm slo fit)"};
  }
  if (!version->is_number_integer() || version->get<int64_t>() != kVersion) {
    return Error{
        fmt::format("SLO file version {}; this eacgm reads version {} (fit it again with "
                    "this eacgm's slo fit)",
                    version->dump(), kVersion)};
  }
  Slo slo;
  const auto windows = j.find("windows");
  if (windows == j.end() || !windows->is_object()) return Error{"no \"windows\" object"};
  for (auto [field, out] : {std::pair{"startup_s", &slo.windows.startup_s},
                            std::pair{"startup_window_s", &slo.windows.startup_window_s},
                            std::pair{"steady_window_s", &slo.windows.steady_window_s}}) {
    auto v = get_number(*windows, field, "\"windows\"");
    if (!v) return v.error();
    if (*v < 0 || (*v == 0 && std::string_view(field) != "startup_s")) {
      return Error{fmt::format("\"windows\" has {} = {}: it must be positive", field, *v)};
    }
    *out = *v;
  }
  // A file from before the percentile was a choice holds p90s.
  if (const auto p = windows->find("latency_percentile"); p != windows->end()) {
    if (!p->is_number_integer() || p->get<int64_t>() < kMinLatencyPercentile ||
        p->get<int64_t>() > kMaxLatencyPercentile) {
      return Error{
          fmt::format("\"windows\" has latency_percentile = {}: it must be a whole "
                      "number from {} to {}",
                      p->dump(), kMinLatencyPercentile, kMaxLatencyPercentile)};
    }
    slo.windows.latency_percentile = p->get<int>();
  }
  slo.options.windows = slo.windows;
  if (const auto f = j.find("fit"); f != j.end() && f->is_object()) {
    if (const auto t = f->find("tolerance"); t != f->end() && t->is_number()) {
      slo.options.tolerance = t->get<double>();
    }
    slo.options.min_calls = f->value("min_calls", slo.options.min_calls);
    slo.options.min_windows = f->value("min_windows", slo.options.min_windows);
    slo.options.min_events = f->value("min_events", slo.options.min_events);
  }
  if (const auto runs = j.find("runs"); runs != j.end() && runs->is_array()) {
    for (const auto& r : *runs) {
      if (r.is_string()) slo.runs.push_back(r.get<std::string>());
    }
  }
  const auto objectives = j.find("objectives");
  if (objectives == j.end() || !objectives->is_array()) return Error{"no \"objectives\" list"};
  for (size_t i = 0; i < objectives->size(); ++i) {
    auto o = read_objective((*objectives)[i], fmt::format("objective {}", i + 1));
    if (!o) return o.error();
    slo.objectives.push_back(std::move(*o));
  }
  if (const auto skipped = j.find("skipped"); skipped != j.end() && skipped->is_array()) {
    for (size_t i = 0; i < skipped->size(); ++i) {
      const std::string where = fmt::format("skipped objective {}", i + 1);
      auto k = read_key((*skipped)[i], where);
      if (!k) return k.error();
      slo.skipped.push_back({std::move(*k), (*skipped)[i].value("reason", std::string())});
    }
  }
  return slo;
}

Result<Slo> read_slo_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Error{
        fmt::format("no SLO file {} (write one with eacgm slo fit SESSION... -o {})", path, path)};
  }
  std::ifstream in(path);
  if (!in) return Error{fmt::format("cannot read {}", path)};
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Error{
        fmt::format("{} is not JSON (a damaged or truncated SLO file? fit it again with "
                    "eacgm slo fit)",
                    path)};
  }
  auto slo = from_json(j);
  if (!slo) return Error{fmt::format("{}: {}", path, slo.error().message)};
  return slo;
}

std::string format_value(double value, std::string_view unit) {
  if (!std::isfinite(value)) return fmt::format("{} {}", value, unit);
  const double a = std::abs(value);
  if (unit == "ns") {
    if (a < 1e3) return fmt::format("{:.0f} ns", value);
    if (a < 1e6) return fmt::format("{:.2f} us", value / 1e3);
    if (a < 1e9) return fmt::format("{:.2f} ms", value / 1e6);
    return fmt::format("{:.2f} s", value / 1e9);
  }
  if (unit == "bytes") {
    if (a >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", value / (1024.0 * 1024 * 1024));
    if (a >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", value / (1024.0 * 1024));
    if (a >= 1024.0) return fmt::format("{:.1f} KiB", value / 1024.0);
    return fmt::format("{:.0f} B", value);
  }
  if (unit == "%") return fmt::format("{:.1f} %", value);
  return fmt::format("{:.4g} {}", value, unit);
}

nlohmann::ordered_json verdicts_json(const Slo& slo, const std::string& slo_path,
                                     const std::vector<SessionVerdicts>& sessions) {
  nlohmann::ordered_json j;
  j["slo"] = slo_path;
  j["version"] = slo.version;
  j["objectives"] = slo.objectives.size();
  bool any = false;
  j["sessions"] = nlohmann::ordered_json::array();
  for (const SessionVerdicts& s : sessions) {
    nlohmann::ordered_json e;
    e["session"] = s.dir;
    nlohmann::ordered_json violations = nlohmann::ordered_json::array();
    nlohmann::ordered_json not_judged = nlohmann::ordered_json::array();
    size_t held = 0;
    for (const Verdict& v : s.verdicts) {
      const Objective& o = *v.objective;
      if (v.state == Verdict::State::kHeld) {
        ++held;
        continue;
      }
      nlohmann::ordered_json x = key_json(o.key, slo.windows);
      x["unit"] = o.unit;
      x["bound"] = bound_name(o.bound);
      x["threshold"] = o.threshold;
      if (v.state == Verdict::State::kNotJudged) {
        x["reason"] = v.reason;
        not_judged.push_back(std::move(x));
        continue;
      }
      const double observed = v.observed ? v.observed->value : 0;
      x["observed"] = observed;
      x["by"] = observed - o.threshold;  // signed: below a lower bound is negative
      const double ratio = excess_ratio(o, observed);
      x["ratio"] = std::isfinite(ratio) ? nlohmann::ordered_json(ratio) : nlohmann::ordered_json();
      x["count"] = v.observed ? v.observed->count : 0;
      if (!v.reason.empty()) x["reason"] = v.reason;
      x["healthy"] = {{"runs", o.runs}, {"values", o.values}};
      violations.push_back(std::move(x));
    }
    any = any || !violations.empty();
    e["held"] = held;
    e["violated"] = violations.size();
    e["not_judged"] = not_judged.size();
    e["violations"] = std::move(violations);
    e["not_judged_objectives"] = std::move(not_judged);
    e["notes"] = s.notes;
    j["sessions"].push_back(std::move(e));
  }
  j["verdict"] = any ? "violated" : "held";
  return j;
}

std::string verdicts_text(const Slo& slo, const std::string& slo_path,
                          const std::vector<SessionVerdicts>& sessions) {
  std::string out = fmt::format("eacgm slo check: {} objectives of {} (fitted from {} run{})\n",
                                slo.objectives.size(), slo_path, slo.runs.size(),
                                slo.runs.size() == 1 ? "" : "s");
  size_t failing = 0;
  for (const SessionVerdicts& s : sessions) {
    const size_t bad = s.violated();
    size_t unjudged = 0;
    for (const Verdict& v : s.verdicts) unjudged += v.state == Verdict::State::kNotJudged;
    if (bad > 0) ++failing;
    const std::string unjudged_text =
        unjudged ? fmt::format(", {} not judged", unjudged) : std::string();
    out += bad == 0 ? fmt::format("{}: every objective holds ({} held{})\n", s.dir,
                                  s.verdicts.size() - unjudged, unjudged_text)
                    : fmt::format("{}: VIOLATED: {} of {} objectives{}\n", s.dir, bad,
                                  s.verdicts.size(), unjudged_text);
    for (const Verdict& v : s.verdicts) {
      if (v.state != Verdict::State::kViolated) continue;
      const Objective& o = *v.objective;
      const double x = v.observed ? v.observed->value : 0;
      const double ratio = excess_ratio(o, x);
      std::vector<std::string> healthy;
      for (double h : o.values) healthy.push_back(format_value(h, o.unit));
      out += fmt::format(
          "  {}: {}, {} the threshold {} by {}{}{}; healthy runs: {}\n", describe(o.key),
          format_value(x, o.unit), o.bound == Bound::kUpper ? "above" : "below",
          format_value(o.threshold, o.unit), format_value(std::abs(x - o.threshold), o.unit),
          std::isfinite(ratio) ? fmt::format(" (x{:.2f})", ratio) : std::string(),
          v.reason.empty() ? std::string() : fmt::format(" ({})", v.reason),
          fmt::join(healthy, ", "));
    }
    for (const Verdict& v : s.verdicts) {
      if (v.state != Verdict::State::kNotJudged) continue;
      out += fmt::format("  not judged: {}: {}\n", describe(v.objective->key), v.reason);
    }
    for (const std::string& note : s.notes) out += fmt::format("  note: {}\n", note);
  }
  out += failing == 0 ? "verdict: the SLO holds\n"
                      : fmt::format("verdict: {} of {} session{} violate the SLO\n", failing,
                                    sessions.size(), sessions.size() == 1 ? "" : "s");
  return out;
}

}  // namespace eacgm::slo
