// eacgm scan without a shell or a session recorder: the rule format and its errors, matching
// (exact and prefix rules, `except`, keyword conditions, the most specific rule), ranking, the
// JSON and text outputs, the session evidence (summary.json and events.sqlite written here by
// hand) and the Python extractor's protocol. tests/e2e/test_scan.py runs the whole command on
// a corpus of real-looking scripts.
#include "upgrade/scan.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_support.h"
#include "upgrade/python_extractor.h"
#include "upgrade/rules.h"
#include "upgrade/session_evidence.h"

namespace eacgm::upgrade {
namespace {

constexpr const char* kScanSampleRules = R"(# a comment
rule torch.lstsq
  replacement torch.linalg.lstsq(A, B)
  versions    removed in 1.13
  severity    error
  aten        aten::lstsq
  source      https://example.org/a
  source      https://example.org/b

rule tensorflow.keras.layers.experimental.preprocessing
  replacement tensorflow.keras.layers.*
  versions    2.15
  severity    error
  source      seed

rule keras.backend.*
  except      floatx epsilon
  replacement keras.ops.*
  versions    3.0
  severity    error
  source      guide

rule tensorflow.keras.mixed_precision.experimental
  replacement tensorflow.keras.mixed_precision.*
  versions    2.9
  severity    error
  source      notes

rule tensorflow.keras.mixed_precision.experimental.set_policy
  replacement tensorflow.keras.mixed_precision.set_global_policy
  versions    2.9
  severity    error
  source      notes

rule tensorflow.keras.utils.get_file
  when        no-keyword cache_subdir 5
  replacement get_file(..., cache_subdir="datasets")
  versions    2.15
  severity    warning
  source      seed

rule torch.load
  when        no-keyword weights_only
  replacement torch.load(..., weights_only=True)
  versions    2.6
  severity    warning
  source      notes

rule torch.utils.data.DataLoader
  when        keyword prefetch_factor
  replacement prefetch_factor=None with num_workers=0
  versions    2.0
  severity    warning
  source      issue

rule torch.norm torch.functional.norm
  replacement torch.linalg.vector_norm
  versions    deprecated
  severity    info
  source      docs
)";

RuleFile scan_sample_rules() {
  auto file = parse_rule_file("sample.rules", kScanSampleRules);
  EXPECT_TRUE(file) << file.error().message;
  return file ? *file : RuleFile{};
}

Use scan_use(std::string name, Use::Kind kind = Use::Kind::kCall, std::string file = "a.py",
             int line = 1) {
  Use u;
  u.file = std::move(file);
  u.line = line;
  u.column = 5;
  u.name = std::move(name);
  u.kind = kind;
  u.function = "<module>";
  return u;
}

std::vector<std::string> scan_replacements(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const Finding& f : findings) out.push_back(f.replacement);
  return out;
}

TEST(ScanRules, ParsesEveryField) {
  const RuleFile file = scan_sample_rules();
  ASSERT_EQ(file.rules.size(), 9u);
  const Rule& lstsq = file.rules[0];
  EXPECT_EQ(lstsq.file, "sample.rules");
  EXPECT_EQ(lstsq.line, 2);
  ASSERT_EQ(lstsq.apis.size(), 1u);
  EXPECT_EQ(lstsq.apis[0].base, "torch.lstsq");
  EXPECT_FALSE(lstsq.apis[0].below_only);
  EXPECT_EQ(lstsq.replacement, "torch.linalg.lstsq(A, B)");
  EXPECT_EQ(lstsq.versions, "removed in 1.13");
  EXPECT_EQ(lstsq.severity, Severity::kError);
  EXPECT_EQ(lstsq.aten, std::vector<std::string>{"aten::lstsq"});
  EXPECT_EQ(lstsq.sources,
            (std::vector<std::string>{"https://example.org/a", "https://example.org/b"}));
  const Rule& backend = file.rules[2];
  EXPECT_TRUE(backend.apis[0].below_only);
  EXPECT_EQ(backend.apis[0].base, "keras.backend");
  EXPECT_EQ(backend.except, (std::vector<std::string>{"floatx", "epsilon"}));
  const Rule& get_file = file.rules[5];
  EXPECT_EQ(get_file.when.kind, KeywordCondition::Kind::kAbsent);
  EXPECT_EQ(get_file.when.keyword, "cache_subdir");
  EXPECT_EQ(get_file.when.position, 5);
  EXPECT_EQ(file.rules[6].when.position, std::nullopt);
  EXPECT_EQ(file.rules[7].when.kind, KeywordCondition::Kind::kPresent);
  EXPECT_EQ(file.rules[8].apis.size(), 2u);
  EXPECT_EQ(file.rules[8].severity, Severity::kInfo);
}

