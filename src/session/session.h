// The session model: everything a recording learned, independent of how it
// was collected (live BPF or a recorded file) and of how it is written out.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "layers/os/os_events.h"
#include "layers/python/python_events.h"
#include "probes/probe_table.h"
#include "session/kernels.h"
#include "session/nested_time.h"
#include "session/overhead.h"

namespace eacgm {

// A collective's place in its communicator, the same on every rank.
struct CollectiveRef {
  std::string comm_id;  // identifies the communicator across processes
  uint64_t seq = 0;     // 1 for the first collective on the communicator
  int rank = -1;
  int nranks = 0;
};

struct PythonSite;  // layers/python/python_profile.h

// One finished traced call, decoded from the ring buffer (or, for rows that
// announce their start, a call that has just begun: finished == false).
struct CallRecord {
  uint32_t pid = 0;
  uint32_t tid = 0;
  const ProbeSpec* spec = nullptr;  // row of the layer's probe table
  uint32_t func_id = 0;
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC (bpf_ktime_get_ns)
  uint64_t duration_ns = 0;
  uint32_t depth = 0;
  // Which of its thread's announcing calls (rows that emit their entry) this is, the same in its
  // begin and its end; 0 for other rows (bpf/events.h eacgm_call.announced).
  uint32_t announced = 0;
  bool finished = true;
  RawCall raw;
  std::optional<CollectiveRef> collective;  // set by the recorder for NCCL collectives
  // The caller's innermost Python frame when the call started (python layer): raw, and as
  // resolved by the recorder (owned by the session's PythonProfile), nullptr when unknown.
  uint64_t py_code = 0;
  uint64_t py_instr = 0;
  const PythonSite* py_site = nullptr;
  // A launch's kernel, as the session's KernelTable named its handle (set by the recorder);
  // nullptr when the call is not a launch or the kernel's name was never seen.
  const std::string* kernel = nullptr;
  // The call ran inside an open call of the layer its layer is built on (a driver call made by
  // the CUDA runtime): that call's own work, in the timeline and the database, never counted.
  bool inner = false;

  Layer layer() const { return spec->layer; }
  std::string_view name() const { return spec->symbol; }
  // The arguments decoded, once for every sink that writes them.
  const std::vector<DecodedArg>& decoded_args() const {
    if (!decoded_args_) decoded_args_ = decode_args(*spec, raw);
    return *decoded_args_;
  }
  mutable std::optional<std::vector<DecodedArg>> decoded_args_;  // decoded_args()'s cache
  bool failed() const { return spec->returns_status && raw.ret != 0; }
  uint64_t bytes() const { return call_bytes(*spec, raw); }
};

// Who sent a process the signal that ended it.
struct SignalSender {
  uint32_t pid = 0;
  std::string comm;
};

struct ProcessExit {
  std::optional<int> code;    // exit status when it exited normally
  std::optional<int> signal;  // terminating signal otherwise
  bool core_dumped = false;
  std::string cause;                   // a sentence a person understands
  std::optional<SignalSender> sender;  // a process sent the terminating signal (os layer)

  // Killed by a signal or exited with a non-zero code.
  bool abnormal() const { return signal.has_value() || (code && *code != 0); }
};

struct ProcessInfo {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  std::string comm;
  std::vector<std::string> cmdline;
  std::optional<int> rank;
  std::optional<int> world_size;  // WORLD_SIZE from the environment
  bool forked = false;            // its fork was seen (it started while traced)
  bool execed = false;            // it ran exec while traced
  uint64_t start_ns = 0;          // monotonic; 0 when it was already running
  uint64_t end_ns = 0;            // monotonic; 0 while alive
  std::optional<ProcessExit> exit;
  std::map<uint32_t, std::string> threads;  // tid -> thread name
  std::string flight_recorder;  // its last events, relative to the session dir, when it died
};

// Aggregates of one API, operator or function.
struct CallStats {
  uint64_t count = 0;
  uint64_t errors = 0;
  uint64_t total_ns = 0;
  // total_ns less the time of traced calls nested in these (torch: operators called by
  // operators on the same thread); equal to total_ns in layers whose calls do not nest.
  uint64_t self_ns = 0;
  uint64_t bytes = 0;
  std::map<int64_t, uint64_t> errors_by_code;
  std::vector<uint64_t> durations_ns;  // every duration, for exact percentiles
  // Traced part of the time (--overhead-budget): `count` and the sums are of the calls seen, and
  // the layer's traced_fraction says what share of the time that was.
  bool sampled = false;

  // Nearest-rank percentile (p in [0, 100]); 0 when empty.
  uint64_t percentile_ns(double p) const;
};

// Device memory of one process: allocations matched to frees by pointer.
// A process's device memory as its traced allocations and frees tell it: the one model the live
// session and `eacgm analyze` (analysis/session_db.cpp) both keep.
struct DeviceMemory {
  int64_t outstanding_bytes = 0;
  int64_t peak_bytes = 0;
  uint64_t unmatched_frees = 0;                 // frees of pointers allocated before tracing began
  std::unordered_map<uint64_t, uint64_t> live;  // pointer -> bytes

