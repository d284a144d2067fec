// The session model: statistics, device memory bookkeeping, and the
// summary.json contract built from them.
#include "session/session.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "probe_row.h"
#include "sinks/summary.h"
#include "test_support.h"

namespace eacgm {
namespace {

CallRecord call(std::string_view symbol, uint32_t pid, uint64_t dur, uint64_t a0, uint64_t a1,
                uint64_t out = 0, int64_t ret = 0) {
  CallRecord c;
  c.pid = pid;
  c.tid = pid;
  c.spec = &cuda_row(symbol);
  c.duration_ns = dur;
  c.raw.args[0] = a0;
  c.raw.args[1] = a1;
  c.raw.out_value = out;
  c.raw.ret = ret;
  return c;
}

TEST(CallStats, NearestRankPercentiles) {
  CallStats s;
  for (uint64_t i = 1; i <= 100; ++i) s.durations_ns.push_back(i);
  EXPECT_EQ(s.percentile_ns(50), 50u);
  EXPECT_EQ(s.percentile_ns(99), 99u);
  EXPECT_EQ(s.percentile_ns(100), 100u);
  EXPECT_EQ(s.percentile_ns(0), 1u);
  EXPECT_EQ(CallStats{}.percentile_ns(50), 0u);
}

TEST(Session, DeviceMemoryMatchesFreesToAllocationsByPointer) {
  Session s;
  s.add_call(call("cudaMalloc", 7, 10, 0x100, 1000, 0xA000));
  s.add_call(call("cudaMalloc", 7, 10, 0x100, 500, 0xB000));
  s.add_call(call("cudaFree", 7, 10, 0xA000, 0));
  s.add_call(call("cudaFree", 7, 10, 0xDEAD, 0));                  // allocated before tracing began
  s.add_call(call("cudaFree", 7, 10, 0, 0));                       // cudaFree(nullptr): no-op
  s.add_call(call("cudaMalloc", 7, 10, 0x100, 9999, 0, 2));        // failed: allocates nothing
  s.add_call(call("cudaMallocHost", 7, 10, 0x100, 4096, 0xC000));  // host memory: not device
  const DeviceMemory& m = s.device_memory.at(7);
  EXPECT_EQ(m.outstanding_bytes, 500);
  EXPECT_EQ(m.peak_bytes, 1500);
  EXPECT_EQ(m.unmatched_frees, 1u);
  const CallStats& malloc_stats = s.layers[Layer::kCuda].calls["cudaMalloc"];
  EXPECT_EQ(malloc_stats.count, 3u);
  EXPECT_EQ(malloc_stats.errors, 1u);
  EXPECT_EQ(malloc_stats.bytes, 1500u);
  EXPECT_EQ(malloc_stats.errors_by_code.at(2), 1u);
}

TEST(Summary, FollowsTheContract) {
  Session s;
  s.version = "1.0";
  s.command = {"python", "train.py"};
  s.exit_code = 0;
  s.start_ns = 1'000'000'000;
  s.end_ns = 2'500'000'000;
  s.events_recorded = 3;
  s.events_dropped = 1;
  ProcessInfo& p = s.process(42);
  p.comm = "python";
  p.rank = 1;
  p.exit = ProcessExit{.code = 0,
                       .signal = std::nullopt,
                       .core_dumped = false,
                       .cause = "exited normally",
                       .sender = std::nullopt};
  s.layers[Layer::kCuda].status = LayerStatus::kActive;
  s.add_call(call("cudaMalloc", 42, 100, 0x1, 64, 0xA0));
  s.add_call(call("cudaMalloc", 42, 300, 0x1, 64, 0, 2));
  s.add_call(call("cudaMemcpy", 42, 200, 0xA0, 0x1));

  const nlohmann::json j = summary_json(s);
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_EQ(j["command"], nlohmann::json({"python", "train.py"}));
  EXPECT_EQ(j["exit_code"], 0);
  EXPECT_DOUBLE_EQ(j["duration_s"].get<double>(), 1.5);
  EXPECT_EQ(j["events"]["recorded"], 3);
  EXPECT_EQ(j["events"]["dropped"], 1);
  EXPECT_EQ(j["processes"][0]["pid"], 42);
  EXPECT_EQ(j["processes"][0]["rank"], 1);
  EXPECT_EQ(j["processes"][0]["exit"]["code"], 0);
  EXPECT_TRUE(j["processes"][0]["exit"]["signal"].is_null());
  const auto& m = j["layers"]["cuda"]["calls"]["cudaMalloc"];
  EXPECT_EQ(j["layers"]["cuda"]["status"], "active");
  EXPECT_EQ(m["count"], 2);
  EXPECT_EQ(m["errors"], 1);
  EXPECT_EQ(m["total_ns"], 400);
  EXPECT_EQ(m["p50_ns"], 100);
  EXPECT_EQ(m["p99_ns"], 300);
  EXPECT_EQ(m["bytes"], 64);
  EXPECT_EQ(m["errors_by_code"]["cudaErrorMemoryAllocation"], 1);
  EXPECT_EQ(j["memory"]["outstanding_device_bytes"]["42"], 64);
  EXPECT_TRUE(j["anomalies"].is_array());

  const std::string report = text_report(s);
  EXPECT_NE(report.find("cudaMalloc"), std::string::npos);
  EXPECT_NE(report.find("cudaErrorMemoryAllocation"), std::string::npos);
  EXPECT_NE(report.find("1 events were lost"), std::string::npos);
}

// Names read from a target's memory need not be UTF-8 (a Python walker that read a string in the
// middle of being freed: b'\xe0y\x94:?'). nlohmann's plain dump() throws on them, which once
// aborted `record` at the end with no summary.json; the invalid bytes must become U+FFFD.
TEST(Summary, IsWrittenWhateverBytesTheTargetsNamesHold) {
  Session s;
  s.version = "1.0";
  s.command = {"python3", "train\xff.py"};
  ProcessInfo& p = s.process(7);
  p.comm = "py\xe0y";
  s.layers[Layer::kPython].status = LayerStatus::kActive;
  s.layers[Layer::kPython].extra["functions"]["b'\xe0y\x94:?'"] = {{"file", "\x94.py"},
                                                                   {"samples", 3}};
  TempDir dir("eacgm-summary");
  const std::string path = (dir.path() / "summary.json").string();
  ASSERT_TRUE(write_summary(s, path)) << "write_summary failed";

  const nlohmann::json j = nlohmann::json::parse(read_bytes(path));  // valid UTF-8, or this throws
  const std::string replacement = "\xEF\xBF\xBD";                    // U+FFFD
  EXPECT_EQ(j["processes"][0]["comm"], "py" + replacement + "y");
  EXPECT_EQ(j["command"][1], "train" + replacement + ".py");
  const auto& functions = j["layers"]["python"]["functions"];
  ASSERT_EQ(functions.size(), 1u) << functions.dump();
  const auto function = functions.begin();
  EXPECT_EQ(function.key(), "b'" + replacement + "y" + replacement + ":?'");
  EXPECT_EQ(function.value()["samples"], 3);
  EXPECT_EQ(function.value()["file"], replacement + ".py");
}

// A driver layer whose calls were all made by the runtime still says what they were, most made
// first, rather than "no calls".
TEST(Summary, TheReportNamesTheDriverCallsMadeInsideRuntimeCalls) {
  Session s;
  LayerState& driver = s.layers[Layer::kDriver];
  driver.status = LayerStatus::kActive;
  driver.loaded_by_job = true;
  driver.libraries = {"/usr/lib/x86_64-linux-gnu/libcuda.so.1"};
  driver.inner_calls = {{"cuCtxSynchronize", 4}, {"cuLaunchKernel", 200}, {"cuMemAlloc_v2", 30},
                        {"cuMemFree_v2", 29},    {"cuMemcpyHtoD_v2", 8},  {"cuInit", 1}};
  const std::string report = text_report(s);
  EXPECT_NE(report.find("[driver] 1 library traced\n  272 calls made inside traced runtime calls "
                        "(counted there, not below): cuLaunchKernel 200, cuMemAlloc_v2 30, "
                        "cuMemFree_v2 29, cuMemcpyHtoD_v2 8, cuCtxSynchronize 4 and 1 more API\n"),
            std::string::npos)
      << report;
  EXPECT_EQ(report.find("no calls"), std::string::npos) << report;
}

}  // namespace
}  // namespace eacgm

