#include "sinks/sqlite_writer.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "common/json_text.h"
#include "layers/python/python_profile.h"
#include "session/session_schema.h"

namespace eacgm {
namespace {

struct StmtDeleter {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

void bind_text(sqlite3_stmt* stmt, int index, std::string_view text) {
  sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

void bind_int(sqlite3_stmt* stmt, int index, int64_t value) {
  sqlite3_bind_int64(stmt, index, value);
}

template <typename T>
void bind_optional(sqlite3_stmt* stmt, int index, const std::optional<T>& value) {
  if (value) {
    sqlite3_bind_int64(stmt, index, static_cast<int64_t>(*value));
  } else {
    sqlite3_bind_null(stmt, index);
  }
}

// 0 stands for "unknown" in the session model; the database says NULL.
void bind_nonzero(sqlite3_stmt* stmt, int index, uint64_t value) {
  if (value != 0) {
    sqlite3_bind_int64(stmt, index, static_cast<int64_t>(value));
  } else {
    sqlite3_bind_null(stmt, index);
  }
}

void bind_text_or_null(sqlite3_stmt* stmt, int index, std::string_view text) {
  if (text.empty()) {
    sqlite3_bind_null(stmt, index);
  } else {
    bind_text(stmt, index, text);
  }
}

std::string to_json(const nlohmann::ordered_json& value) { return json_text(value); }

// The name of a failed call's error, in the layer's own terms.
std::optional<std::string> error_name(const CallRecord& call) {
  if (!call.failed()) return std::nullopt;
  return status_name(call.layer(), call.raw.ret);
}

// `text` as a JSON string. Decoded arguments are ASCII that we formatted;
// a byte outside ASCII becomes U+FFFD rather than invalid JSON. Runs of plain
// characters are copied whole: this runs for every argument of every call.
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  size_t plain_from = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x80 && c != '"' && c != '\\') continue;
    out.append(text.substr(plain_from, i - plain_from));
    plain_from = i + 1;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", byte);
    } else {
      out += "\\ufffd";
    }
  }
  out.append(text.substr(plain_from));
  out += '"';
}

// The decoded arguments as a JSON object, written directly into `out` (the
// writer's buffer, reused): this runs for every recorded call, and building a
// JSON document first cost a tenth of the reader's time per event.
void write_args_json(const CallRecord& call, std::string& out) {
  const std::vector<DecodedArg>& decoded = call.decoded_args();
  out = '{';
  for (size_t i = 0; i < decoded.size(); ++i) {
    const DecodedArg& arg = decoded[i];
    if (i > 0) out += ',';
    append_json_string(out, arg.name);
    out += ':';
    // Pointers stay hex text: readable, and exact beyond 2^53.
    if (arg.number && !arg.is_pointer()) {
      fmt::format_to(std::back_inserter(out), "{}", *arg.number);
    } else {
      append_json_string(out, arg.text);
    }
  }
  out += '}';
}

// A call's text, bound without a copy: the caller keeps it alive until the row is stepped and
// binds the column again before the next step.
void bind_call_text(sqlite3_stmt* stmt, int index, std::string_view text) {
  sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
}

}  // namespace