TEST(ScanRules, ErrorsNameTheFileAndLine) {
  const std::string head = "rule torch.solve\n  replacement x\n  versions v\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + "  severity fatal\n  source s\n",
       "bad.rules:4: severity 'fatal': expected error (removed), warning"},
      {head + "  source s\n", "bad.rules:1: rule torch.solve has no 'severity'"},
      {head + "  severity error\n  colour blue\n  source s\n",
       "bad.rules:5: unknown field 'colour'"},
      {head + "  severity error\n  severity info\n  source s\n",
       "bad.rules:5: 'severity' given twice"},
      {"  replacement x\n", "bad.rules:1: a field line before the first 'rule' line"},
      {"torch.solve\n", "bad.rules:1: expected 'rule API [API...]'"},
      {"rule\n", "bad.rules:1: 'rule' needs an API name"},
      {"rule torch..solve\n", "bad.rules:1: 'torch..solve' is not a dotted Python name"},
      {"rule torch.*.x\n", "bad.rules:1: 'torch.*.x' is not a dotted Python name"},
      {"rule 3d.x\n", "bad.rules:1: '3d.x' is not a dotted Python name"},
      {head + "  severity error\n  source s\n  aten lstsq\n",
       "bad.rules:6: aten operator 'lstsq': expected aten::NAME"},
      {head + "  severity error\n  source s\n  when keyword\n",
       "bad.rules:6: when 'keyword': expected 'keyword NAME' or 'no-keyword NAME [POSITION]'"},
      {head + "  severity error\n  source s\n  when no-keyword a -1\n",
       "bad.rules:6: when: position '-1' is not an argument index"},
      {head + "  severity error\n  source s\n  except a\n",
       "bad.rules:1: 'except' needs a rule on a prefix"},
      {head + "  severity error\n  source s\n  versions\n",
       "bad.rules:6: 'versions' needs a value"},
      {head + "  severity error\n  source s\n" + head + "  severity info\n  source t\n",
       "bad.rules:6: rule torch.solve repeats the rule of line 1"},
      {std::string("rule a\0b", 8), "bad.rules: not a text file"},
  };
  for (const auto& [text, expected] : cases) {
    auto file = parse_rule_file("bad.rules", text);
    ASSERT_FALSE(file) << text;
    EXPECT_TRUE(file.error().message.starts_with(expected))
        << file.error().message << "\nexpected: " << expected;
  }
  // The same API twice is fine under different conditions.
  EXPECT_TRUE(parse_rule_file("ok.rules", head + "  severity error\n  source s\n" + head +
                                              "  severity info\n  source t\n  when keyword k\n"));
  // Comments, blank lines and CRLF line ends.
  auto crlf = parse_rule_file("crlf.rules",
                              "# c\r\n\r\nrule a.b\r\n  replacement r\r\n"
                              "  versions v\r\n  severity info\r\n  source s\r\n");
  ASSERT_TRUE(crlf) << crlf.error().message;
  EXPECT_EQ(crlf->rules.at(0).replacement, "r");
}

TEST(ScanRules, BuiltInFilesParseAndEveryRuleHasSources) {
  auto files = load_rule_files();
  ASSERT_TRUE(files) << files.error().message;
  std::set<std::string> names;
  size_t rules = 0;
  for (const RuleFile& f : *files) {
    names.insert(f.name);
    for (const Rule& r : f.rules) {
      ++rules;
      EXPECT_FALSE(r.sources.empty()) << f.name << ":" << r.line;
      EXPECT_FALSE(r.versions.empty()) << f.name << ":" << r.line;
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"keras-3.rules", "pytorch-1-to-2.rules",
                                          "tensorflow-2.15.rules", "tensorflow-2.16.rules"}));
  EXPECT_GE(rules, 40u);
  EXPECT_EQ(rule_roots(*files), (std::vector<std::string>{"keras", "tensorflow", "torch"}));
}

