// A session's events.sqlite as every reader opens it (analyze, model fit, compare, merge, report,
// scan): found in its directory, opened read-only, and checked to be a session database that this
// eacgm can read, with one wording for what is wrong. The writer is sinks/sqlite_writer.h; the
// schema's columns are docs/SQLITE_SCHEMA.md.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/sqlite_handles.h"

namespace eacgm {

// The schema version SqliteWriter writes into meta.schema_version, bumped when a column's meaning
// changes. A reader refuses a database of a newer one: it would misread it.
constexpr int kSessionSchemaVersion = 1;

struct SessionDatabase {
  SqliteDb db;
  std::string path;
  std::set<std::string, std::less<>> tables;
  int schema_version = 0;  // 0: a session from before the version was written

  sqlite3* handle() const { return db.db; }
  // Whether the table exists: an older session, or one recorded without a layer, lacks some.
  bool has_table(std::string_view name) const { return tables.contains(name); }
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
