// Writes a session as a Perfetto trace (trace.perfetto-trace) that opens in
// ui.perfetto.dev: one slice per traced call on its thread's track, threads
// grouped under their process. See docs/PERFETTO.md.
//
// Memory stays bounded on long runs: event packets are streamed to a temporary
// file next to the output (`<path>.events.tmp`) as calls arrive; finish()
// writes the clock snapshot and the track descriptors, whose names are only
// known at the end, and then appends the events and removes the temporary file.
//
// Not thread-safe: on_call() and finish() are called from one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"
#include "sinks/sink.h"

namespace eacgm {

namespace perfetto {
class TracePacket;  // generated from proto/perfetto_trace.proto
}  // namespace perfetto

// The flow id linking one NCCL collective across the ranks' tracks.
uint64_t collective_flow_id(const CollectiveRef& collective);

// Appends `packet` to `out` as one Trace.packet field (for the writer's helpers).
void append_trace_packet(const perfetto::TracePacket& packet, std::string* out);

class PerfettoGpuTracks;

class PerfettoWriter : public Sink {
 public:
  // Creates `path` and its temporary events file; fails with a message naming
  // the path when either cannot be created.
  static Result<std::unique_ptr<PerfettoWriter>> open(const std::string& path);

  ~PerfettoWriter() override;
  PerfettoWriter(const PerfettoWriter&) = delete;
  PerfettoWriter& operator=(const PerfettoWriter&) = delete;

  // Never fails loudly: a write error is remembered and returned by finish().
  void on_call(const CallRecord& call) override;
  // GPU readings become counter tracks, device events instant events
  // (sinks/perfetto_gpu.h).
  void on_gpu_sample(const GpuSample& sample) override;
  void on_gpu_event(const GpuEvent& event) override;
  // The python layer's sampled stacks: nested slices on a "Python (sampled)" track under the
  // thread's track.
  void on_python_stack(const PythonStackChange& change) override;
  Result<void> finish(const Session& session) override;
  // The calls missing from the trace after a write failed. What is written stays a valid trace:
  // it ends after the last whole batch of events that reached the disk.
  std::vector<OutputLoss> losses() const override;

  // Track uuids are a pure function of pid and tid, so events can name their
  // track before the descriptors are written.
  static uint64_t process_track_uuid(uint32_t pid);
  static uint64_t thread_track_uuid(uint32_t pid, uint32_t tid);
  // Bit 61 (the gpu tracks use 63 and 62): a thread's sampled Python stack.
  static uint64_t python_track_uuid(uint32_t pid, uint32_t tid);

  // Every packet is on this one trusted_packet_sequence_id.
  static constexpr uint32_t kSequenceId = 1;
  // Calls nested in a still-open call are held back (serialized) until their
  // parent arrives, so that each thread's slices are written parent first.
  // Past this many bytes per thread they are written as they are (the trace
  // stays correct; see the comment in the .cpp).
  static constexpr size_t kMaxPendingBytesPerThread = 1 << 20;

 private:
  // A finished call and everything nested in it, already serialized.
  struct Subtree {
    uint64_t start_ns = 0;
    std::string packets;
    uint64_t calls = 0;  // the call and those nested in it
  };
  // The events file after a batch reached it whole: its size then, and the calls in it.
  struct Checkpoint {
    uint64_t bytes = 0;
    uint64_t calls = 0;
  };
  struct ThreadState {
    std::vector<Subtree> pending;  // disjoint, in end (= start) order
    size_t pending_bytes = 0;
  };

  PerfettoWriter(std::string path, std::string events_path, std::FILE* out, std::FILE* events);

  void append_call_packets(const CallRecord& call, std::string* begin, std::string* end);
  void write_events(const std::string& bytes, uint64_t calls = 0);
  void flush_events_buffer();
  void flush_pending(ThreadState* thread);
  std::string descriptor_packets(const Session& session);
  Result<void> assemble();
  // After a failed write to the output: cuts it back to the header and the whole batches that
  // are in it, and counts their calls.
  void cut_to_whole_batches();
  void fail(const std::string& what);
  void close_files();

  std::string path_;
  std::string events_path_;
  std::FILE* out_ = nullptr;
  std::FILE* events_ = nullptr;
  std::string events_buffer_;
  // Demangled once per kernel (CallRecord::kernel points into the session's KernelTable).
  std::unordered_map<const std::string*, std::string> kernel_names_;
  uint64_t buffer_calls_ = 0;            // calls in events_buffer_
  std::vector<Checkpoint> checkpoints_;  // one per batch in the events file, in order
  uint64_t header_bytes_ = 0;            // written before the events: 0 if that failed
  uint64_t calls_given_ = 0;
  uint64_t calls_in_trace_ = 0;  // set by finish()
  std::string error_;            // first error, empty while all is well
  bool finished_ = false;
  uint64_t monotonic_at_open_ns_ = 0;
  uint64_t boottime_at_open_ns_ = 0;
  std::map<std::pair<uint32_t, uint32_t>, ThreadState> threads_;  // (pid, tid) seen in calls
  std::set<std::pair<uint32_t, uint32_t>> python_threads_;        // (pid, tid) with Python slices
  std::unique_ptr<perfetto::TracePacket> scratch_;                // reused for every packet
  // Reused for every call's packets, so that the steady state allocates nothing.
  std::string begin_scratch_, end_scratch_, event_scratch_, text_scratch_;
  std::unique_ptr<PerfettoGpuTracks> gpu_;  // created by the first GPU data
};

}  // namespace eacgm