TEST(ScanRules, ADirectoryAddsFilesAndReplacesBuiltInOnes) {
  TempDir tmp("eacgm-scan");
  const std::string one =
      "rule torch.fancy\n  replacement x\n  versions v\n  severity info\n"
      "  source s\n";
  std::ofstream(tmp.path() / "pytorch-1-to-2.rules") << one;
  std::ofstream(tmp.path() / "mine.rules") << "rule numpy.float\n  replacement float\n"
                                              "  versions 1.24\n  severity error\n  source s\n";
  std::ofstream(tmp.path() / "notes.txt") << "not a rule file";
  auto files = load_rule_files(tmp.path().string());
  ASSERT_TRUE(files) << files.error().message;
  std::map<std::string, size_t> counts;
  for (const RuleFile& f : *files) counts[f.name] = f.rules.size();
  EXPECT_EQ(counts.at("pytorch-1-to-2.rules"), 1u);  // replaced
  EXPECT_EQ(counts.at("mine.rules"), 1u);            // added
  EXPECT_GT(counts.at("keras-3.rules"), 1u);         // kept
  EXPECT_EQ(rule_roots(*files).front(), "keras");

  // One file may be named too.
  auto single = load_rule_files((tmp.path() / "mine.rules").string());
  ASSERT_TRUE(single) << single.error().message;

  // Bad input: the message names the path, and the line.
  std::ofstream(tmp.path() / "broken.rules") << "rule a.b\n  replacement x\n  severity loud\n";
  auto broken = load_rule_files(tmp.path().string());
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().message,
            tmp.path().string() +
                "/broken.rules:3: severity 'loud': expected error (removed), warning (behaviour "
                "changed) or info (deprecated)");
  auto missing = load_rule_files((tmp.path() / "nope").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message,
            "--rules " + (tmp.path() / "nope").string() + ": no such directory");
  const std::string empty = tmp.mkdirs("empty");
  auto none = load_rule_files(empty);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "--rules " + empty + ": no *.rules file in that directory");
}

TEST(ScanMatch, AnExactRuleCoversItsNameAndWhatIsBelowIt) {
  const std::vector<RuleFile> files = {scan_sample_rules()};
  EXPECT_EQ(match_uses(files, {scan_use("torch.lstsq")}).size(), 1u);
  EXPECT_EQ(match_uses(files, {scan_use("torch.lstsq", Use::Kind::kImport)}).size(), 1u);
  EXPECT_EQ(match_uses(files, {scan_use("torch.lstsq.__doc__", Use::Kind::kRef)}).size(), 1u);
  EXPECT_TRUE(match_uses(files, {scan_use("torch.lstsq_ex")}).empty());
  EXPECT_TRUE(match_uses(files, {scan_use("torch.linalg.lstsq")}).empty());
  EXPECT_TRUE(match_uses(files, {scan_use("torch")}).empty());
  // Either API of a rule with two.
  EXPECT_EQ(match_uses(files, {scan_use("torch.functional.norm")}).size(), 1u);
}

TEST(ScanMatch, APrefixFillsTheReplacementAndHonoursExcept) {
  const std::vector<RuleFile> files = {scan_sample_rules()};
  const std::string pre = "tensorflow.keras.layers.experimental.preprocessing";
  auto found = match_uses(files, {scan_use(pre + ".Rescaling"), scan_use(pre + ".image.Resizing"),
                                  scan_use(pre, Use::Kind::kImport)});
  EXPECT_EQ(scan_replacements(found),
            (std::vector<std::string>{"tensorflow.keras.layers.Rescaling",
                                      "tensorflow.keras.layers.image.Resizing",
                                      "tensorflow.keras.layers"}));
  // `keras.backend.*`: what is below only, less the exceptions.
  found = match_uses(files, {scan_use("keras.backend.get_value"), scan_use("keras.backend.floatx"),
                             scan_use("keras.backend", Use::Kind::kImport),
                             scan_use("keras.backend.epsilon.x", Use::Kind::kRef)});
  EXPECT_EQ(scan_replacements(found), std::vector<std::string>{"keras.ops.get_value"});
}

