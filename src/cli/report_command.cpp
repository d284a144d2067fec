#include "cli/report_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <string>

#include "common/atomic_file.h"
#include "common/exit_codes.h"
#include "report/session_report.h"

namespace eacgm {
namespace {

struct ReportArgs {
  std::string session;
  std::string output;  // empty: SESSION/report.html
};

int run_report(const ReportArgs& args) {
  auto html = report::session_report_html(args.session);
  if (!html) return fail(kExitUsage, html.error().message);
  const std::string out = args.output.empty()
                              ? (std::filesystem::path(args.session) / "report.html").string()
                              : args.output;
  if (auto written = write_file_atomically(out, *html); !written) {
    return fail(kExitUsage, written.error().message);
  }
  fmt::print("eacgm: report written to {} ({:.0f} KiB; open it in a browser, nothing is fetched)\n",
             out, static_cast<double>(html->size()) / 1024);
  return kExitOk;
}

}  // namespace

void add_report_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "one recorded session as a self-contained HTML page of plots and tables");
  cmd->add_option("session", args->session, "the session directory (eacgm record -o DIR)")
      ->required();
  cmd->add_option("-o,--output", args->output,
                  "the HTML file to write (default: SESSION/report.html)");
  cmd->callback(
      [args, &run] { run = [args] { return guarded([&] { return run_report(*args); }); }; });
}

}  // namespace eacgm
