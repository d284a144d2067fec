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
  SqliteRows out;
  auto read = sqlite_each_row(db, sql, [&out](sqlite3_stmt* stmt) {
    auto& row = out.emplace_back();
    for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
      const auto* text = sqlite3_column_text(stmt, i);
      row.push_back(text ? std::optional<std::string>(reinterpret_cast<const char*>(text))
                         : std::nullopt);
    }
  });
  if (!read) return read.error();
  return out;
}

}  // namespace eacgm
