#include "sinks/perfetto_gpu.h"

#include <fmt/format.h>

#include <map>

#include "sinks/perfetto_proto.h"
#include "sinks/perfetto_writer.h"

namespace eacgm {
namespace {

namespace pb = ::eacgm::perfetto;

constexpr uint64_t kGpuBit = 1ull << 63;
constexpr uint64_t kDeviceBit = 1ull << 62;

void counter_packet(uint64_t ts_ns, uint64_t track, double value, std::string* out) {
  pb::TracePacket packet;
  packet.set_timestamp(ts_ns);
  packet.set_timestamp_clock_id(pb::BUILTIN_CLOCK_MONOTONIC);
  packet.set_trusted_packet_sequence_id(PerfettoWriter::kSequenceId);
  pb::TrackEvent* event = packet.mutable_track_event();
  event->set_type(pb::TrackEvent::TYPE_COUNTER);
  event->set_track_uuid(track);
  event->set_double_counter_value(value);
  append_trace_packet(packet, out);
}

std::string device_name(const Session& session, uint32_t index) {
  auto it = session.layers.find(Layer::kGpu);
  if (it == session.layers.end() || !it->second.extra.contains("devices")) return {};
  for (const nlohmann::json& d : it->second.extra["devices"]) {
    if (d.value("index", ~0u) == index) return d.value("name", std::string());
  }
  return {};
}

}  // namespace

uint64_t PerfettoGpuTracks::device_track_uuid(uint32_t device) {
  return kGpuBit | kDeviceBit | (static_cast<uint64_t>(device) << 8) | 0xff;
}

uint64_t PerfettoGpuTracks::device_counter_uuid(uint32_t device, uint32_t counter) {
  return kGpuBit | kDeviceBit | (static_cast<uint64_t>(device) << 8) | (counter & 0xff);
}

uint64_t PerfettoGpuTracks::process_counter_uuid(uint32_t pid, uint32_t device, uint32_t counter) {
  return kGpuBit | (static_cast<uint64_t>(pid) << 16) | ((device & 0xff) << 8) | (counter & 0xff);
}

std::string PerfettoGpuTracks::sample_packets(const GpuSample& s) {
  std::string out;
  devices_.insert(s.device);
  for (const GpuMetricInfo& m : gpu_metrics()) {
    if (!s[m.metric]) continue;
    const uint32_t counter = static_cast<uint32_t>(m.metric);
    device_counters_.insert({s.device, counter});
    counter_packet(s.ts_ns, device_counter_uuid(s.device, counter), *s[m.metric], &out);
  }
  if (s.clock_event_reasons) {
    device_counters_.insert({s.device, kThrottledCounter});
    counter_packet(s.ts_ns, device_counter_uuid(s.device, kThrottledCounter),
                   (*s.clock_event_reasons & kThrottleReasons) ? 1.0 : 0.0, &out);
  }
  for (const GpuProcessSample& p : s.processes) {
    // Only the session's processes have a process track to hang these on.
    if (!p.traced) continue;
    if (p.memory_used_bytes) {
      process_counters_.insert({p.pid, s.device, kProcessMemory});
      counter_packet(s.ts_ns, process_counter_uuid(p.pid, s.device, kProcessMemory),
                     static_cast<double>(*p.memory_used_bytes), &out);
    }
    if (p.sm_util_pct) {
      process_counters_.insert({p.pid, s.device, kProcessSmUtil});
      counter_packet(s.ts_ns, process_counter_uuid(p.pid, s.device, kProcessSmUtil), *p.sm_util_pct,
                     &out);
    }
  }
  return out;
}

std::string PerfettoGpuTracks::event_packets(const GpuEvent& e) {
  devices_.insert(e.device);
  pb::TracePacket packet;
  packet.set_timestamp(e.ts_ns);
  packet.set_timestamp_clock_id(pb::BUILTIN_CLOCK_MONOTONIC);
  packet.set_trusted_packet_sequence_id(PerfettoWriter::kSequenceId);
  pb::TrackEvent* event = packet.mutable_track_event();
  event->set_type(pb::TrackEvent::TYPE_INSTANT);
  event->set_track_uuid(device_track_uuid(e.device));
  event->add_categories("gpu");
  const std::string kind(gpu_event_kind_name(e.kind));
  event->set_name(e.kind == GpuEvent::Kind::kXid ? fmt::format("XID {}", e.code) : kind);
  auto annotate = [event](const char* name, auto value) {
    pb::DebugAnnotation* a = event->add_debug_annotations();
    a->set_name(name);
    if constexpr (std::is_integral_v<decltype(value)>) {
      a->set_int_value(static_cast<int64_t>(value));
    } else {
      a->set_string_value(std::string(value));
    }
  };
  annotate("device", e.device);
  annotate("kind", kind);
  if (e.kind == GpuEvent::Kind::kXid) {
    annotate("xid", e.code);
    if (std::string_view what = xid_description(e.code); !what.empty()) {
      annotate("description", what);
    }
  }
  std::string out;
  append_trace_packet(packet, &out);
  return out;
}

std::string PerfettoGpuTracks::descriptor_packets(const Session& session) const {
  std::string out;
  auto descriptor = [&out](uint64_t uuid, uint64_t parent, const std::string& name, bool counter,
                           bool bytes) {
    pb::TracePacket packet;
    packet.set_trusted_packet_sequence_id(PerfettoWriter::kSequenceId);
    pb::TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(uuid);
    if (parent) track->set_parent_uuid(parent);
    track->set_name(name);
    if (counter) {
      pb::CounterDescriptor* c = track->mutable_counter();
      c->add_categories("gpu");
      if (bytes) c->set_unit(pb::CounterDescriptor::UNIT_SIZE_BYTES);
    }
    append_trace_packet(packet, &out);
  };
  for (uint32_t device : devices_) {
    const std::string name = device_name(session, device);
    descriptor(
        device_track_uuid(device), 0,
        name.empty() ? fmt::format("GPU {}", device) : fmt::format("GPU {}: {}", device, name),
        false, false);
  }
  for (const auto& [device, counter] : device_counters_) {
    std::string label = "throttled (1 = thermal or power)";
    bool bytes = false;
    if (counter < kGpuMetricCount) {
      const GpuMetricInfo& m = gpu_metrics()[counter];
      label = fmt::format("{} ({})", m.label, m.unit);
      bytes = m.metric == GpuMetric::kMemoryUsed;
    }
    descriptor(device_counter_uuid(device, counter), device_track_uuid(device),
               fmt::format("GPU {} {}", device, label), true, bytes);
  }
  for (const auto& [pid, device, counter] : process_counters_) {
    descriptor(process_counter_uuid(pid, device, counter), PerfettoWriter::process_track_uuid(pid),
               counter == kProcessMemory ? fmt::format("GPU {} memory (bytes)", device)
                                         : fmt::format("GPU {} SM utilization (%)", device),
               true, counter == kProcessMemory);
  }
  return out;
}

}  // namespace eacgm
