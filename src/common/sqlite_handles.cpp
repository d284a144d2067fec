#include "common/sqlite_handles.h"

namespace eacgm {

Result<void> sqlite_exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errmsg(db);
    sqlite3_free(error);
    return Error{message};
  }
  return {};
}

Result<SqliteRows> sqlite_rows(sqlite3* db, const std::string& sql) {
  SqliteStmt s;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s.stmt, nullptr) != SQLITE_OK) {
    return Error{sqlite3_errmsg(db)};
  }
  SqliteRows out;
  int rc = 0;
  while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
    auto& row = out.emplace_back();
    for (int i = 0; i < sqlite3_column_count(s.stmt); ++i) {
      const auto* text = sqlite3_column_text(s.stmt, i);
      row.push_back(text ? std::optional<std::string>(reinterpret_cast<const char*>(text))
                         : std::nullopt);
    }
  }
  if (rc != SQLITE_DONE) return Error{sqlite3_errmsg(db)};
  return out;
}

}  // namespace eacgm
