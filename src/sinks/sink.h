// A sink receives every call as it is decoded and the finished session at the
// end. Sinks never see BPF structures; they write one output format each.
#pragma once

#include "common/result.h"
#include "layers/gpu/gpu_sample.h"
#include "layers/python/python_profile.h"
#include "session/session.h"

namespace eacgm {

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void on_call(const CallRecord& call) = 0;
  // The entry of a call whose probe reports entries (NCCL collectives), before it returns; its
  // `collective` says which collective, when the communicator is known. For whoever shows what
  // is in flight now; a sink that keeps finished calls only ignores it.
  virtual void on_entry(const CallRecord& /*entry*/) {}
  // The gpu layer: one device reading, one device event (XID, ECC), in the
  // order the main loop drains them. Sinks that keep no GPU data ignore them.
  virtual void on_gpu_sample(const GpuSample& /*sample*/) {}
  virtual void on_gpu_event(const GpuEvent& /*event*/) {}
  // The python layer: how a thread's sampled stack changed, in time order per thread.
  virtual void on_python_stack(const PythonStackChange& /*change*/) {}
  // Called once, after the last call; the session holds processes, threads,
  // exits and statistics. Must leave a complete, valid file behind.
  virtual Result<void> finish(const Session& session) = 0;
  // After finish(): what the sink's output is missing because a write failed (none when the
  // output is whole, or the sink writes no file).
  virtual std::vector<OutputLoss> losses() const { return {}; }
};

}  // namespace eacgm
