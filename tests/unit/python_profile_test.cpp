// PythonProfile: per-function time from samples, slow calls, USDT counts.
#include "layers/python/python_profile.h"

#include <gtest/gtest.h>

namespace eacgm {
namespace {

constexpr uint32_t kPid = 100;
constexpr uint64_t kMain = 0x1000, kTrain = 0x2000, kStall = 0x3000, kStep = 0x4000;
constexpr uint64_t kPeriod = 10'000'000;  // 100 Hz

// Slow calls judged at once (hold_ns 0) unless a test says.
PythonProfile make_profile(uint64_t hold_ns = 0) {
  PythonProfile p({.rate_hz = 100, .slow_call_ns = 100'000'000, .hold_ns = hold_ns});
  p.add_interpreter({kPid, 311, "/usr/bin/python3.11", true, ""});
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
  e.state = on_cpu ? PySampleEvent::State::kRunning : PySampleEvent::State::kSleeping;
  for (uint64_t code : innermost_first) e.frames.push_back({code, 0});
  return e;
}

PySampleEvent in_state(PySampleEvent e, PySampleEvent::State state) {
  e.state = state;
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

TEST(PythonProfile, AThreadMissingFromARoundIsChargedOnePeriodForItsNextSample) {
  PythonProfile p = make_profile();
  const uint32_t other = kPid + 1;
  p.on_sample(sample(1'000'000'000, {kTrain, kMain}));
  // Rounds went by that found the other thread in Python but not this one: it left Python.
  for (uint64_t t = 1'010'000'000; t < 2'000'000'000; t += kPeriod) {
    p.on_sample(sample(t, {kStep, kMain}, other));
  }
  p.on_sample(sample(2'000'000'000, {kTrain, kMain}));
  EXPECT_EQ(p.functions().at("train.py:Trainer.train").total_ns, 2 * kPeriod);
}

TEST(PythonProfile, ALateRoundChargesTheTimeSinceThePreviousSample) {
  PythonProfile p = make_profile();
  // A busy machine held the sampler back for 60 ms: no round missed the thread, which was in
  // the same call all along.
  p.on_sample(sample(1'000'000'000, {kTrain, kMain}));
  p.on_sample(sample(1'060'000'000, {kTrain, kMain}));
  EXPECT_EQ(p.functions().at("train.py:Trainer.train").total_ns, kPeriod + 60'000'000);
}

TEST(PythonProfile, AStallIsOneCallThoughTheSamplerFellBehindDuringIt) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 10; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
  // 80 ms without a round; the agent's loop looks in meanwhile.
  const uint64_t late = t + 70'000'000;
  EXPECT_TRUE(p.take_anomalies(s, t + 40'000'000, false).empty());
  for (t = late; t < 1'300'000'000; t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
  p.on_sample(sample(t, {kStep, kTrain, kMain}));
  std::vector<Anomaly> found = p.take_anomalies(s, t, false);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_DOUBLE_EQ(found[0].evidence["duration_ms"].get<double>(), 300.0);
}

TEST(PythonProfile, OneRoundWithoutTheThreadDoesNotEndItsCall) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  const uint32_t other = kPid + 1;
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 30; ++i, t += kPeriod) {
    // One read of the stalled thread's frames failed mid-way; the other thread was found.
    if (i != 12) p.on_sample(sample(t, {kStall, kTrain, kMain}));
    p.on_sample(sample(t + 1000, {kStep, kMain}, other));
    if (i == 13) {
      EXPECT_TRUE(p.take_anomalies(s, t + 2000, false).empty());
    }
  }
  p.on_sample(sample(t, {kStep, kTrain, kMain}));
  std::vector<Anomaly> found = p.take_anomalies(s, t, false);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_DOUBLE_EQ(found[0].evidence["duration_ms"].get<double>(), 300.0);
}

TEST(PythonProfile, AStallInTheKernelIsCountedNotReported) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  // Page faults as a library's code is first read in: one long uninterruptible wait.
  for (int i = 0; i < 20; ++i, t += kPeriod) {
    p.on_sample(
        in_state(sample(t, {kStall, kTrain, kMain}), PySampleEvent::State::kUninterruptible));
  }
  p.on_sample(sample(t, {kStep, kTrain, kMain}));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
  const nlohmann::json waits = p.figures()["kernel_waits"];
  EXPECT_EQ(waits["count"], 1);
  EXPECT_DOUBLE_EQ(waits["longest_ms"].get<double>(), 200.0);
  EXPECT_EQ(waits["longest_function"], "train.py:Trainer.load_batch");
}

PySampleEvent queued_for(PySampleEvent e, uint64_t run_delay_ns) {
  e.run_delay_ns = run_delay_ns;
  return e;
}

TEST(PythonProfile, AStallForWantOfACpuIsCountedNotReported) {
  // 300 ms in one function on a machine whose CPUs are taken, in three cases: running but
  // queued for a CPU 2 ms of every 10 (its own doing: reported), queued 7 of every 10 (the
  // machine's: counted), and waiting, 0 % on CPU, while another thread of its process, holding
  // what it waits for (the GIL), was queued 7 of every 10 (the machine's too).
  struct Case {
    uint64_t queued_per_period;
    bool on_cpu;
    bool reported;
  };
  for (Case c :
       {Case{2'000'000, true, true}, Case{7'000'000, true, false}, Case{7'000'000, false, false}}) {
    PythonProfile p = make_profile();
    Session s = session_with(kPid);
    const uint32_t other = kPid + 1;
    uint64_t t = 1'000'000'000, delay = 0;
    for (int i = 0; i < 30; ++i, t += kPeriod, delay += c.queued_per_period) {
      if (c.on_cpu) {
        p.on_sample(queued_for(sample(t, {kStall, kTrain, kMain}, kPid, true), delay));
      } else {
        p.on_sample(sample(t, {kStall, kTrain, kMain}));
        p.on_sample(queued_for(sample(t, {kStep}, other, true), delay));
      }
    }
    p.on_sample(sample(t, {kStep, kTrain, kMain}));
    const auto found = p.take_anomalies(s, t, true);
    EXPECT_EQ(found.size(), c.reported ? 1u : 0u) << c.queued_per_period << " " << c.on_cpu;
    const nlohmann::json waits = p.figures()["cpu_waits"];
    EXPECT_EQ(waits["count"], c.reported ? 0 : 1) << waits.dump();
    if (!c.reported) {
      EXPECT_EQ(waits["longest_function"], "train.py:Trainer.load_batch");
    }
  }
}

TEST(PythonProfile, TheShareOfTimeAProcessWaitedForACpu) {
  PythonProfile p = make_profile();
  EXPECT_EQ(p.cpu_wait_share(kPid, 0, kS), std::nullopt);  // never sampled
  uint64_t t = 1'000'000'000, delay = 0;
  // One second queued 6 ms of every 10, then one second queued not at all.
  for (int i = 0; i < 100; ++i, t += kPeriod, delay += 6'000'000) {
    p.on_sample(queued_for(sample(t, {kStep, kTrain, kMain}, kPid, true), delay));
  }
  for (int i = 0; i < 100; ++i, t += kPeriod) {
    p.on_sample(queued_for(sample(t, {kStep, kTrain, kMain}, kPid, true), delay));
  }
  EXPECT_NEAR(*p.cpu_wait_share(kPid, 1'010'000'000, 2'000'000'000), 0.6, 0.01);
  EXPECT_DOUBLE_EQ(*p.cpu_wait_share(kPid, 2'010'000'000, 3'000'000'000), 0.0);
  EXPECT_EQ(p.cpu_wait_share(kPid + 7, 0, 3 * kS), std::nullopt);
}

TEST(PythonProfile, AThreadStoppedFromOutsideIsNotStalledNorCharged) {
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 3; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
  // 200 ms stopped (eacgm probing a library the job just loaded, or job control), then on.
  for (int i = 0; i < 20; ++i, t += kPeriod) {
    p.on_sample(in_state(sample(t, {kStall, kTrain, kMain}, kPid, false, 1),
                         PySampleEvent::State::kStopped));
  }
  for (int i = 0; i < 3; ++i, t += kPeriod)
    p.on_sample(sample(t, {kStall, kTrain, kMain}, kPid, false, 2));
  p.on_sample(sample(t, {kStep, kTrain, kMain}, kPid, false, 2));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
  EXPECT_EQ(p.functions().at("train.py:Trainer.load_batch").total_ns, 6 * kPeriod);
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

TEST(PythonProfile, AWaitWhileOtherThreadsWorkInTracedCallsIsTheirsNotASlowCall) {
  // loss.backward() on a GPU: the calling thread waits off CPU while PyTorch's autograd thread
  // runs the backward operators (traced), here 300 ms of 2 ms calls 1 ms apart.
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  const uint32_t autograd = kPid + 1;
  uint64_t t = 1'000'000'000;
  const uint64_t wait_start = t;
  for (int i = 0; i < 30; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
  for (uint64_t c = wait_start; c < t; c += 3'000'000)
    p.note_traced_call(kPid, autograd, c, 2'000'000);
  for (int i = 0; i < 5; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kTrain, kMain}));
  EXPECT_TRUE(p.take_anomalies(s, t, false).empty());
  EXPECT_EQ(p.figures()["waits_for_busy_threads"], 1);
  // The same wait while the other thread worked for a third of it: a stall.
  const uint64_t stall_start = t;
  for (int i = 0; i < 30; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
  p.note_traced_call(kPid, autograd, stall_start, 100'000'000);
  for (int i = 0; i < 5; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kTrain, kMain}));
  EXPECT_EQ(p.take_anomalies(s, t, false).size(), 1u);
  // On CPU the thread does its own work, whatever the others do.
  PythonProfile q = make_profile();
  t = 1'000'000'000;
  q.note_traced_call(kPid, autograd, t, 400'000'000);
  for (int i = 0; i < 30; ++i, t += kPeriod)
    q.on_sample(sample(t, {kStall, kTrain, kMain}, kPid, true));
  for (int i = 0; i < 5; ++i, t += kPeriod) q.on_sample(sample(t, {kStep, kTrain, kMain}));
  EXPECT_EQ(q.take_anomalies(s, t, false).size(), 1u);
}

TEST(PythonProfile, ASlowCallWaitsForTheTracedCallsThatReturnAfterIt) {
  // torch.cuda's _lazy_init: on CPU in cuInit for 190 ms, whose event comes at its return, after
  // the samples that ended the Python call (its ioctls' waits broke it up).
  PythonProfile p = make_profile(5'000'000'000);
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  const uint64_t start = t;
  for (int i = 0; i < 12; ++i, t += kPeriod)
    p.on_sample(sample(t, {kStall, kTrain, kMain}, kPid, true));
  for (int i = 0; i < 3; ++i, t += kPeriod)
    p.on_sample(sample(t, {kStep, kTrain, kMain}, kPid, true));
  EXPECT_TRUE(p.take_anomalies(s, t, false).empty());  // held
  p.note_traced_call(kPid, kPid, start - 10'000'000, 190'000'000);
  EXPECT_TRUE(p.take_anomalies(s, t + 10'000'000'000, false).empty());
  // The same without a traced call around it is reported once its hold is over.
  const uint64_t again = t;
  for (int i = 0; i < 12; ++i, t += kPeriod)
    p.on_sample(sample(t, {kStall, kTrain, kMain}, kPid, true));
  for (int i = 0; i < 3; ++i, t += kPeriod)
    p.on_sample(sample(t, {kStep, kTrain, kMain}, kPid, true));
  EXPECT_TRUE(p.take_anomalies(s, again + 4'000'000'000, false).empty());
  EXPECT_EQ(p.take_anomalies(s, again + 6'000'000'000, false).size(), 1u);
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

void describe(PythonProfile& p, uint64_t addr, std::string name, std::string file,
              uint32_t line = 1, uint32_t pid = kPid) {
  PyCodeEvent e;
  e.pid = pid;
  e.code = addr;
  e.name = std::move(name);
  e.file = std::move(file);
  e.firstlineno = line;
  p.on_code(e);
}

TEST(PythonProfile, AConsumerThreadThatStallsIsASlowCall) {
  // A helper thread taking work from a queue.Queue, whose handling of one item stalls.
  PythonProfile p = make_profile();
  constexpr uint64_t kWait = 0x6000;
  describe(p, kWait, "Condition.wait", "/usr/lib/python3.11/threading.py", 300);
  Session s = session_with(kPid);
  const uint32_t consumer = kPid + 1;
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 20; ++i, t += kPeriod) p.on_sample(sample(t, {kWait, kMain}, consumer));
  for (int i = 0; i < 40; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kMain}, consumer));
  for (int i = 0; i < 5; ++i, t += kPeriod) p.on_sample(sample(t, {kWait, kMain}, consumer));
  std::vector<Anomaly> found = p.take_anomalies(s, t, true);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].evidence["tid"], consumer);
}

TEST(PythonProfile, ASupervisorsWaitInLibraryCodeIsNotASlowCall) {
  // torchrun's main thread: time.sleep() in the elastic agent's monitor loop while its workers run.
  PythonProfile p = make_profile();
  constexpr uint64_t kMonitor = 0x5000;
  describe(p, kMonitor, "SimpleElasticAgent._invoke_run",
           "/usr/lib/python3/dist-packages/torch/distributed/elastic/agent/server/api.py");
  Session s = session_with(kPid);
  s.process(kPid + 5).ppid = kPid;  // it started a worker
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 100; ++i, t += kPeriod) p.on_sample(sample(t, {kMonitor, kMain}));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
}

TEST(PythonProfile, AProcessWithWorkersIsJudgedByWhatItsOwnCodeDoes) {
  // A training loop with DataLoader workers: its children do not make its own stall a wait.
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  s.process(kPid + 5).ppid = kPid;
  p.note_traced_call(kPid, kPid, 1, 10);
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 40; ++i, t += kPeriod) p.on_sample(sample(t, {kStall, kTrain, kMain}));
  for (int i = 0; i < 3; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kTrain, kMain}));
  std::vector<Anomaly> found = p.take_anomalies(s, t, true);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].evidence["function"], "train.py:Trainer.load_batch");
  // So is a process with workers that traced nothing (only the python layer on): its own code.
  PythonProfile q = make_profile();
  t = 1'000'000'000;
  for (int i = 0; i < 40; ++i, t += kPeriod) q.on_sample(sample(t, {kStall, kTrain, kMain}));
  EXPECT_EQ(q.take_anomalies(s, t, true).size(), 1u);
}

TEST(PythonProfile, AThreadWaitingForWorkIsIdleNotSlow) {
  // A DataLoader worker between batches (selector on its index queue), a pin-memory thread on
  // a queue.Queue: both wait off CPU in the standard library for work to be handed to them.
  PythonProfile p = make_profile();
  constexpr uint64_t kSelect = 0x5000, kWait = 0x6000, kLoop = 0x7000;
  describe(p, kSelect, "_PollLikeSelector.select", "/usr/lib/python3.11/selectors.py", 400);
  describe(p, kWait, "Condition.wait", "/usr/lib/python3.11/threading.py", 300);
  describe(p, kLoop, "_worker_loop",
           "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py", 200);
  Session s = session_with(kPid);
  p.note_traced_call(kPid, kPid, 1, 10);
  p.note_traced_call(kPid, kPid + 1, 1, 10);
  uint64_t t = 1'000'000'000;
  for (int i = 0; i < 100; ++i, t += kPeriod) {
    p.on_sample(sample(t, {kSelect, kLoop}));
    p.on_sample(sample(t + 1, {kWait, kLoop}, kPid + 1));
  }
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
  // Their time is idle time, apart from the work in the report.
  const PythonFunctionStats& select = p.functions().at("selectors.py:_PollLikeSelector.select");
  EXPECT_EQ(select.idle_self_ns, select.self_ns);
  EXPECT_EQ(p.functions().at("torch/utils/data/_utils/worker.py:_worker_loop").threads.size(), 2u);
  // The same function computing (on CPU) is not waiting: judged.
  PythonProfile q = make_profile();
  describe(q, kSelect, "_PollLikeSelector.select", "/usr/lib/python3.11/selectors.py", 400);
  t = 1'000'000'000;
  for (int i = 0; i < 100; ++i, t += kPeriod) q.on_sample(sample(t, {kSelect, kMain}, kPid, true));
  EXPECT_EQ(q.take_anomalies(s, t, true).size(), 1u);
}

TEST(PythonProfile, OneStallInEachEpochsWorkersIsOneFinding) {
  // A DataLoader without persistent workers forks new ones each epoch; the same __getitem__
  // stalls once per epoch, in another process each time.
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  s.process(kPid).cmdline = {"python3", "train.py"};
  const uint32_t workers[] = {kPid + 1, kPid + 2};
  for (uint32_t w : workers) {
    s.process(w).ppid = kPid;
    s.process(w).cmdline = s.process(kPid).cmdline;
    p.on_fork(kPid, w);
  }
  uint64_t t = 1'000'000'000;
  for (uint32_t w : workers) {
    for (int i = 0; i < 30; ++i, t += kPeriod) {
      PySampleEvent e = sample(t, {kStall, kMain}, w);
      e.pid = w;
      p.on_sample(e);
    }
  }
  ASSERT_EQ(p.take_anomalies(s, t, true).size(), 1u);
  const nlohmann::json slow = p.figures()["slow_calls"];
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0]["occurrences"], 2);
  EXPECT_EQ(slow[0]["pids"], nlohmann::json::array({kPid + 1, kPid + 2}));
  // A process that exec'd another program is a process of its own kind.
  PythonProfile q = make_profile();
  s.process(kPid + 2).cmdline = {"python3", "other.py"};
  t = 1'000'000'000;
  for (uint32_t w : workers) {
    q.on_fork(kPid, w);
    for (int i = 0; i < 30; ++i, t += kPeriod) {
      PySampleEvent e = sample(t, {kStall, kMain}, w);
      e.pid = w;
      q.on_sample(e);
    }
  }
  EXPECT_EQ(q.take_anomalies(s, t, true).size(), 2u);
}

TEST(PythonProfile, ImportsAreStartUpNotStalls) {
  PythonProfile p = make_profile();
  constexpr uint64_t kTorch = 0x5000, kBootstrap = 0x6000;
  describe(p, kTorch, "<module>", "/usr/lib/python3/dist-packages/torch/__init__.py");
  describe(p, kBootstrap, "_call_with_frames_removed", "<frozen importlib._bootstrap>", 233);
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  // 350 ms inside `import torch`: the module's code, under the import machinery.
  for (int i = 0; i < 35; ++i, t += kPeriod) p.on_sample(sample(t, {kTorch, kBootstrap, kMain}));
  for (int i = 0; i < 3; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kMain}));
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
  const nlohmann::json startup = p.figures()["startup"];
  ASSERT_EQ(startup.size(), 1u);
  EXPECT_EQ(startup[0]["pid"], kPid);
  EXPECT_DOUBLE_EQ(startup[0]["import_s"].get<double>(), 0.35);
  ASSERT_EQ(startup[0]["slowest_imports"].size(), 1u);
  EXPECT_EQ(startup[0]["slowest_imports"][0]["function"], "torch/__init__.py:<module>");
}

