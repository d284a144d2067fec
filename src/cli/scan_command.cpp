#include "cli/scan_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "common/json_text.h"
#include "upgrade/python_extractor.h"
#include "upgrade/rules.h"
#include "upgrade/scan.h"
#include "upgrade/session_evidence.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;
using upgrade::Finding;

struct ScanArgs {
  std::vector<std::string> paths;
  std::vector<std::string> sessions;
  std::string python = "python3";
  std::string rules;
  bool json = false;
};

// Directories a scan does not enter: hidden ones, caches, installed packages and environments
// (a virtualenv has pyvenv.cfg, a conda environment conda-meta/). They are not the job's code.
bool skipped_directory(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.starts_with('.') || name == "__pycache__" || name == "site-packages" ||
      name == "dist-packages" || name == "node_modules") {
    return true;
  }
  std::error_code ec;
  return fs::exists(dir / "pyvenv.cfg", ec) || fs::exists(dir / "conda-meta", ec);
}

// The files to parse: each PATH that is a file, and every *.py below each PATH that is a
// directory, in name order. Errors: a PATH that does not exist.
Result<std::vector<std::string>> source_files(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const fs::path& p) {
    std::string shown = p.lexically_normal().string();
    if (seen.insert(shown).second) out.push_back(std::move(shown));
  };
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st)) return Error{fmt::format("{}: no such file or directory", path)};
    if (!fs::is_directory(st)) {
      add(path);
      continue;
    }
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
    if (ec) return Error{fmt::format("{}: cannot list it: {}", path, ec.message())};
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const fs::directory_entry& entry = *it;
      std::error_code type_ec;
      if (entry.is_directory(type_ec)) {
        if (skipped_directory(entry.path())) it.disable_recursion_pending();
      } else if (entry.path().extension() == ".py" && entry.is_regular_file(type_ec)) {
        found.push_back(entry.path());
      }
    }
    if (ec) return Error{fmt::format("{}: cannot list it: {}", path, ec.message())};
    std::sort(found.begin(), found.end());
    for (const fs::path& p : found) add(p);
  }
  return out;
}

std::string absolute_source(const std::string& file) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(file, ec), ec);
  return ec ? fs::absolute(file).lexically_normal().string() : p.string();
}

int run_scan(const ScanArgs& args) {
  auto rule_files = upgrade::load_rule_files(args.rules);
  if (!rule_files) return fail(kExitUsage, rule_files.error().message);
  auto files = source_files(args.paths);
  if (!files) return fail(kExitUsage, files.error().message);
  std::vector<upgrade::SessionEvidence> sessions;
  for (const std::string& dir : args.sessions) {
    auto evidence = upgrade::SessionEvidence::load(dir);
    if (!evidence) return fail(kExitUsage, evidence.error().message);
    sessions.push_back(std::move(*evidence));
  }
  auto python = upgrade::find_python(args.python);
  if (!python) return fail(kExitUsage, python.error().message);

  upgrade::Extraction extraction;
  if (files->empty()) {
    fmt::print(stderr, "eacgm: warning: no *.py file under {}\n", fmt::join(args.paths, ", "));
  } else {
    auto extracted =
        upgrade::run_python_extractor(*python, *files, upgrade::rule_roots(*rule_files));
    if (!extracted) return fail(kExitUsage, extracted.error().message);
    extraction = std::move(*extracted);
  }

  upgrade::ScanReport report;
  report.findings = upgrade::match_uses(*rule_files, extraction.uses);
  report.warnings = std::move(extraction.warnings);
  report.files_scanned = extraction.files_parsed;
  report.sessions = sessions.size();
  if (!sessions.empty()) {
    std::map<std::string, std::string> absolute;
    for (Finding& f : report.findings) {
      auto [it, fresh] = absolute.try_emplace(f.use.file);
      if (fresh) it->second = absolute_source(f.use.file);
      f.executed = std::any_of(sessions.begin(), sessions.end(),
                               [&](const auto& s) { return s.ran(f, it->second); });
    }
  }
  upgrade::rank_findings(report.findings);

  if (args.json) {
    fmt::print("{}\n", json_text(upgrade::report_json(report), 2));
  } else {
    for (const upgrade::ScanWarning& w : report.warnings) {
      fmt::print(stderr, "eacgm: warning: {}:{}: {}; the file was not scanned\n", w.file, w.line,
                 w.message);
    }
    fmt::print("{}", upgrade::report_text(report));
  }
  return report.findings.empty() ? kExitOk : kExitFailed;
}

}  // namespace

void add_scan_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<ScanArgs>();
  CLI::App* scan = app.add_subcommand(
      "scan", "find Python code that a framework upgrade breaks, and whether it ran in a session");
  scan->add_option("paths", args->paths, "Python files, or directories to search for *.py")
      ->required();
  scan->add_option("--session", args->sessions,
                   "session directories: say of each finding whether its code ran there");
  scan->add_flag("--json", args->json, "print the findings as JSON");
  scan->add_option("--python", args->python,
                   "the interpreter that parses the code: the job's own (3.8 or newer)")
      ->capture_default_str();
  scan->add_option("--rules", args->rules,
                   "a directory of *.rules files that add to the built-in rules (a file with a "
                   "built-in file's name replaces it)");
  scan->callback(
      [args, &run] { run = [args] { return guarded([&] { return run_scan(*args); }); }; });
}

}  // namespace eacgm