TEST(ScanMatch, TheMostSpecificRuleOfAFileWins) {
  const std::vector<RuleFile> files = {scan_sample_rules()};
  auto found =
      match_uses(files, {scan_use("tensorflow.keras.mixed_precision.experimental."
                                  "set_policy"),
                         scan_use("tensorflow.keras.mixed_precision.experimental.Policy")});
  EXPECT_EQ(scan_replacements(found),
            (std::vector<std::string>{"tensorflow.keras.mixed_precision.set_global_policy",
                                      "tensorflow.keras.mixed_precision.Policy"}));
  // Another file's rule on the same use is reported too: it is another upgrade.
  auto other = parse_rule_file("other.rules",
                               "rule tensorflow.keras\n  replacement keras\n  versions 2.16\n"
                               "  severity info\n  source s\n");
  ASSERT_TRUE(other);
  const std::vector<RuleFile> both = {files[0], *other};
  found = match_uses(both, {scan_use("tensorflow.keras.mixed_precision.experimental.set_policy")});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].rule->file, "sample.rules");
  EXPECT_EQ(found[1].rule->file, "other.rules");
  EXPECT_EQ(found[1].replacement, "keras");
}

TEST(ScanMatch, KeywordConditions) {
  const std::vector<RuleFile> files = {scan_sample_rules()};
  auto get_file = [](int positional, std::vector<KeywordUse> keywords = {}, bool star_args = false,
                     bool star_kwargs = false) {
    Use u = scan_use("tensorflow.keras.utils.get_file", Use::Kind::kCall, "a.py", 7);
    u.positional = positional;
    u.keywords = std::move(keywords);
    u.star_args = star_args;
    u.star_kwargs = star_kwargs;
    return u;
  };
  EXPECT_EQ(match_uses(files, {get_file(2)}).size(), 1u);
  EXPECT_EQ(match_uses(files, {get_file(0, {{"origin", 7, 20}})}).size(), 1u);
  EXPECT_TRUE(match_uses(files, {get_file(2, {{"cache_subdir", 8, 3}})}).empty());
  EXPECT_TRUE(match_uses(files, {get_file(6)}).empty());                   // passed positionally
  EXPECT_TRUE(match_uses(files, {get_file(2, {}, false, true)}).empty());  // maybe in **kwargs
  EXPECT_TRUE(match_uses(files, {get_file(2, {}, true)}).empty());         // maybe in *args
  Use ref = get_file(0);
  ref.kind = Use::Kind::kRef;  // `f = tf.keras.utils.get_file`: no call, no condition met
  EXPECT_TRUE(match_uses(files, {ref}).empty());

  // A keyword-only argument: *args cannot carry it.
  Use load = scan_use("torch.load");
  load.star_args = true;
  EXPECT_EQ(match_uses(files, {load}).size(), 1u);
  load.keywords = {{"weights_only", 1, 30}};
  EXPECT_TRUE(match_uses(files, {load}).empty());

  // A rule on a keyword that is passed reports the keyword's place.
  Use loader = scan_use("torch.utils.data.DataLoader", Use::Kind::kCall, "a.py", 10);
  EXPECT_TRUE(match_uses(files, {loader}).empty());
  loader.keywords = {{"batch_size", 10, 30}, {"prefetch_factor", 12, 9}};
  auto found = match_uses(files, {loader});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].line, 12);
  EXPECT_EQ(found[0].column, 9);
  // A call of a name below the API is not a call of the API.
  loader.name = "torch.utils.data.DataLoader.__init__";
  EXPECT_TRUE(match_uses(files, {loader}).empty());
}

std::vector<Finding> scan_ranked_sample(const std::vector<RuleFile>& files) {
  std::vector<Finding> found =
      match_uses(files, {scan_use("torch.norm", Use::Kind::kCall, "b.py", 3),
                         scan_use("torch.lstsq", Use::Kind::kCall, "b.py", 9),
                         scan_use("torch.lstsq", Use::Kind::kCall, "a.py", 20),
                         scan_use("torch.load", Use::Kind::kCall, "a.py", 1)});
  EXPECT_EQ(found.size(), 4u);
  return found;
}