TEST(PythonProfile, OneFunctionStallingAtTwoLinesIsOneFinding) {
  // CPython 3.8: f_lasti counts bytes, and lnotab {2, 1} puts offset 0 at the first line and
  // offset 2 onwards at the next.
  PythonProfile p({.rate_hz = 100, .slow_call_ns = 100'000'000, .hold_ns = 0});
  p.add_interpreter({kPid, 308, "/usr/bin/python3.8", false, ""});
  PyCodeEvent e;
  e.pid = kPid;
  e.code = kStall;
  e.name = "load_batch";
  e.file = "/job/train.py";
  e.firstlineno = 20;
  e.linetable = {2, 1};
  e.linetable_complete = true;
  p.on_code(e);
  describe(p, kMain, "<module>", "/job/train.py");
  describe(p, kStep, "step", "/job/train.py", 30);
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  auto stall_at = [&](uint64_t lasti) {
    for (int i = 0; i < 20; ++i, t += kPeriod) {
      PySampleEvent ev = sample(t, {kStall, kMain});
      ev.frames[0].instr = lasti;
      p.on_sample(ev);
    }
    for (int i = 0; i < 3; ++i, t += kPeriod) p.on_sample(sample(t, {kStep, kMain}));
  };
  stall_at(0);  // line 20
  stall_at(4);  // line 21
  std::vector<Anomaly> found = p.take_anomalies(s, t, true);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].evidence["line"], 20);
  const nlohmann::json slow = p.figures()["slow_calls"];
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0]["occurrences"], 2);
  EXPECT_EQ(slow[0]["lines"], nlohmann::json::array({20, 21}));
}

