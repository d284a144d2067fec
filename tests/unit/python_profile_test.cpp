// PythonProfile: per-function time from samples, slow calls, USDT counts.
#include "python/python_profile.h"

#include <gtest/gtest.h>

namespace eacgm {
namespace {

constexpr uint32_t kPid = 100;
constexpr uint64_t kMain = 0x1000, kTrain = 0x2000, kStall = 0x3000, kStep = 0x4000;
constexpr uint64_t kPeriod = 10'000'000;  // 100 Hz

PythonProfile make_profile() {
  PythonProfile p({.rate_hz = 100, .slow_call_ns = 100'000'000});
  p.add_interpreter({kPid, 311, "/usr/bin/python3.11", true});
  auto code = [&p](uint64_t addr, std::string name, uint32_t line) {
    PyCodeEvent e;
    e.pid = kPid;
    e.code = addr;
    e.name = std::move(name);
    e.file = "/job/train.py";
    e.firstlineno = line;
    p.on_code(e);
  };
  code(kMain, "<module>", 1);
  code(kTrain, "Trainer.train", 10);
  code(kStall, "Trainer.load_batch", 20);
  code(kStep, "Trainer.step", 30);
  return p;
}

PySampleEvent sample(uint64_t t_ns, std::vector<uint64_t> innermost_first, uint32_t tid = kPid,
                     bool on_cpu = false, uint64_t switches = 0) {
  PySampleEvent e;
  e.voluntary_switches = switches;
  e.pid = kPid;
  e.tid = tid;
  e.ts_ns = t_ns;
  e.on_cpu = on_cpu;
  for (uint64_t code : innermost_first) e.frames.push_back({code, 0});
  return e;
}

Session session_with(uint32_t pid) {
  Session s;
  s.process(pid).comm = "python";
  return s;
}

TEST(PythonProfile, SamplesGiveInclusiveAndSelfTimePerFunction) {
  PythonProfile p = make_profile();
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 30; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kTrain, kMain}));
  for (int i = 0; i < 10; ++i, t += kPeriod) p.on_sample(sample(t, {kTrain, kMain}));
  const auto& f = p.functions();
  EXPECT_EQ(f.at("train.py:Trainer.step").self_ns, 30 * kPeriod);
  EXPECT_EQ(f.at("train.py:Trainer.step").total_ns, 30 * kPeriod);
  EXPECT_EQ(f.at("train.py:Trainer.train").total_ns, 40 * kPeriod);
  EXPECT_EQ(f.at("train.py:Trainer.train").self_ns, 10 * kPeriod);
  EXPECT_EQ(f.at("train.py:<module>").total_ns, 40 * kPeriod);
  EXPECT_EQ(f.at("train.py:<module>").self_ns, 0u);
  EXPECT_EQ(f.at("train.py:Trainer.step").first_line, 30);
  EXPECT_EQ(f.at("train.py:Trainer.step").file, "/job/train.py");
}

TEST(PythonProfile, ATimeGapIsNotChargedBeyondTwoPeriods) {
  PythonProfile p = make_profile();
  p.on_sample(sample(1'000'000'000, {kTrain, kMain}));
  // The thread left Python for a second: the next sample stands for two periods, not 1 s.
  p.on_sample(sample(2'000'000'000, {kTrain, kMain}));
  EXPECT_EQ(p.functions().at("train.py:Trainer.train").total_ns, 3 * kPeriod);
}

TEST(PythonProfile, RecursionCountsAFunctionOncePerSample) {
  PythonProfile p = make_profile();
  p.on_sample(sample(1'000'000'000, {kStep, kStep, kStep, kMain}));
  EXPECT_EQ(p.functions().at("train.py:Trainer.step").total_ns, kPeriod);
  EXPECT_EQ(p.functions().at("train.py:Trainer.step").samples, 1u);
}

TEST(PythonProfile, AStallOnTheMainThreadIsOneSlowCall) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  // Healthy steps: the innermost frame changes every sample.
  for (int i = 0; i < 50; ++i, t += kPeriod) {
    p.on_sample(sample(t, i % 2 ? std::vector{kStep, kTrain, kMain} : std::vector{kTrain, kMain}));
  }
  EXPECT_TRUE(p.take_anomalies(s, t, false).empty());
  // 300 ms in one call of load_batch, then back to work.
  for (int i = 0; i < 30; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
  for (int i = 0; i < 5; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kTrain, kMain}));
  std::vector<Anomaly> found = p.take_anomalies(s, t, false);
  ASSERT_EQ(found.size(), 1u);
  const Anomaly& a = found[0];
  EXPECT_EQ(a.kind, "slow_call");
  EXPECT_EQ(a.layer, Layer::kPython);
  EXPECT_EQ(a.pid, kPid);
  EXPECT_EQ(a.evidence["function"], "train.py:Trainer.load_batch");
  EXPECT_DOUBLE_EQ(a.evidence["duration_ms"].get<double>(), 300.0);  // 29 periods + one
  EXPECT_DOUBLE_EQ(a.evidence["on_cpu_fraction"].get<double>(), 0.0);
  EXPECT_EQ(a.evidence["called_from"], "train.py:Trainer.train");
  EXPECT_NE(a.suggestion.find("asynchronous"), std::string::npos);
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
}

TEST(PythonProfile, TheSameStallAgainIsCountedNotReportedAgain) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 20; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
    for (int i = 0; i < 3; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kTrain, kMain}));
  }
  EXPECT_EQ(p.take_anomalies(s, t, true).size(), 1u);
  const nlohmann::json slow = p.figures()["slow_calls"];
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0]["occurrences"], 3);
  EXPECT_DOUBLE_EQ(slow[0]["max_ms"].get<double>(), 200.0);
}

