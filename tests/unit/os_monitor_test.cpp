// The os layer's pure parts: the MAP_POPULATE storm detector, the sentences
// that say why a process ended, large-mapping bookkeeping, ioctl histograms,
// library conflicts, the decoder of the os records and the flight recorder.
#include "layers/os/os_monitor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "agent/flight_recorder.h"
#include "probes/library_identity.h"
#include "reader/decoder.h"
#include "test_support.h"

namespace eacgm {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

// `count` populate mappings evenly spread over [start, start + span).
std::optional<MmapStormDetector::Storm> feed(MmapStormDetector& d, uint64_t start, uint64_t span,
                                             uint64_t count) {
  std::optional<MmapStormDetector::Storm> storm;
  for (uint64_t i = 0; i < count; ++i) {
    if (auto s = d.add(start + span * i / count, 4096); s && !storm) storm = s;
  }
  return storm;
}

TEST(MmapStorm, SustainedHundredsPerSecondFromTheFirstSecond) {
  MmapStormDetector d;
  d.set_origin(0);
  auto storm = feed(d, 0, kSecond, 500);
  ASSERT_TRUE(storm);
  EXPECT_EQ(storm->rule, "absolute");
  EXPECT_GE(storm->count, 200u);
  EXPECT_FALSE(storm->baseline_per_s);  // no history needed
  // Reported once the rate had held for half the window, not before.
  EXPECT_GE(storm->ts_ns - storm->window_start_ns, kSecond / 2);
  EXPECT_LT(storm->ts_ns, kSecond);
  EXPECT_GE(d.peak_count(), 499u);
}

TEST(MmapStorm, TheSeedsRatesNormalIsQuietStormIsFlagged) {
  MmapStormDetector d;
  d.set_origin(0);
  EXPECT_FALSE(feed(d, 0, 30 * kSecond, 12 * 30));  // ~12/s: TF 2.14
  EXPECT_LE(d.peak_count(), 13u);
  auto storm = feed(d, 30 * kSecond, 5 * kSecond, 217 * 5);  // ~217/s: TF 2.15
  ASSERT_TRUE(storm);
  // Ten times its own ~12/s is seen before the absolute 200/s is reached.
  EXPECT_EQ(storm->rule, "relative");
  ASSERT_TRUE(storm->baseline_per_s);
  EXPECT_NEAR(*storm->baseline_per_s, 12.0, 0.5);
  EXPECT_GE(storm->rate_per_s, 120);
  EXPECT_LT(storm->ts_ns, 31 * kSecond);
}

TEST(MmapStorm, FarAboveItsOwnNormalBelowTheAbsoluteThreshold) {
  MmapStormDetector d;
  d.set_origin(0);
  EXPECT_FALSE(feed(d, 0, 20 * kSecond, 5 * 20));  // 5/s for 20 s
  auto storm = feed(d, 20 * kSecond, 3 * kSecond, 150 * 3);
  ASSERT_TRUE(storm);
  EXPECT_EQ(storm->rule, "relative");
  ASSERT_TRUE(storm->baseline_per_s);
  EXPECT_NEAR(*storm->baseline_per_s, 5.0, 0.5);
  EXPECT_EQ(storm->threshold, 100u);  // max(100, 10 x 5/s)
}

TEST(MmapStorm, OneBatchIsNotAStorm) {
  MmapStormDetector d;
  d.set_origin(0);
  // 1,000 mappings in 10 ms (an allocator's pool at start-up), then quiet.
  EXPECT_FALSE(feed(d, kSecond, kSecond / 100, 1000));
  EXPECT_FALSE(feed(d, 3 * kSecond, 10 * kSecond, 20));
}

TEST(MmapStorm, BelowTheThresholdWithoutHistoryIsQuiet) {
  MmapStormDetector d;
  d.set_origin(0);
  EXPECT_FALSE(feed(d, 0, 5 * kSecond, 150 * 5));  // 150/s: no baseline yet
}

TEST(MmapStorm, ReportedOnce) {
  MmapStormDetector d;
  EXPECT_TRUE(feed(d, 0, kSecond, 500));
  EXPECT_FALSE(feed(d, kSecond, kSecond, 500));
}

SignalEvent kill_signal(uint32_t pid, int sig, uint32_t sender, std::string comm, int code = 0) {
  SignalEvent s;
  s.pid = pid;
  s.tid = pid;
  s.sig = sig;
  s.code = code;
  s.sender_pid = sender;
  s.sender_tid = sender;
  s.sender_comm = std::move(comm);
  return s;
}

ProcessExit killed(int sig) {
  ProcessExit exit;
  exit.signal = sig;
  exit.cause = "plain";
  return exit;
}

TEST(ExitCause, KilledByAnotherProcessNamesIt) {
  SignalEvent s = kill_signal(100, SIGKILL, 812, "kill");
  ProcessExit e = explain_exit(killed(SIGKILL), &s, nullptr);
  EXPECT_EQ(e.cause, "killed by SIGKILL from pid 812 (kill)");
  ASSERT_TRUE(e.sender);
  EXPECT_EQ(e.sender->pid, 812u);
  EXPECT_EQ(e.sender->comm, "kill");
}

TEST(ExitCause, CoreDumpIsSaid) {
  SignalEvent s = kill_signal(100, SIGQUIT, 7, "bash");
  ProcessExit exit = killed(SIGQUIT);
  exit.core_dumped = true;
  EXPECT_EQ(explain_exit(exit, &s, nullptr).cause,
            "killed by SIGQUIT from pid 7 (bash), core dumped");
}

TEST(ExitCause, OomKillWinsOverItsSigkill) {
  SignalEvent s = kill_signal(100, SIGKILL, 100, "python3.11", kSiKernel);
  OomKillEvent oom;
  oom.pid = 100;
  oom.killer_pid = 100;
  oom.anon_rss_bytes = 1288490189;  // 1.2 GiB
  oom.cgroup = "/eacgm-test";
  ProcessExit e = explain_exit(killed(SIGKILL), &s, &oom);
  EXPECT_EQ(e.cause, "killed by the OOM killer: anon-rss 1.2 GiB in cgroup /eacgm-test");
  EXPECT_FALSE(e.sender);
  oom.killer_pid = 200;
  oom.killer_comm = "loader";
  EXPECT_EQ(explain_exit(killed(SIGKILL), &s, &oom).cause,
            "killed by the OOM killer: anon-rss 1.2 GiB in cgroup /eacgm-test, when pid 200 "
            "(loader) needed memory");
}

TEST(ExitCause, RaisedByItself) {
  SignalEvent s = kill_signal(100, SIGABRT, 100, "python3.11", kSiTkill);
  ProcessExit e = explain_exit(killed(SIGABRT), &s, nullptr);
  EXPECT_EQ(e.cause, "killed by SIGABRT (Aborted) that it raised itself");
  SignalEvent pipe = kill_signal(100, SIGPIPE, 100, "python3.11");
  EXPECT_EQ(explain_exit(killed(SIGPIPE), &pipe, nullptr).cause,
            "killed by SIGPIPE: it wrote to a pipe or socket whose reader had gone");
}

TEST(ExitCause, KernelSignalsHaveNoSender) {
  SignalEvent tty = kill_signal(100, SIGINT, 55, "kworker/0:1", kSiKernel);
  ProcessExit e = explain_exit(killed(SIGINT), &tty, nullptr);
  EXPECT_EQ(e.cause, "killed by SIGINT (Interrupt), raised by the kernel");
  EXPECT_FALSE(e.sender);
  SignalEvent fault = kill_signal(100, SIGSEGV, 100, "python3.11", 1 /* SEGV_MAPERR */);
  EXPECT_EQ(explain_exit(killed(SIGSEGV), &fault, nullptr).cause, "plain");
}

TEST(ExitCause, NothingSeenKeepsTheWaitStatusSentence) {
  EXPECT_EQ(explain_exit(killed(SIGTERM), nullptr, nullptr).cause, "plain");
  SignalEvent other = kill_signal(100, SIGUSR1, 9, "x");
  EXPECT_EQ(explain_exit(killed(SIGTERM), &other, nullptr).cause, "plain");
  ProcessExit exited;
  exited.code = 3;
  exited.cause = "exited with code 3";
  EXPECT_EQ(explain_exit(exited, &other, nullptr).cause, "exited with code 3");
}

TEST(OsMonitor, EacgmsOwnStopAndResumeAreNotTheJobsSignals) {
  OsMonitor::Options options;
  options.self_pid = 42;
  OsMonitor os(options);
  EXPECT_FALSE(os.on_signal(kill_signal(100, SIGSTOP, 100, "job", kSiKernel)));
  EXPECT_FALSE(os.on_signal(kill_signal(100, SIGCONT, 42, "eacgm")));
  EXPECT_TRUE(os.on_signal(kill_signal(100, SIGCONT, 43, "bash")));
  EXPECT_TRUE(os.on_signal(kill_signal(100, SIGTERM, 42, "eacgm")));  // forwarded Ctrl-C: real
  EXPECT_EQ(os.activity().signals.size(), 2u);
  ProcessExit e = os.explain(100, killed(SIGTERM));
  EXPECT_EQ(e.cause, "killed by SIGTERM from pid 42 (eacgm)");
}

// A rank paused at a loader stop makes its parent (the launcher) get a SIGCHLD when it stops and
// one when eacgm continues it: eacgm's doing. Its exit, and another child's stop, are the job's.
TEST(OsMonitor, TheParentsSigchldsOfALoaderStopAreNotTheJobsSignals) {
  OsMonitor::Options options;
  options.self_pid = 42;
  OsMonitor os(options);
  const uint32_t launcher = 10, rank = 11, other = 12;
  EXPECT_FALSE(os.on_signal(kill_signal(rank, SIGSTOP, rank, "rank", kSiKernel)));
  EXPECT_FALSE(os.on_signal(kill_signal(launcher, SIGCHLD, rank, "rank", CLD_STOPPED)));
  EXPECT_FALSE(os.on_signal(kill_signal(rank, SIGCONT, 42, "eacgm")));
  EXPECT_FALSE(os.on_signal(kill_signal(launcher, SIGCHLD, rank, "rank", CLD_CONTINUED)));
  // A child stopped by someone else, and the paused child's exit.
  EXPECT_TRUE(os.on_signal(kill_signal(other, SIGSTOP, 77, "bash")));
  EXPECT_TRUE(os.on_signal(kill_signal(launcher, SIGCHLD, other, "other", CLD_STOPPED)));
  EXPECT_TRUE(os.on_signal(kill_signal(launcher, SIGCHLD, rank, "rank", CLD_EXITED)));
  EXPECT_EQ(os.activity().signals.size(), 3u);
  // Once it has exited nothing is kept of it; a new process with its pid starts afresh.
  os.on_process_exit(rank);
  os.forget_process(launcher);
  os.forget_process(other);
  EXPECT_EQ(os.footprint().processes, 0u);
  EXPECT_TRUE(os.on_signal(kill_signal(launcher, SIGCHLD, rank, "rank", CLD_STOPPED)));
}

MmapEvent mapping(MmapEvent::Op op, uint64_t addr, uint64_t len, uint32_t flags = 0x22,
                  uint32_t prot = 3) {
  MmapEvent m;
  m.op = op;
  m.pid = 7;
  m.addr = addr;
  m.len = len;
  m.flags = flags;
  m.prot = prot;
  m.ret = static_cast<int64_t>(addr);
  return m;
}

TEST(OsMonitor, LargeAnonymousMappingsUntilUnmapped) {
  OsMonitor os;
  const uint64_t a = 0x7f0000000000;
  os.on_mmap(mapping(MmapEvent::Op::kMmap, a, 256 * kMiB));
  os.on_mmap(mapping(MmapEvent::Op::kMmap, a + 1024 * kMiB, 1 * kMiB));             // small
  os.on_mmap(mapping(MmapEvent::Op::kMmap, a + 2048 * kMiB, 128 * kMiB, 0x22, 0));  // PROT_NONE
  os.on_mmap(mapping(MmapEvent::Op::kMmap, a + 4096 * kMiB, 128 * kMiB, 0x02));     // file
  const auto& live = os.activity().mmap.at(7).large_anonymous;
  ASSERT_EQ(live.size(), 1u);
  // Unmapping the head leaves a large tail; unmapping more leaves a small one.
  os.on_mmap(mapping(MmapEvent::Op::kMunmap, a, 64 * kMiB));
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live.begin()->first, a + 64 * kMiB);
  EXPECT_EQ(live.begin()->second.len, 192 * kMiB);
  // mremap moves it.
  MmapEvent grow = mapping(MmapEvent::Op::kMremap, a + 8192 * kMiB, 512 * kMiB);
  grow.old_addr = a + 64 * kMiB;
  grow.old_len = 192 * kMiB;
  os.on_mmap(grow);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live.begin()->first, a + 8192 * kMiB);
  EXPECT_EQ(live.begin()->second.len, 512 * kMiB);
  os.on_mmap(mapping(MmapEvent::Op::kMunmap, a + 8192 * kMiB, 500 * kMiB));
  EXPECT_TRUE(live.empty());  // 12 MiB left: below the threshold
  EXPECT_EQ(os.activity().mmap.at(7).mmaps, 4u);
  EXPECT_EQ(os.activity().mmap.at(7).munmaps, 2u);
}