TEST(PythonProfile, ImplausibleCodeObjectsAndTheSamplesThroughThemAreRejected) {
  // What the walker read from freed or reused memory, as seen on real jobs.
  PythonProfile p = make_profile();
  describe(p, 0x5000, "\xe0y\x94", "/job/train.py");
  describe(p, 0x5100, "?", "/usr/lib/python3.11/__future__.py");
  describe(p, 0x5200, "name", "origin");
  describe(p, 0x5300, "_init_old", "?");
  describe(p, 0x5400, "step", "/job/train.py", 1993825072);
  describe(p, 0x5500, "step", "/job/tr\x01ain.py");
  uint64_t t = 1'000'000'000;
  for (uint64_t code : {0x5000, 0x5100, 0x5200, 0x5300, 0x5400, 0x5500}) {
    p.on_sample(sample(t, {code, kMain}));
    t += kPeriod;
  }
  p.on_sample(sample(t, {kTrain, 0x1234567, kMain}));  // not a pointer to an object
  p.on_sample(sample(t + kPeriod, {kTrain, kMain}));   // a good one
  const nlohmann::json f = p.figures();
  EXPECT_EQ(f["codes_rejected"], 6);
  EXPECT_EQ(f["samples_rejected"], 7);
  EXPECT_EQ(f["samples"], 1);
  EXPECT_EQ(p.functions().size(), 2u);  // train and <module> of the good sample
  EXPECT_EQ(p.site(kPid, 0x5200, 0), nullptr);
  // A code object described again, properly, is named from then on.
  describe(p, 0x5200, "Trainer.load_batch", "/job/train.py", 20);
  ASSERT_NE(p.site(kPid, 0x5200, 0), nullptr);
}

