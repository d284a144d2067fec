#include "upgrade/rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace eacgm::upgrade {
namespace {

namespace fs = std::filesystem;

bool is_identifier(std::string_view s) {
  if (s.empty()) return false;
  auto head = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!head(s.front())) return false;
  return std::all_of(s.begin() + 1, s.end(),
                     [&](char c) { return head(c) || (c >= '0' && c <= '9'); });
}

// "a.b.c" or "a.b.*"; nullopt when malformed.
std::optional<RulePattern> parse_pattern(std::string_view text) {
  RulePattern p;
  if (text.size() > 2 && text.ends_with(".*")) {
    p.below_only = true;
    text.remove_suffix(2);
  }
  size_t begin = 0;
  while (true) {
    const size_t dot = text.find('.', begin);
    if (!is_identifier(text.substr(begin, dot - begin))) return std::nullopt;
    if (dot == std::string_view::npos) break;
    begin = dot + 1;
  }
  p.base = std::string(text);
  return p;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    const size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '\t') ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string condition_key(const Rule& r, const RulePattern& p) {
  return fmt::format("{}{} {} {}", p.base, p.below_only ? ".*" : "", static_cast<int>(r.when.kind),
                     r.when.keyword);
}

// The rule being read, with what it has so far.
struct PendingRule {
  Rule rule;
  std::set<std::string> fields;
};

Result<void> parse_field(std::string_view file, int line, std::string_view key,
                         std::string_view value, PendingRule& p) {
  auto error = [&](const std::string& what) {
    return Error{fmt::format("{}:{}: {}", file, line, what)};
  };
  static const std::set<std::string_view> repeatable = {"source", "aten", "except"};
  static const std::set<std::string_view> known = {"replacement", "versions", "severity", "source",
                                                   "aten",        "when",     "except"};
  if (!known.contains(key)) {
    return error(fmt::format(
        "unknown field '{}' (known: replacement, versions, severity, source, aten, when, except)",
        key));
  }
  if (value.empty()) return error(fmt::format("'{}' needs a value", key));
  if (!repeatable.contains(key) && !p.fields.insert(std::string(key)).second) {
    return error(fmt::format("'{}' given twice in one rule", key));
  }
  p.fields.insert(std::string(key));
  Rule& r = p.rule;
  if (key == "replacement") {
    r.replacement = std::string(value);
  } else if (key == "versions") {
    r.versions = std::string(value);
  } else if (key == "source") {
    r.sources.emplace_back(value);
  } else if (key == "severity") {
    if (value == "error") {
      r.severity = Severity::kError;
    } else if (value == "warning") {
      r.severity = Severity::kWarning;
    } else if (value == "info") {
      r.severity = Severity::kInfo;
    } else {
      return error(
          fmt::format("severity '{}': expected error (removed), warning (behaviour "
                      "changed) or info (deprecated)",
                      value));
    }
  } else if (key == "aten") {
    for (std::string_view op : words(value)) {
      if (!op.starts_with("aten::") || !is_identifier(op.substr(6, op.find('.') - 6))) {
        return error(fmt::format("aten operator '{}': expected aten::NAME[.OVERLOAD]", op));
      }
      r.aten.emplace_back(op);
    }
  } else if (key == "except") {
    for (std::string_view name : words(value)) {
      if (!is_identifier(name)) {
        return error(
            fmt::format("except '{}': expected a name directly below the rule's prefix", name));
      }
      r.except.emplace_back(name);
    }
  } else if (key == "when") {
    const std::vector<std::string_view> w = words(value);
    const bool present = !w.empty() && w[0] == "keyword";
    const bool absent = !w.empty() && w[0] == "no-keyword";
    if ((!present && !absent) || w.size() < 2 || !is_identifier(w[1]) ||
        (present && w.size() != 2) || (absent && w.size() > 3)) {
      return error(
          fmt::format("when '{}': expected 'keyword NAME' or 'no-keyword NAME [POSITION]'", value));
    }
    r.when.kind = present ? KeywordCondition::Kind::kPresent : KeywordCondition::Kind::kAbsent;
    r.when.keyword = std::string(w[1]);
    if (w.size() == 3) {
      int position = -1;
      const auto [end, ec] = std::from_chars(w[2].data(), w[2].data() + w[2].size(), position);
      if (ec != std::errc() || end != w[2].data() + w[2].size() || position < 0 || position > 255) {
        return error(fmt::format("when: position '{}' is not an argument index (0 to 255)", w[2]));
      }
      r.when.position = position;
    }
  }
  return {};
}

