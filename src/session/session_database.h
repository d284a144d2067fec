// A session's events.sqlite as every reader opens it (analyze, model fit, compare, merge, report,
// scan): found in its directory, opened read-only, and checked to be a session database that this
// eacgm can read, with one wording for what is wrong. The tables and columns are
// session/session_schema.h (what each means: docs/SQLITE_SCHEMA.md); the writer is
// sinks/sqlite_writer.h.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/sqlite_handles.h"
#include "session/session_schema.h"

namespace eacgm {

struct SessionDatabase {
  SqliteDb db;
  std::string path;
  // Each table the file has, with its columns.
  std::map<std::string, std::set<std::string, std::less<>>, std::less<>> tables;
  int schema_version = 0;  // 0: a session from before the version was written

  sqlite3* handle() const { return db.db; }
  // Whether the table exists: an older session, or one recorded without a layer, lacks some.
  bool has_table(std::string_view name) const { return tables.contains(name); }
  // Whether the table has the column: sessions of an older eacgm lack the ones added since
  // (session_schema.h keeps the version for changes of meaning only).
  bool has_column(std::string_view table, std::string_view column) const {
    auto it = tables.find(table);
    return it != tables.end() && it->second.contains(column);
  }
};

// The events.sqlite of a session directory, or why `dir` is none (missing, not a directory, no
// database in it), naming it.
Result<std::string> session_database(const std::string& dir);

// Opens the database at `path` read-only. Errors name the file: it cannot be opened, it is not an
// eacgm session database (not SQLite, or no meta table), or a newer eacgm wrote it.
Result<std::unique_ptr<SessionDatabase>> open_session_database(const std::string& path);
// The same, for the database of a session directory.
Result<std::unique_ptr<SessionDatabase>> open_session_directory(const std::string& dir);

}  // namespace eacgm