Result<std::unique_ptr<SqliteWriter>> SqliteWriter::open(const std::string& path) {
  // A new recording replaces an old database at the same path, with the
  // journal files an interrupted run may have left.
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::remove((path + suffix).c_str());
  }
  sqlite3* db = nullptr;
  const int rc =
      // NOMUTEX: one thread at a time uses the connection (the reader's or the sinks' writer,
      // then finish()), so SQLite's own locking on every bind and step is pure cost.
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = "cannot create SQLite database " + path + ": " +
                          (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    if (db != nullptr && sqlite3_system_errno(db) != 0) {
      message += std::string(" (") + std::strerror(sqlite3_system_errno(db)) + ")";
    }
    sqlite3_close(db);
    return Error{message};
  }
  std::unique_ptr<SqliteWriter> writer(new SqliteWriter(path, db));

  // Journal mode: WAL, synchronous=OFF, no automatic checkpoints. Each batch
  // commit is then one sequential append to the -wal file: no fsync and no
  // copying pages back into the main file while the job runs (a checkpoint
  // re-reads and rewrites every page, which cost the reader thread as much
  // as the inserts). A crash of the tracer (or a kill -9) loses only the
  // open batch: committed batches are in the WAL and are recovered by the
  // next reader; only a power cut may lose the last commits. finish()
  // switches the file back to a rollback journal, which checkpoints once,
  // so that the finished database is one self-contained file that
  // read-only readers open.
  const std::string schema = session_schema_sql();
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=OFF",
                          "PRAGMA wal_autocheckpoint=0", schema.c_str()}) {
    if (Result<void> r = writer->exec(sql); !r.ok()) {
      return Error{"cannot create SQLite database " + path + ": " + r.error().message};
    }
  }
  const std::string meta = fmt::format("INSERT INTO meta(key, value) VALUES('{}', '{}')",
                                       meta_key::kSchemaVersion, kSessionSchemaVersion);
  if (Result<void> r = writer->exec(meta.c_str()); !r.ok()) {
    return Error{"cannot create SQLite database " + path + ": " + r.error().message};
  }
  // The calls' statement binds the columns in the schema's order (on_call).
  for (auto [table, stmt] : {std::pair{"calls", &writer->insert_call_},
                             std::pair{"collectives", &writer->insert_collective_}}) {
    if (Result<void> r = writer->prepare(session_table(table).insert_sql().c_str(), stmt);
        !r.ok()) {
      return Error{"cannot create SQLite database " + path + ": " + r.error().message};
    }
  }
  auto gpu = SqliteGpuTables::prepare(db);
  if (!gpu) return Error{"cannot create SQLite database " + path + ": " + gpu.error().message};
  writer->gpu_ = std::move(*gpu);
  return writer;
}

SqliteWriter::SqliteWriter(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

SqliteWriter::~SqliteWriter() {
  if (db_ == nullptr) return;
  // Without finish(), keep what was recorded.
  if (in_transaction_) sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_finalize(insert_call_);
  sqlite3_finalize(insert_collective_);
  gpu_.reset();
  sqlite3_close(db_);
}

Error SqliteWriter::sqlite_error(const std::string& what) const {
  return Error{what + ": " + sqlite3_errmsg(db_)};
}

void SqliteWriter::fail(Error error) {
  if (error_.empty()) error_ = std::move(error.message);
}

Result<void> SqliteWriter::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    Error error{message != nullptr ? message : sqlite3_errmsg(db_)};
    sqlite3_free(message);
    return error;
  }
  return {};
}

Result<void> SqliteWriter::prepare(const char* sql, sqlite3_stmt** stmt) {
  if (sqlite3_prepare_v2(db_, sql, -1, stmt, nullptr) != SQLITE_OK) {
    return sqlite_error("preparing statement");
  }
  return {};
}

Result<void> SqliteWriter::commit_batch() {
  if (!in_transaction_) return {};
  in_transaction_ = false;
  batch_rows_ = 0;
  if (Result<void> r = exec("COMMIT"); !r.ok()) {
    return Error{"committing calls: " + r.error().message};
  }
  return {};
}

void SqliteWriter::on_call(const CallRecord& call) {
  if (finished_ || call.spec == nullptr) return;
  ++calls_given_;
  threads_seen_.insert((static_cast<uint64_t>(call.pid) << 32) | call.tid);
  if (!error_.empty()) {
    ++calls_lost_;
    return;
  }
  if (!begin_batch()) {
    ++calls_lost_;
    return;
  }

  sqlite3_stmt* stmt = insert_call_;
  bind_int(stmt, 1, call.pid);
  bind_int(stmt, 2, call.tid);
  // Every text column is bound without a copy: each lives until sqlite3_step below.
  bind_call_text(stmt, 3, layer_name(call.layer()));
  bind_call_text(stmt, 4, call.name());
  bind_int(stmt, 5, static_cast<int64_t>(call.start_ns));
  bind_int(stmt, 6, static_cast<int64_t>(call.duration_ns));
  bind_int(stmt, 7, call.raw.ret);
  const std::optional<std::string> error = error_name(call);
  if (error) {
    bind_call_text(stmt, 8, *error);
  } else {
    sqlite3_bind_null(stmt, 8);
  }
  bind_int(stmt, 9, call.failed() ? 0 : static_cast<int64_t>(call.bytes()));
  bind_int(stmt, 10, call.depth);
  write_args_json(call, args_buffer_);
  bind_call_text(stmt, 11, args_buffer_);
  if (call.py_site) {
    bind_call_text(stmt, 12, call.py_site->function);
    bind_call_text(stmt, 13, call.py_site->file);
    if (call.py_site->line > 0) {
      bind_int(stmt, 14, call.py_site->line);
    } else {
      sqlite3_bind_null(stmt, 14);
    }
  } else {
    for (int i : {12, 13, 14}) sqlite3_bind_null(stmt, i);
  }
  if (call.kernel) {
    bind_call_text(stmt, 15, *call.kernel);
  } else {
    sqlite3_bind_null(stmt, 15);
  }
  bind_int(stmt, 16, call.inner ? 1 : 0);
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  if (rc != SQLITE_DONE) {
    fail(sqlite_error("inserting a call into " + path_));
    ++calls_lost_;
    return;
  }
  ++calls_written_;
  if (call.collective) {
    const CollectiveRef& c = *call.collective;
    sqlite3_stmt* coll = insert_collective_;
    bind_int(coll, 1, sqlite3_last_insert_rowid(db_));
    bind_call_text(coll, 2, c.comm_id);
    bind_int(coll, 3, c.rank);
    bind_int(coll, 4, c.nranks);
    bind_int(coll, 5, static_cast<int64_t>(c.seq));
    const int crc = sqlite3_step(coll);
    sqlite3_reset(coll);
    if (crc != SQLITE_DONE) fail(sqlite_error("inserting a collective into " + path_));
  }

  end_batch_rows(1);
}

