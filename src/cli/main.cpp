// The eacgm command line. Errors become a message on stderr and exit code 2;
// `record` exits with the job's own exit code.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/trace_session.h"
#include "cli/agent_flags.h"
#include "cli/analyze_command.h"
#include "cli/cluster_command.h"
#include "cli/compare_command.h"
#include "cli/doctor.h"
#include "cli/gmm_command.h"
#include "cli/merge_command.h"
#include "cli/numeric_flags.h"
#include "cli/report_command.h"
#include "cli/scan_command.h"
#include "cli/serve_command.h"
#include "cli/slo_command.h"

namespace {

// record's and attach's flags: the live agent's, and the session directory's.
void add_trace_options(CLI::App* cmd, eacgm::TraceOptions& opts, std::string& layers) {
  cmd->add_option("-o,--output", opts.out_dir, "session directory to write")->required();
  eacgm::add_agent_flags(cmd, opts.agent, layers,
                         {.layers = eacgm::layer_names(), .gpu_rate_hz = 10.0});
  cmd->add_flag("-q,--quiet", opts.quiet, "do not print the report");
}

// What is wrong with the command words, if anything: CLI11 alone says "A subcommand is required"
// both of `eacgm nosuchcommand` and of `eacgm slo`, naming neither the word nor the choices. Walks
// the words down through the commands that require one of their own (eacgm, eacgm model, eacgm
// slo); nullopt when every command word is known, or an option comes first (CLI11 reports that
// better).
std::optional<std::string> command_word_error(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  const auto choices = [&] {
    std::vector<std::string> names;
    for (CLI::App* sub : current->get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    return names;
  };
  const auto command = [&] {
    return current == &app ? std::string("eacgm") : fmt::format("'eacgm {}'", current->get_name());
  };
  int i = 1;
  for (; i < argc && current->get_require_subcommand_min() > 0; ++i) {
    const std::string word = argv[i];
    if (word.starts_with('-')) return std::nullopt;
    CLI::App* next = nullptr;
    for (CLI::App* sub : current->get_subcommands([](CLI::App*) { return true; })) {
      if (sub->check_name(word)) next = sub;
    }
    if (next == nullptr) {
      const std::string where = current == &app ? "" : fmt::format(" of {}", command());
      return fmt::format("unknown command '{}'{}; the commands are: {}", word, where,
                         fmt::join(choices(), ", "));
    }
    current = next;
  }
  if (i >= argc && current->get_require_subcommand_min() > 0) {
    return fmt::format("{} needs a command: {}", command(), fmt::join(choices(), ", "));
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"eacgm: trace AI/ML jobs from outside with eBPF and find what is slow or broken"};
  app.set_version_flag("--version", EACGM_VERSION);
  app.require_subcommand(1);

  std::string doctor_nvml;
  std::function<int()> run_gmm;
  eacgm::add_gmm_command(app, run_gmm);
  std::function<int()> run_serve, run_cluster;
  eacgm::add_serve_command(app, run_serve);
  eacgm::add_cluster_command(app, run_cluster);
  std::function<int()> run_analyze;
  eacgm::add_analyze_commands(app, run_analyze);
  std::function<int()> run_scan;
  eacgm::add_scan_command(app, run_scan);
  std::function<int()> run_slo;
  eacgm::add_slo_command(app, run_slo);
  std::function<int()> run_merge;
  eacgm::add_merge_command(app, run_merge);
  std::function<int()> run_report;
  eacgm::add_report_command(app, run_report);
  // Everything after the first "--" (below): record's job, compare's candidate sessions.
  std::vector<std::string> job_argv;
  bool separator = false;
  std::function<int()> run_compare;
  eacgm::add_compare_command(app, run_compare, job_argv, separator);

  CLI::App* doctor = app.add_subcommand("doctor", "check whether this machine can trace, and what");
  doctor->add_option("--nvml-lib", doctor_nvml,
                     "NVML library to check (default: libnvidia-ml.so.1 on the search path)");

  eacgm::TraceOptions record_opts;
  std::string record_layers;
  std::vector<std::string> command;
  CLI::App* record = app.add_subcommand("record", "run a command and trace it from its start");
  add_trace_options(record, record_opts, record_layers);
  record->add_option("command", command, "the command to run, after --");
  record->prefix_command();  // everything after the command belongs to it

  eacgm::TraceOptions attach_opts;
  std::string attach_layers;
  int pid = 0;
  std::optional<double> duration;
  CLI::App* attach = app.add_subcommand("attach", "trace a running process and its descendants");
  add_trace_options(attach, attach_opts, attach_layers);
  // Within pid_t: larger numbers would overflow; a pid the kernel never hands out is "no process".
  attach->add_option("-p,--pid", pid, "process to trace")
      ->required()
      ->check(eacgm::bounded(1, 2147483647, "(a process id)"));
  attach->add_option("-d,--duration", duration, "seconds to trace (default: until Ctrl-C)")
      ->check(eacgm::bounded(0.1, 30 * 86400, "seconds (at most 30 days)"));

  // Everything after the first "--" is the job's command line, untouched
  // (CLI11 would append its own "--" to a prefix command's arguments).
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      job_argv.assign(argv + i + 1, argv + argc);
      separator = true;
      argc = i;
      break;
    }
  }

  // With an explicit "--", every option before it is ours: unknown ones are errors.
  if (!job_argv.empty()) record->prefix_command(false);

  if (auto unknown = command_word_error(app, argc, argv)) {
    fmt::print(stderr, "eacgm: error: {}\nRun 'eacgm --help' for usage.\n", *unknown);
    return eacgm::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "eacgm: error: {}\nRun 'eacgm --help' for usage.\n", e.what());
    return eacgm::kExitUsage;
  }

  std::string error;
  if (run_gmm) return run_gmm();
  if (run_serve) return run_serve();
  if (run_cluster) return run_cluster();
  if (run_analyze) return run_analyze();
  if (run_scan) return run_scan();
  if (run_slo) return run_slo();
  if (run_merge) return run_merge();
  if (run_report) return run_report();
  if (run_compare) return run_compare();
  if (app.got_subcommand("doctor")) return eacgm::run_doctor(doctor_nvml);
  if (app.got_subcommand("record")) {
    for (const std::string& extra : record->remaining()) command.push_back(extra);
    command.insert(command.end(), job_argv.begin(), job_argv.end());
    if (!command.empty() && command.front().starts_with('-')) {
      fmt::print(stderr,
                 "eacgm: error: unknown option '{}'\nRun 'eacgm record --help' for usage.\n",
                 command.front());
      return eacgm::kExitUsage;
    }
    auto layers = eacgm::parse_layers(record_layers, error);
    if (!layers) {
      fmt::print(stderr, "eacgm: error: {}\n", error);
      return eacgm::kExitUsage;
    }
    record_opts.agent.layers = *layers;
    return eacgm::run_record(record_opts, command);
  }
  auto layers = eacgm::parse_layers(attach_layers, error);
  if (!layers) {
    fmt::print(stderr, "eacgm: error: {}\n", error);
    return eacgm::kExitUsage;
  }
  attach_opts.agent.layers = *layers;
  return eacgm::run_attach(attach_opts, pid, duration);
}
