// The live side of a session: takes ring buffer records from the Tracer,
// keeps the Session up to date, feeds the sinks, and reacts to process
// events (new processes, libraries mapped later, exits).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "agent/duty_cycle.h"
#include "agent/flight_recorder.h"
#include "analysis/leak_detector.h"
#include "analysis/window_analyzer.h"
#include "layers/gpu/gpu_layer.h"
#include "layers/nccl/collectives.h"
#include "layers/os/os_monitor.h"
#include "layers/python/python_profile.h"
#include "layers/torch/torch_threads.h"
#include "probes/probe_control.h"
#include "reader/decoder.h"
#include "session/overhead.h"
#include "session/session.h"
#include "sinks/sink.h"

namespace eacgm {

class Recorder {
 public:
  Recorder(Session& session, std::set<Layer> layers, CollectiveTracker::Options collectives = {})
      : session_(session), layers_(std::move(layers)), collectives_(collectives) {
    analysis_.set_lookup([this](uint32_t pid) {
      const ProcessInfo* p = session_.find_process(pid);
      return p ? EntityInfo{p->rank, p->comm, std::string(process_role(session_, *p))}
               : EntityInfo{};
    });
  }

  void add_sink(std::unique_ptr<Sink> sink) { sinks_.push_back(std::move(sink)); }
  // The probes it asks for libraries, interpreters and processes (the Tracer; a fake in tests).
  void set_probes(ProbeControl* probes) { probes_ = probes; }
  // The gpu layer's sampler: tick() drains it, finish_sinks() ends it.
  void set_gpu(GpuLayer* gpu) { gpu_ = gpu; }
  // Where flight recorder files go (flight_recorder/<pid>.json); none if empty.
  void set_output_dir(std::string dir) { out_dir_ = std::move(dir); }

  // The os layer: which device files' ioctls are timed (comma-separated
  // globs), and the analysis's thresholds.
  struct OsOptions {
    std::string ioctl_devices = "/dev/nvidia*";
    OsMonitor::Options monitor;
  };
  void configure_os(OsOptions options);
  // Resolves the ioctl device pattern to device numbers and hands them to
  // the tracer; repeated by tick() so devices created later are timed too.
  void refresh_ioctl_devices();

  // The python layer's thresholds and sampling rate (the tracer samples; the profile weighs).
  void configure_python(PythonProfile::Options options, bool count_calls) {
    python_ = PythonProfile(options);
    python_calls_ = count_calls;
  }

  // --overhead-budget (agent/duty_cycle.h): the rows that may be traced part of the time
  // (may_duty_cycle) are, so that no process's estimated slowdown passes the budget. The tracer
  // must have been opened with Tracer::Options::duty_cycle. `call_costs` says what one traced call
  // of each layer costs the job, in ns (its traps and programs); it is asked once a second.
  using CallCosts = std::function<std::map<Layer, double>()>;
  void set_overhead_budget(DutyCycle::Options options, uint64_t start_ns, CallCosts call_costs);
  // The budget's account so far, or nullopt without a budget.
  std::optional<DutyCycleFigures> duty_cycle_figures(uint64_t now_ns) const;

  // Entry point for every ring buffer record.
  void handle(std::span<const std::byte> data);

  // Starts following a process: its /proc identity, rank and libraries.
  void watch_process(uint32_t pid, uint64_t start_ns);
  // serve's notice of new processes (Tracer::Options::notice_libraries): a process that mapped a
  // traced library became a target and waits, stopped. The handler takes it (true: it has
  // called watch_process) or not (it is then passed over for good); either way it goes on.
  using NoticeHandler = std::function<bool(uint32_t pid, uint64_t ts_ns)>;
  void set_notice_handler(NoticeHandler handler) { notice_ = std::move(handler); }
  // Probes every library of an enabled layer that `pid` has mapped.
  void attach_mapped_libraries(uint32_t pid);
  // Probes the enabled layers' libraries found on the job's search path.
  void attach_search_path_libraries(const std::map<std::string, std::string>& env);
  // Resumes every target that the loader probe stopped and we have not yet
  // resumed: nothing may stay stopped once we stop listening.
  void resume_stopped_targets();
  // How long eacgm kept targets stopped (library loads, unwinding): its own cost to the job.
  const TargetPauses& pauses() const { return pauses_; }
  // Processes still alive among those followed.
  size_t live_processes() const;
  // Releases everything kept about a process that has exited (its session
  // entry, memory model, flight recorder, leak history, communicators and os
  // layer records): `eacgm serve` follows processes for days and must not
  // keep the dead.
  void forget_process(uint32_t pid);