TEST(ScanRank, ExecutedFirstThenSeverityThenPlace) {
  const std::vector<RuleFile> files = {scan_sample_rules()};
  std::vector<Finding> found = scan_ranked_sample(files);
  rank_findings(found);
  auto order = [&] {
    std::vector<std::string> out;
    for (const Finding& f : found) out.push_back(f.use.file + ":" + std::to_string(f.line));
    return out;
  };
  EXPECT_EQ(order(), (std::vector<std::string>{"a.py:20", "b.py:9", "a.py:1", "b.py:3"}));
  for (Finding& f : found) f.executed = f.use.file == "b.py";
  rank_findings(found);
  EXPECT_EQ(order(), (std::vector<std::string>{"b.py:9", "b.py:3", "a.py:20", "a.py:1"}));
}

TEST(ScanOutput, JsonShape) {
  const std::vector<RuleFile> files = {scan_sample_rules()};
  ScanReport report;
  report.findings = scan_ranked_sample(files);
  rank_findings(report.findings);
  report.files_scanned = 2;
  report.warnings = {{"c.py", 3, "SyntaxError: invalid syntax"}};
  nlohmann::ordered_json j = report_json(report);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"findings", "files_scanned", "warnings"}));
  EXPECT_EQ(j["files_scanned"], 2);
  EXPECT_EQ(j["warnings"][0],
            (nlohmann::ordered_json{
                {"file", "c.py"}, {"line", 3}, {"message", "SyntaxError: invalid syntax"}}));
  const auto& first = j["findings"][0];
  keys.clear();
  for (const auto& [k, v] : first.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"file", "line", "column", "api", "replacement", "rule",
                                            "rule_line", "severity", "versions", "source",
                                            "sources", "function", "kind", "executed"}));
  EXPECT_EQ(first["file"], "a.py");
  EXPECT_EQ(first["line"], 20);
  EXPECT_EQ(first["column"], 5);
  EXPECT_EQ(first["api"], "torch.lstsq");
  EXPECT_EQ(first["replacement"], "torch.linalg.lstsq(A, B)");
  EXPECT_EQ(first["rule"], "sample.rules");
  EXPECT_EQ(first["rule_line"], 2);
  EXPECT_EQ(first["severity"], "error");
  EXPECT_EQ(first["versions"], "removed in 1.13");
  EXPECT_EQ(first["source"], "https://example.org/a ; https://example.org/b");
  EXPECT_EQ(first["function"], "<module>");
  EXPECT_EQ(first["kind"], "call");
  EXPECT_TRUE(first["executed"].is_null());
  report.findings[0].executed = true;
  report.findings[1].executed = false;
  j = report_json(report);
  EXPECT_EQ(j["findings"][0]["executed"], true);
  EXPECT_EQ(j["findings"][1]["executed"], false);
}

TEST(ScanOutput, TextLinesAndSummary) {
  const std::vector<RuleFile> files = {scan_sample_rules()};
  ScanReport report;
  report.findings = scan_ranked_sample(files);
  rank_findings(report.findings);
  report.files_scanned = 3;
  EXPECT_EQ(report_text(report),
            "a.py:20: torch.lstsq -> torch.linalg.lstsq(A, B) [error, sample.rules]\n"
            "b.py:9: torch.lstsq -> torch.linalg.lstsq(A, B) [error, sample.rules]\n"
            "a.py:1: torch.load -> torch.load(..., weights_only=True) [warning, sample.rules]\n"
            "b.py:3: torch.norm -> torch.linalg.vector_norm [info, sample.rules]\n"
            "4 findings (2 errors, 1 warning, 1 info) in 2 of 3 files scanned\n");
  for (Finding& f : report.findings) f.executed = f.line == 9;
  rank_findings(report.findings);
  report.sessions = 1;
  report.warnings = {{"c.py", 1, "SyntaxError"}};
  const std::string text = report_text(report);
  EXPECT_TRUE(
      text.starts_with("b.py:9: torch.lstsq -> torch.linalg.lstsq(A, B) [error, "
                       "sample.rules] (ran in session)\na.py:20: torch.lstsq -> "
                       "torch.linalg.lstsq(A, B) [error, sample.rules] (not seen in "
                       "session)\n"))
      << text;
  EXPECT_TRUE(text.ends_with(
      "4 findings (2 errors, 1 warning, 1 info) in 2 of 3 files scanned; 1 ran in the session; "
      "1 file could not be parsed\n"))
      << text;
  EXPECT_EQ(report_text(ScanReport{{}, {}, 1, 0}), "no findings in 1 file scanned\n");
}

