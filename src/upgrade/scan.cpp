#include "upgrade/scan.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

namespace eacgm::upgrade {
namespace {

// The part of `name` below `pattern` ("" for the pattern's own name) when the pattern covers it.
std::optional<std::string> covered(const Rule& rule, const RulePattern& pattern,
                                   const std::string& name) {
  std::string rest;
  if (name == pattern.base) {
    if (pattern.below_only) return std::nullopt;
  } else if (name.size() > pattern.base.size() && name.starts_with(pattern.base) &&
             name[pattern.base.size()] == '.') {
    rest = name.substr(pattern.base.size() + 1);
  } else {
    return std::nullopt;
  }
  if (pattern.below_only && !rule.except.empty()) {
    const std::string first = rest.substr(0, rest.find('.'));
    if (std::find(rule.except.begin(), rule.except.end(), first) != rule.except.end()) {
      return std::nullopt;
    }
  }
  return rest;
}

// Whether a use satisfies the rule's keyword condition; `at` becomes the keyword's place for a
// rule on a keyword that is passed.
bool condition_holds(const Rule& rule, const RulePattern& pattern, const std::string& rest,
                     const Use& use, const KeywordUse** at) {
  const KeywordCondition& when = rule.when;
  if (when.kind == KeywordCondition::Kind::kNone) return true;
  // Conditions are on calls: of the API itself, or of any name below a `.*` prefix.
  if (use.kind != Use::Kind::kCall || (!pattern.below_only && !rest.empty())) return false;
  const auto kw = std::find_if(use.keywords.begin(), use.keywords.end(),
                               [&](const KeywordUse& k) { return k.name == when.keyword; });
  if (when.kind == KeywordCondition::Kind::kPresent) {
    if (kw == use.keywords.end()) return false;
    *at = &*kw;
    return true;
  }
  // Absent: not by keyword, not positionally, and nothing hidden in **kwargs (or in *args when
  // the argument can be positional) that could carry it.
  if (kw != use.keywords.end() || use.star_kwargs) return false;
  if (when.position && (use.positional > *when.position || use.star_args)) return false;
  return true;
}

// The replacement with its ".*" standing for the part of the name below the rule's API.
std::string fill_replacement(const std::string& replacement, const std::string& rest) {
  std::string out;
  for (size_t i = 0; i < replacement.size(); ++i) {
    if (replacement[i] == '.' && i + 1 < replacement.size() && replacement[i + 1] == '*') {
      if (!rest.empty()) out += "." + rest;
      ++i;
    } else {
      out += replacement[i];
    }
  }
  return out;
}

std::string plural(size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string joined_sources(const Rule& rule) {
  std::string out;
  for (const std::string& s : rule.sources) out += (out.empty() ? "" : " ; ") + s;
  return out;
}

}  // namespace

std::vector<Finding> match_uses(const std::vector<RuleFile>& files, const std::vector<Use>& uses) {
  std::vector<Finding> out;
  for (const Use& use : uses) {
    for (const RuleFile& file : files) {
      std::vector<Finding> best;
      size_t best_length = 0;
      for (const Rule& rule : file.rules) {
        for (const RulePattern& pattern : rule.apis) {
          const std::optional<std::string> rest = covered(rule, pattern, use.name);
          if (!rest) continue;
          const KeywordUse* at = nullptr;
          if (!condition_holds(rule, pattern, *rest, use, &at)) continue;
          if (pattern.base.size() < best_length) continue;
          if (pattern.base.size() > best_length) {
            best.clear();
            best_length = pattern.base.size();
          }
          Finding f;
          f.use = use;
          f.rule = &rule;
          f.replacement = fill_replacement(rule.replacement, *rest);
          f.line = at ? at->line : use.line;
          f.column = at ? at->column : use.column;
          best.push_back(std::move(f));
          break;  // one finding per rule and use
        }
      }
      for (Finding& f : best) out.push_back(std::move(f));
    }
  }
  return out;
}

void rank_findings(std::vector<Finding>& findings) {
  auto key = [](const Finding& f) {
    return std::tuple<bool, int, const std::string&, int, int, const std::string&,
                      const std::string&, int>(
        f.executed != true, static_cast<int>(f.rule->severity), f.use.file, f.line, f.column,
        f.use.name, f.rule->file, f.rule->line);
  };
  std::stable_sort(findings.begin(), findings.end(),
                   [&](const Finding& a, const Finding& b) { return key(a) < key(b); });
}

nlohmann::ordered_json report_json(const ScanReport& report) {
  nlohmann::ordered_json out;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Finding& f : report.findings) {
    nlohmann::ordered_json j;
    j["file"] = f.use.file;
    j["line"] = f.line;
    j["column"] = f.column;
    j["api"] = f.use.name;
    j["replacement"] = f.replacement;
    j["rule"] = f.rule->file;
    j["rule_line"] = f.rule->line;
    j["severity"] = severity_name(f.rule->severity);
    j["versions"] = f.rule->versions;
    j["source"] = joined_sources(*f.rule);
    j["sources"] = f.rule->sources;
    j["function"] = f.use.function;
    j["kind"] = f.use.kind == Use::Kind::kCall     ? "call"
                : f.use.kind == Use::Kind::kImport ? "import"
                                                   : "reference";
    j["executed"] = f.executed ? nlohmann::ordered_json(*f.executed) : nullptr;
    list.push_back(std::move(j));
  }
  out["findings"] = std::move(list);
  out["files_scanned"] = report.files_scanned;
  nlohmann::ordered_json warnings = nlohmann::ordered_json::array();
  for (const ScanWarning& w : report.warnings) {
    warnings.push_back({{"file", w.file}, {"line", w.line}, {"message", w.message}});
  }
  out["warnings"] = std::move(warnings);
  return out;
}

std::string report_text(const ScanReport& report) {
  std::string out;
  size_t by_severity[3] = {0, 0, 0};
  size_t ran = 0;
  std::vector<std::string_view> files;
  for (const Finding& f : report.findings) {
    out += fmt::format("{}:{}: {} -> {} [{}, {}]", f.use.file, f.line, f.use.name, f.replacement,
                       severity_name(f.rule->severity), f.rule->file);
    if (f.executed) out += *f.executed ? " (ran in session)" : " (not seen in session)";
    out += '\n';
    ++by_severity[static_cast<int>(f.rule->severity)];
    ran += f.executed == true;
    files.push_back(f.use.file);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  const std::string scanned = plural(report.files_scanned, "file", "files");
  if (report.findings.empty()) {
    out += fmt::format("no findings in {} scanned", scanned);
  } else {
    out += fmt::format("{} ({}, {}, {}) in {} of {} scanned",
                       plural(report.findings.size(), "finding", "findings"),
                       plural(by_severity[0], "error", "errors"),
                       plural(by_severity[1], "warning", "warnings"),
                       plural(by_severity[2], "info", "infos"), files.size(), scanned);
    if (report.sessions > 0) {
      out += fmt::format("; {} ran in the {}", ran,
                         report.sessions == 1 ? "session" : "sessions given");
    }
  }
  if (!report.warnings.empty()) {
    out += fmt::format("; {} could not be parsed", plural(report.warnings.size(), "file", "files"));
  }
  out += '\n';
  return out;
}

}  // namespace eacgm::upgrade