Result<void> finish_rule(std::string_view file, PendingRule& p, std::vector<Rule>& rules,
                         std::map<std::string, int>& seen) {
  Rule& r = p.rule;
  for (const char* required : {"replacement", "versions", "severity", "source"}) {
    if (!p.fields.contains(required)) {
      return Error{
          fmt::format("{}:{}: rule {} has no '{}'", file, r.line, r.apis.front().base, required)};
    }
  }
  const bool has_prefix =
      std::any_of(r.apis.begin(), r.apis.end(), [](const RulePattern& a) { return a.below_only; });
  if (!r.except.empty() && !has_prefix) {
    return Error{fmt::format("{}:{}: 'except' needs a rule on a prefix (NAME.*)", file, r.line)};
  }
  for (const RulePattern& a : r.apis) {
    const auto [it, fresh] = seen.emplace(condition_key(r, a), r.line);
    if (!fresh) {
      return Error{fmt::format("{}:{}: rule {}{} repeats the rule of line {}", file, r.line, a.base,
                               a.below_only ? ".*" : "", it->second)};
    }
  }
  rules.push_back(std::move(r));
  return {};
}

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{fmt::format("cannot read {}: {}", path.string(), std::strerror(errno))};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{fmt::format("cannot read {}", path.string())};
  return text.str();
}

}  // namespace

std::string_view severity_name(Severity s) {
  switch (s) {
    case Severity::kError:
      return "error";
    case Severity::kWarning:
      return "warning";
    case Severity::kInfo:
      return "info";
  }
  return "error";
}

Result<RuleFile> parse_rule_file(std::string_view name, std::string_view text) {
  RuleFile out;
  out.name = std::string(name);
  if (text.find('\0') != std::string_view::npos) {
    return Error{fmt::format("{}: not a text file (it holds NUL bytes)", name)};
  }
  std::optional<PendingRule> pending;
  std::map<std::string, int> seen;
  int number = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    const std::string_view raw = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++number;
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const bool indented = raw.front() == ' ' || raw.front() == '\t';
    if (!indented) {
      if (pending) {
        if (auto r = finish_rule(name, *pending, out.rules, seen); !r) return r.error();
      }
      const std::vector<std::string_view> w = words(line);
      if (w.front() != "rule") {
        return Error{fmt::format(
            "{}:{}: expected 'rule API [API...]' (a rule's fields are indented lines below it)",
            name, number)};
      }
      if (w.size() < 2) return Error{fmt::format("{}:{}: 'rule' needs an API name", name, number)};
      pending.emplace();
      pending->rule.file = std::string(name);
      pending->rule.line = number;
      for (size_t i = 1; i < w.size(); ++i) {
        auto pattern = parse_pattern(w[i]);
        if (!pattern) {
          return Error{
              fmt::format("{}:{}: '{}' is not a dotted Python name (such as torch.lstsq or "
                          "tensorflow.compat.v1.*)",
                          name, number, w[i])};
        }
        pending->rule.apis.push_back(std::move(*pattern));
      }
      continue;
    }
    if (!pending) {
      return Error{fmt::format("{}:{}: a field line before the first 'rule' line", name, number)};
    }
    const size_t split = line.find_first_of(" \t");
    const std::string_view key = line.substr(0, split);
    const std::string_view value =
        split == std::string_view::npos ? std::string_view() : trim(line.substr(split));
    if (auto r = parse_field(name, number, key, value, *pending); !r) return r.error();
  }
  if (pending) {
    if (auto r = finish_rule(name, *pending, out.rules, seen); !r) return r.error();
  }
  return out;
}

Result<std::vector<RuleFile>> load_rule_files(const std::string& extra) {
  std::map<std::string, std::pair<std::string, std::string>> texts;  // name -> (origin, text)
  for (const EmbeddedRuleFile& f : embedded_rule_files()) {
    texts[std::string(f.name)] = {"built in", std::string(f.text)};
  }
  if (!extra.empty()) {
    std::error_code ec;
    const fs::file_status st = fs::status(extra, ec);
    std::vector<fs::path> paths;
    if (fs::is_directory(st)) {
      for (const auto& entry : fs::directory_iterator(extra, ec)) {
        if (entry.path().extension() == ".rules" && entry.is_regular_file(ec)) {
          paths.push_back(entry.path());
        }
      }
      if (ec) return Error{fmt::format("--rules {}: cannot list it: {}", extra, ec.message())};
      if (paths.empty()) {
        return Error{fmt::format("--rules {}: no *.rules file in that directory", extra)};
      }
    } else if (fs::is_regular_file(st)) {
      paths.emplace_back(extra);
    } else {
      return Error{fmt::format("--rules {}: no such directory", extra)};
    }
    for (const fs::path& path : paths) {
      auto text = read_file(path);
      if (!text) return text.error();
      texts[path.filename().string()] = {path.parent_path().string(), std::move(*text)};
    }
  }
  std::vector<RuleFile> out;
  for (const auto& [name, origin_text] : texts) {
    auto file = parse_rule_file(name, origin_text.second);
    if (!file) {
      const std::string& origin = origin_text.first;
      return Error{origin == "built in" || origin.empty()
                       ? file.error().message
                       : fmt::format("{}/{}", origin, file.error().message)};
    }
    out.push_back(std::move(*file));
  }
  return out;
}

std::vector<std::string> rule_roots(const std::vector<RuleFile>& files) {
  std::set<std::string> roots;
  for (const RuleFile& f : files) {
    for (const Rule& r : f.rules) {
      for (const RulePattern& a : r.apis) roots.insert(a.base.substr(0, a.base.find('.')));
    }
  }
  return {roots.begin(), roots.end()};
}

}  // namespace eacgm::upgrade