TEST(PythonProfile, ACodeObjectDescribedAgainAtTheSameAddressRenamesIt) {
  // site.py's module code, freed once imported, left its address to the script's function.
  PythonProfile p = make_profile();
  describe(p, 0x5000, "<module>", "/usr/lib/python3.11/site.py");
  ASSERT_EQ(p.site(kPid, 0x5000, 0)->function, "site.py:<module>");
  describe(p, 0x5000, "slow", "/job/train.py", 40);
  EXPECT_EQ(p.site(kPid, 0x5000, 0)->function, "train.py:slow");
  p.on_sample(sample(1'000'000'000, {0x5000, kMain}));
  EXPECT_EQ(p.functions().at("train.py:slow").self_ns, kPeriod);
  EXPECT_FALSE(p.functions().contains("site.py:<module>"));
}

TEST(PythonProfile, PlausibleCodeObjects) {
  EXPECT_TRUE(plausible_python_code("<module>", "/job/train.py", 1));
  EXPECT_TRUE(plausible_python_code("Trainer.fit.<locals>.<lambda>", "train.py", 10));
  EXPECT_TRUE(
      plausible_python_code("_call_with_frames_removed", "<frozen importlib._bootstrap>", 233));
  EXPECT_TRUE(plausible_python_code("run", "/usr/bin/torchrun", 0));  // a script without .py
  EXPECT_TRUE(plausible_python_code("f2", "<string>", 1));
  EXPECT_FALSE(plausible_python_code("", "/job/train.py", 1));
  EXPECT_FALSE(plausible_python_code("a..b", "/job/train.py", 1));
  EXPECT_FALSE(plausible_python_code("1st", "/job/train.py", 1));
  EXPECT_FALSE(plausible_python_code("f", "<string", 1));
  EXPECT_FALSE(plausible_python_code("f", "/job/train.py", uint64_t{1} << 31));
}

TEST(PythonProfile, FunctionKeysTellModulesApart) {
  EXPECT_EQ(python_function_key("/usr/lib/python3/dist-packages/torch/nn/modules/module.py",
                                "Module._call_impl"),
            "torch/nn/modules/module.py:Module._call_impl");
  EXPECT_EQ(
      python_function_key("/opt/venv/lib/python3.12/site-packages/numpy/__init__.py", "<module>"),
      "numpy/__init__.py:<module>");
  EXPECT_EQ(python_function_key("/root/.pyenv/versions/3.8.18/lib/python3.8/multiprocessing/"
                                "connection.py",
                                "wait"),
            "multiprocessing/connection.py:wait");
  EXPECT_EQ(python_function_key("/usr/lib/python3.11/threading.py", "Thread.run"),
            "threading.py:Thread.run");
  EXPECT_EQ(python_function_key("/job/models/resnet.py", "ResNet.forward", "/job"),
            "models/resnet.py:ResNet.forward");
  EXPECT_EQ(python_function_key("/job/train.py", "main", "/job"), "train.py:main");
  EXPECT_EQ(python_function_key("/elsewhere/mypkg/__init__.py", "<module>", "/job"),
            "mypkg/__init__.py:<module>");
  EXPECT_EQ(python_function_key("/elsewhere/util.py", "f", "/job"), "util.py:f");
  EXPECT_EQ(python_function_key("<frozen runpy>", "_run_code"), "<frozen runpy>:_run_code");
}

TEST(PythonProfile, TheScriptDirectoryComesFromTheCommandLine) {
  EXPECT_EQ(python_script_dir({"python3", "-u", "train.py", "--lr", "1"}, "/job"), "/job");
  EXPECT_EQ(python_script_dir({"python3", "-X", "dev", "models/train.py"}, "/job"), "/job/models");
  EXPECT_EQ(python_script_dir({"/usr/bin/python3.11", "/srv/app/main.py"}, "/tmp"), "/srv/app");
  EXPECT_EQ(python_script_dir({"python3", "-m", "torch.distributed.run", "t.py"}, "/job"), "");
  EXPECT_EQ(python_script_dir({"python3", "-c", "print(1)"}, "/job"), "");
  EXPECT_EQ(python_script_dir({"python3"}, "/job"), "");
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

TEST(PythonProfile, ALoopOfShortComputationsBetweenWaitsIsNotOneSlowCall) {
  // asyncio tasks computing 1 ms between awaits: every sample finds one of them in the same
  // function with the same stack, on CPU, but the thread waited (in the selector) in between.
  PythonProfile p = make_profile();
  Session s = session_with(kPid);
  uint64_t t = 1'000'000'000;
  for (uint64_t i = 0; i < 300; ++i, t += kPeriod) {
    p.on_sample(sample(t, {kStep, kMain}, kPid, true, /*switches=*/i * 4));
  }
  EXPECT_TRUE(p.take_anomalies(s, t, true).empty());
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