TEST(OsMonitor, PopulateStormBecomesAnAnomalyNamingTheFlag) {
  OsMonitor os;
  os.set_session_start(0);
  os.on_process(7, "trainer", 0);
  for (int i = 0; i < 500; ++i) {
    MmapEvent m = mapping(MmapEvent::Op::kMmap, 0x1000 * (i + 1), 4096, 0x22 | kMapPopulate);
    m.ts_ns = kSecond + kSecond * i / 500;
    os.on_mmap(m);
  }
  std::vector<Anomaly> a = os.take_anomalies();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "mmap_storm");
  EXPECT_EQ(a[0].layer, Layer::kOs);
  EXPECT_EQ(a[0].evidence["flag"], "MAP_POPULATE");
  EXPECT_GE(a[0].evidence["rate_per_s"].get<double>(), 200);
  EXPECT_NE(a[0].message.find("MAP_POPULATE"), std::string::npos);
  EXPECT_NE(a[0].message.find("pid 7 (trainer)"), std::string::npos);
  const PopulateStats& p = os.activity().mmap.at(7).populate;
  EXPECT_EQ(p.count, 500u);
  EXPECT_EQ(p.bytes, 500u * 4096);
  EXPECT_GE(p.peak_per_s, 499u);
  EXPECT_TRUE(os.take_anomalies().empty());
}