TEST(ScanEvidence, SameSourceFile) {
  EXPECT_TRUE(same_source_file("/src/proj/train.py", "/src/proj/train.py"));
  EXPECT_TRUE(same_source_file("/src/proj/train.py", "/src/proj/./train.py"));
  EXPECT_FALSE(same_source_file("/src/proj/train.py", "/other/proj/train.py"));
  EXPECT_TRUE(same_source_file("/src/proj/train.py", "train.py"));
  EXPECT_TRUE(same_source_file("/src/proj/pkg/model.py", "pkg/model.py"));
  EXPECT_FALSE(same_source_file("/src/proj/xpkg/model.py", "pkg/model.py"));
  EXPECT_FALSE(same_source_file("/src/proj/train.py", "<string>"));
  EXPECT_FALSE(same_source_file("/src/proj/train.py", ""));
  EXPECT_FALSE(same_source_file("/src/proj/train.py", "../train.py"));
}

// A finding points into its rule files: `rules` must outlive it.
Finding scan_finding_at(const std::vector<RuleFile>& rules, const std::string& function,
                        int function_line, int line) {
  Use u = scan_use("torch.lstsq", Use::Kind::kCall, "proj/model.py", line);
  u.function = function;
  u.function_line = function_line;
  auto found = match_uses(rules, {u});
  EXPECT_EQ(found.size(), 1u);
  return found.at(0);
}

TEST(ScanEvidence, WhatCountsAsRun) {
  const std::vector<RuleFile> rules = {scan_sample_rules()};
  const std::string file = "/src/proj/model.py";
  const Finding in_forward = scan_finding_at(rules, "Net.forward", 12, 14);
  SessionEvidence evidence;
  EXPECT_FALSE(evidence.ran(in_forward, file));

  evidence.add_function("proj/model.py:Net.forward");
  EXPECT_TRUE(evidence.ran(in_forward, file));
  EXPECT_FALSE(evidence.ran(in_forward, "/src/other/model.py"));
  EXPECT_FALSE(evidence.ran(scan_finding_at(rules, "Net.backward", 20, 21), file));
  EXPECT_FALSE(evidence.ran(scan_finding_at(rules, "<module>", 0, 3), file));

  // Older interpreters give co_name only: the last part of the qualname.
  SessionEvidence co_name;
  co_name.add_function("model.py:forward");
  EXPECT_TRUE(co_name.ran(in_forward, file));
  EXPECT_FALSE(co_name.ran(scan_finding_at(rules, "forward_all", 20, 21), file));

  // The function's first line where names disagree; the exact line of a traced call.
  SessionEvidence first_line;
  first_line.add_function("somewhere.py:renamed", file, 12);
  EXPECT_TRUE(first_line.ran(in_forward, file));
  SessionEvidence line;
  line.add_line(file, 14);
  EXPECT_TRUE(line.ran(in_forward, file));
  EXPECT_FALSE(line.ran(scan_finding_at(rules, "Net.forward", 12, 15), file));

  // The module's own code.
  SessionEvidence module;
  module.add_function("model.py:<module>");
  EXPECT_TRUE(module.ran(scan_finding_at(rules, "<module>", 0, 3), file));
  EXPECT_FALSE(module.ran(in_forward, file));

  // The operator the old API ran, with or without an overload.
  SessionEvidence ops;
  ops.add_torch_op("aten::lstsq.X");
  EXPECT_TRUE(ops.ran(in_forward, file));
  SessionEvidence other_ops;
  other_ops.add_torch_op("aten::lstsq_ex");
  other_ops.add_torch_op("aten::linalg_lstsq");
  EXPECT_FALSE(other_ops.ran(in_forward, file));
}

