// SqliteWriter: rows are read back through sqlite3's own API and compared
// exactly. The 1M-call insert measurement prints a line; it asserts nothing
// about speed (machines differ), only that every row arrived.
#include "sinks/sqlite_writer.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "session/session_schema.h"
#include "test_support.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const ProbeSpec kMalloc{
    .symbol = "cudaMalloc",
    .layer = Layer::kCuda,
    .args = {{"devPtr", kRdi, ArgFormat::kOutPointer}, {"size", kRsi, ArgFormat::kSize}},
    .bytes_slot = kRsi,
    .out_slot = kRdi,
    .memory = MemoryEffect::kDeviceAlloc};
const ProbeSpec kMemcpy{.symbol = "cudaMemcpy",
                        .layer = Layer::kCuda,
                        .args = {{"dst", kRdi, ArgFormat::kPointer},
                                 {"src", kRsi, ArgFormat::kPointer},
                                 {"count", kRdx, ArgFormat::kSize},
                                 {"kind", kRcx, ArgFormat::kMemcpyKind}},
                        .bytes_slot = kRdx};
const ProbeSpec kMemset{.symbol = "cudaMemset",
                        .layer = Layer::kCuda,
                        .args = {{"devPtr", kRdi, ArgFormat::kPointer},
                                 {"value", kRsi, ArgFormat::kInt},
                                 {"count", kRdx, ArgFormat::kSize}},
                        .bytes_slot = kRdx};
const ProbeSpec kAllReduce{.symbol = "ncclAllReduce",
                           .layer = Layer::kNccl,
                           .args = {{"count", kRdx, ArgFormat::kSize}},
                           .bytes_slot = kRdx};
const ProbeSpec kMm{
    .symbol = "aten::mm", .layer = Layer::kTorch, .args = {}, .returns_status = false};

CallRecord make_call(uint32_t pid, uint32_t tid, const ProbeSpec& spec, uint64_t start,
                     uint64_t duration, uint32_t depth, RawCall raw = {}) {
  CallRecord call;
  call.pid = pid;
  call.tid = tid;
  call.spec = &spec;
  call.start_ns = start;
  call.duration_ns = duration;
  call.depth = depth;
  call.raw = raw;
  return call;
}

// A value read back from a row: NULL, an integer or text.
struct Value {
  int type = SQLITE_NULL;
  int64_t integer = 0;
  std::string text;

  bool operator==(const Value& o) const {
    return type == o.type && integer == o.integer && text == o.text;
  }
};
Value null_value() { return {}; }
Value int_value(int64_t v) { return {SQLITE_INTEGER, v, {}}; }
Value text_value(std::string v) { return {SQLITE_TEXT, 0, std::move(v)}; }

void PrintTo(const Value& v, std::ostream* os) {
  if (v.type == SQLITE_NULL) *os << "NULL";
  if (v.type == SQLITE_INTEGER) *os << v.integer;
  if (v.type == SQLITE_TEXT) *os << '\'' << v.text << '\'';
}

class Db {
 public:
  explicit Db(const fs::path& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  }
  ~Db() { sqlite3_close(db_); }

  std::vector<std::vector<Value>> query(const std::string& sql) {
    std::vector<std::vector<Value>> rows;
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    while (stmt != nullptr && sqlite3_step(stmt) == SQLITE_ROW) {
      std::vector<Value> row;
      for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
        Value v;
        v.type = sqlite3_column_type(stmt, i);
        if (v.type == SQLITE_INTEGER) v.integer = sqlite3_column_int64(stmt, i);
        if (v.type == SQLITE_TEXT) {
          v.text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
        }
        row.push_back(v);
      }
      rows.push_back(row);
    }
    sqlite3_finalize(stmt);
    return rows;
  }

  Value scalar(const std::string& sql) {
    auto rows = query(sql);
    EXPECT_EQ(rows.size(), 1u) << sql;
    return rows.empty() || rows[0].empty() ? Value{} : rows[0][0];
  }

 private:
  sqlite3* db_ = nullptr;
};

