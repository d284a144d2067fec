// Writes a session into an SQLite database (events.sqlite): every call as a
// row of `calls`, inserted as it arrives, and at finish() the processes,
// threads, device memory, layers and session metadata. The schema is
// documented column by column in docs/SQLITE_SCHEMA.md.
//
// Calls are inserted through one prepared statement inside batched
// transactions (kBatchRows rows, or kBatchInterval, whichever comes first), so
// a crash of the tracer loses at most the last batch.
//
// Not thread-safe: on_call() and finish() are called from one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "common/result.h"
#include "sinks/sink.h"
#include "sinks/sqlite_gpu.h"

struct sqlite3;
struct sqlite3_stmt;

namespace eacgm {

class SqliteWriter : public Sink {
 public:
  // Creates (or replaces) the database at `path` with an empty schema; fails
  // with a message naming the path.
  static Result<std::unique_ptr<SqliteWriter>> open(const std::string& path);

  ~SqliteWriter() override;
  SqliteWriter(const SqliteWriter&) = delete;
  SqliteWriter& operator=(const SqliteWriter&) = delete;

  // Never fails loudly: the first error is remembered and returned by finish().
  void on_call(const CallRecord& call) override;
  // gpu_samples, gpu_process_samples and gpu_events rows, in the same batches as calls.
  void on_gpu_sample(const GpuSample& sample) override;
  void on_gpu_event(const GpuEvent& event) override;
  Result<void> finish(const Session& session) override;
  // The calls not in the database after a write failed, counted in it: a failed insert or commit
  // can take the rows of its whole transaction with it.
  std::vector<OutputLoss> losses() const override;

  static constexpr size_t kBatchRows = 10000;
  static constexpr std::chrono::milliseconds kBatchInterval{1000};

 private:
  SqliteWriter(std::string path, sqlite3* db);

  Result<void> exec(const char* sql);
  Result<void> prepare(const char* sql, sqlite3_stmt** stmt);
  Result<void> commit_batch();
  bool begin_batch();                // opens the batch's transaction if none is open
  void end_batch_rows(size_t rows);  // counts rows; commits a full or old batch
  Result<void> write_session(const Session& session);
  Result<void> write_os_events(const Session& session);
  Result<void> write_python(const Session& session);
  Result<void> write_kernels(const Session& session);
  Error sqlite_error(const std::string& what) const;
  void fail(Error error);

  std::string path_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_call_ = nullptr;
  sqlite3_stmt* insert_collective_ = nullptr;
  std::unique_ptr<SqliteGpuTables> gpu_;  // statements on db_: reset before closing it
  bool in_transaction_ = false;
  bool finished_ = false;
  size_t batch_rows_ = 0;
  std::chrono::steady_clock::time_point batch_started_;
  uint64_t calls_written_ = 0;
  uint64_t calls_lost_ = 0;  // not written because of an earlier error
  uint64_t calls_given_ = 0;
  std::optional<uint64_t> calls_in_db_;        // counted by finish() after an error
  std::string error_;                          // first error, empty while all is well
  std::unordered_set<uint64_t> threads_seen_;  // pid << 32 | tid
  std::string args_buffer_;                    // the current call's arguments as JSON, reused
};

}  // namespace eacgm
