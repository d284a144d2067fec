#include "cli/compare_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/numeric_flags.h"
#include "common/atomic_file.h"
#include "common/exit_codes.h"
#include "common/json_text.h"
#include "compare/compare.h"
#include "compare/report.h"
#include "compare/run_data.h"
#include "report/compare_report.h"

namespace eacgm {
namespace {

struct CompareArgs {
  std::vector<std::string> sessions;  // before any "--"
  double window_s = 0;                // 0: chosen from the runs' lengths
  uint64_t min_calls = compare::Thresholds{}.min_calls;
  double min_time_cost_pct = 100 * compare::Thresholds{}.min_call_time_cost;
  bool json = false;
  bool all = false;
  std::string html;  // -o: also the comparison as a page
};

int run_compare(const CompareArgs& args, const std::vector<std::string>& after, bool separator) {
  std::vector<std::string> base_dirs, candidate_dirs;
  if (separator) {
    base_dirs = args.sessions;
    candidate_dirs = after;
    if (base_dirs.empty()) {
      return fail(kExitUsage,
                  "no base session before '--' (eacgm compare BASE... -- CANDIDATE...)");
    }
    if (candidate_dirs.empty()) {
      return fail(kExitUsage,
                  "no candidate session after '--' (eacgm compare BASE... -- CANDIDATE...)");
    }
  } else if (args.sessions.size() == 2) {
    base_dirs = {args.sessions[0]};
    candidate_dirs = {args.sessions[1]};
  } else if (args.sessions.size() < 2) {
    return fail(kExitUsage, "compare needs two sessions: eacgm compare BASE CANDIDATE");
  } else {
    return fail(kExitUsage,
                fmt::format("{} sessions and no '--': say which are the base runs and which the "
                            "candidate runs, as in eacgm compare BASE... -- CANDIDATE...",
                            args.sessions.size()));
  }

  std::vector<compare::LoadedRun> base, candidate;
  for (auto [dirs, runs] : {std::pair{&base_dirs, &base}, std::pair{&candidate_dirs, &candidate}}) {
    for (const std::string& dir : *dirs) {
      auto run = compare::load_run(dir);
      if (!run) return fail(kExitUsage, run.error().message);
      runs->push_back(std::move(*run));
    }
  }
  std::vector<const compare::LoadedRun*> all;
  for (const auto* side : {&base, &candidate}) {
    for (const compare::LoadedRun& r : *side) all.push_back(&r);
  }
  const uint64_t window_ns = args.window_s > 0 ? static_cast<uint64_t>(args.window_s * 1e9)
                                               : compare::choose_window_ns(all);
  std::vector<compare::RunData> base_data, candidate_data;
  for (const compare::LoadedRun& r : base) base_data.push_back(compare::measure_run(r, window_ns));
  for (const compare::LoadedRun& r : candidate) {
    candidate_data.push_back(compare::measure_run(r, window_ns));
  }
  compare::Thresholds thresholds;
  thresholds.min_calls = args.min_calls;
  thresholds.min_call_time_cost = args.min_time_cost_pct / 100;
  const compare::Comparison result = compare::compare_runs(
      base_data, candidate_data, static_cast<double>(window_ns) / 1e9, thresholds);
  if (!args.html.empty()) {
    const std::string page = report::compare_report_html(result, base_data, candidate_data);
    if (auto written = write_file_atomically(args.html, page); !written) {
      return fail(kExitUsage, written.error().message);
    }
    fmt::print(stderr, "eacgm: comparison page written to {}\n", args.html);
  }
  if (args.json) {
    fmt::print("{}\n", json_text(compare::report_json(result, thresholds, args.all), 2));
  } else {
    fmt::print("{}", compare::report_text(result, args.all));
  }
  return result.regressions.empty() ? kExitOk : kExitFailed;
}

}  // namespace

void add_compare_command(CLI::App& app, std::function<int()>& run,
                         const std::vector<std::string>& after_separator, const bool& separator) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "what changed between recorded runs of a job: BASE CANDIDATE, or BASE... -- CANDIDATE...");
  cmd->add_option("sessions", args->sessions,
                  "session directories: the base run and the candidate run, or the base runs "
                  "(then '--' and the candidate runs)");
  cmd->add_flag("--json", args->json, "print the comparison as JSON");
  cmd->add_option("-o,--output", args->html,
                  "also write the comparison as one self-contained HTML page: each change's "
                  "base and candidate values side by side");
  cmd->add_flag("--all", args->all,
                "also list every metric that did not change, with its figures and confidence");
  cmd->add_option("--window", args->window_s,
                  "seconds per window the runs are cut into (default: a twentieth of the "
                  "shortest run, from 0.05 to 1 s)")
      ->check(bounded(0.01, 3600, "seconds"));
  cmd->add_option("--min-calls", args->min_calls,
                  "calls an API needs (on both sides for latency, either side for its rate) to "
                  "be judged")
      ->capture_default_str()
      ->check(bounded(1, 1e12, "calls"));
  cmd->add_option("--min-time-cost", args->min_time_cost_pct,
                  "percent of a process's time that a change of a latency or self time must "
                  "cost or save to be reported (0 reports every significant one)")
      ->capture_default_str()
      ->check(bounded(0, 100, "percent"));
  cmd->callback([args, &run, &after_separator, &separator] {
    run = [args, &after_separator, &separator] {
      return guarded([&] { return run_compare(*args, after_separator, separator); });
    };
  });
}

}  // namespace eacgm