struct Fixture {
  Session session;
  std::vector<CallRecord> calls;

  Fixture() {
    session.version = "9.9.9-test";
    session.command = {"python", "train.py", "--lr=0.1"};
    session.exit_code = 3;
    session.start_ns = 1000;
    session.end_ns = 99000;
    session.realtime_offset_ns = 1'700'000'000'123'456'789;
    session.events_recorded = 12345;
    session.events_dropped = 7;
    session.interrupted = true;

    ProcessInfo& a = session.process(100);
    a.ppid = 1;
    a.comm = "python";
    a.cmdline = {"python", "train.py", "--lr=0.1"};
    a.rank = 1;
    a.start_ns = 1000;
    a.end_ns = 90000;
    a.exit = ProcessExit{.code = std::nullopt,
                         .signal = 9,
                         .core_dumped = false,
                         .cause = "killed by SIGKILL (OOM killer)",
                         .sender = std::nullopt};
    a.threads = {{100, "python"}, {101, "pt_worker"}};
    ProcessInfo& b = session.process(200);
    b.comm = "torchrun";
    b.cmdline = {"torchrun"};
    b.threads = {{200, "torchrun"}};

    session.device_memory[100].outstanding_bytes = 1 << 20;
    session.device_memory[100].peak_bytes = 3 << 20;
    session.device_memory[100].unmatched_frees = 2;
    session.layers[Layer::kCuda] = LayerState{.status = LayerStatus::kActive,
                                              .reason = "",
                                              .libraries = {"/usr/lib/libcudart.so.13"},
                                              .calls = {}};
    session.layers[Layer::kNccl] = LayerState{.status = LayerStatus::kUnavailable,
                                              .reason = "libnccl.so.2 not found",
                                              .libraries = {},
                                              .calls = {}};

    RawCall malloc_ok;
    malloc_ok.args = {0x7ffd12345678, 1 << 20};
    malloc_ok.out_value = 0x7f0000200000;
    RawCall malloc_failed;
    malloc_failed.args = {0x7ffd12345678, 4096};
    malloc_failed.ret = 35;
    RawCall memcpy_raw;
    memcpy_raw.args = {0x7f0000200000, 0x5555aaaa0000, 512, 1};
    RawCall memset_raw;
    memset_raw.args = {0x7f0000200000, static_cast<uint64_t>(-1), 64};
    RawCall nccl_failed;
    nccl_failed.args = {0, 0, 1024};
    nccl_failed.ret = 2;

    calls.push_back(make_call(100, 100, kMalloc, 2000, 150, 0, malloc_ok));
    calls.push_back(make_call(100, 101, kMalloc, 2100, 40, 0, malloc_failed));
    calls.push_back(make_call(100, 100, kMemcpy, 3000, 900, 1, memcpy_raw));
    calls.push_back(make_call(200, 200, kMemset, 3100, 10, 0, memset_raw));
    calls.push_back(make_call(200, 200, kAllReduce, 3200, 77, 0, nccl_failed));
    calls.push_back(make_call(300, 301, kMm, 4000, 5, 0));  // process known only from a call
  }
};

