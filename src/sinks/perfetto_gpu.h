// The gpu layer in the Perfetto trace: one counter track per device and
// metric (grouped under a track per device), counter tracks for each traced
// process's GPU memory and SM utilisation under its process track, and an
// instant event per XID or ECC event on the device's track. Used by
// PerfettoWriter, which streams the packets and writes the descriptors.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>

#include "layers/gpu/gpu_sample.h"
#include "session/session.h"

namespace eacgm {

class PerfettoGpuTracks {
 public:
  // Packets for one sample / one event, framed as Trace.packet fields.
  std::string sample_packets(const GpuSample& sample);
  std::string event_packets(const GpuEvent& event);
  // Descriptors of every track the packets above used; device names come
  // from session.layers[gpu].
  std::string descriptor_packets(const Session& session) const;

  // Track uuids. Bit 63 keeps them apart from process and thread tracks
  // (pid << 32 | tid, with pid < 2^22); bit 62 tells device from process tracks.
  static uint64_t device_track_uuid(uint32_t device);
  static uint64_t device_counter_uuid(uint32_t device, uint32_t counter);
  static uint64_t process_counter_uuid(uint32_t pid, uint32_t device, uint32_t counter);

  // Counter ids besides the GpuMetric values.
  static constexpr uint32_t kThrottledCounter = 0x80;  // 1 while thermal/power throttled
  static constexpr uint32_t kProcessMemory = 0;
  static constexpr uint32_t kProcessSmUtil = 1;

 private:
  std::set<uint32_t> devices_;
  std::set<std::pair<uint32_t, uint32_t>> device_counters_;              // (device, counter)
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> process_counters_;  // (pid, device, counter)
};

}  // namespace eacgm
