// Owners of an SQLite connection and a prepared statement, closed and finalized on scope exit.
// (session_db, compare and scan still keep copies of their own; new code uses these.)
#pragma once

#include <sqlite3.h>

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

}  // namespace eacgm