  void on_alloc(uint64_t ptr, uint64_t bytes);
  void on_free(uint64_t ptr);  // free(nullptr) is a documented no-op
};

enum class LayerStatus { kActive, kUnavailable, kDisabled };
std::string_view layer_status_name(LayerStatus status);  // as in summary.json

struct LayerState {
  LayerStatus status = LayerStatus::kDisabled;
  std::string reason;                  // why unavailable or disabled
  std::vector<std::string> libraries;  // files whose functions are probed
  // Whether a traced process mapped one of them: record probes the libraries on the job's search
  // path before it starts, and a job may never load them (a CUDA toolkit on a CPU-only job).
  bool loaded_by_job = true;
  std::map<std::string, CallStats, std::less<>> calls;  // by symbol name
  // Calls that were another layer's call's inner part (CallRecord::inner), by symbol name.
  std::map<std::string, uint64_t, std::less<>> inner_calls = {};
  nlohmann::json extra = nlohmann::json::object();  // layer-specific figures (nccl: ranks)
  // --overhead-budget: the share of the session this layer's cycled rows were traced.
  std::optional<double> traced_fraction = std::nullopt;
  // And what a sampled call count multiplies by to estimate the whole session's
  // (DutyCycleFigures::count_scale).
  std::optional<double> count_scale = std::nullopt;
};

// What an output of the session could not hold: a write failed (a full disk) and the rest of it,
// or all of it, is missing. summary.json lists these ("lost") and says the session is not
// complete; record and attach say so and exit non-zero.
struct OutputLoss {
  std::string output;       // relative to the session directory: "events.sqlite"
  uint64_t calls = 0;       // calls the output was given
  uint64_t calls_lost = 0;  // of those, calls not in it
  std::string error;        // the first failure, with its reason
};

// Something slow or broken, with the evidence and what to do about it.
struct Anomaly {
  std::string kind;  // "straggler", "hang", ...
  Layer layer = Layer::kCuda;
  std::optional<uint32_t> pid;
  std::optional<int> rank;
  double t_s = 0;    // seconds since the session started
  double score = 0;  // lower is more anomalous (a log-probability)
  nlohmann::json evidence = nlohmann::json::object();
  std::string message;
  std::string suggestion;
};

class Session {
 public:
  // Folds one call into the statistics and the memory model.
  void add_call(const CallRecord& call);
  ProcessInfo& process(uint32_t pid);
  const ProcessInfo* find_process(uint32_t pid) const;

  std::string version;
  std::vector<std::string> command;  // record: the job's argv; attach: empty
  std::vector<uint32_t> attached_pids;
  std::optional<int> exit_code;    // the job's exit code (record)
  uint64_t start_ns = 0;           // monotonic
  uint64_t end_ns = 0;             // monotonic
  int64_t realtime_offset_ns = 0;  // add to a monotonic time to get wall-clock ns
  uint64_t events_recorded = 0;
  uint64_t events_dropped = 0;  // ring buffer reservations that failed, all CPUs
  // Events the decoder rejected (a record not in the wire format this eacgm reads): lost too, so
  // counted beside the drops and warned about once.
  uint64_t events_undecodable = 0;
  // --overhead-budget: calls of rows that may be traced part of the time are marked sampled.
  bool duty_cycled = false;
  bool interrupted = false;      // stopped by Ctrl-C or SIGTERM
  std::vector<OutputLoss> lost;  // outputs that could not be written in full
  TracingOverhead overhead;      // what tracing cost (record and attach fill it at the end)
  // The window detectors' workers (WindowAnalyzer::report()): which processes were judged, and
  // which ended before their warm-up gave them a baseline.
  nlohmann::json window_workers = nlohmann::json::array();
  // Every call's duration is kept for exact percentiles; `eacgm serve` runs
  // for days and keeps its own fixed-bucket histograms instead.
  bool keep_durations = true;

  std::map<uint32_t, ProcessInfo> processes;
  std::map<Layer, LayerState> layers;
  std::map<uint32_t, DeviceMemory> device_memory;  // by pid
  std::vector<Anomaly> anomalies;
  OsActivity os;                     // the os layer's signals, OOM kills, mappings and ioctls
  std::vector<PyGcEvent> python_gc;  // the python layer's garbage collections
  // The torch layer's operators nest: what each call's self time excludes.
  NestedTime torch_nesting;
  // Kernel names by handle, and every kernel's launches (cuda and driver layers).
  KernelTable kernels;

  double duration_s() const { return end_ns > start_ns ? (end_ns - start_ns) / 1e9 : 0.0; }
};

// What a process is to its job, for naming it and for keeping baselines apart:
//   "worker"   a fork of a traced process still running its image (a DataLoader or
//              multiprocessing worker): forked and never exec'd, or, when it was already running
//              (attach), the same command line as its traced parent; it keeps its parent's rank
//   "rank"     a process with a rank of its own (RANK, or its NCCL communicator)
//   "launcher" a process whose children are ranks (torchrun, mpirun, a launcher script)
//   "main"     anything else: the job's own process
std::string_view process_role(const Session& session, const ProcessInfo& process);

}  // namespace eacgm