void scan_exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &error), SQLITE_OK) << error;
}

TEST(ScanEvidence, LoadsSummaryAndDatabase) {
  TempDir tmp("eacgm-scan");
  const std::string dir = tmp.mkdirs("run1");
  std::ofstream(dir + "/summary.json")
      << R"({"layers": {"python": {"status": "active", "functions": {
              "proj/model.py:Net.forward": {"count": 1, "total_ns": 5}}},
            "torch": {"status": "active", "ops": {"aten::symeig": {"count": 2}}}}})";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/events.sqlite").c_str(), &db), SQLITE_OK);
  scan_exec(db,
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
            "INSERT INTO meta VALUES ('schema_version', '1');"
            "CREATE TABLE python_functions(function TEXT PRIMARY KEY, file TEXT, first_line "
            "INTEGER, count INTEGER, samples INTEGER NOT NULL, total_ns INTEGER NOT NULL, "
            "self_ns INTEGER NOT NULL);"
            "INSERT INTO python_functions VALUES ('train.py:step', '/src/proj/train.py', 30, "
            "NULL, 4, 10, 5);"
            "CREATE TABLE calls(id INTEGER PRIMARY KEY, layer TEXT NOT NULL, name TEXT NOT NULL,"
            " py_function TEXT, py_file TEXT, py_line INTEGER);"
            "INSERT INTO calls VALUES (1, 'torch', 'aten::eig', 'train.py:<module>', "
            "'/src/proj/train.py', 7);");
  sqlite3_close(db);
  auto evidence = SessionEvidence::load(dir);
  ASSERT_TRUE(evidence) << evidence.error().message;
  EXPECT_EQ(evidence->functions(), 3u);
  EXPECT_EQ(evidence->torch_ops(), 2u);
  const std::vector<RuleFile> rules = {scan_sample_rules()};
  EXPECT_TRUE(evidence->ran(scan_finding_at(rules, "Net.forward", 3, 4), "/src/proj/model.py"));
  EXPECT_TRUE(evidence->ran(scan_finding_at(rules, "step", 30, 31), "/src/proj/train.py"));
  EXPECT_TRUE(evidence->ran(scan_finding_at(rules, "<module>", 0, 7), "/src/proj/train.py"));
  EXPECT_FALSE(evidence->ran(scan_finding_at(rules, "other", 40, 41), "/src/proj/train.py"));

  // Not sessions: each says so in one line.
  auto missing = SessionEvidence::load(dir + "/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, dir + "/nope: no such session directory");
  const std::string empty = tmp.mkdirs("empty");
  auto not_session = SessionEvidence::load(empty);
  ASSERT_FALSE(not_session);
  EXPECT_EQ(not_session.error().message,
            empty + " is not an eacgm session (it has neither summary.json nor events.sqlite)");
  const std::string bad_summary = tmp.mkdirs("bad-summary");
  std::ofstream(bad_summary + "/summary.json") << "{ truncated";
  auto garbled = SessionEvidence::load(bad_summary);
  ASSERT_FALSE(garbled);
  EXPECT_EQ(garbled.error().message,
            bad_summary + "/summary.json is not an eacgm session summary (not a JSON object)");
  const std::string bad_db = tmp.mkdirs("bad-db");
  std::ofstream(bad_db + "/events.sqlite") << "this is not a database, just text long enough";
  auto not_db = SessionEvidence::load(bad_db);
  ASSERT_FALSE(not_db);
  EXPECT_TRUE(not_db.error().message.starts_with(bad_db + "/events.sqlite is not an eacgm session "
                                                          "database: "))
      << not_db.error().message;
}

