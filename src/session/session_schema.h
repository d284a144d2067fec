// The tables of a session's events.sqlite, said once. SqliteWriter creates them and builds its
// insert statements from this; readers open a file through session/session_database.h, which
// reads the columns that file has, and ask it by these names; a unit test holds
// docs/SQLITE_SCHEMA.md, which says what every column means, to this list.
//
// Columns and tables may be added without a version change (a reader of an older session asks
// SessionDatabase::has_column); a change of a column's meaning bumps kSessionSchemaVersion.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace eacgm {

// What SqliteWriter writes into meta.schema_version. A reader refuses a database of a newer one:
// it would misread it.
constexpr int kSessionSchemaVersion = 1;

struct SchemaColumn {
  std::string name;
  std::string declaration;  // its type and constraints, as CREATE TABLE writes them
  // SQLite assigns it (an INTEGER PRIMARY KEY that is the row id): inserts leave it out.
  bool assigned = false;
};

struct SchemaTable {
  std::string name;
  std::vector<SchemaColumn> columns;
  std::string constraints = {};  // after the columns ("PRIMARY KEY(layer, name)"); empty for none

  std::string create_sql() const;
  // INSERT INTO name(every column SQLite does not assign) VALUES(?, ...): parameter i is the
  // i-th such column, in this table's order. `verb` may be "INSERT OR REPLACE".
  std::string insert_sql(std::string_view verb = "INSERT") const;
};

// Every table, in the order the writer creates them: the calls and what the session learned
// about its processes first, the gpu layer's last.
const std::vector<SchemaTable>& session_schema();
// The table named `name`; one of session_schema()'s, or the program is wrong (it aborts).
const SchemaTable& session_table(std::string_view name);
// Every CREATE TABLE statement.
std::string session_schema_sql();

// Built when the session finishes, after the bulk inserts: maintaining them row by row would slow
// every insert for no benefit while recording.
const char* session_index_sql();

// A merged session's tables (eacgm merge, docs/MERGE.md): every session table but meta, each row
// led by the index of the session it came from and that session's node, then the table's columns
// with their types only. One node's keys (a pid, a thread, a layer) repeat on another, and a
// column a session of an older eacgm lacks is NULL in its rows: so no key and no NOT NULL. meta is
// the merged session's own, as in a session.
const std::vector<SchemaTable>& merged_schema();
// Every CREATE TABLE statement of merged_schema().
std::string merged_schema_sql();
// A session's indexes, with the session leading where a pid does.
const char* merged_index_sql();

// The keys of the meta table that readers use (docs/SQLITE_SCHEMA.md lists every key).
namespace meta_key {
constexpr std::string_view kSchemaVersion = "schema_version";
constexpr std::string_view kStartNs = "start_ns";
constexpr std::string_view kEndNs = "end_ns";
}  // namespace meta_key

}  // namespace eacgm