TEST(PythonProfile, AnIdleHelperThreadIsNotASlowCall) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  const uint32_t helper = kPid + 1;
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 100; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kMain}, helper));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
  // The same thread once it made traced calls (it feeds the GPU) is watched.
  PythonProfile q = make_profile();
  q.note_traced_call(kPid, helper, 1, 10);  // a 10 ns call: only says the thread works
  t = 1'000'000'000;
  for (int i = 0; i < 100; ++i, t += kPeriod) q.on_sample(sample(t, {kStall, kMain}, helper));
  EXPECT_EQ(q.take_anomalies(s, t, true).size(), 1u);
}

TEST(PythonProfile, ALaunchersWaitIsNotASlowCall) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  s.process(kPid + 5).ppid = kPid;  // it started a worker
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 100; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kMain}));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
}

TEST(PythonProfile, ALoopOfShortWaitsFromOneLineIsNotOneSlowCall) {
  // step() sleeps 4 ms per call, called in a loop: every sample shows step waiting at the same
  // line, but the thread began a new wait between any two of them.
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  for (uint64_t i = 0; i < 300; ++i, t += kPeriod) {
    p.on_sample(sample(t, {kStep, kMain}, kPid, false, /*switches=*/i * 3));
  }
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
  // The same samples with no wait begun in between are one blocked call.
  PythonProfile q = make_profile();
  t = 1'000'000'000;
  for (int i = 0; i < 300; ++i, t += kPeriod)
    q.on_sample(sample(t, {kStep, kMain}, kPid, false, 7));
  EXPECT_EQ(q.take_anomalies(s, t, true).size(), 1u);
}

TEST(PythonProfile, AWaitInsideATracedCallIsNotAPythonStall) {
  // torch.cuda.synchronize() waiting 500 ms for the GPU: the time is inside cudaDeviceSynchronize.
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  const uint64_t begin = t;
  for (int i = 0; i < 50; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kMain}));
  p.note_traced_call(kPid, kPid, begin - 1'000'000, t - begin);
  p.on_sample(sample(t, {kStep, kMain}));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
}

TEST(PythonProfile, AShortCallIsNotSlow) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 9; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kMain}));
  p.on_sample(sample(t, {kStep, kMain}));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
}

TEST(PythonProfile, UsdtCountsFindTheQualifiedName) {
  PythonProfile p = make_profile();
  p.on_function({.pid = kPid,
                 .ts_ns = 0,
                 .file_ptr = 1,
                 .name_ptr = 2,
                 .name = "load_batch",
                 .file = "/job/train.py"});
  p.on_function({.pid = kPid,
                 .ts_ns = 0,
                 .file_ptr = 1,
                 .name_ptr = 3,
                 .name = "helper",
                 .file = "/job/train.py"});
  p.add_call_count(kPid, 1, 2, 12);
  p.add_call_count(kPid, 1, 3, 5);
  p.add_call_count(kPid, 9, 9, 7);  // its name event was lost: not reported under any name
  const auto& f = p.functions();
  EXPECT_EQ(f.at("train.py:Trainer.load_batch").count, 12u);
  EXPECT_EQ(f.at("train.py:helper").count, 5u);  // never sampled: keyed by co_name
  EXPECT_EQ(f.size(), 2u);
}

TEST(PythonProfile, SitesNameTheFunctionOfACallersFrame) {
  PythonProfile p = make_profile();
  const PythonSite* site = p.site(kPid, kStall, 0);
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->function, "train.py:Trainer.load_batch");
  EXPECT_EQ(site->file, "/job/train.py");
  EXPECT_EQ(p.site(kPid, kStall, 0), site);  // interned
  EXPECT_EQ(p.site(kPid, 0xdead, 0), nullptr);
  EXPECT_EQ(p.site(kPid + 1, kStall, 0), nullptr);
}

TEST(PythonProfile, AForkSharesItsParentsCodeObjects) {
  PythonProfile p = make_profile();
  p.on_fork(kPid, kPid + 1);
  EXPECT_TRUE(p.has_interpreter(kPid + 1));
  const PythonSite* site = p.site(kPid + 1, kTrain, 0);
  ASSERT_NE(site, nullptr);
  EXPECT_EQ(site->function, "train.py:Trainer.train");
}

TEST(PythonProfile, GcPausesAddUpPerGeneration) {
  PythonProfile p = make_profile();
  p.on_gc(
      {.pid = kPid, .tid = kPid, .ts_ns = 1, .duration_ns = 500, .collected = 3, .generation = 2});
  p.on_gc(
      {.pid = kPid, .tid = kPid, .ts_ns = 2, .duration_ns = 1500, .collected = 0, .generation = 2});
  p.on_gc(
      {.pid = kPid, .tid = kPid, .ts_ns = 3, .duration_ns = 100, .collected = 1, .generation = 0});
  const nlohmann::json gc = p.figures()["gc"];
  EXPECT_EQ(gc["2"]["collections"], 2);
  EXPECT_EQ(gc["2"]["total_ns"], 2000);
  EXPECT_EQ(gc["2"]["max_ns"], 1500);
  EXPECT_EQ(gc["2"]["collected"], 3);
  EXPECT_EQ(gc["0"]["collections"], 1);
  EXPECT_EQ(p.gc_events().size(), 3u);
}

}  // namespace
}  // namespace eacgm
