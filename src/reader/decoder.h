// Turns the raw bytes of one ring buffer record into a typed event. Pure:
// no kernel, no I/O, so it is unit-tested and fuzzed on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/result.h"
#include "layers/python/python_events.h"
#include "layers/torch/torch_ops.h"
#include "session/session.h"

namespace eacgm {

struct ProcEvent {
  // kNotice: serve's notice of a process that mapped a traced library (bpf/core.bpf.c).
  enum class Kind { kFork, kExec, kExit, kLoaderStop, kUnwindStop, kNotice };
  Kind kind = Kind::kFork;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t ppid = 0;   // kFork: the parent
  int32_t status = 0;  // kExit: wait(2)-style status, (code << 8) | signal
  uint64_t ts_ns = 0;
  std::string comm;
  // kUnwindStop (struct eacgm_unwind_stop): the traced calls the thread was in, and the
  // return addresses to put back, as (stack slot, original address), newest first.
  uint32_t open_calls = 0;
  std::vector<std::pair<uint64_t, uint64_t>> return_slots;
};

// A traced call gave a handle a name (struct eacgm_name): a kernel's host stub, CUfunction or
// CUkernel. Sent with the call's own event; a failed call names nothing.
struct HandleNameEvent {
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;
  const ProbeSpec* spec = nullptr;
  uint64_t handle = 0;
  int64_t ret = 0;
  std::string name;

  bool failed() const { return spec->returns_status && ret != 0; }
};

using Event = std::variant<CallRecord, ProcEvent, SignalEvent, OomKillEvent, MmapEvent, IoctlEvent,
                           PySampleEvent, PyCodeEvent, PyFunctionEvent, PyGcEvent, HandleNameEvent>;

// The layer an event belongs to: a call's, a handle's name's, or the layer whose program sends
// that kind of record (each such struct says, as kLayer); none for the core's process events.
std::optional<Layer> layer_of(const Event& event);

// `torch`: the torch layer's rows (made at run time, see layers/torch/torch_ops.h); without it a
// torch call record is an error like any record of an unknown function.
Result<Event> decode_event(std::span<const std::byte> data, const TorchOpTable* torch = nullptr);

}  // namespace eacgm
