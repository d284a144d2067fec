// The gpu layer's tables in events.sqlite (docs/SQLITE_SCHEMA.md):
//   gpu_samples          one row per device reading, one column per metric
//   gpu_process_samples  one row per process using a device, per reading
//   gpu_events           one row per XID or ECC event
//   gpu_devices          one row per device (written at finish)
// SqliteWriter owns one of these and calls it inside its own batched
// transactions, so GPU rows cost what call rows cost.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "layers/gpu/gpu_sample.h"
#include "session/session.h"

struct sqlite3;
struct sqlite3_stmt;

namespace eacgm {

class SqliteGpuTables {
 public:
  // Its tables are created with every other (session/session_schema.h).
  // Prepares the insert statements on `db`, which must outlive this object.
  static Result<std::unique_ptr<SqliteGpuTables>> prepare(sqlite3* db);
  ~SqliteGpuTables();
  SqliteGpuTables(const SqliteGpuTables&) = delete;
  SqliteGpuTables& operator=(const SqliteGpuTables&) = delete;

  // Each returns the number of rows written, or the error.
  Result<size_t> insert(const GpuSample& sample);
  Result<size_t> insert(const GpuEvent& event);
  // gpu_devices, from session.layers[gpu] (call inside a transaction).
  Result<void> write_devices(const Session& session);

 private:
  explicit SqliteGpuTables(sqlite3* db) : db_(db) {}
  Error error(const std::string& what) const;

  sqlite3* db_;
  sqlite3_stmt* insert_sample_ = nullptr;
  sqlite3_stmt* insert_process_ = nullptr;
  sqlite3_stmt* insert_event_ = nullptr;
};

}  // namespace eacgm