Result<void> SqliteWriter::write_session(const Session& session) {
  if (Result<void> r = exec("BEGIN"); !r.ok()) return r;

  // Processes: all the session knows, plus any seen only in calls.
  std::map<uint32_t, std::map<uint32_t, std::optional<std::string>>> threads;
  for (const auto& [pid, info] : session.processes) {
    auto& tids = threads[pid];
    for (const auto& [tid, name] : info.threads) tids[tid] = name;
  }
  for (const uint64_t key : threads_seen_) {
    threads[static_cast<uint32_t>(key >> 32)].try_emplace(static_cast<uint32_t>(key), std::nullopt);
  }

  sqlite3_stmt* raw = nullptr;
  if (Result<void> r = prepare(session_table("processes").insert_sql().c_str(), &raw); !r.ok()) {
    return r;
  }
  Stmt insert(raw);
  for (const auto& [pid, tids] : threads) {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);  // unknown processes: everything but pid NULL
    bind_int(stmt, 1, pid);
    if (const ProcessInfo* info = session.find_process(pid)) {
      bind_nonzero(stmt, 2, info->ppid);
      bind_text_or_null(stmt, 3, info->comm);
      bind_text(stmt, 4, to_json(nlohmann::ordered_json(info->cmdline)));
      bind_optional(stmt, 5, info->rank);
      bind_nonzero(stmt, 6, info->start_ns);
      bind_nonzero(stmt, 7, info->end_ns);
      if (info->exit) {
        bind_optional(stmt, 8, info->exit->code);
        bind_optional(stmt, 9, info->exit->signal);
        bind_int(stmt, 10, info->exit->core_dumped ? 1 : 0);
        bind_text_or_null(stmt, 11, info->exit->cause);
      }
      bind_text(stmt, 12, process_role(session, *info));
    }
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting processes");
  }

  if (Result<void> r = prepare(session_table("threads").insert_sql().c_str(), &raw); !r.ok()) {
    return r;
  }
  insert.reset(raw);
  for (const auto& [pid, tids] : threads) {
    for (const auto& [tid, name] : tids) {
      sqlite3_stmt* stmt = insert.get();
      sqlite3_reset(stmt);
      bind_int(stmt, 1, pid);
      bind_int(stmt, 2, tid);
      if (name) {
        bind_text(stmt, 3, *name);
      } else {
        sqlite3_bind_null(stmt, 3);
      }
      if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting threads");
    }
  }

  if (Result<void> r = prepare(session_table("device_memory").insert_sql().c_str(), &raw);
      !r.ok()) {
    return r;
  }
  insert.reset(raw);
  for (const auto& [pid, memory] : session.device_memory) {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    bind_int(stmt, 1, pid);
    bind_int(stmt, 2, memory.outstanding_bytes);
    bind_int(stmt, 3, memory.peak_bytes);
    bind_int(stmt, 4, static_cast<int64_t>(memory.unmatched_frees));
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting device memory");
  }

  if (Result<void> r = prepare(session_table("layers").insert_sql().c_str(), &raw); !r.ok()) {
    return r;
  }
  insert.reset(raw);
  for (const auto& [layer, state] : session.layers) {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    bind_text(stmt, 1, layer_name(layer));
    bind_text(stmt, 2, layer_status_name(state.status));
    bind_text_or_null(stmt, 3, state.reason);
    bind_text(stmt, 4, to_json(nlohmann::ordered_json(state.libraries)));
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting layers");
  }

  if (Result<void> r = write_os_events(session); !r.ok()) return r;
  if (Result<void> r = write_python(session); !r.ok()) return r;
  if (Result<void> r = write_kernels(session); !r.ok()) return r;

  if (Result<void> r = prepare(session_table("meta").insert_sql("INSERT OR REPLACE").c_str(), &raw);
      !r.ok()) {
    return r;
  }
  insert.reset(raw);
  std::string version = session.version;
