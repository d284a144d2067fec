#include "session/session_schema.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "layers/gpu/gpu_sample.h"

namespace eacgm {
namespace {

// The row id: SQLite numbers the rows 1, 2, 3, ... in insert order.
SchemaColumn row_id(std::string name = "id") {
  return {.name = std::move(name), .declaration = "INTEGER PRIMARY KEY", .assigned = true};
}

std::vector<SchemaTable> build_schema() {
  std::vector<SchemaTable> tables = {
      {.name = "calls",
       .columns = {row_id(),
                   {"pid", "INTEGER NOT NULL"},
                   {"tid", "INTEGER NOT NULL"},
                   {"layer", "TEXT NOT NULL"},
                   {"name", "TEXT NOT NULL"},
                   {"start_ns", "INTEGER NOT NULL"},
                   {"duration_ns", "INTEGER NOT NULL"},
                   {"ret", "INTEGER NOT NULL"},
                   {"error", "TEXT"},
                   {"bytes", "INTEGER NOT NULL"},
                   {"depth", "INTEGER NOT NULL"},
                   {"args", "TEXT NOT NULL"},
                   {"py_function", "TEXT"},
                   {"py_file", "TEXT"},
                   {"py_line", "INTEGER"},
                   {"kernel", "TEXT"},
                   {"inner_call", "INTEGER NOT NULL DEFAULT 0"}}},
      {.name = "kernels",
       .columns = {{"layer", "TEXT NOT NULL"},
                   {"name", "TEXT NOT NULL"},
                   {"demangled", "TEXT NOT NULL"},
                   {"launches", "INTEGER NOT NULL"},
                   {"errors", "INTEGER NOT NULL"},
                   {"total_ns", "INTEGER NOT NULL"},
                   {"p50_ns", "INTEGER NOT NULL"},
                   {"p99_ns", "INTEGER NOT NULL"},
                   {"shapes", "TEXT NOT NULL"},
                   {"python", "TEXT NOT NULL"},
                   {"torch_ops", "TEXT NOT NULL"}},
       .constraints = "PRIMARY KEY(layer, name)"},
      // call_id is a calls.id the writer gives: not assigned by SQLite.
      {.name = "collectives",
       .columns = {{"call_id", "INTEGER PRIMARY KEY REFERENCES calls(id)"},
                   {"comm", "TEXT NOT NULL"},
                   {"rank", "INTEGER NOT NULL"},
                   {"nranks", "INTEGER NOT NULL"},
                   {"seq", "INTEGER NOT NULL"}}},
      {.name = "processes",
       .columns = {{"pid", "INTEGER PRIMARY KEY"},
                   {"ppid", "INTEGER"},
                   {"comm", "TEXT"},
                   {"cmdline", "TEXT"},
                   {"rank", "INTEGER"},
                   {"start_ns", "INTEGER"},
                   {"end_ns", "INTEGER"},
                   {"exit_code", "INTEGER"},
                   {"exit_signal", "INTEGER"},
                   {"core_dumped", "INTEGER"},
                   {"cause", "TEXT"},
                   {"role", "TEXT"}}},
      {.name = "threads",
       .columns = {{"pid", "INTEGER NOT NULL"}, {"tid", "INTEGER NOT NULL"}, {"name", "TEXT"}},
       .constraints = "PRIMARY KEY(pid, tid)"},
      {.name = "device_memory",
       .columns = {{"pid", "INTEGER PRIMARY KEY"},
                   {"outstanding_bytes", "INTEGER NOT NULL"},
                   {"peak_bytes", "INTEGER NOT NULL"},
                   {"unmatched_frees", "INTEGER NOT NULL"}}},
      {.name = "layers",
       .columns = {{"layer", "TEXT PRIMARY KEY"},
                   {"status", "TEXT NOT NULL"},
                   {"reason", "TEXT"},
                   {"libraries", "TEXT NOT NULL"}}},
      {.name = "meta", .columns = {{"key", "TEXT PRIMARY KEY"}, {"value", "TEXT"}}},
      {.name = "os_events",
       .columns = {row_id(),
                   {"pid", "INTEGER NOT NULL"},
                   {"tid", "INTEGER"},
                   {"kind", "TEXT NOT NULL"},
                   {"ts_ns", "INTEGER"},
                   {"name", "TEXT"},
                   {"value", "INTEGER"},
                   {"detail", "TEXT NOT NULL"}}},
      {.name = "python_functions",
       .columns = {{"function", "TEXT PRIMARY KEY"},
                   {"file", "TEXT"},
                   {"first_line", "INTEGER"},
                   {"count", "INTEGER"},
                   {"samples", "INTEGER NOT NULL"},
                   {"total_ns", "INTEGER NOT NULL"},
                   {"self_ns", "INTEGER NOT NULL"}}},
      {.name = "python_gc",
       .columns = {{"pid", "INTEGER NOT NULL"},
                   {"tid", "INTEGER NOT NULL"},
                   {"start_ns", "INTEGER NOT NULL"},
                   {"duration_ns", "INTEGER NOT NULL"},
                   {"generation", "INTEGER NOT NULL"},
                   {"collected", "INTEGER NOT NULL"}}},
  };

  // The gpu layer's. gpu_samples has one column per GpuMetric, named by its summary.json key, so
  // the two can never disagree.
  SchemaTable samples{
      .name = "gpu_samples",
      .columns = {row_id(), {"device", "INTEGER NOT NULL"}, {"ts_ns", "INTEGER NOT NULL"}}};
  for (const GpuMetricInfo& m : gpu_metrics()) {
    samples.columns.push_back({std::string(m.key), "NUMERIC"});
  }
  for (const char* name :
       {"memory_total_bytes", "clock_event_reasons", "ecc_corrected", "ecc_uncorrected"}) {
    samples.columns.push_back({name, "INTEGER"});
  }
  tables.push_back(std::move(samples));
  tables.push_back({.name = "gpu_process_samples",
                    .columns = {{"sample_id", "INTEGER NOT NULL REFERENCES gpu_samples(id)"},
                                {"device", "INTEGER NOT NULL"},
                                {"ts_ns", "INTEGER NOT NULL"},
                                {"pid", "INTEGER NOT NULL"},
                                {"traced", "INTEGER NOT NULL"},
                                {"memory_used_bytes", "INTEGER"},
                                {"sm_util_pct", "NUMERIC"},
                                {"memory_util_pct", "NUMERIC"}}});
  tables.push_back({.name = "gpu_events",
                    .columns = {row_id(),
                                {"device", "INTEGER NOT NULL"},
                                {"ts_ns", "INTEGER NOT NULL"},
                                {"kind", "TEXT NOT NULL"},
                                {"code", "INTEGER"},
                                {"description", "TEXT"}}});
  tables.push_back({.name = "gpu_devices",
                    .columns = {{"device", "INTEGER PRIMARY KEY"},
                                {"name", "TEXT"},
                                {"uuid", "TEXT"},
                                {"memory_total_bytes", "INTEGER"},
                                {"samples", "INTEGER NOT NULL"},
                                {"unsupported", "TEXT NOT NULL"}}});
  return tables;
}

// Every table's CREATE TABLE statement, in order.
std::string create_sql(const std::vector<SchemaTable>& tables) {
  std::string sql;
  for (const SchemaTable& t : tables) sql += t.create_sql();
  return sql;
}

}  // namespace

std::string SchemaTable::create_sql() const {
  std::string sql = fmt::format("CREATE TABLE {}(\n", name);
  for (size_t i = 0; i < columns.size(); ++i) {
    sql += fmt::format("  {} {}{}\n", columns[i].name, columns[i].declaration,
                       i + 1 < columns.size() || !constraints.empty() ? "," : "");
  }
  if (!constraints.empty()) sql += fmt::format("  {}\n", constraints);
  return sql + ");\n";
}

std::string SchemaTable::insert_sql(std::string_view verb) const {
  std::string names, params;
  for (const SchemaColumn& c : columns) {
    if (c.assigned) continue;
    names += (names.empty() ? "" : ", ") + c.name;
    params += params.empty() ? "?" : ", ?";
  }
  return fmt::format("{} INTO {}({}) VALUES({})", verb, name, names, params);
}

const std::vector<SchemaTable>& session_schema() {
  static const std::vector<SchemaTable> tables = build_schema();
  return tables;
}

const SchemaTable& session_table(std::string_view name) {
  for (const SchemaTable& t : session_schema()) {
    if (t.name == name) return t;
  }
  std::fprintf(stderr, "eacgm: internal error: no session table %.*s\n",
               static_cast<int>(name.size()), name.data());
  std::abort();
}

std::string session_schema_sql() { return create_sql(session_schema()); }

const char* session_index_sql() {
  return "CREATE INDEX IF NOT EXISTS calls_by_name ON calls(name);\n"
         "CREATE INDEX IF NOT EXISTS calls_by_pid_start ON calls(pid, start_ns);\n";
}

const std::vector<SchemaTable>& merged_schema() {
  static const std::vector<SchemaTable> tables = [] {
    std::vector<SchemaTable> merged;
    for (const SchemaTable& t : session_schema()) {
      if (t.name == "meta") {
        merged.push_back(t);
        continue;
      }
      SchemaTable m{.name = t.name,
                    .columns = {{"session", "INTEGER NOT NULL"}, {"node", "TEXT NOT NULL"}}};
      for (const SchemaColumn& c : t.columns) {
        // The type is the declaration's first word ("INTEGER PRIMARY KEY" -> "INTEGER").
        m.columns.push_back({c.name, c.declaration.substr(0, c.declaration.find(' '))});
      }
      merged.push_back(std::move(m));
    }
    return merged;
  }();
  return tables;
}

std::string merged_schema_sql() { return create_sql(merged_schema()); }

const char* merged_index_sql() {
  return "CREATE INDEX IF NOT EXISTS calls_by_name ON calls(name);\n"
         "CREATE INDEX IF NOT EXISTS calls_by_pid_start ON calls(session, pid, start_ns);\n";
}

}  // namespace eacgm
