// Upgrade rules for `eacgm scan`: which APIs a framework upgrade removes, moves or changes, as
// data. One file per framework and version range (src/upgrade/rules/*.rules, embedded in the
// binary at build time; `--rules DIR` adds or replaces files at run time). docs/UPGRADE.md
// describes the format:
//
//   # a comment
//   rule torch.lstsq
//     replacement torch.linalg.lstsq(A, B) (arguments swapped)
//     versions    deprecated in 1.9, removed in 1.13
//     severity    error
//     aten        aten::lstsq
//     source      https://github.com/pytorch/pytorch/pull/70980
//
// A rule line names one or more fully qualified APIs: `A` matches A and every name below it
// (A.x, A.x.y), `A.*` only the names below it. In the replacement, `*` stands for the part of the
// name below A. Field lines are indented: replacement, versions, severity (error: removed;
// warning: behaviour changed; info: deprecated) and at least one source are required; aten (the
// torch operators the API runs), when (`keyword NAME`: calls that pass NAME=; `no-keyword NAME
// [POSITION]`: calls that pass it neither by keyword nor, with POSITION (0-based), positionally)
// and except (names directly below a `.*` prefix that are not affected) are optional.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace eacgm::upgrade {

enum class Severity { kError, kWarning, kInfo };

std::string_view severity_name(Severity s);

// A condition on the call's arguments; only calls of exactly the rule's API satisfy one.
struct KeywordCondition {
  enum class Kind { kNone, kPresent, kAbsent };
  Kind kind = Kind::kNone;
  std::string keyword;
  std::optional<int> position;  // kAbsent: the argument's index when passed positionally
};

struct RulePattern {
  std::string base;         // dotted name, without a trailing ".*"
  bool below_only = false;  // written `base.*`
};

struct Rule {
  std::vector<RulePattern> apis;
  std::string replacement;
  std::string versions;
  Severity severity = Severity::kError;
  std::vector<std::string> sources;
  std::vector<std::string> aten;    // aten::op names
  std::vector<std::string> except;  // first components below a `.*` base left alone
  KeywordCondition when;
  std::string file;  // the rule file's name, e.g. "pytorch-1-to-2.rules"
  int line = 0;      // of its `rule` line
};

struct RuleFile {
  std::string name;
  std::vector<Rule> rules;
};

// Parses one rule file; `name` is its file name (it goes into every rule and every error).
// Errors read "NAME:LINE: what is wrong".
Result<RuleFile> parse_rule_file(std::string_view name, std::string_view text);

// The rule files built into eacgm (src/upgrade/rules/, in name order): name and text.
struct EmbeddedRuleFile {
  std::string_view name;
  std::string_view text;
};
std::vector<EmbeddedRuleFile> embedded_rule_files();

// The built-in files, then the `*.rules` files of `extra` (a directory, or one file) when given:
// a file named like a built-in one replaces it, others are added. Files in name order.
Result<std::vector<RuleFile>> load_rule_files(const std::string& extra = {});

// The first components of every rule's APIs ("torch", "tensorflow", "keras"): the only names the
// extractor needs to report.
std::vector<std::string> rule_roots(const std::vector<RuleFile>& files);

}  // namespace eacgm::upgrade