TEST(SqliteWriter, WritesCallsSessionAndMeta) {
  TempDir dir;
  const fs::path path = dir.path() / "events.sqlite";
  auto writer = SqliteWriter::open(path.string());
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  Fixture f;
  for (const CallRecord& call : f.calls) (*writer)->on_call(call);
  Result<void> done = (*writer)->finish(f.session);
  ASSERT_TRUE(done.ok()) << done.error().message;

  // One self-contained file: no WAL left behind, back in rollback mode.
  EXPECT_FALSE(fs::exists(path.string() + "-wal"));
  Db db(path);
  EXPECT_EQ(db.scalar("PRAGMA journal_mode"), text_value("delete"));

  const auto calls = db.query(
      "SELECT id, pid, tid, layer, name, start_ns, duration_ns, ret, error, bytes, depth "
      "FROM calls ORDER BY id");
  const std::vector<std::vector<Value>> expected = {
      {int_value(1), int_value(100), int_value(100), text_value("cuda"), text_value("cudaMalloc"),
       int_value(2000), int_value(150), int_value(0), null_value(), int_value(1 << 20),
       int_value(0)},
      {int_value(2), int_value(100), int_value(101), text_value("cuda"), text_value("cudaMalloc"),
       int_value(2100), int_value(40), int_value(35), text_value("cudaErrorInsufficientDriver"),
       int_value(0), int_value(0)},
      {int_value(3), int_value(100), int_value(100), text_value("cuda"), text_value("cudaMemcpy"),
       int_value(3000), int_value(900), int_value(0), null_value(), int_value(512), int_value(1)},
      {int_value(4), int_value(200), int_value(200), text_value("cuda"), text_value("cudaMemset"),
       int_value(3100), int_value(10), int_value(0), null_value(), int_value(64), int_value(0)},
      {int_value(5), int_value(200), int_value(200), text_value("nccl"),
       text_value("ncclAllReduce"), int_value(3200), int_value(77), int_value(2),
       text_value("ncclSystemError"), int_value(0), int_value(0)},
      {int_value(6), int_value(300), int_value(301), text_value("torch"), text_value("aten::mm"),
       int_value(4000), int_value(5), int_value(0), null_value(), int_value(0), int_value(0)},
  };
  EXPECT_EQ(calls, expected);

  // Arguments: numbers as JSON numbers, everything else as the decoded text,
  // in the probe table's order.
  auto args = [&](int id) {
    return json::parse(db.scalar("SELECT args FROM calls WHERE id = " + std::to_string(id)).text);
  };
  const std::vector<DecodedArg> malloc_args = decode_args(kMalloc, f.calls[0].raw);
  EXPECT_EQ(args(1),
            json::parse(R"({"devPtr": ")" + malloc_args[0].text + R"(", "size": 1048576})"));
  EXPECT_EQ(malloc_args[0].text, "0x7f0000200000");  // the pointer cudaMalloc returned
  const json memcpy_args = args(3);
  EXPECT_EQ(memcpy_args["dst"], "0x7f0000200000");
  EXPECT_EQ(memcpy_args["src"], "0x5555aaaa0000");
  EXPECT_EQ(memcpy_args["count"], 512);
  EXPECT_EQ(memcpy_args["kind"], "cudaMemcpyHostToDevice");
  std::vector<std::string> keys;
  const nlohmann::ordered_json ordered =
      nlohmann::ordered_json::parse(db.scalar("SELECT args FROM calls WHERE id = 3").text);
  for (auto it = ordered.begin(); it != ordered.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"dst", "src", "count", "kind"}));
  EXPECT_EQ(args(4)["value"], -1);
  EXPECT_EQ(args(6), json::object());
  // SQLite's JSON functions work on the column.
  EXPECT_EQ(db.scalar("SELECT json_extract(args, '$.count') FROM calls WHERE id = 3"),
            int_value(512));

  EXPECT_EQ(
      db.query("SELECT * FROM processes ORDER BY pid"),
      (std::vector<std::vector<Value>>{
          {int_value(100), int_value(1), text_value("python"),
           text_value(R"(["python","train.py","--lr=0.1"])"), int_value(1), int_value(1000),
           int_value(90000), null_value(), int_value(9), int_value(0),
           text_value("killed by SIGKILL (OOM killer)"), text_value("rank")},
          {int_value(200), null_value(), text_value("torchrun"), text_value(R"(["torchrun"])"),
           null_value(), null_value(), null_value(), null_value(), null_value(), null_value(),
           null_value(), text_value("main")},
          {int_value(300), null_value(), null_value(), null_value(), null_value(), null_value(),
           null_value(), null_value(), null_value(), null_value(), null_value(), null_value()},
      }));
  EXPECT_EQ(db.query("SELECT pid, tid, name FROM threads ORDER BY pid, tid"),
            (std::vector<std::vector<Value>>{
                {int_value(100), int_value(100), text_value("python")},
                {int_value(100), int_value(101), text_value("pt_worker")},
                {int_value(200), int_value(200), text_value("torchrun")},
                {int_value(300), int_value(301), null_value()},
            }));
  EXPECT_EQ(db.query("SELECT * FROM device_memory"),
            (std::vector<std::vector<Value>>{
                {int_value(100), int_value(1 << 20), int_value(3 << 20), int_value(2)}}));
  EXPECT_EQ(db.query("SELECT * FROM layers ORDER BY layer"),
            (std::vector<std::vector<Value>>{
                {text_value("cuda"), text_value("active"), null_value(),
                 text_value(R"(["/usr/lib/libcudart.so.13"])")},
                {text_value("nccl"), text_value("unavailable"),
                 text_value("libnccl.so.2 not found"), text_value("[]")},
            }));

  auto meta = [&](const std::string& key) {
    return db.scalar("SELECT value FROM meta WHERE key = '" + key + "'");
  };
  EXPECT_EQ(meta("schema_version"), text_value(std::to_string(kSessionSchemaVersion)));
  EXPECT_EQ(meta("version"), text_value("9.9.9-test"));
  EXPECT_EQ(json::parse(meta("command").text),
            json::parse(R"(["python", "train.py", "--lr=0.1"])"));
  EXPECT_EQ(meta("attached_pids"), text_value("[]"));
  EXPECT_EQ(meta("exit_code"), text_value("3"));
  EXPECT_EQ(meta("start_ns"), text_value("1000"));
  EXPECT_EQ(meta("end_ns"), text_value("99000"));
  EXPECT_EQ(meta("realtime_offset_ns"), text_value("1700000000123456789"));
  EXPECT_EQ(meta("events_recorded"), text_value("12345"));
  EXPECT_EQ(meta("events_dropped"), text_value("7"));
  EXPECT_EQ(meta("interrupted"), text_value("1"));
  EXPECT_EQ(meta("calls_written"), text_value("6"));

  // The documented indexes exist and the planner uses them.
  EXPECT_EQ(db.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN "
                      "('calls_by_name', 'calls_by_pid_start')"),
            int_value(2));
  const auto plan = db.query("EXPLAIN QUERY PLAN SELECT * FROM calls WHERE name = 'cudaMalloc'");
  ASSERT_FALSE(plan.empty());
  EXPECT_NE(plan[0].back().text.find("calls_by_name"), std::string::npos);
}

