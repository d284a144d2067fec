#include "session/session_database.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <charconv>

namespace eacgm {

Result<std::string> session_database(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return Error{fmt::format("{}: no such session directory", dir)};
  if (!S_ISDIR(st.st_mode)) {
    return Error{
        fmt::format("{}: not a directory (a session is the directory record -o wrote)", dir)};
  }
  std::string path = dir + "/events.sqlite";
  if (stat(path.c_str(), &st) != 0) {
    return Error{fmt::format("{}: not a session directory (no events.sqlite)", dir)};
  }
  return path;
}

Result<std::unique_ptr<SessionDatabase>> open_session_database(const std::string& path) {
  auto database = std::make_unique<SessionDatabase>();
  database->path = path;
  if (sqlite3_open_v2(path.c_str(), &database->db.db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    return Error{fmt::format("cannot open {}: {}", path, sqlite3_errmsg(database->db.db))};
  }
  const auto not_ours = [&path](std::string_view why) {
    return Error{fmt::format("{} is not an eacgm session database: {}", path, why)};
  };
  // SQLite reads a file lazily: a file that is not a database fails here, at the first query.
  if (auto r = sqlite_each_row(database->handle(),
                               "SELECT m.name, c.name FROM sqlite_master AS m, "
                               "pragma_table_info(m.name) AS c WHERE m.type = 'table'",
                               [&](sqlite3_stmt* s) {
                                 const auto* table = sqlite3_column_text(s, 0);
                                 const auto* column = sqlite3_column_text(s, 1);
                                 if (!table || !column) return;
                                 database->tables[reinterpret_cast<const char*>(table)].emplace(
                                     reinterpret_cast<const char*>(column));
                               });
      !r) {
    return not_ours(r.error().message);
  }
  if (!database->has_table("meta")) return not_ours("it has no meta table");
  if (auto r = sqlite_each_row(
          database->handle(),
          fmt::format("SELECT value FROM meta WHERE key = '{}'", meta_key::kSchemaVersion),
          [&](sqlite3_stmt* s) {
            const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
            const std::string_view v = text ? text : "";
            std::from_chars(v.data(), v.data() + v.size(), database->schema_version);
          });
      !r) {
    return not_ours(r.error().message);
  }
  if (database->schema_version > kSessionSchemaVersion) {
    return Error{fmt::format(
        "{} was written by a newer eacgm (schema version {}; this one reads up to {}): read it "
        "with that version",
        path, database->schema_version, kSessionSchemaVersion)};
  }
  return database;
}

Result<std::unique_ptr<SessionDatabase>> open_session_directory(const std::string& dir) {
  auto path = session_database(dir);
  if (!path) return path.error();
  return open_session_database(*path);
}

}  // namespace eacgm