  // Live analysis: reports anomalies that became clear by `now_ns`.
  // `final`: the session is ending; judge on what there is.
  void tick(uint64_t now_ns, bool final = false);

  // Lets every sink write its final file.
  std::vector<std::string> finish_sinks();

  // Whether a followed process had a library of `layer` mapped (probes on a library found only
  // on the search path prove nothing about the job: torch is installed, the job may not use it).
  bool layer_mapped(Layer layer) const { return mapped_layers_.contains(layer); }

 private:
  void on_call(const CallRecord& call);
  void on_process_event(const struct ProcEvent& event);
  void on_os_event(const Event& event);
  void on_python_event(const Event& event);
  // Registers `pid` with the python layer if one of `files` is a CPython interpreter.
  void find_interpreter(uint32_t pid, const std::vector<MappedFile>& files);
  void check_libraries(uint32_t pid, const std::vector<MappedFile>& files);
  void write_flight_recorder(uint32_t pid);
  void lose_flight_recorder(const std::string& relative, std::string error);
  // A hang reported earlier moved after all: its anomaly says so.
  void resolve_hang(const CollectiveTracker::HangResolution& resolution);
  // A window anomaly of a process whose threads waited for a CPU for much of it says so: the
  // machine's CPUs were taken, which is where to look first (PythonProfile::cpu_wait_share).
  void note_cpu_waits(Anomaly& anomaly) const;
  void report(Anomaly anomaly);
  void refresh_identity(uint32_t pid);
  void warn(std::string message);
  // Sends SIGCONT to a stopped target and counts how long it waited.
  void resume(uint32_t pid);
  // Leaves `pid` to others for good (serve's notice): untargeted in the kernel, its events dropped.
  void pass_over(uint32_t pid);
  // Moves the budget's phases on, attaching or releasing the cycled probes.
  void cycle(uint64_t now_ns, bool final);

  Session& session_;
  std::set<Layer> layers_;
  ProbeControl* probes_ = nullptr;
  GpuLayer* gpu_ = nullptr;
  std::vector<std::unique_ptr<Sink>> sinks_;
  // Targets stopped by the loader probe or the unwind guard: when each stop was asked for.
  std::map<uint32_t, uint64_t> stopped_;
  TargetPauses pauses_;
  // Targets stopped as a thread began to unwind, their return addresses put back: tick() resumes
  // them after one more drain.
  std::set<uint32_t> unwinding_;
  CollectiveTracker collectives_;
  LeakDetector leaks_;
  uint64_t leaks_checked_ns_ = 0;
  WindowAnalyzer analysis_;  // latency, throughput and GMM on one-second windows
  OsMonitor os_;
  std::string ioctl_devices_;
  uint64_t devices_refreshed_ns_ = 0;
  std::map<FileId, LibraryBuild> library_builds_;  // identified files (reading ELF costs)
  FlightRecorder flight_;
  std::string out_dir_;
  size_t flight_files_ = 0;
  std::set<Layer> mapped_layers_;
  TorchThreads torch_threads_;
  PythonProfile python_;
  bool python_calls_ = false;  // count Python calls through USDT
  struct PythonRegistration {
    uint64_t runtime = 0;
    uint32_t layout = 0;
  };
  std::map<uint32_t, PythonRegistration> python_processes_;  // pid -> where its runtime is
  std::set<FileId> not_interpreters_;                        // mapped files that are not CPython
  std::optional<DutyCycle> duty_;
  CallCosts call_costs_;
  NoticeHandler notice_;
  // Processes noticed and not taken, with the children the kernel made targets meanwhile (one
  // forked after another agent's SIGCONT ended the stop early): their events are not this
  // session's. Bounded: those forks are in the ring before pass_over returns, so an old entry
  // is never needed again.
  std::set<uint32_t> passed_over_;
  std::deque<uint32_t> passed_over_order_;
  std::map<Layer, double> call_cost_ns_;  // call_costs_'s answer, refreshed once a second
  uint64_t call_costs_read_ns_ = 0;
  bool budget_warned_ = false;
};

// "killed by SIGSEGV (Segmentation fault), core dumped" from a wait status.
ProcessExit describe_exit_status(int status);

}  // namespace eacgm
