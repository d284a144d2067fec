// The per-API call figures of a merged session (merge/merged_layers.h): two nodes' sessions are
// written by the writers `record` uses (SqliteWriter, write_summary) and merged; each layer's call
// table must equal the one a single session that had seen every call of both nodes writes
// (summary_json), percentiles included, though neither node's own percentiles are those.
#include "merge/merged_layers.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/sqlite_handles.h"
#include "merge/session_merge.h"
#include "probe_row.h"
#include "session/session.h"
#include "session/session_database.h"
#include "session/session_schema.h"
#include "sinks/sqlite_writer.h"
#include "sinks/summary.h"
#include "test_support.h"

namespace eacgm {
namespace {

using nlohmann::json;

const ProbeSpec kMergedMm{
    .symbol = "aten::mm", .layer = Layer::kTorch, .args = {}, .returns_status = false};
const ProbeSpec kMergedAdd{
    .symbol = "aten::add", .layer = Layer::kTorch, .args = {}, .returns_status = false};
const ProbeSpec kMergedCuMemAlloc{.symbol = "cuMemAlloc_v2", .layer = Layer::kDriver, .args = {}};

CallRecord merged_call(uint32_t tid, const ProbeSpec& spec, uint64_t start, uint64_t duration,
                       uint32_t depth = 0, RawCall raw = {}, bool inner = false) {
  CallRecord c;
  c.pid = 100;  // the same pid on both nodes, as real nodes have
  c.tid = tid;
  c.spec = &spec;
  c.start_ns = start;
  c.duration_ns = duration;
  c.depth = depth;
  c.raw = raw;
  c.inner = inner;
  return c;
}

void set_layer(Session& s, Layer layer, LayerStatus status, const std::string& reason = "") {
  s.layers[layer].status = status;
  s.layers[layer].reason = reason;
}

// One node's recording: its calls as the recorder hands them to the session and the database
// (an inner call only counted by name, Recorder::on_call), and to `job`, the session of both.
class Node {
 public:
  Node(const std::string& dir, Session& job) : dir_(dir), job_(job) {
    session_.realtime_offset_ns = 1'700'000'000'000'000'000;
    session_.start_ns = 1000;
    session_.end_ns = 10 * kS;
    auto writer = SqliteWriter::open(dir + "/events.sqlite");
    EXPECT_TRUE(writer.ok()) << writer.error().message;
    if (writer.ok()) writer_ = std::move(*writer);
  }
  Session& session() { return session_; }

  void call(const CallRecord& c) {
    writer_->on_call(c);
    for (Session* s : {&session_, &job_}) {
      if (c.inner) {
        ++s->layers[c.layer()].inner_calls[std::string(c.name())];
      } else {
        s->add_call(c);
      }
    }
  }

  void finish() {
    ASSERT_TRUE(writer_->finish(session_).ok());
    ASSERT_TRUE(write_summary(session_, dir_ + "/summary.json").ok());
  }