TEST(OsMonitor, IoctlHistogramAndSlowCalls) {
  OsMonitor os;
  os.set_devices("/dev/nvidia*", {{(195u << 20) | 255, "/dev/nvidiactl"}});
  const uint32_t ctl = (195u << 20) | 255;
  for (uint64_t d : {0ull, 1ull, 3ull, 1000ull, 1023ull, 60'000'000ull, 70'000'000ull}) {
    IoctlEvent e;
    e.pid = 9;
    e.rdev = ctl;
    e.duration_ns = d;
    e.request = 0xc020462a;
    os.on_ioctl(e);
  }
  const IoctlStats& st = os.activity().ioctl.at(9).at(ctl);
  EXPECT_EQ(st.count, 7u);
  EXPECT_EQ(st.log2_ns[0], 2u);   // 0 and 1
  EXPECT_EQ(st.log2_ns[1], 1u);   // 3
  EXPECT_EQ(st.log2_ns[9], 2u);   // 1000, 1023
  EXPECT_EQ(st.log2_ns[25], 1u);  // 60 ms: [2^25, 2^26)
  EXPECT_EQ(st.log2_ns[26], 1u);  // 70 ms
  EXPECT_EQ(st.slow, 2u);
  EXPECT_EQ(st.max_ns, 70'000'000u);
  std::vector<Anomaly> a = os.take_anomalies();
  ASSERT_EQ(a.size(), 1u);  // once per process and device
  EXPECT_EQ(a[0].kind, "slow_ioctl");
  EXPECT_EQ(a[0].evidence["device"], "/dev/nvidiactl");
  EXPECT_EQ(a[0].evidence["request"], "0xc020462a");
  const nlohmann::json f = os.figures();
  EXPECT_EQ(f["ioctl"]["processes"]["9"]["/dev/nvidiactl"]["count"], 7);
  EXPECT_EQ(f["ioctl"]["slow"].size(), 2u);
}

