// The last events of every layer of every process, kept in memory so that
// when a process dies abnormally (a signal, a non-zero exit) what it was
// doing just before can be written next to the session: the CUDA calls, the
// collectives, the mappings and signals of its last moments.
//
// One ring per process and layer (plus one for process events), so a flood
// of one layer (mmap calls from an allocator) never pushes out the last
// calls of another.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "reader/decoder.h"
#include "session/session.h"

namespace eacgm {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t per_layer = 64) : per_layer_(per_layer) {}

  void add(uint32_t pid, const Event& event);
  // The kept events of `pid`, oldest first, as summary-style JSON objects.
  // `start_ns` is the session start (times are seconds since it); `devices`
  // names ioctl devices by kernel dev_t.
  nlohmann::json events_json(uint32_t pid, uint64_t start_ns,
                             const std::map<uint32_t, std::string>& devices) const;
  // The whole file written for a process that died: identity, exit, events.
  nlohmann::json report(const ProcessInfo& process, uint64_t start_ns,
                        const std::map<uint32_t, std::string>& devices) const;
  void forget(uint32_t pid) { rings_.erase(pid); }
  size_t per_layer() const { return per_layer_; }

 private:
  struct Ring {
    std::vector<Event> items;
    size_t next = 0;  // oldest item once the ring is full
  };
  // Process events, then one ring per layer by its number (bpf/events.h; gpu's stays empty).
  static constexpr size_t kRings = EACGM_LAYER_ID_END;

  size_t per_layer_;
  std::unordered_map<uint32_t, std::array<Ring, kRings>> rings_;
};

}  // namespace eacgm