 private:
  std::string dir_;
  Session& job_;
  Session session_;
  std::unique_ptr<SqliteWriter> writer_;
};

TEST(MergedLayers, CallFiguresEqualThoseOfOneSessionOfEveryCall) {
  TempDir tmp;
  Session job;
  const std::string a_dir = tmp.mkdirs("node-a"), b_dir = tmp.mkdirs("node-b");
  Node a(a_dir, job), b(b_dir, job);
  for (Session* s : {&a.session(), &b.session(), &job}) {
    set_layer(*s, Layer::kCuda, LayerStatus::kActive);
    set_layer(*s, Layer::kDriver, LayerStatus::kActive);
  }
  set_layer(a.session(), Layer::kTorch, LayerStatus::kActive);
  set_layer(job, Layer::kTorch, LayerStatus::kActive);
  set_layer(b.session(), Layer::kTorch, LayerStatus::kDisabled, "not asked for");
  set_layer(a.session(), Layer::kNccl, LayerStatus::kUnavailable, "libnccl.so.2 not found");
  set_layer(b.session(), Layer::kNccl, LayerStatus::kUnavailable, "no NCCL on node b");

  const ProbeSpec& memcpy = cuda_row("cudaMemcpy");
  const ProbeSpec& malloc = cuda_row("cudaMalloc");
  RawCall copy;
  copy.args = {0x7f0000200000, 0x5555aaaa0000, 4096, 1};
  // Node a's copies are fast (10..600 ns), node b's slow (1000..1390 ns): the job's p50 and
  // p99 are neither node's.
  for (uint64_t i = 1; i <= 60; ++i) a.call(merged_call(100, memcpy, i * kMs, 10 * i, 0, copy));
  for (uint64_t i = 1; i <= 40; ++i) {
    b.call(merged_call(100, memcpy, i * kMs, 1000 + 10 * i, 0, copy));
  }
  RawCall alloc;
  alloc.args = {0x7ffd12345678, kMiB};
  alloc.out_value = 0x7f0000400000;
  RawCall alloc_failed = alloc;
  alloc_failed.ret = 2;  // cudaErrorMemoryAllocation: counted, timed, no bytes
  a.call(merged_call(100, malloc, 100 * kMs, 500, 0, alloc));
  a.call(merged_call(100, cuda_row("cudaMalloc"), 200 * kMs + 10, 30, 1, {}, /*inner=*/true));
  b.call(merged_call(100, malloc, 100 * kMs, 700, 0, alloc));
  b.call(merged_call(101, malloc, 300 * kMs, 90, 0, alloc_failed));
  // The driver's allocation inside the runtime's: counted by name only.
  a.call(merged_call(100, kMergedCuMemAlloc, 100 * kMs + 10, 300, 1, {}, true));
  b.call(merged_call(100, kMergedCuMemAlloc, 100 * kMs + 10, 400, 1, {}, true));
  // Node a's torch: aten::add inside aten::mm (the child returns first), then a lone add.
  a.call(merged_call(100, kMergedAdd, 500 * kMs + 100, 200, 1));
  a.call(merged_call(100, kMergedMm, 500 * kMs, 1000, 0));
  a.call(merged_call(100, kMergedAdd, 600 * kMs, 50, 0));
  a.finish();
  b.finish();

  auto merged = merge_sessions({.sessions = {a_dir, b_dir},
                                .out_dir = (tmp.path() / "merged").string(),
                                .reference = 0,
                                .hang_timeout_s = 3.0});
  ASSERT_TRUE(merged.ok()) << merged.error().message;
  const json layers = (*merged)["layers"];
  const json expected = summary_json(job)["layers"];

  const json cuda = layers["cuda"];
  EXPECT_EQ(cuda["status"], "active");
  EXPECT_EQ(cuda["nodes"], json({"node-a", "node-b"}));
  EXPECT_EQ(cuda["calls"], expected["cuda"]["calls"]);
  const json copies = cuda["calls"]["cudaMemcpy"];
  EXPECT_EQ(copies["count"], 100);
  EXPECT_EQ(copies["bytes"], 100 * 4096);
  EXPECT_EQ(copies["p50_ns"], 500);   // the 50th of 10..600 and 1010..1400
  EXPECT_EQ(copies["p99_ns"], 1390);  // the 99th
  const json allocs = cuda["calls"]["cudaMalloc"];
  EXPECT_EQ(allocs["count"], 3);
  EXPECT_EQ(allocs["errors"], 1);
  EXPECT_EQ(allocs["bytes"], 2 * kMiB);
  EXPECT_EQ(allocs["total_ns"], 500 + 700 + 90);
  EXPECT_EQ(allocs["errors_by_code"], json({{"cudaErrorMemoryAllocation", 1}}));
  // An inner call of the cuda layer is not one of its calls (it is counted apart).
  EXPECT_EQ(cuda["inner_calls"], json({{"cudaMalloc", 1}}));

  const json driver = layers["driver"];
  EXPECT_EQ(driver["calls"], json::object());
  EXPECT_EQ(driver["inner_calls"], expected["driver"]["inner_calls"]);
  EXPECT_EQ(driver["inner_calls"], json({{"cuMemAlloc_v2", 2}}));
  EXPECT_EQ(driver["nodes"], json({"node-a", "node-b"}));

  const json torch = layers["torch"];
  EXPECT_EQ(torch["status"], "active");
  EXPECT_EQ(torch["nodes"], json({"node-a"}));
  EXPECT_EQ(torch["ops"], expected["torch"]["ops"]);
  EXPECT_EQ(torch["ops"]["aten::mm"]["self_ns"], 800);
  EXPECT_EQ(torch["ops"]["aten::add"]["self_ns"], 250);
  EXPECT_FALSE(torch.contains("calls"));

  // Active nowhere: the first node's status and reason, no call table.
  EXPECT_EQ(layers["nccl"], json({{"status", "unavailable"},
                                  {"reason", "libnccl.so.2 not found"},
                                  {"nodes", json::array()}}));
  // The rest of the merged summary is as before.
  EXPECT_EQ((*merged)["sessions"].size(), 2u);
  EXPECT_TRUE((*merged)["nccl"].contains("collectives_across_sessions"));
}

TEST(MergedLayers, ANodeWithoutSummaryCountsByItsCalls) {
  // A crashed recorder leaves calls and no summary: its layers were active all the same.
  TempDir tmp;
  Session job;
  const std::string a_dir = tmp.mkdirs("node-a"), b_dir = tmp.mkdirs("node-b");
  Node a(a_dir, job), b(b_dir, job);
  set_layer(a.session(), Layer::kCuda, LayerStatus::kActive);
  const ProbeSpec& memcpy = cuda_row("cudaMemcpy");
  a.call(merged_call(100, memcpy, kMs, 10));
  b.call(merged_call(100, memcpy, kMs, 20));
  b.call(merged_call(100, memcpy, 2 * kMs, 30));
  a.finish();
  b.finish();
  std::filesystem::remove(b_dir + "/summary.json");
  auto merged = merge_sessions({.sessions = {a_dir, b_dir},
                                .out_dir = (tmp.path() / "merged").string(),
                                .reference = 0,
                                .hang_timeout_s = 3.0});
  ASSERT_TRUE(merged.ok()) << merged.error().message;
  const json cuda = (*merged)["layers"]["cuda"];
  EXPECT_EQ(cuda["nodes"], json({"node-a", "node-b"}));
  EXPECT_EQ(cuda["calls"]["cudaMemcpy"], json({{"count", 3},
                                               {"errors", 0},
                                               {"total_ns", 60},
                                               {"p50_ns", 20},
                                               {"p99_ns", 30},
                                               {"bytes", 0}}));
}

// The merged database has every table of merged_schema(), columns in its order, whatever each
// session brings: a session of an older eacgm (a column and a table fewer) reads NULL there, and a
// newer one's extra column and table are kept.
TEST(MergedSchema, TheMergedDatabaseHasEveryTableOfTheMergedSchema) {
  TempDir tmp;
  Session job;
  const std::string a_dir = tmp.mkdirs("node-a"), b_dir = tmp.mkdirs("node-b");
  Node a(a_dir, job), b(b_dir, job);
  a.call(merged_call(100, cuda_row("cudaMalloc"), 100 * kMs, 500));
  b.call(merged_call(100, cuda_row("cudaMalloc"), 100 * kMs, 700));
  a.finish();
  b.finish();
  {
    SqliteDb older;
    ASSERT_EQ(sqlite3_open((a_dir + "/events.sqlite").c_str(), &older.db), SQLITE_OK);
    ASSERT_TRUE(
        sqlite_exec(older.db, "ALTER TABLE calls DROP COLUMN inner_call; DROP TABLE python_gc")
            .ok());
    SqliteDb newer;
    ASSERT_EQ(sqlite3_open((b_dir + "/events.sqlite").c_str(), &newer.db), SQLITE_OK);
    ASSERT_TRUE(sqlite_exec(newer.db,
                            "ALTER TABLE calls ADD COLUMN future INTEGER; UPDATE calls SET future "
                            "= 7; CREATE TABLE future_table(x INTEGER); INSERT INTO "
                            "future_table VALUES(3)")
                    .ok());
  }
  const std::string out = (tmp.path() / "merged").string();
  auto merged = merge_sessions({.sessions = {a_dir, b_dir}, .out_dir = out});
  ASSERT_TRUE(merged.ok()) << merged.error().message;

  auto opened = open_session_database(out + "/events.sqlite");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ((*opened)->schema_version, kSessionSchemaVersion);
  std::set<std::string> written, declared = {"future_table"};
  for (const auto& [table, columns] : (*opened)->tables) written.insert(table);
  for (const SchemaTable& table : merged_schema()) {
    declared.insert(table.name);
    std::vector<std::string> expected;
    if (table.name != "meta") expected = {"session", "node"};
    for (const SchemaColumn& c : session_table(table.name).columns) expected.push_back(c.name);
    if (table.name == "calls") expected.push_back("future");
    EXPECT_EQ(column_names((*opened)->handle(), table.name), expected) << table.name;
  }
  EXPECT_EQ(written, declared);
  auto calls = sqlite_rows((*opened)->handle(),
                           "SELECT session, node, inner_call, future FROM calls ORDER BY session");
  ASSERT_TRUE(calls.ok()) << calls.error().message;
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0][1], "node-a");
  EXPECT_EQ((*calls)[0][2], std::nullopt);  // the older session did not mark inner calls
  EXPECT_EQ((*calls)[0][3], std::nullopt);
  EXPECT_EQ((*calls)[1][1], "node-b");
  EXPECT_EQ((*calls)[1][2], "0");
  EXPECT_EQ((*calls)[1][3], "7");
  auto future = sqlite_rows((*opened)->handle(), "SELECT session, node, x FROM future_table");
  ASSERT_TRUE(future.ok()) << future.error().message;
  ASSERT_EQ(future->size(), 1u);
  EXPECT_EQ((*future)[0][1], "node-b");
  EXPECT_EQ((*future)[0][2], "3");
  // Both sessions' cudaMalloc is counted: the older one's NULL inner_call is an outer call.
  EXPECT_EQ((*merged)["layers"]["cuda"]["calls"]["cudaMalloc"]["count"], 2);
}

}  // namespace
}  // namespace eacgm