TEST(OsMonitor, ASlowIoctlInsideATracedCallIsThatCallsNotReported) {
  OsMonitor::Options options;
  options.hold_ns = 10 * kSecond;
  OsMonitor os(options);
  const uint32_t uvm = (238u << 20) | 0;
  os.set_devices("/dev/nvidia*", {{uvm, "/dev/nvidia-uvm"}});
  auto slow_ioctl = [&](uint32_t tid, uint64_t start_ns) {
    IoctlEvent e;
    e.pid = 9;
    e.tid = tid;
    e.rdev = uvm;
    e.ts_ns = start_ns;
    e.duration_ns = 170'000'000;
    e.request = 0x25;
    os.on_ioctl(e);
  };
  // The GPU's set-up: cuDevicePrimaryCtxRetain on thread 9 from 1 s to 1.5 s, a 170 ms ioctl in it.
  slow_ioctl(9, kSecond + 100'000'000);
  EXPECT_TRUE(os.take_anomalies(2 * kSecond).empty());       // held for the call around it
  os.on_traced_call(9, 10, kSecond, kSecond + 500'000'000);  // another thread's: not around it
  os.on_traced_call(9, 9, kSecond, kSecond + 500'000'000);
  EXPECT_TRUE(os.take_anomalies(20 * kSecond).empty());
  // One outside any traced call is reported once its hold is over, not before.
  slow_ioctl(9, 30 * kSecond);
  os.on_traced_call(9, 9, 30 * kSecond + 1, 31 * kSecond);  // began after it
  EXPECT_TRUE(os.take_anomalies(35 * kSecond).empty());
  const std::vector<Anomaly> a = os.take_anomalies(41 * kSecond);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "slow_ioctl");
  EXPECT_DOUBLE_EQ(a[0].t_s, 30.0);
  const nlohmann::json f = os.figures();
  EXPECT_EQ(f["ioctl"]["slow"].size(), 2u);  // both are in the record
  EXPECT_EQ(f["ioctl"]["slow_inside_traced_calls"], 1);
  EXPECT_EQ(f["ioctl"]["processes"]["9"]["/dev/nvidia-uvm"]["slow"], 2);
}

