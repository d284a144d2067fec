// `eacgm scan`: Python code matched against upgrade rules (upgrade/rules.h). The Python side
// (upgrade/python_extractor.h) turns source files into uses of fully qualified names, with
// imports and aliases resolved; this side matches them against the rules, says whether each
// finding's code ran in recorded sessions (upgrade/session_evidence.h), ranks and prints them.
// docs/UPGRADE.md.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "upgrade/rules.h"

namespace eacgm::upgrade {

struct KeywordUse {
  std::string name;
  int line = 0;
  int column = 0;
};

// One use of a fully qualified name in a source file, as the extractor reports it.
struct Use {
  enum class Kind { kRef, kCall, kImport };
  std::string file;  // as given to the scan (the path printed)
  int line = 0;
  int column = 0;    // 1-based, in characters
  std::string name;  // "torch.lstsq", whatever alias the code used
  Kind kind = Kind::kRef;
  std::string function;   // enclosing def's qualname ("Net.forward"), "<module>" at top level
  int function_line = 0;  // its first line (first decorator's), as co_firstlineno; 0 at top level
  // Calls only: keywords passed, positional arguments, and whether *args / **kwargs were used.
  std::vector<KeywordUse> keywords;
  int positional = 0;
  bool star_args = false;
  bool star_kwargs = false;
};

struct Finding {
  Use use;
  const Rule* rule = nullptr;  // points into the rule files given to match_uses()
  std::string replacement;     // the rule's, with `*` filled in
  int line = 0;                // the use's, or the keyword's for a `when keyword` rule
  int column = 0;
  std::optional<bool> executed;  // nullopt: no session given
};

// Every finding of `uses` under `files`: in each file, the most specific rules that match a use
// (longest API); several files may each report the same use.
std::vector<Finding> match_uses(const std::vector<RuleFile>& files, const std::vector<Use>& uses);

// Executed first, then by severity (error, warning, info), then file, line, column.
void rank_findings(std::vector<Finding>& findings);

struct ScanWarning {
  std::string file;
  int line = 0;
  std::string message;
};

struct ScanReport {
  std::vector<Finding> findings;  // ranked
  std::vector<ScanWarning> warnings;
  size_t files_scanned = 0;
  size_t sessions = 0;  // --session directories given
};

// {"findings": [{file, line, column, api, replacement, rule, severity, versions, source, function,
// executed, ...}], "files_scanned": N, "warnings": [{file, line, message}]}
nlohmann::ordered_json report_json(const ScanReport& report);
// One line per finding, `file:line: api -> replacement [severity, rule file]` with `(ran in
// session)` or `(not seen in session)` when sessions were given, and a summary line.
std::string report_text(const ScanReport& report);

}  // namespace eacgm::upgrade