#ifdef EACGM_VERSION
  if (version.empty()) version = EACGM_VERSION;
#endif
  const std::vector<std::pair<std::string_view, std::optional<std::string>>> meta = {
      {meta_key::kSchemaVersion, std::to_string(kSessionSchemaVersion)},
      {"version", version},
      {"command", to_json(nlohmann::ordered_json(session.command))},
      {"attached_pids", to_json(nlohmann::ordered_json(session.attached_pids))},
      {"exit_code",
       session.exit_code ? std::optional(std::to_string(*session.exit_code)) : std::nullopt},
      {"start_ns", std::to_string(session.start_ns)},
      {"end_ns", std::to_string(session.end_ns)},
      {"realtime_offset_ns", std::to_string(session.realtime_offset_ns)},
      {"events_recorded", std::to_string(session.events_recorded)},
      {"events_dropped", std::to_string(session.events_dropped)},
      {"interrupted", session.interrupted ? "1" : "0"},
      {"calls_written", std::to_string(calls_written_)},
  };
  for (const auto& [key, value] : meta) {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    bind_text(stmt, 1, key);
    if (value) {
      bind_text(stmt, 2, *value);
    } else {
      sqlite3_bind_null(stmt, 2);
    }
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting meta");
  }
  insert.reset();
  return exec("COMMIT");
}

// The os layer's findings, one row each: signals, OOM kills, each process's
// MAP_POPULATE summary, and the ioctls over the slow threshold. Rare by
// nature (mmap calls themselves are summarized, not stored).
// Every kernel launched, by name (unnamed launches under ''), with its figures.
Result<void> SqliteWriter::write_kernels(const Session& session) {
  sqlite3_stmt* raw = nullptr;
  if (Result<void> r = prepare(session_table("kernels").insert_sql().c_str(), &raw); !r.ok()) {
    return r;
  }
  Stmt insert(raw);
  for (const auto& [id, k] : session.kernels.stats()) {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    bind_text(stmt, 1, layer_name(id.first));
    bind_text(stmt, 2, id.second);
    bind_text(stmt, 3, demangled_kernel_name(id.second));
    bind_int(stmt, 4, static_cast<int64_t>(k.launches));
    bind_int(stmt, 5, static_cast<int64_t>(k.errors));
    bind_int(stmt, 6, static_cast<int64_t>(k.total_ns));
    bind_int(stmt, 7, static_cast<int64_t>(k.percentile_ns(50)));
    bind_int(stmt, 8, static_cast<int64_t>(k.percentile_ns(99)));
    bind_text(stmt, 9, to_json(nlohmann::ordered_json(k.shapes)));
    bind_text(stmt, 10, to_json(nlohmann::ordered_json(k.sites)));
    bind_text(stmt, 11, to_json(nlohmann::ordered_json(k.torch_ops)));
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting kernels");
  }
  return {};
}