TEST(ScanExtractor, ReadsItsLines) {
  const std::vector<std::string> files = {"a.py", "b.py"};
  Extraction out;
  bool done = false;
  for (const char* line :
       {R"({"t":"use","f":0,"l":4,"c":9,"n":"torch.lstsq","k":"call","fn":"Net.forward",)"
        R"("fl":3,"kw":[["rcond",4,30]],"na":2,"sa":false,"sk":true})",
        R"({"t":"use","f":0,"l":1,"c":1,"n":"torch.lstsq","k":"import","fn":"<module>","fl":0})",
        R"({"t":"file","f":0})", R"({"t":"warn","f":1,"l":2,"m":"SyntaxError: invalid syntax"})",
        R"({"t":"done","version":"3.11.7"})"}) {
    auto r = read_extractor_line(line, files, out, done);
    ASSERT_TRUE(r) << r.error().message;
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(out.python_version, "3.11.7");
  EXPECT_EQ(out.files_parsed, 1u);
  ASSERT_EQ(out.uses.size(), 2u);
  const Use& call = out.uses[0];
  EXPECT_EQ(call.file, "a.py");
  EXPECT_EQ(call.line, 4);
  EXPECT_EQ(call.column, 9);
  EXPECT_EQ(call.kind, Use::Kind::kCall);
  EXPECT_EQ(call.function, "Net.forward");
  EXPECT_EQ(call.function_line, 3);
  ASSERT_EQ(call.keywords.size(), 1u);
  EXPECT_EQ(call.keywords[0].name, "rcond");
  EXPECT_EQ(call.positional, 2);
  EXPECT_FALSE(call.star_args);
  EXPECT_TRUE(call.star_kwargs);
  EXPECT_EQ(out.uses[1].kind, Use::Kind::kImport);
  ASSERT_EQ(out.warnings.size(), 1u);
  EXPECT_EQ(out.warnings[0].file, "b.py");
  EXPECT_EQ(out.warnings[0].line, 2);

  for (const char* bad : {"not json", R"({"t":"use","f":7,"n":"x"})", R"({"t":"use","f":0})",
                          R"({"t":"what","f":0})", R"({"t":"use","f":0,"n":"x","kw":[[1]]})"}) {
    EXPECT_FALSE(read_extractor_line(bad, files, out, done)) << bad;
  }
}

// The script itself, run by the first python3 on PATH where there is one (every CI machine has
// one; tests/e2e/test_scan.py runs it under several versions).
TEST(ScanExtractor, RunsTheScriptWithPython) {
  auto python = find_python("python3");
  if (!python) GTEST_SKIP() << python.error().message;
  TempDir tmp("eacgm-scan");
  const std::string a = (tmp.path() / "a.py").string();
  const std::string b = (tmp.path() / "b.py").string();
  std::ofstream(a) << "import torch as T\n\"torch.lstsq in a string\"\n"
                      "def f(x):\n    return T.lstsq(x, x, out=None)\n";
  std::ofstream(b) << "def broken(:\n";
  auto out = run_python_extractor(*python, {a, b, (tmp.path() / "gone.py").string()}, {"torch"});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->files_parsed, 1u);
  ASSERT_EQ(out->uses.size(), 2u);
  EXPECT_EQ(out->uses[0].name, "torch");
  EXPECT_EQ(out->uses[0].kind, Use::Kind::kImport);
  EXPECT_EQ(out->uses[1].name, "torch.lstsq");
  EXPECT_EQ(out->uses[1].file, a);
  EXPECT_EQ(out->uses[1].line, 4);
  EXPECT_EQ(out->uses[1].column, 12);
  EXPECT_EQ(out->uses[1].function, "f");
  EXPECT_EQ(out->uses[1].function_line, 3);
  EXPECT_EQ(out->uses[1].positional, 2);
  ASSERT_EQ(out->warnings.size(), 2u);
  EXPECT_EQ(out->warnings[0].file, b);
  EXPECT_EQ(out->warnings[0].line, 1);
  EXPECT_TRUE(out->warnings[1].message.starts_with("cannot read it")) << out->warnings[1].message;

  // Not a Python 3.8+: a message, not a crash.
  auto shell = run_python_extractor("/bin/sh", {a}, {"torch"});
  ASSERT_FALSE(shell);
  EXPECT_NE(shell.error().message.find("needs Python 3.8 or newer"), std::string::npos)
      << shell.error().message;
  EXPECT_FALSE(find_python("no-such-python-here"));
  EXPECT_FALSE(find_python("/nonexistent/python3"));
}

}  // namespace
}  // namespace eacgm::upgrade