TEST(SqliteWriter, CommittedBatchesSurviveWithoutFinish) {
  // A crash loses at most the open batch: after kBatchRows calls a reader on
  // another connection already sees them.
  TempDir dir;
  const fs::path path = dir.path() / "events.sqlite";
  auto writer = SqliteWriter::open(path.string());
  ASSERT_TRUE(writer.ok());
  RawCall raw;
  raw.args = {0, 0, 64};
  const size_t n = SqliteWriter::kBatchRows + 5;
  for (size_t i = 0; i < n; ++i) (*writer)->on_call(make_call(1, 1, kMemset, i, 1, 0, raw));
  {
    Db db(path);
    const Value rows = db.scalar("SELECT count(*) FROM calls");
    EXPECT_GE(rows.integer, int64_t(SqliteWriter::kBatchRows));
    EXPECT_LE(rows.integer, int64_t(n));
  }
  writer->reset();  // no finish(): the destructor still commits what it has
  Db db(path);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM calls"), int_value(int64_t(n)));
}

TEST(SqliteWriter, ReplacesAnExistingDatabase) {
  TempDir dir;
  const fs::path path = dir.path() / "events.sqlite";
  Fixture f;
  for (int run = 0; run < 2; ++run) {
    auto writer = SqliteWriter::open(path.string());
    ASSERT_TRUE(writer.ok()) << writer.error().message;
    for (const CallRecord& call : f.calls) (*writer)->on_call(call);
    ASSERT_TRUE((*writer)->finish(f.session).ok());
    EXPECT_FALSE((*writer)->finish(f.session).ok());
  }
  Db db(path);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM calls"), int_value(int64_t(f.calls.size())));
}