LibraryBuild build(std::string path, uint64_t inode, std::string build_id) {
  LibraryBuild b;
  b.family = *library_family(path);
  b.version = library_version(path);
  b.path = std::move(path);
  b.id = FileId{1, inode};
  b.build_id = std::move(build_id);
  b.size = 1000;
  return b;
}

TEST(OsMonitor, TwoBuildsOfOneLibraryReportedOncePerFamily) {
  OsMonitor os;
  os.on_libraries(
      5,
      {build("/usr/local/cuda/lib64/libcudart.so.13", 10, "2a12"),
       build("/usr/lib/libcublas.so.13", 11, "aa"), build("/usr/lib/libcublasLt.so.13", 12, "bb")},
      kSecond);
  EXPECT_TRUE(os.take_anomalies().empty());  // cuBLAS and cuBLASLt are two families
  const std::vector<LibraryBuild> both = {
      build("/usr/local/cuda/lib64/libcudart.so.13", 10, "2a12"),
      build("/opt/sim/lib/libcudart.so.13", 20, "9f9f")};
  os.on_libraries(5, both, 2 * kSecond);
  std::vector<Anomaly> a = os.take_anomalies();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "library_conflict");
  EXPECT_DOUBLE_EQ(a[0].t_s, 2.0);
  EXPECT_EQ(a[0].evidence["family"], "libcudart");
  EXPECT_FALSE(a[0].evidence["same_build"].get<bool>());
  EXPECT_EQ(a[0].evidence["libraries"][0]["path"], "/usr/local/cuda/lib64/libcudart.so.13");
  EXPECT_EQ(a[0].evidence["libraries"][1]["path"], "/opt/sim/lib/libcudart.so.13");
  EXPECT_EQ(a[0].evidence["libraries"][1]["version"], "13");
  EXPECT_NE(a[0].message.find("/opt/sim/lib/libcudart.so.13"), std::string::npos);
  os.on_libraries(5, both, 3 * kSecond);  // the next loader stop rescans: no repeat
  EXPECT_TRUE(os.take_anomalies().empty());
  os.on_libraries(6, both, 4 * kSecond);  // another process: its own report
  EXPECT_EQ(os.take_anomalies().size(), 1u);
}

