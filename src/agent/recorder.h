// The live side of a session: takes ring buffer records from the Tracer, keeps the Session up to
// date, feeds the sinks, and reacts to process events (new processes, libraries mapped later,
// exits). What each layer keeps and judges is its runtime's (layers/layer_runtime.h), driven here
// for every enabled layer alike; the recorder itself keeps what is every layer's: the targets and
// their stops, the processes' identities, the flight recorders, the window and leak detectors and
// the overhead budget.
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

#include "agent/agent_options.h"
#include "agent/duty_cycle.h"
#include "agent/flight_recorder.h"
#include "analysis/leak_detector.h"
#include "analysis/window_analyzer.h"
#include "layers/layer_runtime.h"
#include "probes/probe_control.h"
#include "reader/decoder.h"
#include "session/overhead.h"
#include "session/session.h"
#include "sinks/sink.h"

namespace eacgm {

class Recorder : private LayerHost {
 public:
  // `options` and `mode` are the live mode's: each enabled layer's runtime takes its settings.
  Recorder(Session& session, std::set<Layer> layers, const AgentOptions& options = {},
           const AgentMode& mode = {});

  void add_sink(std::unique_ptr<Sink> sink) { sinks_.push_back(std::move(sink)); }
  // The probes it asks for libraries, interpreters and processes (the Tracer; a fake in tests).
  void set_probes(ProbeControl* probes) { probes_ = probes; }
  // Where flight recorder files go (flight_recorder/<pid>.json); none if empty.
  void set_output_dir(std::string dir) { out_dir_ = std::move(dir); }

  // The probes are set and no target is followed yet: each layer's runtime starts (the os
  // layer hands the tracer the devices whose ioctls it times).
  void start_layers();

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
  // on the search path prove nothing about the job: torch is installed, the job may not use it),
  // or ran what the layer's runtime found by other means (LayerRuntime::mapped).
  bool layer_mapped(Layer layer) const;
  // Why an enabled layer's runtime sees nothing (LayerRuntime::unavailable); nullopt otherwise.
  std::optional<std::string> layer_unavailable(Layer layer) const;

 private:
  // What the layers' runtimes may use (LayerHost).
  Session& session() override { return session_; }
  ProbeControl* probes() override { return probes_; }
  std::span<const std::unique_ptr<Sink>> sinks() override { return sinks_; }
  void report(Anomaly anomaly) override;
  void warn(std::string message) override;
  void remember(uint32_t pid, const Event& event) override { flight_.add(pid, event); }

  // The enabled layer's runtime; null when it has none.
  const LayerRuntime* runtime_of(Layer layer) const;
  void on_call(const CallRecord& call);
  void on_process_event(const struct ProcEvent& event);
  void write_flight_recorder(uint32_t pid);
  void lose_flight_recorder(const std::string& relative, std::string error);
  void refresh_identity(uint32_t pid);
  // Sends SIGCONT to a stopped target and counts how long it waited.
  void resume(uint32_t pid);
  // Leaves `pid` to others for good (serve's notice): untargeted in the kernel, its events dropped.
  void pass_over(uint32_t pid);
  // Moves the budget's phases on, attaching or releasing the cycled probes.
  void cycle(uint64_t now_ns, bool final);

  Session& session_;
  std::set<Layer> layers_;
  ProbeControl* probes_ = nullptr;
  std::vector<std::unique_ptr<Sink>> sinks_;
  // Targets stopped by the loader probe or the unwind guard: when each stop was asked for.
  std::map<uint32_t, uint64_t> stopped_;
  TargetPauses pauses_;
  // Targets stopped as a thread began to unwind, their return addresses put back: tick() resumes
  // them after one more drain.
  std::set<uint32_t> unwinding_;
  // The enabled layers' live state, in registry order (layers/layer_runtime.h).
  LayerRuntimes runtimes_;
  LeakDetector leaks_;
  uint64_t leaks_checked_ns_ = 0;
  WindowAnalyzer analysis_;  // latency, throughput and GMM on one-second windows
  FlightRecorder flight_;
  std::string out_dir_;
  size_t flight_files_ = 0;
  std::set<Layer> mapped_layers_;
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
