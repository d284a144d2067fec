// What the python layer learned about a session's Python code: time per
// function from stack samples, calls per function from the USDT probes,
// garbage-collection pauses, slow calls, and the Python line behind each
// traced call of the other layers.
//
// Functions are keyed `module/path.py:qualname`, the file's path below
// site-packages or dist-packages, the standard library's directory or the
// script's directory (the full path is kept beside), so that modules with the
// same base name stay apart. Time comes from wall-clock samples of every thread,
// running or waiting: a sample stands for the time since that thread's
// previous one (at most two periods), so `total_ns` (the function anywhere on
// the stack) and `self_ns` (innermost) are estimates within a period or two
// per stretch of code.
//
// Everything here was read from a target's memory by the BPF walker, racing
// the interpreter: a code object may be freed and its memory reused between
// two reads. So descriptions are checked (names that are Python names, files
// that are paths, line numbers in range) and a sample that passes through a
// code object that failed the check is dropped whole, counted in
// `samples_rejected`.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "layers/python/python_events.h"
#include "session/session.h"

namespace eacgm {

// A place in Python code: what a traced call is attributed to.
struct PythonSite {
  std::string function;  // file.py:qualname
  std::string file;      // co_filename as given
  int line = 0;          // 0 when the line table says nothing
};

// How one thread's sampled Python stack changed: `ended` innermost frames left the stack, then
// `begun` frames (outermost first) entered it, all at `ts_ns`. Sinks turn these into nested
// slices (Perfetto: a "Python" track under the thread).
struct PythonStackChange {
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;
  size_t ended = 0;
  std::vector<const PythonSite*> begun;
};

struct PythonFunctionStats {
  std::string file;
  int first_line = 0;
  std::optional<uint64_t> count;  // calls, where the interpreter has USDT probes
  uint64_t samples = 0;           // samples with the function on the stack
  uint64_t total_ns = 0;
  uint64_t self_ns = 0;
  // Of those, the time its thread sat in an idle wait (is_idle_wait: a queue, a condition, a
  // selector) off CPU: a worker waiting for work, not work.
  uint64_t idle_total_ns = 0;
  uint64_t idle_self_ns = 0;
  std::set<std::pair<uint32_t, uint32_t>>
      threads;  // (pid, tid) that ran it: totals add up over them
};

// The key of a function: `path:qualname` with the path as function_path() gives it.
std::string python_function_key(std::string_view file, std::string_view name,
                                std::string_view script_dir = {});
// The part of a code object's file that tells modules apart: below site-packages or
// dist-packages (`torch/nn/modules/module.py`), below the standard library's directory
// (`multiprocessing/connection.py`), below the script's directory; else the base name (with its
// directory for a package's `__init__.py` or `__main__.py`). `<frozen ...>` and `<string>` as is.
std::string python_function_path(std::string_view file, std::string_view script_dir = {});
// The directory of the script a Python command line runs (`python3 -u dir/train.py ...`),
// absolute, from its argv and its working directory; empty for `-c`, `-m` and the REPL.
std::string python_script_dir(const std::vector<std::string>& argv, std::string_view cwd);
// Whether a code object's name and file can be what CPython holds: a qualname of Python names
// (or `<module>`, `<lambda>`, `<locals>`, ...), a file that is a path or a `<...>` pseudo-file,
// a first line in range. What the walker read from a freed or reused object fails.
bool plausible_python_code(std::string_view name, std::string_view file, uint64_t first_line);
// Standard-library functions in which a thread blocks until another thread or process hands it
// work: `queue.Queue.get`, `threading.Condition.wait`, a selector's select, a multiprocessing
// connection's poll or recv. A thread off CPU in one of them is idle, not slow.
bool is_idle_wait(std::string_view function_key);

struct PythonGcStats {
  uint64_t collections = 0;
  uint64_t total_ns = 0;
  uint64_t max_ns = 0;
  int64_t collected = 0;
};

class PythonProfile {
 public:
  struct Options {
    double rate_hz = 99;
    uint64_t slow_call_ns = 100'000'000;
    // A slow call is judged this long after it ended: the traced calls it waited in, its own
    // thread's or others', may return (and be seen) after the samples that ended it.
    uint64_t hold_ns = 5'000'000'000;
  };
  PythonProfile() = default;
  explicit PythonProfile(Options options) : options_(options) {}

  struct Interpreter {
    uint32_t pid = 0;
    int version = 0;  // major * 100 + minor
    std::string path;
    bool usdt = false;
    std::string script_dir;  // python_script_dir(): function keys are relative to it
  };
  void add_interpreter(Interpreter interpreter);
  // A fork inherits its parent's interpreter and code objects.
  void on_fork(uint32_t parent, uint32_t child);
  void forget(uint32_t pid);  // exec'd into something else
  bool has_interpreter(uint32_t pid) const { return interpreters_.contains(pid); }

