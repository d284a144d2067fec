// The live side of a session: takes ring buffer records from the Tracer,
// keeps the Session up to date, feeds the sinks, and reacts to process
// events (new processes, libraries mapped later, exits).
#pragma once

#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "analysis/collectives.h"
#include "analysis/leak_detector.h"
#include "probes/tracer.h"
#include "session/session.h"
#include "sinks/sink.h"

namespace eacgm {

class Recorder {
 public:
  Recorder(Session& session, std::set<Layer> layers, CollectiveTracker::Options collectives = {})
      : session_(session), layers_(std::move(layers)), collectives_(collectives) {}

  void add_sink(std::unique_ptr<Sink> sink) { sinks_.push_back(std::move(sink)); }
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

  // Entry point for every ring buffer record.
  void handle(std::span<const std::byte> data);

  // Starts following a process: its /proc identity, rank and libraries.
  void watch_process(uint32_t pid, uint64_t start_ns);
  // Probes every library of an enabled layer that `pid` has mapped.
  void attach_mapped_libraries(uint32_t pid);
  // Probes the enabled layers' libraries found on the job's search path.
  void attach_search_path_libraries(const std::map<std::string, std::string>& env);
  // Resumes every target that the loader probe stopped and we have not yet
  // resumed: nothing may stay stopped once we stop listening.
  void resume_stopped_targets();
  // Processes still alive among those followed.
  size_t live_processes() const;

  // Live analysis: reports anomalies that became clear by `now_ns`.
  // `final`: the session is ending; judge on what there is.
  void tick(uint64_t now_ns, bool final = false);

  // Lets every sink write its final file.
  std::vector<std::string> finish_sinks();

  const std::vector<std::string>& warnings() const { return warnings_; }
  uint64_t decode_errors() const { return decode_errors_; }

 private:
  void on_call(const CallRecord& call);
  void on_process_event(const struct ProcEvent& event);
  void refresh_identity(uint32_t pid);
  void warn(std::string message);
  void report(Anomaly anomaly);  // prints it live and keeps it in the session

  Session& session_;
  std::set<Layer> layers_;
  Tracer* tracer_ = nullptr;
  std::vector<std::unique_ptr<Sink>> sinks_;
  std::set<uint32_t> stopped_;  // targets stopped by the loader probe
  CollectiveTracker collectives_;
  LeakDetector leaks_;
  uint64_t leaks_checked_ns_ = 0;
  std::vector<std::string> warnings_;
  uint64_t decode_errors_ = 0;
};

// "killed by SIGSEGV (Segmentation fault), core dumped" from a wait status.
ProcessExit describe_exit_status(int status);

}  // namespace eacgm