namespace eacgm {
namespace {

// The roles of a job's processes, from what the recorder saw of each.
TEST(ProcessRole, MainWorkersLaunchersAndRanks) {
  Session s;
  auto add = [&s](uint32_t pid, uint32_t ppid, std::vector<std::string> cmdline) -> ProcessInfo& {
    ProcessInfo& p = s.process(pid);
    p.ppid = ppid;
    p.comm = "python3.11";
    p.cmdline = std::move(cmdline);
    return p;
  };
  // A training script (exec'd by record) and two DataLoader workers it forked.
  add(10, 1, {"python3.11", "train.py"}).execed = true;
  for (uint32_t w : {11u, 12u}) add(w, 10, {"python3.11", "train.py"}).forked = true;
  // A launcher that exec'd two ranks, one of which forked a DataLoader worker of its own.
  add(20, 1, {"python3.11", "-m", "torch.distributed.run", "train.py"}).execed = true;
  for (int r : {0, 1}) {
    ProcessInfo& rank = add(21 + static_cast<uint32_t>(r), 20, {"python3.11", "train.py"});
    rank.forked = rank.execed = true;
    rank.rank = r;
  }
  ProcessInfo& rank_worker = add(30, 21, {"python3.11", "train.py"});
  rank_worker.forked = true;
  rank_worker.rank = 0;  // inherited
  // Attached to a running job: workers known by their parent's command line.
  add(40, 1, {"python3.11", "serve.py"});
  add(41, 40, {"python3.11", "serve.py"});
  add(42, 40, {"python3.11", "other.py"});

  auto role = [&s](uint32_t pid) { return std::string(process_role(s, *s.find_process(pid))); };
  EXPECT_EQ(role(10), "main");
  EXPECT_EQ(role(11), "worker");
  EXPECT_EQ(role(12), "worker");
  EXPECT_EQ(role(20), "launcher");
  EXPECT_EQ(role(21), "rank");
  EXPECT_EQ(role(22), "rank");
  EXPECT_EQ(role(30), "worker");
  EXPECT_EQ(role(40), "main");
  EXPECT_EQ(role(41), "worker");
  EXPECT_EQ(role(42), "main");
}

}  // namespace
}  // namespace eacgm