Result<void> SqliteWriter::write_python(const Session& session) {
  auto layer = session.layers.find(Layer::kPython);
  if (layer == session.layers.end()) return {};
  sqlite3_stmt* raw = nullptr;
  if (Result<void> r = prepare(session_table("python_functions").insert_sql().c_str(), &raw);
      !r.ok()) {
    return r;
  }
  Stmt insert(raw);
  const nlohmann::json functions = layer->second.extra.value("functions", nlohmann::json::object());
  for (const auto& [name, f] : functions.items()) {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    bind_text(stmt, 1, name);
    bind_text(stmt, 2, f.value("file", ""));
    bind_int(stmt, 3, f.value("first_line", 0));
    if (f.contains("count")) bind_int(stmt, 4, f["count"].get<int64_t>());
    bind_int(stmt, 5, f.value("samples", int64_t{0}));
    bind_int(stmt, 6, f.value("total_ns", int64_t{0}));
    bind_int(stmt, 7, f.value("self_ns", int64_t{0}));
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting python functions");
  }
  if (Result<void> r = prepare(session_table("python_gc").insert_sql().c_str(), &raw); !r.ok()) {
    return r;
  }
  insert.reset(raw);
  for (const PyGcEvent& gc : session.python_gc) {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    bind_int(stmt, 1, gc.pid);
    bind_int(stmt, 2, gc.tid);
    bind_int(stmt, 3, static_cast<int64_t>(gc.ts_ns));
    bind_int(stmt, 4, static_cast<int64_t>(gc.duration_ns));
    bind_int(stmt, 5, gc.generation);
    bind_int(stmt, 6, gc.collected);
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting python gc");
  }
  return {};
}

Result<void> SqliteWriter::write_os_events(const Session& session) {
  sqlite3_stmt* raw = nullptr;
  if (Result<void> r = prepare(session_table("os_events").insert_sql().c_str(), &raw); !r.ok()) {
    return r;
  }
  Stmt insert(raw);
  const OsActivity& os = session.os;
  auto row = [&](uint32_t pid, std::optional<uint32_t> tid, std::string_view kind,
                 std::optional<uint64_t> ts_ns, std::string_view name, int64_t value,
                 const nlohmann::ordered_json& detail) -> Result<void> {
    sqlite3_stmt* stmt = insert.get();
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    bind_int(stmt, 1, pid);
    bind_optional(stmt, 2, tid);
    bind_text(stmt, 3, kind);
    bind_optional(stmt, 4, ts_ns);
    bind_text_or_null(stmt, 5, name);
    bind_int(stmt, 6, value);
    bind_text(stmt, 7, to_json(detail));
    if (sqlite3_step(stmt) != SQLITE_DONE) return sqlite_error("inserting os events");
    return {};
  };
  auto device = [&os](uint32_t rdev) {
    auto it = os.devices.find(rdev);
    return it != os.devices.end() ? it->second : device_number(rdev);
  };
  for (const SignalEvent& e : os.signals) {
    nlohmann::ordered_json detail = {{"code", e.code},
                                     {"result", e.result},
                                     {"group", e.group},
                                     {"sender_pid", e.sender_pid},
                                     {"sender_tid", e.sender_tid},
                                     {"sender_comm", e.sender_comm},
                                     {"sent_by_process", e.sent_by_process()}};
    if (Result<void> r = row(e.pid, e.tid, "signal", e.ts_ns, signal_name(e.sig), e.sig, detail);
        !r.ok()) {
      return r;
    }
  }
  for (const OomKillEvent& e : os.oom_kills) {
    nlohmann::ordered_json detail = {{"comm", e.comm},
                                     {"anon_rss_bytes", e.anon_rss_bytes},
                                     {"file_rss_bytes", e.file_rss_bytes},
                                     {"shmem_rss_bytes", e.shmem_rss_bytes},
                                     {"total_vm_bytes", e.total_vm_bytes},
                                     {"cgroup_version", e.cgroup_v1 ? 1 : 2},
                                     {"oom_score_adj", e.oom_score_adj},
                                     {"killer_pid", e.killer_pid},
                                     {"killer_comm", e.killer_comm}};
    if (Result<void> r = row(e.pid, e.tid, "oom_kill", e.ts_ns, e.cgroup,
                             static_cast<int64_t>(e.anon_rss_bytes), detail);
        !r.ok()) {
      return r;
    }
  }
  for (const auto& [pid, st] : os.mmap) {
    if (st.populate.count == 0) continue;
    nlohmann::ordered_json detail = {{"bytes", st.populate.bytes},
                                     {"peak_per_s", st.populate.peak_per_s},
                                     {"peak_at_ns", st.populate.peak_at_ns},
                                     {"mmaps", st.mmaps},
                                     {"munmaps", st.munmaps}};
    if (Result<void> r = row(pid, std::nullopt, "mmap_populate", std::nullopt, "MAP_POPULATE",
                             static_cast<int64_t>(st.populate.count), detail);
        !r.ok()) {
      return r;
    }
  }
  for (const IoctlEvent& e : os.slow_ioctls) {
    nlohmann::ordered_json detail = {
        {"request", e.request}, {"fd", e.fd}, {"ret", e.ret}, {"rdev", device_number(e.rdev)}};
    if (Result<void> r = row(e.pid, e.tid, "slow_ioctl", e.ts_ns, device(e.rdev),
                             static_cast<int64_t>(e.duration_ns), detail);
        !r.ok()) {
      return r;
    }
  }
  return {};
}