// Everything the os layer can learn about one process: its name and start, a
// signal, an OOM kill, a large populate mapping, a slow ioctl, two builds of
// libcudart.
void live_a_process(OsMonitor& os, uint32_t pid, uint64_t t) {
  os.on_process(pid, "worker", t);
  os.on_signal(kill_signal(pid, SIGTERM, 1, "systemd"));
  OomKillEvent oom;
  oom.pid = pid;
  oom.ts_ns = t;
  oom.comm = "worker";
  os.on_oom_kill(oom);
  MmapEvent m = mapping(MmapEvent::Op::kMmap, 0x7f0000000000, 256 * kMiB, 0x22 | kMapPopulate);
  m.pid = pid;
  m.ts_ns = t;
  os.on_mmap(m);
  IoctlEvent e;
  e.pid = pid;
  e.ts_ns = t;
  e.rdev = (195u << 20) | 255;
  e.duration_ns = 60'000'000;
  os.on_ioctl(e);
  os.on_libraries(pid,
                  {build("/usr/local/cuda/lib64/libcudart.so.13", 10, "2a12"),
                   build("/opt/sim/lib/libcudart.so.13", 20, "9f9f")},
                  t);
  os.on_process_exit(pid);
}

TEST(OsMonitor, ForgettingAProcessReleasesEverythingKeptAboutIt) {
  OsMonitor os;
  live_a_process(os, 5, kSecond);
  live_a_process(os, 6, kSecond);
  EXPECT_EQ(os.take_anomalies().size(), 6u);  // each: its OOM kill, slow ioctl and conflict
  EXPECT_EQ(os.footprint().processes, 2u);
  const ProcessExit before = os.explain(5, killed(SIGKILL));
  EXPECT_NE(before.cause.find("OOM killer"), std::string::npos);

  os.forget_process(5);
  const OsMonitor::Footprint f = os.footprint();
  EXPECT_EQ(f.processes, 1u);
  EXPECT_EQ(f.signals, 1u);
  EXPECT_EQ(f.oom_kills, 1u);
  EXPECT_EQ(f.slow_ioctls, 1u);
  EXPECT_FALSE(os.activity().mmap.contains(5));
  EXPECT_FALSE(os.activity().ioctl.contains(5));
  EXPECT_EQ(os.activity().signals.front().pid, 6u);
  EXPECT_EQ(os.explain(6, killed(SIGKILL)).cause, before.cause);  // the other one is kept
  EXPECT_EQ(os.explain(5, killed(SIGKILL)).cause, killed(SIGKILL).cause);

  // A new process with a reused pid starts from nothing: its conflict is reported again.
  live_a_process(os, 5, 2 * kSecond);
  std::vector<Anomaly> again = os.take_anomalies();
  EXPECT_EQ(std::ranges::count(again, std::string("library_conflict"), &Anomaly::kind), 1);
  EXPECT_EQ(std::ranges::count(again, std::string("slow_ioctl"), &Anomaly::kind), 1);
}