TEST(SqliteWriter, OpenFailsOnUnwritablePath) {
  TempDir dir;
  const fs::path file = dir.path() / "not-a-directory";
  std::ofstream(file) << "x";
  const std::string path = (file / "events.sqlite").string();
  auto writer = SqliteWriter::open(path);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.error().message.find(path), std::string::npos) << writer.error().message;

  const std::string missing = (dir.path() / "no" / "such" / "events.sqlite").string();
  auto writer2 = SqliteWriter::open(missing);
  ASSERT_FALSE(writer2.ok());
  EXPECT_NE(writer2.error().message.find(missing), std::string::npos);
}

TEST(SqliteWriter, DocumentedPercentileQueryMatchesSessionStatistics) {
  // The p99 query in docs/SQLITE_SCHEMA.md uses the nearest rank, like
  // CallStats::percentile_ns and summary.json.
  TempDir dir;
  const fs::path path = dir.path() / "events.sqlite";
  auto writer = SqliteWriter::open(path.string());
  ASSERT_TRUE(writer.ok());
  std::map<uint32_t, Session> per_pid;
  uint64_t seed = 12345;
  for (int i = 0; i < 1013; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t pid = 100 + i % 3;
    CallRecord call = make_call(pid, pid, kMemcpy, 1000 + i * 100, (seed >> 33) % 100000, 0);
    (*writer)->on_call(call);
    per_pid[pid].add_call(call);
  }
  ASSERT_TRUE((*writer)->finish(Session{}).ok());
  Db db(path);
  const auto rows = db.query(R"sql(
    WITH d AS (
      SELECT pid, duration_ns,
             ROW_NUMBER() OVER (PARTITION BY pid ORDER BY duration_ns) AS rn,
             COUNT(*) OVER (PARTITION BY pid) AS n
      FROM calls WHERE name = 'cudaMemcpy')
    SELECT pid, MIN(duration_ns) AS p99_ns
    FROM d WHERE rn >= (99 * n + 99) / 100
    GROUP BY pid ORDER BY pid)sql");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    const CallStats& stats =
        per_pid.at(uint32_t(row[0].integer)).layers.at(Layer::kCuda).calls.at("cudaMemcpy");
    EXPECT_EQ(row[1], int_value(int64_t(stats.percentile_ns(99)))) << "pid " << row[0].integer;
  }
}

TEST(SqliteWriter, InsertsOneMillionCalls) {
  TempDir dir;
  const fs::path path = dir.path() / "events.sqlite";
  auto writer = SqliteWriter::open(path.string());
  ASSERT_TRUE(writer.ok());
  const size_t kCalls = 1'000'000;
  RawCall raw;
  raw.args = {0x7f0000200000, 0x5555aaaa0000, 4096, 1};
  CallRecord call = make_call(42, 43, kMemcpy, 0, 1000, 0, raw);

  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kCalls; ++i) {
    call.start_ns = 1'000'000 + i * 2000;
    call.duration_ns = 1000 + i % 977;
    (*writer)->on_call(call);
  }
  const auto t1 = std::chrono::steady_clock::now();
  Session session;
  ASSERT_TRUE((*writer)->finish(session).ok());
  const auto t2 = std::chrono::steady_clock::now();
  using ms = std::chrono::duration<double, std::milli>;
  std::printf(
      "[   INFO   ] SqliteWriter: %zu calls inserted in %.0f ms (%.2f us/call), "
      "finish (indexes, checkpoint) %.0f ms, file %.1f MiB\n",
      kCalls, ms(t1 - t0).count(), ms(t1 - t0).count() * 1000.0 / kCalls, ms(t2 - t1).count(),
      fs::file_size(path) / 1048576.0);

  Db db(path);
  EXPECT_EQ(db.scalar("SELECT count(*) FROM calls"), int_value(int64_t(kCalls)));
}

}  // namespace
}  // namespace eacgm