  void on_code(const PyCodeEvent& event);
  void on_function(const PyFunctionEvent& event);
  void on_gc(const PyGcEvent& event);
  // Folds a sample into the per-function time; a call that stayed innermost past the
  // threshold on a thread that does the job's work ends up in take_anomalies(). Returns how the
  // thread's stack changed since its previous sample.
  std::vector<PythonStackChange> on_sample(const PySampleEvent& event);
  // Ends every thread's stack (at its last sample plus a period): the session is over.
  std::vector<PythonStackChange> close_stacks();
  // A traced call of another layer finished on a thread: that thread does the job's work (as
  // main threads do), and time it spent inside a traced call (a GPU sync, a collective) is
  // that layer's to judge, not a Python stall.
  void note_traced_call(uint32_t pid, uint32_t tid, uint64_t start_ns, uint64_t duration_ns);

  // The site of a call's innermost Python frame; nullptr when unknown. The pointer stays
  // valid for the profile's life.
  const PythonSite* site(uint32_t pid, uint64_t code, uint64_t instr);

  // Slow calls found since the last take (`session` says which processes supervise traced
  // children). `final` closes calls still open.
  std::vector<Anomaly> take_anomalies(const Session& session, uint64_t now_ns, bool final);
  // The share of [from_ns, to_ns) in which some sampled thread of `pid` waited for a CPU (see
  // starved_); none when the sampler has not visited `pid`.
  std::optional<double> cpu_wait_share(uint32_t pid, uint64_t from_ns, uint64_t to_ns) const;
  // USDT call counts (tracer), by the probe's string pointers.
  void add_call_count(uint32_t pid, uint64_t file_ptr, uint64_t name_ptr, uint64_t count);

  const std::map<std::string, PythonFunctionStats>& functions() const { return functions_; }
  const std::vector<PyGcEvent>& gc_events() const { return gc_events_; }
  // layers.python's figures for summary.json.
  nlohmann::json figures() const;

 private:
  struct Code {
    std::string key;  // path:qualname (python_function_key)
    std::string name;
    std::string file;
    int first_line = 0;
    std::vector<uint8_t> linetable;
    bool library = false;    // the standard library's or an installed package's
    bool idle_wait = false;  // is_idle_wait(key)
    bool importer = false;   // the import machinery's (`<frozen importlib._bootstrap>`)
  };
  using CodeKey = std::pair<uint32_t, uint64_t>;  // (pid, code object)
  // One call seen as the innermost frame of a thread over consecutive samples.
  struct OpenCall {
    uint64_t code = 0;
    uint64_t stack_hash = 0;  // the outer frames': the same function called again is another call
    uint64_t instr = 0;       // at the last sample
    uint64_t first_ns = 0;
    uint64_t last_ns = 0;
    uint64_t samples = 0;
    uint64_t on_cpu = 0;
    uint64_t in_kernel = 0;         // samples waiting uninterruptibly (page faults, disk, reclaim)
    std::vector<PyFrameRef> outer;  // at the first sample, innermost first, for the report
    bool importing = false;         // under the import machinery: start-up, not a stall
  };
  struct Thread {
    uint64_t last_ns = 0;
    uint64_t last_round = 0;    // SamplerRounds::count at its last sample
    uint64_t switches = 0;      // voluntary context switches at the last sample
    uint64_t run_delay_ns = 0;  // the scheduler's run_delay at the last sample
    std::optional<OpenCall> call;
    // Traced calls of 1 ms or more since the open call began, (start, end): how much of a long
    // innermost call was spent waiting in them.
    std::vector<std::pair<uint64_t, uint64_t>> traced;
    std::vector<uint64_t> stack;  // code objects as last sampled, outermost first
  };

  // The sampler's visits of one process: rounds seen so far, and when the latest began (its
  // first sample; the rest of a round follow within microseconds).
  struct SamplerRounds {
    uint64_t count = 0;
    uint64_t current_ns = 0;
  };
  // A thread missing from this many whole rounds has left Python (the round under way when the
  // agent looks may still be arriving, so a thread found in the round before it is there).
  static constexpr uint64_t kRoundsMissedForAGap = 2;
  // No round of a process for this long: it is gone (or no longer sampled), its calls ended.
  static constexpr uint64_t kSamplerSilenceNs = 1'000'000'000;

  const Code* code(uint32_t pid, uint64_t code) const;
  void close_call(uint32_t pid, uint32_t tid, const OpenCall& call);
  uint64_t period_ns() const { return static_cast<uint64_t>(1e9 / options_.rate_hz); }

