#include "cli/analyze_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "analysis/detector_model.h"
#include "analysis/leak_detector.h"
#include "analysis/session_db.h"
#include "analysis/whole_run_latency.h"
#include "analysis/window_analyzer.h"
#include "cli/numeric_flags.h"
#include "common/atomic_file.h"
#include "common/exit_codes.h"
#include "common/json_text.h"
#include "sinks/summary.h"

namespace eacgm {
namespace {

// Options shared by both commands: how baselines are learned.
struct LearnArgs {
  std::string scaling = "standard";
  double quantile = 0.01;
  double margin = 6.0;
  std::optional<double> density;
  double window_s = 1.0;
};

struct AnalyzeArgs {
  std::string session;
  std::string model;
  std::string output;
  size_t warmup = 10;
  int persist = 2;
  bool quiet = false;
  LearnArgs learn;
};

struct ModelFitArgs {
  std::vector<std::string> sessions;
  std::string output;
  LearnArgs learn;
};

BaselineOptions baseline_options(const LearnArgs& a) {
  BaselineOptions o;
  o.scaling = a.scaling == "minmax" ? ScalingKind::kMinMax : ScalingKind::kStandard;
  o.threshold.quantile = a.quantile;
  o.threshold.margin = a.margin;
  if (a.density) {
    o.threshold.kind = ThresholdRule::Kind::kDensity;
    o.threshold.density = *a.density;
  }
  return o;
}

void add_learn_options(CLI::App* cmd, LearnArgs& a) {
  cmd->add_option("--scaling", a.scaling, "feature scaling after clipping at ±3σ")
      ->check(CLI::IsMember({"standard", "minmax"}))
      ->capture_default_str();
  cmd->add_option("--threshold-quantile", a.quantile,
                  "GMM threshold: this quantile of the training log-likelihoods...")
      ->check(bounded(0, 1, "(a fraction)"))
      ->capture_default_str();
  cmd->add_option("--threshold-margin", a.margin, "...minus this many nats")
      ->check(bounded(0, 1000, "nats"))
      ->capture_default_str();
  cmd->add_option("--density", a.density,
                  "GMM threshold: a window is anomalous when its density is below this (the "
                  "seed's 1e-5) instead of the quantile rule")
      ->check(bounded(1e-300, 1e300, "(a probability density)"));
}

// The kinds `analyze` finds again from events.sqlite (the window detectors and the leak
// detector). The others need what only the live run saw (a hang's stop in time, a signal, an
// NVML reading, the Python samples) and are taken from summary.json as recorded.
bool replayed_offline(std::string_view kind) {
  return kind == "latency" || kind == "throughput" || kind == "gmm" || kind == "leak";
}

// `dir`/summary.json, read once for what analyze takes from it: nullopt when there is none, a
// discarded (non-object) value when it is not JSON.
std::optional<nlohmann::json> read_summary(const std::string& dir) {
  std::ifstream in(dir + "/summary.json");
  if (!in) return std::nullopt;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The anomalies the live run recorded in summary.json that analyze does not replay; an empty
// list when the summary is missing or unreadable (then `note` says so).
nlohmann::json live_only_anomalies(const std::optional<nlohmann::json>& summary,
                                   std::string& note) {
  if (!summary) {
    note = "no summary.json: the live run's other anomalies are unknown";
    return nlohmann::json::array();
  }
  if (!summary->is_object() || !summary->contains("anomalies") ||
      !(*summary)["anomalies"].is_array()) {
    note = "summary.json is unreadable: the live run's other anomalies are unknown";
    return nlohmann::json::array();
  }
  nlohmann::json out = nlohmann::json::array();
  for (const nlohmann::json& a : (*summary)["anomalies"]) {
    if (!a.is_object() || !a.contains("kind") || !a["kind"].is_string()) continue;
    if (!replayed_offline(a["kind"].get<std::string>())) out.push_back(a);
  }
  return out;
}

// --overhead-budget's off-phases (summary.json overhead.budget.untraced_s, seconds from the
// session's start): the windows that overlap one are not judged, as the live run did not judge
// them; they lack the calls that were not traced.
void skip_untraced(const std::optional<nlohmann::json>& summary, uint64_t start_ns,
                   WindowAnalyzer& analyzer) {
  const nlohmann::json::json_pointer at("/overhead/budget/untraced_s");
  if (!summary || !summary->is_object() || !summary->contains(at) || !(*summary)[at].is_array()) {
    return;
  }
  for (const nlohmann::json& phase : (*summary)[at]) {
    if (!phase.is_array() || phase.size() != 2 || !phase[0].is_number() || !phase[1].is_number())
      continue;
    const auto ns = [start_ns](const nlohmann::json& s) {
      return start_ns + static_cast<uint64_t>(std::max(0.0, s.get<double>()) * 1e9);
    };
    analyzer.add_untraced(ns(phase[0]), ns(phase[1]));
  }
}

int run_analyze(const AnalyzeArgs& args) {
  auto session = load_recorded_session(args.session);
  if (!session) return fail(kExitUsage, session.error().message);
  std::optional<DetectorModel> model;
  if (!args.model.empty()) {
    auto m = load_detector_model(args.model);
    if (!m) return fail(kExitUsage, m.error().message);
    model = std::move(*m);
  }
  AnalyzerOptions options;
  options.window_ns = static_cast<uint64_t>((model ? model->window_s : args.learn.window_s) * 1e9);
  options.warmup_windows = args.warmup;
  options.persist = args.persist;
  options.baseline = baseline_options(args.learn);
  WindowAnalyzer analyzer(options, model ? &*model : nullptr);
  const std::optional<nlohmann::json> summary = read_summary(args.session);
  skip_untraced(summary, (*session)->start_ns, analyzer);
  LeakDetector leaks;
  std::vector<Anomaly> anomalies = replay_session(**session, analyzer, &leaks);
  // What no baseline judged (a process shorter than its warm-up) is judged against its whole run.
  const std::set<uint32_t> unjudged = analyzer.unjudged();
  for (Anomaly& a : whole_run_latency_episodes(**session, unjudged)) {
    anomalies.push_back(std::move(a));
  }
  std::stable_sort(anomalies.begin(), anomalies.end(),
                   [](const Anomaly& a, const Anomaly& b) { return a.t_s < b.t_s; });

  nlohmann::json report;
  report["session"] = args.session;
  report["model"] = args.model.empty() ? nlohmann::json(nullptr) : nlohmann::json(args.model);
  report["window_s"] = static_cast<double>(options.window_ns) / 1e9;
  report["warmup_windows"] = model ? 0 : args.warmup;
  report["calls"] = (*session)->calls.size();
  report["workers"] = analyzer.report();
  for (nlohmann::json& w : report["workers"]) {
    w["whole_run"] = unjudged.contains(w["pid"].get<uint32_t>());
  }
  nlohmann::json list = nlohmann::json::array();
  for (const Anomaly& a : anomalies) list.push_back(anomaly_json(a));
  report["anomalies"] = std::move(list);
  std::string live_note;
  report["live_only"] = live_only_anomalies(summary, live_note);
  if (!live_note.empty()) report["live_only_note"] = live_note;
  if (!args.output.empty()) {
    if (auto written = write_file_atomically(args.output, json_text(report, 2) + "\n"); !written) {
      return fail(kExitUsage, written.error().message);
    }
  }
  if (!args.quiet) {
    fmt::print(
        "{}: {} calls, {} workers, baseline from {}, else from the worker's whole run\n",
        args.session, (*session)->calls.size(), report["workers"].size(),
        model ? "model " + args.model : fmt::format("each worker's first {} s", args.warmup));
    for (const auto& w : report["workers"]) {
      fmt::print("  pid {} {}: {} windows, {} scored, baseline: {}{}\n", w["pid"].get<uint32_t>(),
                 w["key"].get<std::string>(), w["windows"].get<size_t>(),
                 w["scored_windows"].get<size_t>(), w["baseline"].get<std::string>(),
                 w["whole_run"].get<bool>() ? "; latency judged against its whole run" : "");
    }
    fmt::print("anomalies: {}\n", anomalies.size());
    for (const Anomaly& a : anomalies) {
      fmt::print("  [{}] {} at {:.1f} s: {}\n      suggestion: {}\n", a.kind, layer_name(a.layer),
                 a.t_s, a.message, a.suggestion);
    }
    const nlohmann::json& live = report["live_only"];
    if (!live_note.empty()) {
      fmt::print("{}\n", live_note);
    } else if (!live.empty()) {
      fmt::print(
          "recorded live, not replayed here ({} of them; they need what only the live run saw: "
          "hangs, signals, GPU readings, Python samples):\n",
          live.size());
      auto text = [](const nlohmann::json& a, const char* key) {
        const auto it = a.find(key);
        if (it == a.end()) return std::string();
        return it->is_string() ? it->get<std::string>() : json_text(*it);
      };
      for (const nlohmann::json& a : live) {
        const auto t = a.find("t_s");
        fmt::print("  [{}] {} at {:.1f} s: {}\n", text(a, "kind"), text(a, "layer"),
                   t != a.end() && t->is_number() ? t->get<double>() : 0.0, text(a, "message"));
      }
    }
  }
  return kExitOk;
}

int run_model_fit(const ModelFitArgs& args) {
  std::map<std::string, std::vector<Window>> windows;
  const auto width = static_cast<uint64_t>(args.learn.window_s * 1e9);
  // The windows' API names point into their session: keep every session until the fit is done.
  std::vector<std::unique_ptr<RecordedSession>> sessions;
  for (const std::string& dir : args.sessions) {
    auto session = load_recorded_session(dir);
    if (!session) return fail(kExitUsage, session.error().message);
    sessions.push_back(std::move(*session));
    for (auto& [key, ws] : session_windows(*sessions.back(), width)) {
      auto& all = windows[key];
      auto& pooled = windows["*"];
      all.insert(all.end(), ws.begin(), ws.end());
      pooled.insert(pooled.end(), ws.begin(), ws.end());
    }
  }
  DetectorModel model;
  model.window_s = args.learn.window_s;
  const BaselineOptions options = baseline_options(args.learn);
  for (const auto& [key, ws] : windows) {
    auto b = EntityBaseline::fit(ws, options);
    if (!b) {
      fmt::print(stderr, "eacgm: warning: worker '{}': {}\n", key, b.error().message);
      continue;
    }
    fmt::print(
        "worker {}: {} windows, {} features, {} GMM components, {} APIs with a latency "
        "baseline, {:.0f} calls/s\n",
        key, b->windows, b->scaler.features.size(), b->gmm ? b->gmm->n_components() : 0,
        b->latency.size(), b->call_rate_median);
    model.entities.emplace(key, std::move(*b));
  }
  if (model.entities.empty()) {
    return fail(kExitFailed, "no worker has enough complete one-second windows for a baseline");
  }
  if (auto r = save_detector_model(args.output, model); !r)
    return fail(kExitUsage, r.error().message);
  fmt::print("model of {} workers -> {}\n", model.entities.size(), args.output);
  return kExitOk;
}

}  // namespace

void add_analyze_commands(CLI::App& app, std::function<int()>& run) {
  auto analyze_args = std::make_shared<AnalyzeArgs>();
  CLI::App* analyze = app.add_subcommand(
      "analyze", "find anomalies in a recorded session (latency, throughput, GMM, leaks)");
  analyze->add_option("session", analyze_args->session, "session directory")->required();
  analyze->add_option("-m,--model", analyze_args->model,
                      "baselines from 'eacgm model fit' (default: each worker's own warm-up)");
  analyze->add_option("-o,--output", analyze_args->output, "report JSON file to write");
  analyze
      ->add_option("--warmup", analyze_args->warmup,
                   "one-second windows of each worker that form its baseline")
      ->check(bounded(5, 100000, "windows"))
      ->capture_default_str();
  analyze
      ->add_option("--persist", analyze_args->persist,
                   "consecutive anomalous windows before a report")
      ->check(bounded(1, 1000, "windows"))
      ->capture_default_str();
  analyze->add_flag("-q,--quiet", analyze_args->quiet, "print nothing");
  add_learn_options(analyze, analyze_args->learn);
  analyze->callback([analyze_args, &run] {
    run = [analyze_args] { return guarded([&] { return run_analyze(*analyze_args); }); };
  });

  CLI::App* model = app.add_subcommand("model", "anomaly models learned from healthy sessions");
  model->require_subcommand(1);
  auto fit_args = std::make_shared<ModelFitArgs>();
  CLI::App* fit =
      model->add_subcommand("fit", "learn each worker's baseline from healthy sessions");
  fit->add_option("sessions", fit_args->sessions, "session directories")->required();
  fit->add_option("-o,--output", fit_args->output, "model JSON file to write")->required();
  fit->add_option("--window", fit_args->learn.window_s, "window length, seconds")
      ->check(bounded(0.1, 3600, "seconds"))
      ->capture_default_str();
  add_learn_options(fit, fit_args->learn);
  fit->callback([fit_args, &run] {
    run = [fit_args] { return guarded([&] { return run_model_fit(*fit_args); }); };
  });
}

}  // namespace eacgm
