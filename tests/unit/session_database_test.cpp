// Every reader of a session (analyze, compare, merge, report, scan) opens its database through
// open_session_database: what it accepts and how it says what is wrong.
#include "session/session_database.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/sqlite_handles.h"
#include "session/session.h"
#include "session/session_schema.h"
#include "sinks/sqlite_writer.h"
#include "test_support.h"

namespace eacgm {
namespace {

// A database at `path` holding the given SQL.
void make_database(const std::string& path, const std::string& sql) {
  SqliteDb db;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db.db), SQLITE_OK);
  ASSERT_TRUE(sqlite_exec(db.db, sql).ok());
}

std::string error_of(const std::string& path) {
  auto opened = open_session_database(path);
  return opened ? "" : opened.error().message;
}

TEST(SessionDatabase, OpensWhatTheWriterWritesAndListsItsTables) {
  TempDir dir;
  const std::string path = (dir.path() / "events.sqlite").string();
  {
    auto writer = SqliteWriter::open(path);
    ASSERT_TRUE(writer.ok()) << writer.error().message;
    Session session;
    ASSERT_TRUE((*writer)->finish(session).ok());
  }
  auto opened = open_session_database(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ((*opened)->schema_version, kSessionSchemaVersion);
  EXPECT_EQ((*opened)->path, path);
  EXPECT_TRUE((*opened)->has_table("meta"));
  EXPECT_TRUE((*opened)->has_table("calls"));
  EXPECT_FALSE((*opened)->has_table("no_such_table"));
  auto by_dir = open_session_directory(dir.path().string());
  ASSERT_TRUE(by_dir.ok()) << by_dir.error().message;
}

TEST(SessionDatabase, SaysWhatIsWrongNamingTheFile) {
  TempDir dir;
  const std::string garbage = (dir.path() / "garbage.sqlite").string();
  std::ofstream(garbage) << std::string(4096, 'x');
  EXPECT_EQ(error_of(garbage),
            garbage + " is not an eacgm session database: file is not a database");

  const std::string foreign = (dir.path() / "foreign.sqlite").string();
  make_database(foreign, "CREATE TABLE t(x)");
  EXPECT_EQ(error_of(foreign), foreign + " is not an eacgm session database: it has no meta table");

  const std::string newer = (dir.path() / "newer.sqlite").string();
  make_database(newer,
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                "INSERT INTO meta VALUES('schema_version', '" +
                    std::to_string(kSessionSchemaVersion + 1) + "')");
  EXPECT_EQ(error_of(newer), newer + " was written by a newer eacgm (schema version " +
                                 std::to_string(kSessionSchemaVersion + 1) +
                                 "; this one reads up to " + std::to_string(kSessionSchemaVersion) +
                                 "): read it with that version");

  const std::string missing = (dir.path() / "missing.sqlite").string();
  EXPECT_NE(error_of(missing).find("cannot open " + missing), std::string::npos);
  EXPECT_EQ(open_session_directory((dir.path() / "nope").string()).error().message,
            (dir.path() / "nope").string() + ": no such session directory");
}

// The schema object is what the writer creates: every table and every column, in its order, and
// nothing else; and every insert statement it builds prepares on that database.
TEST(SessionSchema, TheWriterCreatesEveryTableAndColumnOfTheSchema) {
  TempDir dir;
  const std::string path = (dir.path() / "events.sqlite").string();
  {
    auto writer = SqliteWriter::open(path);
    ASSERT_TRUE(writer.ok()) << writer.error().message;
    ASSERT_TRUE((*writer)->finish(Session{}).ok());
  }
  auto opened = open_session_database(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  std::set<std::string, std::less<>> written, declared;
  for (const auto& [table, columns] : (*opened)->tables) written.insert(table);
  for (const SchemaTable& table : session_schema()) {
    declared.insert(table.name);
    std::vector<std::string> in_schema;
    for (const SchemaColumn& c : table.columns) in_schema.push_back(c.name);
    EXPECT_EQ(column_names((*opened)->handle(), table.name), in_schema) << table.name;
    for (const SchemaColumn& c : table.columns) {
      EXPECT_TRUE((*opened)->has_column(table.name, c.name)) << table.name << "." << c.name;
    }
    SqliteStmt insert;
    EXPECT_EQ(sqlite3_prepare_v2((*opened)->handle(), table.insert_sql().c_str(), -1, &insert.stmt,
                                 nullptr),
              SQLITE_OK)
        << table.insert_sql();
  }
  EXPECT_EQ(written, declared);
  EXPECT_FALSE((*opened)->has_column("calls", "no_such_column"));
  EXPECT_FALSE((*opened)->has_column("no_such_table", "id"));
  EXPECT_EQ(session_table("collectives").insert_sql(),
            "INSERT INTO collectives(call_id, comm, rank, nranks, seq) VALUES(?, ?, ?, ?, ?)");
  EXPECT_EQ(session_table("threads").insert_sql("INSERT OR REPLACE"),
            "INSERT OR REPLACE INTO threads(pid, tid, name) VALUES(?, ?, ?)");
}

// A reader asks which columns an older session has: one without those added since reads as such.
TEST(SessionSchema, AnOlderSessionLacksTheColumnsAddedSince) {
  TempDir dir;
  const std::string path = (dir.path() / "old.sqlite").string();
  make_database(path,
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                "INSERT INTO meta VALUES('schema_version', '1');"
                "CREATE TABLE processes(pid INTEGER PRIMARY KEY, rank INTEGER, comm TEXT);");
  auto opened = open_session_database(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_TRUE((*opened)->has_column("processes", "comm"));
  EXPECT_FALSE((*opened)->has_column("processes", "role"));
  EXPECT_FALSE((*opened)->has_table("calls"));
}

// docs/SQLITE_SCHEMA.md says what each column means: it names exactly the schema's columns for
// every table, so a column added to one and not the other fails here.
TEST(SessionSchema, TheDocumentDescribesEveryColumnOfEveryTable) {
  std::ifstream doc(std::string(EACGM_DOCS_DIR) + "/SQLITE_SCHEMA.md");
  ASSERT_TRUE(doc) << EACGM_DOCS_DIR "/SQLITE_SCHEMA.md";
  // A table is introduced by a heading "## `name` — ..." or a paragraph "`name` — ...", then
  // described by a Markdown table whose first column names one or more columns: "`a`, `b`".
  const std::regex introduced(R"(^(?:## )?`(\w+)` — )");
  const std::regex named("`(\\w+)`");
  std::map<std::string, std::set<std::string>> described;
  std::string table, line;
  bool in_rows = false;
  while (std::getline(doc, line)) {
    std::smatch m;
    if (std::regex_search(line, m, introduced)) {
      table = m[1];
      in_rows = false;
      continue;
    }
    if (line.starts_with("| column |")) {
      in_rows = !table.empty();
      continue;
    }
    if (!line.starts_with("|")) {
      if (in_rows) table.clear();  // one table of columns per introduction
      in_rows = false;
      continue;
    }
    if (!in_rows || line.starts_with("| ---") || line.starts_with("|---")) continue;
    const std::string first = line.substr(1, line.find('|', 1) - 1);
    for (auto it = std::sregex_iterator(first.begin(), first.end(), named);
         it != std::sregex_iterator(); ++it) {
      described[table].insert((*it)[1]);
    }
  }
  for (const SchemaTable& t : session_schema()) {
    if (t.name == "meta") continue;  // key and value, described by its keys
    std::set<std::string> columns;
    for (const SchemaColumn& c : t.columns) columns.insert(c.name);
    EXPECT_EQ(described[t.name], columns) << t.name;
    described.erase(t.name);
  }
  for (const auto& [name, columns] : described) ADD_FAILURE() << "the document describes " << name;
}

}  // namespace
}  // namespace eacgm
