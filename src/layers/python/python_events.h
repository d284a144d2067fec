// The python layer's events, decoded (src/layers/python/python.bpf.c makes them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layers/layer.h"

namespace eacgm {

// One frame of a sampled stack: a code object and the raw instruction word of
// the version's layout (see eacgm_py_layout.frame_instr).
struct PyFrameRef {
  uint64_t code = 0;
  uint64_t instr = 0;
};

struct PySampleEvent {
  static constexpr Layer kLayer = Layer::kPython;  // the layer whose records these are
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;
  // What the thread was doing (bpf/events.h eacgm_py_thread_state): running, waiting for
  // something, waiting in the kernel (page faults, disk, reclaim), or stopped from outside
  // (job control, a debugger, eacgm's own stop at a library load).
  enum class State : uint8_t { kRunning, kSleeping, kUninterruptible, kStopped };
  State state = State::kSleeping;
  bool on_cpu() const { return state == State::kRunning; }
  bool truncated = false;           // deeper than the frames kept
  uint64_t voluntary_switches = 0;  // the thread's count of waits begun (task nvcsw)
  uint64_t run_delay_ns = 0;        // its time spent runnable, waiting for a CPU, so far
  std::vector<PyFrameRef> frames;   // innermost first
};

// A code object described the first time a process showed it.
struct PyCodeEvent {
  static constexpr Layer kLayer = Layer::kPython;  // the layer whose records these are
  uint32_t pid = 0;
  uint64_t ts_ns = 0;
  uint64_t code = 0;
  uint32_t firstlineno = 0;
  std::string name;  // co_qualname (3.11+) or co_name
  std::string file;  // co_filename
  std::vector<uint8_t> linetable;
  bool linetable_complete = false;  // the whole table was copied
};

// A function the USDT probes saw return for the first time in a process.
struct PyFunctionEvent {
  static constexpr Layer kLayer = Layer::kPython;  // the layer whose records these are
  uint32_t pid = 0;
  uint64_t ts_ns = 0;
  uint64_t file_ptr = 0;
  uint64_t name_ptr = 0;
  std::string name;  // co_name
  std::string file;  // co_filename
};

struct PyGcEvent {
  static constexpr Layer kLayer = Layer::kPython;  // the layer whose records these are
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;
  uint64_t duration_ns = 0;
  int64_t collected = 0;
  int generation = 0;
};

}  // namespace eacgm