bool SqliteWriter::begin_batch() {
  if (in_transaction_) return true;
  if (Result<void> r = exec("BEGIN"); !r.ok()) {
    fail(Error{"starting a transaction: " + r.error().message});
    return false;
  }
  in_transaction_ = true;
  batch_started_ = std::chrono::steady_clock::now();
  return true;
}

void SqliteWriter::end_batch_rows(size_t rows) {
  batch_rows_ += rows;
  if (batch_rows_ >= kBatchRows ||
      std::chrono::steady_clock::now() - batch_started_ >= kBatchInterval) {
    if (Result<void> r = commit_batch(); !r.ok()) fail(r.error());
  }
}

void SqliteWriter::on_gpu_sample(const GpuSample& sample) {
  if (finished_ || !gpu_ || !error_.empty() || !begin_batch()) return;
  Result<size_t> rows = gpu_->insert(sample);
  if (!rows) {
    fail(Error{rows.error().message + " into " + path_});
    return;
  }
  end_batch_rows(*rows);
}

void SqliteWriter::on_gpu_event(const GpuEvent& event) {
  if (finished_ || !gpu_ || !error_.empty() || !begin_batch()) return;
  Result<size_t> rows = gpu_->insert(event);
  if (!rows) {
    fail(Error{rows.error().message + " into " + path_});
    return;
  }
  end_batch_rows(*rows);
}

Result<void> SqliteWriter::finish(const Session& session) {
  if (finished_) return Error{"SQLite database " + path_ + " was already finished"};
  finished_ = true;
  if (Result<void> r = commit_batch(); !r.ok()) fail(r.error());
  // The session tables are written even after a failed insert: best effort.
  if (Result<void> r = write_session(session); !r.ok()) {
    fail(Error{"writing session tables: " + r.error().message});
    (void)exec("ROLLBACK");  // may fail when nothing is open; nothing else to do then
  }
  if (gpu_) {
    Result<void> r = exec("BEGIN");
    if (r.ok()) r = gpu_->write_devices(session);
    if (r.ok()) r = exec("COMMIT");
    if (!r.ok()) {
      fail(Error{"writing gpu_devices: " + r.error().message});
      (void)exec("ROLLBACK");
    }
    gpu_.reset();
  }
  if (Result<void> r = exec(session_index_sql()); !r.ok()) {
    fail(Error{"creating indexes: " + r.error().message});
  }
  if (Result<void> r = exec("PRAGMA journal_mode=DELETE"); !r.ok()) {
    fail(Error{"checkpointing: " + r.error().message});
  }
  if (!error_.empty()) {
    // What the file holds: rows of a transaction that a failure ended are not in it.
    if (!sqlite3_get_autocommit(db_)) (void)exec("ROLLBACK");
    sqlite3_stmt* count = nullptr;
    if (sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM calls", -1, &count, nullptr) == SQLITE_OK &&
        sqlite3_step(count) == SQLITE_ROW) {
      calls_in_db_ = static_cast<uint64_t>(sqlite3_column_int64(count, 0));
    }
    sqlite3_finalize(count);
  }
  sqlite3_finalize(insert_call_);
  insert_call_ = nullptr;
  sqlite3_finalize(insert_collective_);
  insert_collective_ = nullptr;
  if (sqlite3_close(db_) != SQLITE_OK) fail(sqlite_error("closing"));
  db_ = nullptr;
  if (!error_.empty()) {
    std::string message = "SQLite database " + path_ + " incomplete: " + error_;
    if (const uint64_t lost = losses().front().calls_lost; lost > 0) {
      message += " (" + std::to_string(lost) + " calls not written)";
    }
    return Error{message};
  }
  return {};
}

std::vector<OutputLoss> SqliteWriter::losses() const {
  if (error_.empty()) return {};
  // Without a count (the database cannot even be read), the calls that met the error.
  const uint64_t stored = calls_in_db_.value_or(calls_given_ - std::min(calls_given_, calls_lost_));
  return {{.output = std::filesystem::path(path_).filename().string(),
           .calls = calls_given_,
           .calls_lost = calls_given_ - std::min(calls_given_, stored),
           .error = error_}};
}

}  // namespace eacgm
