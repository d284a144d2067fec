// Owners of an SQLite connection and a prepared statement, closed and finalized on scope exit,
// and the two ways of running SQL that reading a session database needs (a session's database is
// opened through session/session_database.h).
#pragma once

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace eacgm {

struct SqliteDb {
  sqlite3* db = nullptr;
  SqliteDb() = default;
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;
  ~SqliteDb() { sqlite3_close(db); }
};

struct SqliteStmt {
  sqlite3_stmt* stmt = nullptr;
  SqliteStmt() = default;
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;
  ~SqliteStmt() { sqlite3_finalize(stmt); }
};

// Statements without results; the error is SQLite's message.
Result<void> sqlite_exec(sqlite3* db, const std::string& sql);

// Runs a query and calls on_row(statement) for each row as SQLite steps to it, so a table of
// millions of calls is never held in memory; the error is SQLite's message.
template <typename OnRow>
Result<void> sqlite_each_row(sqlite3* db, const std::string& sql, OnRow&& on_row) {
  SqliteStmt s;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s.stmt, nullptr) != SQLITE_OK) {
    return Error{sqlite3_errmsg(db)};
  }
  int rc = 0;
  while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) on_row(s.stmt);
  if (rc != SQLITE_DONE) return Error{sqlite3_errmsg(db)};
  return {};
}

// Rows of a query, every value as text (NULL as nullopt); the error is SQLite's message.
using SqliteRows = std::vector<std::vector<std::optional<std::string>>>;
Result<SqliteRows> sqlite_rows(sqlite3* db, const std::string& sql);

}  // namespace eacgm
