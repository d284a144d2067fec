#include "upgrade/session_evidence.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "session/session_database.h"

namespace eacgm::upgrade {
namespace {

namespace fs = std::filesystem;

using EvidenceStmt = SqliteStmt;

std::string column_text(sqlite3_stmt* stmt, int i) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
  return text ? text : "";
}

// "a/b.py:Net.forward" -> ("a/b.py", "Net.forward"); qualnames hold no ':'.
std::pair<std::string, std::string> split_key(const std::string& key) {
  const size_t colon = key.rfind(':');
  if (colon == std::string::npos) return {"", key};
  return {key.substr(0, colon), key.substr(colon + 1)};
}

// Whether a session's function name names the finding's enclosing function: the same qualname,
// or its last part where the session had only `co_name` (a key without dots).
bool same_function(const std::string& recorded, const std::string& qualname) {
  if (recorded == qualname) return true;
  if (recorded.empty() || recorded.find('.') != std::string::npos || recorded.front() == '<') {
    return false;
  }
  const size_t dot = qualname.rfind('.');
  return dot != std::string::npos && qualname.compare(dot + 1, std::string::npos, recorded) == 0;
}

Result<void> read_summary(const fs::path& path, SessionEvidence& evidence) {
  std::ifstream in(path);
  if (!in) return Error{fmt::format("cannot read {}", path.string())};
  const nlohmann::json summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!summary.is_object()) {
    return Error{
        fmt::format("{} is not an eacgm session summary (not a JSON object)", path.string())};
  }
  auto object_at = [&](const char* layer, const char* field) -> const nlohmann::json* {
    const auto layers = summary.find("layers");
    if (layers == summary.end() || !layers->is_object()) return nullptr;
    const auto l = layers->find(layer);
    if (l == layers->end() || !l->is_object()) return nullptr;
    const auto f = l->find(field);
    return f != l->end() && f->is_object() ? &*f : nullptr;
  };
  if (const nlohmann::json* functions = object_at("python", "functions")) {
    for (const auto& [key, stats] : functions->items()) {
      std::string file;
      int first_line = 0;
      if (stats.is_object()) {
        if (const auto f = stats.find("file"); f != stats.end() && f->is_string()) {
          file = f->get<std::string>();
        }
        if (const auto l = stats.find("first_line"); l != stats.end() && l->is_number_integer()) {
          first_line = l->get<int>();
        }
      }
      evidence.add_function(key, file, first_line);
    }
  }
  if (const nlohmann::json* ops = object_at("torch", "ops")) {
    for (const auto& [op, stats] : ops->items()) evidence.add_torch_op(op);
  }
  return {};
}

Result<void> read_database(const fs::path& path, SessionEvidence& evidence) {
  auto database = open_session_database(path.string());
  if (!database) return database.error();
  sqlite3* const db = (*database)->handle();
  const SessionDatabase& session = **database;
  // Every query below reads what an older or a crashed session may lack: a missing table or
  // column only means less evidence.
  auto each_row = [&](const char* sql, auto&& row) {
    EvidenceStmt s;
    if (sqlite3_prepare_v2(db, sql, -1, &s.stmt, nullptr) != SQLITE_OK) return;
    while (sqlite3_step(s.stmt) == SQLITE_ROW) row(s.stmt);
  };
  if (session.has_table("python_functions")) {
    each_row("SELECT function, file, first_line FROM python_functions", [&](sqlite3_stmt* s) {
      evidence.add_function(column_text(s, 0), column_text(s, 1), sqlite3_column_int(s, 2));
    });
  }
  if (session.has_column("calls", "py_file")) {
    each_row("SELECT DISTINCT py_function, py_file, py_line FROM calls WHERE py_file IS NOT NULL",
             [&](sqlite3_stmt* s) {
               const std::string file = column_text(s, 1);
               if (sqlite3_column_type(s, 0) != SQLITE_NULL)
                 evidence.add_function(column_text(s, 0));
               if (sqlite3_column_type(s, 2) != SQLITE_NULL) {
                 evidence.add_line(file, sqlite3_column_int(s, 2));
               }
             });
  }
  if (session.has_table("calls")) {
    each_row("SELECT DISTINCT name FROM calls WHERE layer = 'torch'",
             [&](sqlite3_stmt* s) { evidence.add_torch_op(column_text(s, 0)); });
  }
  return {};
}

}  // namespace

bool same_source_file(const std::string& absolute, const std::string& recorded) {
  if (recorded.empty() || recorded.front() == '<') return false;
  const fs::path r = fs::path(recorded).lexically_normal();
  if (r.is_absolute()) return r.string() == absolute;
  // A whole-component tail: "pkg/train.py" names "/src/pkg/train.py", not "/src/xpkg/train.py".
  const fs::path a(absolute);
  std::vector<fs::path> tail(r.begin(), r.end());
  std::vector<fs::path> full(a.begin(), a.end());
  if (tail.empty() || tail.size() >= full.size()) return false;
  for (const fs::path& part : tail) {
    if (part == "." || part == "..") return false;
  }
  return std::equal(tail.rbegin(), tail.rend(), full.rbegin());
}

Result<SessionEvidence> SessionEvidence::load(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error{fmt::format("{}: no such session directory", dir)};
  const fs::path summary = fs::path(dir) / "summary.json";
  const fs::path database = fs::path(dir) / "events.sqlite";
  const bool has_summary = fs::exists(summary, ec);
  const bool has_database = fs::exists(database, ec);
  if (!has_summary && !has_database) {
    return Error{fmt::format(
        "{} is not an eacgm session (it has neither summary.json nor events.sqlite)", dir)};
  }
  SessionEvidence evidence;
  if (has_summary) {
    if (auto r = read_summary(summary, evidence); !r) return r.error();
  }
  if (has_database) {
    if (auto r = read_database(database, evidence); !r) return r.error();
  }
  return evidence;
}

void SessionEvidence::add_function(const std::string& key, const std::string& file,
                                   int first_line) {
  auto [path, name] = split_key(key);
  functions_.push_back({std::move(path), std::move(name), file, first_line});
}

void SessionEvidence::add_line(const std::string& file, int line) {
  std::vector<std::string>& files = lines_[line];
  if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
}

void SessionEvidence::add_torch_op(const std::string& op) { torch_ops_.insert(op); }

bool SessionEvidence::ran(const Finding& finding, const std::string& absolute_file) const {
  const Use& use = finding.use;
  for (const Function& f : functions_) {
    const bool file =
        same_source_file(absolute_file, f.path) || same_source_file(absolute_file, f.file);
    if (!file) continue;
    if (same_function(f.name, use.function)) return true;
    if (f.first_line > 0 && f.first_line == use.function_line) return true;
  }
  for (int line : {use.line, finding.line}) {
    const auto it = lines_.find(line);
    if (it == lines_.end()) continue;
    for (const std::string& file : it->second) {
      if (same_source_file(absolute_file, file)) return true;
    }
  }
  for (const std::string& aten : finding.rule->aten) {
    const auto it = torch_ops_.lower_bound(aten);
    if (it != torch_ops_.end() &&
        (*it == aten || (it->starts_with(aten) && (*it)[aten.size()] == '.'))) {
      return true;
    }
  }
  return false;
}

}  // namespace eacgm::upgrade
