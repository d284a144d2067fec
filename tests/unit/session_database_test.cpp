// Every reader of a session (analyze, compare, merge, report, scan) opens its database through
// open_session_database: what it accepts and how it says what is wrong.
#include "session/session_database.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/sqlite_handles.h"
#include "session/session.h"
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

}  // namespace
}  // namespace eacgm
