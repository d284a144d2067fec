#include "cli/slo_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/numeric_flags.h"
#include "common/exit_codes.h"
#include "common/json_text.h"
#include "compare/run_data.h"
#include "slo/measure.h"
#include "slo/rules.h"
#include "slo/slo.h"

namespace eacgm {
namespace {

struct SloFitArgs {
  std::vector<std::string> sessions;
  std::string output;
  std::optional<double> startup_s, window_s, tolerance;
  uint64_t min_calls = slo::FitOptions{}.min_calls;
  int latency_percentile = slo::kDefaultLatencyPercentile;
};

struct SloCheckArgs {
  std::string slo;
  std::vector<std::string> sessions;
  bool json = false;
};

struct SloRulesArgs {
  std::string slo;
  std::string output;
  double for_s = slo::RulesOptions{}.for_s;
  double range_s = slo::RulesOptions{}.range_s;
};

// Writes `text` to `path` whole, or says why not.
std::optional<std::string> write_slo_output(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (out) out << text;
  if (out) out.flush();
  if (!out)
    return fmt::format("cannot write {} (does its directory exist, and may we write it?)", path);
  return std::nullopt;
}

int run_slo_fit(const SloFitArgs& args) {
  std::vector<compare::LoadedRun> runs;
  for (const std::string& dir : args.sessions) {
    auto run = compare::load_run(dir);
    if (!run) return fail(kExitUsage, run.error().message);
    runs.push_back(std::move(*run));
  }
  std::vector<const compare::LoadedRun*> all;
  for (const compare::LoadedRun& r : runs) all.push_back(&r);
  slo::FitOptions options;
  options.windows = slo::choose_windows(all, args.startup_s, args.window_s);
  options.windows.latency_percentile = args.latency_percentile;
  options.tolerance = args.tolerance;
  options.min_calls = args.min_calls;
  std::vector<slo::Observed> observed;
  for (const compare::LoadedRun& r : runs) {
    observed.push_back(slo::observe(slo::measure_session(r, options.windows)));
  }
  const slo::Slo fitted = slo::fit(observed, options);
  if (auto error = write_slo_output(args.output, json_text(slo::to_json(fitted), 2) + "\n")) {
    return fail(kExitUsage, *error);
  }
  fmt::print(
      "{}: {} objectives from {} run{} (start-up: the first {:.3g} s in {:.3g} s windows; "
      "steady state: {:.3g} s windows); {} skipped for too little data (listed in the "
      "file)\n",
      args.output, fitted.objectives.size(), runs.size(), runs.size() == 1 ? "" : "s",
      options.windows.startup_s, options.windows.startup_window_s, options.windows.steady_window_s,
      fitted.skipped.size());
  if (runs.size() < 3) {
    fmt::print(
        "note: fitted from {} run{}: the margins learn the spread between healthy runs, "
        "so record three or more\n",
        runs.size(), runs.size() == 1 ? "" : "s");
  }
  return kExitOk;
}

int run_slo_check(const SloCheckArgs& args) {
  auto spec = slo::read_slo_file(args.slo);
  if (!spec) return fail(kExitUsage, spec.error().message);
  // Every session is read before any is judged: a typo in the last one is bad input, not a
  // verdict on the others.
  std::vector<compare::LoadedRun> runs;
  for (const std::string& dir : args.sessions) {
    auto run = compare::load_run(dir);
    if (!run) return fail(kExitUsage, run.error().message);
    runs.push_back(std::move(*run));
  }
  std::vector<slo::SessionVerdicts> verdicts;
  bool violated = false;
  for (const compare::LoadedRun& r : runs) {
    verdicts.push_back(slo::check(*spec, slo::observe(slo::measure_session(r, spec->windows))));
    violated = violated || verdicts.back().violated() > 0;
  }
  if (args.json) {
    fmt::print("{}\n", json_text(slo::verdicts_json(*spec, args.slo, verdicts), 2));
  } else {
    fmt::print("{}", slo::verdicts_text(*spec, args.slo, verdicts));
  }
  return violated ? kExitFailed : kExitOk;
}

int run_slo_rules(const SloRulesArgs& args) {
  auto spec = slo::read_slo_file(args.slo);
  if (!spec) return fail(kExitUsage, spec.error().message);
  const std::string text = slo::render_rules(*spec, {args.slo, args.for_s, args.range_s});
  if (args.output.empty() || args.output == "-") {
    fmt::print("{}", text);
    return kExitOk;
  }
  if (auto error = write_slo_output(args.output, text)) return fail(kExitUsage, *error);
  return kExitOk;
}

}  // namespace

void add_slo_command(CLI::App& app, std::function<int()>& run) {
  CLI::App* cmd = app.add_subcommand(
      "slo", "SLO baselines from healthy runs, the rollout gate, and Prometheus rules");
  cmd->require_subcommand(1);

  auto fit_args = std::make_shared<SloFitArgs>();
  CLI::App* fit = cmd->add_subcommand("fit", "learn SLO baselines from healthy recorded sessions");
  fit->add_option("sessions", fit_args->sessions, "healthy session directories (three or more)")
      ->required();
  fit->add_option("-o,--output", fit_args->output, "the SLO file to write")->required();
  fit->add_option("--startup", fit_args->startup_s,
                  "seconds from a session's start that are its start-up phase, judged apart from "
                  "the steady state (default: a tenth of the shortest run, at most 300)")
      ->check(bounded(0, 86400, "seconds (at most a day)"));
  fit->add_option("--window", fit_args->window_s,
                  "seconds per steady-state window (default: a twentieth of the shortest run, "
                  "from 0.05 to 1 s)")
      ->check(bounded(0.01, 3600, "seconds"));
  fit->add_option("--tolerance", fit_args->tolerance,
                  "the margin of every threshold as a fraction of its worst healthy value "
                  "(default per metric: docs/SLO.md)")
      ->check(bounded(0, 100, "(a fraction: 0.5 is 50%)"));
  fit->add_option("--min-calls", fit_args->min_calls,
                  "calls an API needs in every run and phase for an objective on its own calls "
                  "(tail latency, self time, calls/s, share of calls)")
      ->capture_default_str()
      ->check(bounded(1, 1e12, "calls"));
  fit->add_option("--latency-percentile", fit_args->latency_percentile,
                  "the tail of each API's latency to hold, a whole percentile: 99 for a p99 on "
                  "a machine whose tails are quiet (the p90 default rides out a busy host's "
                  "preemptions: docs/SLO.md)")
      ->capture_default_str()
      ->check(bounded(slo::kMinLatencyPercentile, slo::kMaxLatencyPercentile, "(a percentile)"));
  fit->callback([fit_args, &run] {
    run = [fit_args] { return guarded([&] { return run_slo_fit(*fit_args); }); };
  });

  auto check_args = std::make_shared<SloCheckArgs>();
  CLI::App* check = cmd->add_subcommand(
      "check", "hold sessions to an SLO file: exit 0 when every objective holds, 1 when any fails");
  check->add_option("slo", check_args->slo, "the SLO file (from eacgm slo fit)")->required();
  check->add_option("sessions", check_args->sessions, "session directories to judge")->required();
  check->add_flag("--json", check_args->json, "print the verdicts as JSON");
  check->callback([check_args, &run] {
    run = [check_args] { return guarded([&] { return run_slo_check(*check_args); }); };
  });

  auto rules_args = std::make_shared<SloRulesArgs>();
  CLI::App* rules = cmd->add_subcommand(
      "rules", "write an SLO file's objectives as Prometheus alerting rules over serve's metrics");
  rules->add_option("slo", rules_args->slo, "the SLO file (from eacgm slo fit)")->required();
  rules->add_option("-o,--output", rules_args->output, "the rule file to write (default: stdout)");
  rules
      ->add_option("--for", rules_args->for_s,
                   "seconds a condition must hold before its alert fires")
      ->capture_default_str()
      ->check(bounded(1, 86400, "seconds (at most a day)"));
  rules
      ->add_option("--range", rules_args->range_s,
                   "seconds of the range the rules' rate() and avg_over_time() look back over")
      ->capture_default_str()
      ->check(bounded(1, 86400, "seconds (at most a day)"));
  rules->callback([rules_args, &run] {
    run = [rules_args] { return guarded([&] { return run_slo_rules(*rules_args); }); };
  });
}

}  // namespace eacgm
