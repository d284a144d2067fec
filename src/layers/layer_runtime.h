// The live part of a layer: what it keeps while a session runs and how it reacts to what the
// agent sees. The agent's recorder (agent/recorder.h) makes one for each enabled layer whose
// descriptor has a make_runtime (layers/layer.h) and drives them all through this interface, in
// registry order; it never asks which layer one is. A layer whose calls the session counts on
// its own (cuda, driver) needs none.
//
// The hooks are for every layer's events, not only its own: a layer may take what others do into
// account (the os layer times the gaps between traced calls, the python layer names each call's
// line), and may add to another's anomaly (LayerRuntime::explain_window).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent_options.h"
#include "probes/library_finder.h"
#include "probes/probe_control.h"
#include "reader/decoder.h"
#include "session/session.h"
#include "sinks/sink.h"

namespace eacgm {

// What a layer's runtime may use of the agent that drives it.
class LayerHost {
 public:
  virtual Session& session() = 0;
  // The probes (the tracer; a fake in tests); null when the recorder has none.
  virtual ProbeControl* probes() = 0;
  virtual std::span<const std::unique_ptr<Sink>> sinks() = 0;
  // An anomaly, said on stderr as it is found and kept in the session.
  virtual void report(Anomaly anomaly) = 0;
  // A warning, said once on stderr; nothing is kept (serve runs for months).
  virtual void warn(std::string message) = 0;
  // Keeps `event` in the flight recorder of `pid` (agent/flight_recorder.h), written if the
  // process ends abnormally.
  virtual void remember(uint32_t pid, const Event& event) = 0;

 protected:
  ~LayerHost() = default;
};

// What the flags of the live mode say, for each layer to take its own settings from.
struct LayerRuntimeSetup {
  const AgentOptions& options;
  const AgentMode& mode;
};

class LayerRuntime {
 public:
  virtual ~LayerRuntime() = default;

  // The probes are there and no target is followed yet.
  virtual void start() {}
  // A record that is not a call: true when it is this layer's (then no other layer sees it).
  virtual bool on_event(const Event& /*event*/) { return false; }
  // A call of any layer, as it begins (only calls whose entry is sent: collectives).
  virtual void on_call_entry(CallRecord& /*entry*/, ProcessInfo& /*process*/) {}
  // A finished call of any layer, before the session counts it and the sinks see it: a layer may
  // add to it (the collective it belongs to, its Python line). `call.inner` marks a driver call
  // made inside a traced runtime call, which the session does not count on its own.
  virtual void on_call(CallRecord& /*call*/, ProcessInfo& /*process*/) {}

  // A process is followed from now on (found, forked or exec'd).
  virtual void on_process_start(uint32_t /*pid*/, const ProcessInfo& /*process*/,
                                uint64_t /*ts_ns*/) {}
  // `child` is a fork of `parent`: it runs the same image at the same addresses.
  virtual void on_fork(uint32_t /*parent*/, uint32_t /*child*/) {}
  // `pid` exec'd: whatever its old image held is gone.
  virtual void on_exec(uint32_t /*pid*/) {}
  // `pid` exited; `process.exit` says how (the wait status), and a layer may say why.
  virtual void on_exit(uint32_t /*pid*/, ProcessInfo& /*process*/) {}
  // The files `pid` has mapped, when it is found and at each loader stop. The enabled layers'
  // BPF programs are loaded by then; the libraries of library layers are probed right after.
  virtual void on_mapped_files(uint32_t /*pid*/, const std::vector<MappedFile>& /*files*/) {}
  // eacgm kept `pid` stopped from `from_ns` to `to_ns` (a loader stop): not the job's own time.
  virtual void on_pause(uint32_t /*pid*/, uint64_t /*from_ns*/, uint64_t /*to_ns*/) {}
  // Everything kept about `pid` goes: it has exited and serve must not keep the dead.
  virtual void forget(uint32_t /*pid*/) {}

  // Reports what became clear by `now_ns`; `final`: the session is ending.
  virtual void tick(uint64_t /*now_ns*/, bool /*final*/) {}
  // Adds what the layer knows to an anomaly of the window detectors (analysis/window_analyzer.h).
  virtual void explain_window(Anomaly& /*anomaly*/) const {}
  // The session ends: the layer's figures go into the session, its last outputs to the sinks.
  virtual void finish() {}

  // Whether a followed process ran something of the layer that no library name shows (the
  // python layer: an interpreter found by its structures).
  virtual bool mapped() const { return false; }
  // Why the layer sees nothing at all since start() (the gpu layer: no NVML); nullopt when it
  // works.
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Device files the layer knows, by kernel dev_t, for the flight recorder to name; null: none.
  virtual const std::map<uint32_t, std::string>* device_names() const { return nullptr; }
};

// Every enabled layer's runtime, in registry order, for `host` to drive.
using LayerRuntimes = std::vector<std::pair<Layer, std::unique_ptr<LayerRuntime>>>;
LayerRuntimes make_layer_runtimes(const std::set<Layer>& layers, const LayerRuntimeSetup& setup,
                                  LayerHost& host);

}  // namespace eacgm