  Options options_;
  std::map<uint32_t, Interpreter> interpreters_;
  std::map<CodeKey, Code> codes_;
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, std::pair<std::string, std::string>>
      usdt_names_;  // (pid, file ptr, name ptr) -> (file, name)
  std::map<std::string, PythonFunctionStats> functions_;
  std::map<std::pair<uint32_t, uint32_t>, Thread> threads_;
  std::map<uint32_t, SamplerRounds> rounds_;                 // by pid
  std::set<std::pair<uint32_t, uint32_t>> working_threads_;  // made traced calls
  // Seen waiting for work handed to them (a consumer on a queue): what they do with it is work.
  std::set<std::pair<uint32_t, uint32_t>> fed_threads_;
  std::unordered_map<std::string, PythonSite> sites_;  // by "function\0line"
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, const PythonSite*> site_cache_;
  std::vector<PyGcEvent> gc_events_;
  std::map<int, PythonGcStats> gc_by_generation_;
  struct SlowCall {
    uint32_t pid = 0;
    uint32_t tid = 0;
    uint64_t start_ns = 0;
    uint64_t duration_ns = 0;
    double on_cpu = 0;
    double in_kernel = 0;  // share of samples waiting uninterruptibly in the kernel
    std::string function;
    std::string file;
    int line = 0;
    std::vector<std::string> stack;  // outer frames, innermost first
    std::string called_from;         // the innermost outer frame outside the standard library
    // Waiting in library code on a thread that made no traced call: what a launcher's main
    // thread does while its workers run (torchrun's monitor loop, a Popen.wait).
    bool supervisor = false;
  };
  std::vector<SlowCall> slow_calls_;  // found, not yet taken
  // Ended, past the threshold, not yet judged (Options::hold_ns): how much of it was inside
  // its own thread's traced calls so far, and whether it waited off CPU.
  struct HeldCall {
    SlowCall call;
    uint64_t inside_ns = 0;
    bool waiting = false;
  };
  std::vector<HeldCall> held_;
  void judge_held(uint64_t now_ns, bool final);
  // Long calls that were the machine's doing, counted rather than reported.
  struct MachineWaits {
    uint64_t count = 0;
    uint64_t total_ns = 0;
    uint64_t longest_ns = 0;
    std::string longest_function;
    void add(uint64_t duration_ns, const std::string& function);
    nlohmann::json to_json() const;
  };
  MachineWaits kernel_waits_;  // mostly waiting uninterruptibly in the kernel (see close_call)
  MachineWaits cpu_waits_;     // mostly while its process waited for a CPU (see judge_held)
  // Time spans of one process, gaps under `gap_ns` bridged, the last `max_spans`.
  using Spans = std::deque<std::pair<uint64_t, uint64_t>>;
  static constexpr uint64_t kBusyGapNs = 10'000'000;
  static void add_span(Spans& spans, uint64_t from, uint64_t to, uint64_t gap_ns, size_t max_spans);
  static uint64_t covered_ns(const Spans& spans, uint64_t from, uint64_t to);
  // When some thread of a process made traced calls: a thread that waits while others of its
  // process work in traced calls waits for what it handed them (PyTorch's backward runs on its
  // autograd threads while the calling thread waits).
  std::map<uint32_t, Spans> busy_;
  static constexpr size_t kMaxBusySpans = 4096;
  uint64_t waits_for_busy_threads_ = 0;
  // When some thread of a process was runnable but waiting for a CPU (the scheduler's
  // run_delay grew between its samples): on a machine whose CPUs are taken (a DataLoader's
  // workers, another job, a build), a call that runs or holds the GIL takes longer for want of
  // a CPU, and a thread that waits for it waits longer too. That is the machine's doing.
  // Unbridged (samples are 10 ms apart: a thread queued 2 ms of every 10 is mostly running),
  // and enough of them for the hold_ns a slow call waits before it is judged.
  std::map<uint32_t, Spans> starved_;
  static constexpr size_t kMaxStarvedSpans = 16384;
  struct SlowCallSummary {
    uint64_t occurrences = 0;
    uint64_t total_ns = 0;
    uint64_t max_ns = 0;
    std::set<int> lines;      // where it was seen waiting or running
    std::set<uint32_t> pids;  // the processes it stalled in: the first and its forked workers
  };
  // One function that stalls is one finding, at whichever lines and in whichever of a process's
  // forked workers: (pid of the first process of its kind, function).
  std::map<std::pair<uint32_t, std::string>, SlowCallSummary> slow_summary_;
  // Start-up: time each process spent importing modules (sampled), and its longest imports.
  struct Startup {
    uint64_t import_ns = 0;
    std::vector<std::pair<uint64_t, std::string>> slowest;  // (duration, module), longest first
  };
  std::map<uint32_t, Startup> startup_;
  void note_slow_import(uint32_t pid, uint64_t duration_ns, const OpenCall& call);
  // Code objects whose description failed plausible_python_code, per process.
  std::set<CodeKey> rejected_codes_;
  uint64_t codes_rejected_ = 0;
  uint64_t samples_rejected_ = 0;
  uint64_t samples_ = 0;
};

}  // namespace eacgm
