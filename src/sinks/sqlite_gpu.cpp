#include "sinks/sqlite_gpu.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <cmath>
#include <memory>

#include "session/session_schema.h"

namespace eacgm {
namespace {

void bind_optional(sqlite3_stmt* stmt, int index, const std::optional<double>& value) {
  if (!value) {
    sqlite3_bind_null(stmt, index);
  } else if (std::fabs(*value) < 9.0e18 && std::trunc(*value) == *value) {
    sqlite3_bind_int64(stmt, index, static_cast<int64_t>(*value));  // exact integers stay integers
  } else {
    sqlite3_bind_double(stmt, index, *value);
  }
}

void bind_optional(sqlite3_stmt* stmt, int index, const std::optional<uint64_t>& value) {
  if (value) {
    sqlite3_bind_int64(stmt, index, static_cast<int64_t>(*value));
  } else {
    sqlite3_bind_null(stmt, index);
  }
}

}  // namespace

Result<std::unique_ptr<SqliteGpuTables>> SqliteGpuTables::prepare(sqlite3* db) {
  std::unique_ptr<SqliteGpuTables> t(new SqliteGpuTables(db));
  const std::string sample_sql = session_table("gpu_samples").insert_sql();
  const std::string process_sql = session_table("gpu_process_samples").insert_sql();
  const std::string event_sql = session_table("gpu_events").insert_sql();
  for (auto [sql, stmt] : {std::pair{sample_sql.c_str(), &t->insert_sample_},
                           std::pair{process_sql.c_str(), &t->insert_process_},
                           std::pair{event_sql.c_str(), &t->insert_event_}}) {
    if (sqlite3_prepare_v2(db, sql, -1, stmt, nullptr) != SQLITE_OK) {
      return t->error("preparing the gpu tables' statements");
    }
  }
  return t;
}

SqliteGpuTables::~SqliteGpuTables() {
  sqlite3_finalize(insert_sample_);
  sqlite3_finalize(insert_process_);
  sqlite3_finalize(insert_event_);
}

Error SqliteGpuTables::error(const std::string& what) const {
  return Error{what + ": " + sqlite3_errmsg(db_)};
}

Result<size_t> SqliteGpuTables::insert(const GpuSample& s) {
  sqlite3_stmt* stmt = insert_sample_;
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  int i = 1;
  sqlite3_bind_int64(stmt, i++, s.device);
  sqlite3_bind_int64(stmt, i++, static_cast<int64_t>(s.ts_ns));
  for (const std::optional<double>& v : s.values) bind_optional(stmt, i++, v);
  bind_optional(stmt, i++, s.memory_total_bytes);
  bind_optional(stmt, i++, s.clock_event_reasons);
  bind_optional(stmt, i++, s.ecc_corrected);
  bind_optional(stmt, i++, s.ecc_uncorrected);
  if (sqlite3_step(stmt) != SQLITE_DONE) return error("inserting a GPU sample");
  const int64_t sample_id = sqlite3_last_insert_rowid(db_);
  size_t rows = 1;
  for (const GpuProcessSample& p : s.processes) {
    stmt = insert_process_;
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    sqlite3_bind_int64(stmt, 1, sample_id);
    sqlite3_bind_int64(stmt, 2, s.device);
    sqlite3_bind_int64(stmt, 3, static_cast<int64_t>(s.ts_ns));
    sqlite3_bind_int64(stmt, 4, p.pid);
    sqlite3_bind_int(stmt, 5, p.traced ? 1 : 0);
    bind_optional(stmt, 6, p.memory_used_bytes);
    bind_optional(stmt, 7, p.sm_util_pct);
    bind_optional(stmt, 8, p.memory_util_pct);
    if (sqlite3_step(stmt) != SQLITE_DONE) return error("inserting a GPU process sample");
    ++rows;
  }
  return rows;
}

Result<size_t> SqliteGpuTables::insert(const GpuEvent& e) {
  sqlite3_stmt* stmt = insert_event_;
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  const std::string_view kind = gpu_event_kind_name(e.kind);
  const std::string_view what = e.kind == GpuEvent::Kind::kXid ? xid_description(e.code) : "";
  sqlite3_bind_int64(stmt, 1, e.device);
  sqlite3_bind_int64(stmt, 2, static_cast<int64_t>(e.ts_ns));
  sqlite3_bind_text(stmt, 3, kind.data(), static_cast<int>(kind.size()), SQLITE_TRANSIENT);
  if (e.kind == GpuEvent::Kind::kXid) sqlite3_bind_int64(stmt, 4, static_cast<int64_t>(e.code));
  if (!what.empty()) {
    sqlite3_bind_text(stmt, 5, what.data(), static_cast<int>(what.size()), SQLITE_TRANSIENT);
  }
  if (sqlite3_step(stmt) != SQLITE_DONE) return error("inserting a GPU event");
  return size_t{1};
}

Result<void> SqliteGpuTables::write_devices(const Session& session) {
  auto it = session.layers.find(Layer::kGpu);
  if (it == session.layers.end() || !it->second.extra.contains("devices")) return {};
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, session_table("gpu_devices").insert_sql("INSERT OR REPLACE").c_str(),
                         -1, &raw, nullptr) != SQLITE_OK) {
    return error("preparing gpu_devices");
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  for (const nlohmann::json& d : it->second.extra["devices"]) {
    sqlite3_reset(raw);
    sqlite3_clear_bindings(raw);
    const std::string name = d.value("name", std::string());
    const std::string uuid = d.value("uuid", std::string());
    const std::string unsupported = d.value("unsupported", nlohmann::json::array()).dump();
    sqlite3_bind_int64(raw, 1, d.value("index", 0));
    sqlite3_bind_text(raw, 2, name.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(raw, 3, uuid.c_str(), -1, SQLITE_TRANSIENT);
    if (d.contains("memory_total_bytes")) {
      sqlite3_bind_int64(raw, 4, d["memory_total_bytes"].get<int64_t>());
    }
    sqlite3_bind_int64(raw, 5, d.value("samples", int64_t{0}));
    sqlite3_bind_text(raw, 6, unsupported.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(raw) != SQLITE_DONE) return error("inserting gpu_devices");
  }
  return {};
}

}  // namespace eacgm