TEST(OsMonitor, AnAgentsStateStaysBoundedOverTenThousandProcesses) {
  // serve's caps; each process is forgotten once it has exited, as serve does.
  OsMonitor::Options options;
  options.max_signals = 256;
  options.max_oom_kills = 64;
  options.max_slow_ioctls = 64;
  OsMonitor os(options);
  for (uint32_t pid = 1000; pid < 11'000; ++pid) {
    live_a_process(os, pid, pid * kSecond);
    // A long-lived process in between, never forgotten: the caps hold for it.
    os.on_signal(kill_signal(1, SIGUSR1, 2, "sender"));
    os.take_anomalies();
    os.explain(pid, killed(SIGKILL));
    os.forget_process(pid);
    const OsMonitor::Footprint f = os.footprint();
    ASSERT_LE(f.processes, 1u) << "after pid " << pid;
    ASSERT_LE(f.signals, 256u);
    ASSERT_LE(f.oom_kills, 64u);
    ASSERT_LE(f.slow_ioctls, 64u);
  }
  // The long-lived process's signals fill the list but for the last place,
  // which each short-lived process's signal takes until it is forgotten.
  EXPECT_EQ(os.footprint().signals, 255u);
  EXPECT_GT(os.figures()["signals_not_kept"].get<uint64_t>(), 9'000u);
}

TEST(OsMonitor, OomKillsBeyondTheCapAreCounted) {
  OsMonitor::Options options;
  options.max_oom_kills = 2;
  OsMonitor os(options);
  for (uint32_t pid = 1; pid <= 3; ++pid) {
    OomKillEvent oom;
    oom.pid = pid;
    os.on_oom_kill(oom);
  }
  EXPECT_EQ(os.take_anomalies().size(), 3u);  // every one is still an anomaly
  const nlohmann::json f = os.figures();
  EXPECT_EQ(f["oom_kills"].size(), 2u);
  EXPECT_EQ(f["oom_kills_not_kept"], 1);
  // The third is still the cause of its process's death.
  EXPECT_NE(os.explain(3, killed(SIGKILL)).cause.find("OOM killer"), std::string::npos);
}

TEST(LibraryIdentity, Families) {
  EXPECT_EQ(library_family("/usr/local/cuda/lib64/libcudart.so.13.0.96"), "libcudart");
  EXPECT_EQ(library_family("libcublasLt.so.12"), "libcublasLt");
  EXPECT_EQ(library_family("/site-packages/torch/lib/libtorch_cpu.so"), "libtorch_cpu");
  EXPECT_EQ(library_family("/x/numpy.libs/libcublas-3b81d170.so.11"), "libcublas");
  EXPECT_EQ(library_family("/usr/lib/libcudnn_ops.so.9"), "libcudnn_ops");
  EXPECT_EQ(library_family("/usr/lib/x86_64-linux-gnu/libc.so.6"), std::nullopt);
  EXPECT_EQ(library_family("/usr/lib/libcudart_static.a"), std::nullopt);
  EXPECT_EQ(library_version("/usr/local/cuda/lib64/libcudart.so.13.0.96"), "13.0.96");
  EXPECT_EQ(library_version("libtorch_cpu.so"), "");
}

TEST(LibraryIdentity, BuildIdOfARealLibrary) {
  // libc always carries a GNU build id on Debian.
  auto id = read_build_id("/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->size(), 40u);
  EXPECT_FALSE(read_build_id("/nonexistent"));
}

TEST(OsDecoder, SignalRecord) {
  eacgm_signal r{};
  r.hdr = {EACGM_EV_SIGNAL, 100, 101, EACGM_LAYER_OS, 5};
  r.sig = 9;
  r.code = 0;
  r.sender_tgid = 812;
  r.sender_tid = 813;
  std::strcpy(r.sender_comm, "kill");
  auto e = decode_event(bytes_of(r));
  ASSERT_TRUE(e.ok()) << e.error().message;
  const auto& s = std::get<SignalEvent>(*e);
  EXPECT_EQ(s.pid, 100u);
  EXPECT_EQ(s.sender_pid, 812u);
  EXPECT_EQ(s.sender_comm, "kill");
  EXPECT_TRUE(s.sent_by_process());
}

TEST(OsDecoder, OomRecordBuildsTheCgroupPath) {
  eacgm_oom r{};
  r.hdr = {EACGM_EV_OOM_KILL, 100, 100, EACGM_LAYER_OS, 5};
  r.anon_rss_bytes = 64 * kMiB;
  std::strcpy(r.comm, "python3.11");
  std::strcpy(r.cgroup[0], "eacgm-test");
  std::strcpy(r.cgroup[1], "jobs");
  r.cgroup_names = 2;
  r.cgroup_level = 2;
  r.cgroup_hierarchy = 4;
  auto e = decode_event(bytes_of(r));
  ASSERT_TRUE(e.ok()) << e.error().message;
  const auto& o = std::get<OomKillEvent>(*e);
  EXPECT_EQ(o.cgroup, "/jobs/eacgm-test");
  EXPECT_TRUE(o.cgroup_v1);
  EXPECT_EQ(o.comm, "python3.11");
  r.cgroup_level = 11;  // deeper than the record holds
  EXPECT_EQ(std::get<OomKillEvent>(*decode_event(bytes_of(r))).cgroup, "/.../jobs/eacgm-test");
  r.cgroup_level = 0;
  r.cgroup_names = 0;
  EXPECT_EQ(std::get<OomKillEvent>(*decode_event(bytes_of(r))).cgroup, "/");
}

TEST(OsDecoder, MmapAndIoctlRecords) {
  eacgm_mmap m{};
  m.hdr = {EACGM_EV_MMAP, 7, 8, EACGM_LAYER_OS, 5};
  m.op = EACGM_MMAP;
  m.flags = 0x8022;
  m.len = 4096;
  m.ret = -12;
  auto e = decode_event(bytes_of(m));
  ASSERT_TRUE(e.ok());
  const auto& mm = std::get<MmapEvent>(*e);
  EXPECT_TRUE(mm.populate());
  EXPECT_TRUE(mm.anonymous());
  EXPECT_TRUE(mm.failed());
  m.op = 9;
  EXPECT_FALSE(decode_event(bytes_of(m)).ok());

  eacgm_ioctl i{};
  i.hdr = {EACGM_EV_IOCTL, 7, 8, EACGM_LAYER_OS, 5};
  i.rdev = (1u << 20) | 5;
  i.duration_ns = 700;
  e = decode_event(bytes_of(i));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(device_number(std::get<IoctlEvent>(*e).rdev), "1:5");
  // Truncated records are refused, never read past their end.
  std::vector<std::byte> short_record = bytes_of(i);
  short_record.resize(sizeof(i) - 1);
  EXPECT_FALSE(decode_event(short_record).ok());
}

TEST(FlightRecorder, KeepsTheLastEventsOfEveryLayer) {
  static const ProbeSpec kMalloc{.symbol = "cudaMalloc", .layer = Layer::kCuda, .args = {}};
  FlightRecorder flight(4);
  CallRecord call;
  call.pid = 3;
  call.spec = &kMalloc;
  call.start_ns = 10;
  flight.add(3, Event{call});
  // A flood of mmaps does not push the CUDA call out.
  for (uint64_t i = 0; i < 100; ++i) {
    MmapEvent m = mapping(MmapEvent::Op::kMmap, 0x1000 * (i + 1), 4096);
    m.pid = 3;
    m.ts_ns = 100 + i;
    flight.add(3, Event{m});
  }
  const nlohmann::json events = flight.events_json(3, 0, {});
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0]["event"], "cudaMalloc");
  EXPECT_EQ(events[0]["layer"], "cuda");
  EXPECT_EQ(events[1]["event"], "mmap");
  EXPECT_DOUBLE_EQ(events[1]["t_s"].get<double>(), 196e-9);  // the last four, in order
  EXPECT_DOUBLE_EQ(events[4]["t_s"].get<double>(), 199e-9);
  EXPECT_EQ(events[4]["flags"], "MAP_PRIVATE|MAP_ANONYMOUS");
  flight.forget(3);
  EXPECT_TRUE(flight.events_json(3, 0, {}).empty());
}

}  // namespace
}  // namespace eacgm
