// The live agent behind `record`, `attach` and `serve`: one session, its recorder, the tracer and
// the GPU sampler, set up in one order, woken by one loop and torn down in one order. The modes
// differ only in how they find their targets (a child, a process tree, a node's /proc) and in the
// sinks they run (the session directory's files, Prometheus metrics); a flag means the same in
// each, since each reads it from the same AgentOptions field here.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/agent_options.h"
#include "agent/overhead_meter.h"
#include "agent/recorder.h"
#include "common/clock.h"
#include "probes/probe_table.h"
#include "probes/tracer.h"
#include "session/session.h"
#include "sinks/sink.h"

namespace eacgm {

// The signals a live mode reads from a signalfd instead of handling them: blocked from
// construction, which must come before any thread exists so that they reach only the fd, to
// destruction. Those still pending then (a second Ctrl-C while the session was written, the
// job's SIGCHLD) were for the loop: they are taken, not delivered by their default action once
// the mask is back, where they would end eacgm after its work was done and turn the exit code
// a caller relies on into a death by signal.
class LoopSignals {
 public:
  explicit LoopSignals(std::initializer_list<int> signals);
  ~LoopSignals();
  LoopSignals(const LoopSignals&) = delete;
  LoopSignals& operator=(const LoopSignals&) = delete;

  int fd() const { return fd_; }
  // The mask from before, which a child takes back before it execs the job.
  const sigset_t& previous_mask() const { return previous_; }

 private:
  sigset_t set_{};
  sigset_t previous_{};
  int fd_ = -1;
};

class AgentRuntime {
 public:
  AgentRuntime(AgentOptions options, AgentMode mode);
  AgentRuntime(const AgentRuntime&) = delete;
  AgentRuntime& operator=(const AgentRuntime&) = delete;

  // Checks the privileges and loads the tracer with the options' layers; the python sampler
  // starts and the os layer is configured. Nothing is probed in a target yet and no sink is
  // added. On failure says why on stderr and returns the exit code.
  std::optional<int> open();
  // The sinks every event goes to; added between open() and begin().
  void add_sink(std::unique_ptr<Sink> sink) { recorder_.add_sink(std::move(sink)); }
  // The GPU sampler and the loader probe (libraries targets load later are probed before their
  // first call): the session runs from here.
  void begin();

  // Waits for events until `done()`; after each wait `on_wake(now_ns)` runs, after the recorder's
  // tick. Each signal read from `signals` goes to `on_signal`, which returns true to stop at once.
  template <typename Done, typename OnSignal, typename OnWake>
  void loop(const LoopSignals& signals, Done done, OnSignal on_signal, OnWake on_wake) {
    while (!done()) {
      if (tracer_->wait(signals.fd()) < 0) break;
      const uint64_t now = monotonic_ns();
      recorder_.tick(now);
      on_wake(now);
      signalfd_siginfo si{};
      bool stop = false;
      while (read(signals.fd(), &si, sizeof(si)) == sizeof(si)) stop |= on_signal(si);
      if (stop) return;
    }
  }

  // Nothing stays stopped or probed: every stopped target resumed, every probe removed, the last
  // events read.
  void stop();
  // Each traced layer's status in the session (LayerState::status, reason, libraries), from what
  // the tracer probed and what the targets mapped, by the layer's LayerSource. A layer read from
  // user space (gpu) is its runtime's: LayerRuntime::finish.
  void settle_layer_statuses();
  // What tracing has cost the targets so far (session/overhead.h).
  TracingOverhead overhead(uint64_t now_ns);

  const AgentOptions& options() const { return options_; }
  Session& session() { return session_; }
  Recorder& recorder() { return recorder_; }
  Tracer& tracer() { return *tracer_; }

 private:
  void settle_library_layer(const LayerInfo& info, LayerState& state,
                            const std::optional<std::string>& problem);

  AgentOptions options_;
  AgentMode mode_;
  Session session_;
  Recorder recorder_;
  OverheadMeter overhead_;
  std::unique_ptr<Tracer> tracer_;
};

}  // namespace eacgm
