#include "sinks/perfetto_writer.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <set>
#include <string_view>

#include "common/clock.h"
#include "layers/python/python_profile.h"
#include "sinks/perfetto_gpu.h"
#include "sinks/perfetto_proto.h"
#include "sinks/proto_wire.h"

namespace eacgm {
namespace {

namespace pb = ::eacgm::perfetto;

}  // namespace

uint64_t collective_flow_id(const CollectiveRef& c) {
  // FNV-1a over the communicator id and sequence number: equal on every rank.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint8_t byte) { h = (h ^ byte) * 1099511628211ull; };
  for (char ch : c.comm_id) mix(static_cast<uint8_t>(ch));
  for (int i = 0; i < 8; ++i) mix(static_cast<uint8_t>(c.seq >> (8 * i)));
  return h;
}

namespace {

constexpr size_t kEventsBufferBytes = 1 << 20;
constexpr size_t kCopyChunkBytes = 1 << 20;

// Appends `packet` as one `Trace.packet` field (field 1, wire type 2): a
// tag, a varint length, the bytes. A trace file is nothing but these.
void append_framed(const pb::TracePacket& packet, std::string* out) {
  size_t size = packet.ByteSizeLong();
  out->push_back(static_cast<char>((1 << 3) | 2));
  while (size >= 0x80) {
    out->push_back(static_cast<char>((size & 0x7f) | 0x80));
    size >>= 7;
  }
  out->push_back(static_cast<char>(size));
  packet.AppendToString(out);
}

}  // namespace

void append_trace_packet(const pb::TracePacket& packet, std::string* out) {
  append_framed(packet, out);
}

namespace {

std::string process_display_name(const ProcessInfo* info) {
  if (info == nullptr) return {};
  std::string name = info->comm;
  if (info->rank) {
    if (!name.empty()) name += ' ';
    name += "(rank " + std::to_string(*info->rank) + ")";
  }
  return name;
}

}  // namespace

uint64_t PerfettoWriter::process_track_uuid(uint32_t pid) {
  // No thread has tid 0xffffffff, so this never equals a thread track's uuid.
  return (static_cast<uint64_t>(pid) << 32) | 0xffffffffull;
}

uint64_t PerfettoWriter::thread_track_uuid(uint32_t pid, uint32_t tid) {
  return (static_cast<uint64_t>(pid) << 32) | tid;
}

uint64_t PerfettoWriter::python_track_uuid(uint32_t pid, uint32_t tid) {
  return (1ull << 61) | thread_track_uuid(pid, tid);
}

Result<std::unique_ptr<PerfettoWriter>> PerfettoWriter::open(const std::string& path) {
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) {
    return Error{"cannot create Perfetto trace " + path + ": " + std::strerror(errno)};
  }
  std::string events_path = path + ".events.tmp";
  std::FILE* events = std::fopen(events_path.c_str(), "w+b");
  if (events == nullptr) {
    const int err = errno;
    std::fclose(out);
    std::remove(path.c_str());
    return Error{"cannot create temporary Perfetto events file " + events_path + ": " +
                 std::strerror(err)};
  }
  return std::unique_ptr<PerfettoWriter>(
      new PerfettoWriter(path, std::move(events_path), out, events));
}

PerfettoWriter::PerfettoWriter(std::string path, std::string events_path, std::FILE* out,
                               std::FILE* events)
    : path_(std::move(path)),
      events_path_(std::move(events_path)),
      out_(out),
      events_(events),
      monotonic_at_open_ns_(clock_ns(CLOCK_MONOTONIC)),
      boottime_at_open_ns_(clock_ns(CLOCK_BOOTTIME)),
      scratch_(std::make_unique<pb::TracePacket>()) {
  events_buffer_.reserve(kEventsBufferBytes);
}

PerfettoWriter::~PerfettoWriter() {
  // Without finish() the output stays an empty (valid, packet-less) trace.
  close_files();
}

void PerfettoWriter::close_files() {
  if (events_ != nullptr) {
    std::fclose(events_);
    events_ = nullptr;
    std::remove(events_path_.c_str());
  }
  if (out_ != nullptr) {
    std::fclose(out_);
    out_ = nullptr;
  }
}

void PerfettoWriter::fail(const std::string& what) {
  if (error_.empty()) error_ = what;
}

namespace {

namespace wire = proto_wire;

// Field numbers of proto/perfetto_trace.proto (Perfetto's own).
enum : uint32_t {
  kTracePacketField = 1,  // Trace.packet
  kPacketTimestamp = 8,
  kPacketSequenceId = 10,
  kPacketTrackEvent = 11,
  kPacketClockId = 58,
  kEventAnnotation = 4,
  kEventType = 9,
  kEventTrackUuid = 11,
  kEventCategory = 22,
  kEventName = 23,
  kEventFlowId = 47,
  kAnnotationInt = 4,
  kAnnotationString = 6,
  kAnnotationPointer = 7,
  kAnnotationName = 10,
};

// One DebugAnnotation in a TrackEvent: the value field, then the name (the generated
// serializer's order, by field number).
void put_annotation_uint(wire::WireWriter& event, uint32_t value_field, std::string_view name,
                         uint64_t value) {
  event.length_delimited(kEventAnnotation,
                         wire::uint_field_size(value_field, value) +
                             wire::bytes_field_size(kAnnotationName, name.size()));
  event.uint_field(value_field, value);
  event.bytes_field(kAnnotationName, name);
}

void put_annotation(wire::WireWriter& event, std::string_view name, int64_t value) {
  put_annotation_uint(event, kAnnotationInt, name, static_cast<uint64_t>(value));
}

void put_annotation(wire::WireWriter& event, std::string_view name, std::string_view value) {
  event.length_delimited(kEventAnnotation,
                         wire::bytes_field_size(kAnnotationString, value.size()) +
                             wire::bytes_field_size(kAnnotationName, name.size()));
  event.bytes_field(kAnnotationString, value);
  event.bytes_field(kAnnotationName, name);
}

// Frames a TrackEvent as a TracePacket on the writer's sequence and appends it as a Trace.packet
// field: timestamp, sequence id, the event, the clock (field order).
void put_event_packet(std::string& out, uint64_t timestamp, std::string_view event) {
  const size_t packet_size = wire::uint_field_size(kPacketTimestamp, timestamp) +
                             wire::uint_field_size(kPacketSequenceId, PerfettoWriter::kSequenceId) +
                             wire::bytes_field_size(kPacketTrackEvent, event.size()) +
                             wire::uint_field_size(kPacketClockId, pb::BUILTIN_CLOCK_MONOTONIC);
  wire::WireWriter packet(out);
  packet.length_delimited(kTracePacketField, packet_size);
  packet.uint_field(kPacketTimestamp, timestamp);
  packet.uint_field(kPacketSequenceId, PerfettoWriter::kSequenceId);
  packet.bytes_field(kPacketTrackEvent, event);
  packet.uint_field(kPacketClockId, pb::BUILTIN_CLOCK_MONOTONIC);
}

}  // namespace

void PerfettoWriter::append_call_packets(const CallRecord& call, std::string* begin,
                                         std::string* end) {
  const ProbeSpec& spec = *call.spec;
  const uint64_t track = thread_track_uuid(call.pid, call.tid);
  event_scratch_.clear();
  wire::WireWriter event(event_scratch_);
  std::string_view name = spec.symbol;
  if (call.kernel) {
    // A launch is shown by what it launched; the API that launched it is an annotation.
    auto demangled = kernel_names_.find(call.kernel);
    if (demangled == kernel_names_.end()) {
      demangled = kernel_names_.emplace(call.kernel, demangled_kernel_name(*call.kernel)).first;
    }
    name = demangled->second;
    put_annotation(event, "api", spec.symbol);
    put_annotation(event, "kernel", *call.kernel);
  }
  for (const DecodedArg& arg : call.decoded_args()) {
    if (arg.is_pointer()) {
      put_annotation_uint(event, kAnnotationPointer, arg.name, arg.value);
    } else if (arg.number) {
      put_annotation(event, arg.name, *arg.number);
    } else {
      put_annotation(event, arg.name, arg.text);
    }
  }
  put_annotation(event, "ret", call.raw.ret);
  if (spec.returns_status) {
    put_annotation(event, "ret_name", status_name(call.layer(), call.raw.ret));
  }
  // A failed call moved nothing (as in the session's statistics); what it
  // asked for is still in its arguments.
  put_annotation(event, "bytes", call.failed() ? 0 : static_cast<int64_t>(call.bytes()));
  put_annotation(event, "depth", static_cast<int64_t>(call.depth));
  if (call.py_site) {
    if (call.py_site->line > 0) {
      text_scratch_.clear();
      fmt::format_to(std::back_inserter(text_scratch_), "{} line {}", call.py_site->function,
                     call.py_site->line);
      put_annotation(event, "python", text_scratch_);
    } else {
      put_annotation(event, "python", call.py_site->function);
    }
  }
  if (call.collective) {
    const CollectiveRef& c = *call.collective;
    put_annotation(event, "comm", c.comm_id);
    put_annotation(event, "seq", static_cast<int64_t>(c.seq));
    put_annotation(event, "rank", static_cast<int64_t>(c.rank));
  }
  event.uint_field(kEventType, pb::TrackEvent::TYPE_SLICE_BEGIN);
  event.uint_field(kEventTrackUuid, track);
  event.bytes_field(kEventCategory, layer_name(spec.layer));
  event.bytes_field(kEventName, name);
  if (call.collective) event.fixed64_field(kEventFlowId, collective_flow_id(*call.collective));
  event.flush();
  put_event_packet(*begin, call.start_ns, event_scratch_);

  // The END needs no name or arguments: it closes the innermost open slice
  // of its track, and trace_processor merges BEGIN and END.
  event_scratch_.clear();
  event.uint_field(kEventType, pb::TrackEvent::TYPE_SLICE_END);
  event.uint_field(kEventTrackUuid, track);
  event.flush();
  put_event_packet(*end, call.start_ns + call.duration_ns, event_scratch_);
}

// Packet order in the file. trace_processor sorts all packets by timestamp
// before building slices, and keeps file order among equal timestamps. Calls
// arrive when they return, so a child arrives before its parent; written as
// they come, a child that began in the very nanosecond its parent did would
// sort before the parent's BEGIN and the two would nest the wrong way round.
// So a call that is nested (depth > 0) waits, serialized, until a call that
// contains it in time arrives; a call at depth 0 is written at once together
// with everything it contains. The file is then in begin order per thread,
// which any reader can rely on. Orphans (their parent started before tracing
// began, or the thread holds more than kMaxPendingBytesPerThread) are written
// as they are, which only matters for such exact ties.
void PerfettoWriter::on_call(const CallRecord& call) {
  if (finished_ || call.spec == nullptr) return;
  ++calls_given_;
  ThreadState& thread = threads_[{call.pid, call.tid}];
  if (!error_.empty()) return;

  begin_scratch_.clear();
  end_scratch_.clear();
  append_call_packets(call, &begin_scratch_, &end_scratch_);

  // Pending subtrees are disjoint and ordered; the ones inside this call are
  // a suffix (they all ended before it did).
  auto first_child = thread.pending.end();
  while (first_child != thread.pending.begin() &&
         std::prev(first_child)->start_ns >= call.start_ns) {
    --first_child;
  }
  if (call.depth == 0 && first_child == thread.pending.end()) {
    // The common case, a call with nothing nested in it waiting: straight to the buffer.
    events_buffer_ += begin_scratch_;
    write_events(end_scratch_, 1);
    return;
  }
  Subtree tree{.start_ns = call.start_ns, .packets = begin_scratch_, .calls = 1};
  for (auto it = first_child; it != thread.pending.end(); ++it) {
    tree.packets += it->packets;
    tree.calls += it->calls;
    thread.pending_bytes -= it->packets.size();
  }
  thread.pending.erase(first_child, thread.pending.end());
  tree.packets += end_scratch_;

  if (call.depth == 0) {
    write_events(tree.packets, tree.calls);
    return;
  }
  thread.pending_bytes += tree.packets.size();
  thread.pending.push_back(std::move(tree));
  if (thread.pending_bytes > kMaxPendingBytesPerThread) flush_pending(&thread);
}

void PerfettoWriter::on_gpu_sample(const GpuSample& sample) {
  if (finished_ || !error_.empty()) return;
  if (!gpu_) gpu_ = std::make_unique<PerfettoGpuTracks>();
  write_events(gpu_->sample_packets(sample));
}

void PerfettoWriter::on_gpu_event(const GpuEvent& event) {
  if (finished_ || !error_.empty()) return;
  if (!gpu_) gpu_ = std::make_unique<PerfettoGpuTracks>();
  write_events(gpu_->event_packets(event));
}

void PerfettoWriter::on_python_stack(const PythonStackChange& change) {
  if (finished_ || !error_.empty()) return;
  python_threads_.insert({change.pid, change.tid});
  const uint64_t track = python_track_uuid(change.pid, change.tid);
  begin_scratch_.clear();
  // Ends first: at one timestamp trace_processor keeps file order, so a frame that left and
  // one that entered at the same sample do not nest.
  for (size_t i = 0; i < change.ended; ++i) {
    event_scratch_.clear();
    wire::WireWriter event(event_scratch_);
    event.uint_field(kEventType, pb::TrackEvent::TYPE_SLICE_END);
    event.uint_field(kEventTrackUuid, track);
    event.flush();
    put_event_packet(begin_scratch_, change.ts_ns, event_scratch_);
  }
  for (const PythonSite* site : change.begun) {
    event_scratch_.clear();
    wire::WireWriter event(event_scratch_);
    if (site) {
      put_annotation(event, "file", site->file);
      if (site->line > 0) put_annotation(event, "line", static_cast<int64_t>(site->line));
    }
    event.uint_field(kEventType, pb::TrackEvent::TYPE_SLICE_BEGIN);
    event.uint_field(kEventTrackUuid, track);
    event.bytes_field(kEventCategory, "python");
    event.bytes_field(kEventName, site ? std::string_view(site->function)
                                       : std::string_view("(Python code not yet described)"));
    event.flush();
    put_event_packet(begin_scratch_, change.ts_ns, event_scratch_);
  }
  write_events(begin_scratch_);
}

void PerfettoWriter::flush_pending(ThreadState* thread) {
  for (const Subtree& tree : thread->pending) write_events(tree.packets, tree.calls);
  thread->pending.clear();
  thread->pending_bytes = 0;
}

void PerfettoWriter::write_events(const std::string& bytes, uint64_t calls) {
  events_buffer_ += bytes;
  buffer_calls_ += calls;
  if (events_buffer_.size() >= kEventsBufferBytes) flush_events_buffer();
}

void PerfettoWriter::flush_events_buffer() {
  if (events_buffer_.empty() || !error_.empty()) return;
  // Flushed at once, so that a write error belongs to this batch and every earlier one is known
  // to be whole (the buffer is large: the flush costs nothing).
  if (std::fwrite(events_buffer_.data(), 1, events_buffer_.size(), events_) !=
          events_buffer_.size() ||
      std::fflush(events_) != 0) {
    fail("writing " + events_path_ + ": " + std::strerror(errno));
  } else {
    const Checkpoint last = checkpoints_.empty() ? Checkpoint{} : checkpoints_.back();
    checkpoints_.push_back(
        {.bytes = last.bytes + events_buffer_.size(), .calls = last.calls + buffer_calls_});
  }
  events_buffer_.clear();
  buffer_calls_ = 0;
}

std::string PerfettoWriter::descriptor_packets(const Session& session) {
  std::string bytes;
  pb::TracePacket& packet = *scratch_;

  // The trace clock. Our timestamps are CLOCK_MONOTONIC (bpf_ktime_get_ns);
  // every event packet says so with timestamp_clock_id, and this snapshot
  // makes MONOTONIC the trace's primary clock so trace_processor keeps them
  // as they are (no conversion, same numbers as events.sqlite). BOOTTIME and
  // REALTIME readings taken at the same instant let it relate the trace to
  // other clock domains (wall-clock display, merging with system traces).
  packet.Clear();
  packet.set_trusted_packet_sequence_id(kSequenceId);
  packet.set_sequence_flags(pb::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
  pb::ClockSnapshot* snapshot = packet.mutable_clock_snapshot();
  snapshot->set_primary_trace_clock(pb::BUILTIN_CLOCK_MONOTONIC);
  auto add_clock = [snapshot](pb::BuiltinClock id, uint64_t ts) {
    pb::ClockSnapshot::Clock* clock = snapshot->add_clocks();
    clock->set_clock_id(id);
    clock->set_timestamp(ts);
  };
  add_clock(pb::BUILTIN_CLOCK_MONOTONIC, monotonic_at_open_ns_);
  add_clock(pb::BUILTIN_CLOCK_BOOTTIME, boottime_at_open_ns_);
  if (session.realtime_offset_ns != 0) {
    add_clock(pb::BUILTIN_CLOCK_REALTIME,
              static_cast<uint64_t>(static_cast<int64_t>(monotonic_at_open_ns_) +
                                    session.realtime_offset_ns));
  }
  append_framed(packet, &bytes);

  // Every process and thread the session knows, plus any seen only in calls.
  std::map<uint32_t, std::set<uint32_t>> tids_by_pid;
  for (const auto& [pid, info] : session.processes) {
    std::set<uint32_t>& tids = tids_by_pid[pid];
    for (const auto& [tid, name] : info.threads) tids.insert(tid);
  }
  for (const auto& [key, state] : threads_) tids_by_pid[key.first].insert(key.second);
  for (const auto& [pid, tid] : python_threads_) tids_by_pid[pid].insert(tid);

  for (const auto& [pid, tids] : tids_by_pid) {
    const ProcessInfo* info = session.find_process(pid);
    const std::string process_name = process_display_name(info);

    packet.Clear();
    packet.set_trusted_packet_sequence_id(kSequenceId);
    pb::TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(process_track_uuid(pid));
    if (!process_name.empty()) track->set_name(process_name);
    pb::ProcessDescriptor* process = track->mutable_process();
    process->set_pid(static_cast<int32_t>(pid));
    if (info != nullptr) {
      for (const std::string& arg : info->cmdline) process->add_cmdline(arg);
    }
    // The UI titles a process by process_name, so it carries the rank too.
    if (!process_name.empty()) process->set_process_name(process_name);
    append_framed(packet, &bytes);

    for (uint32_t tid : tids) {
      std::string thread_name;
      if (info != nullptr) {
        auto it = info->threads.find(tid);
        thread_name = it != info->threads.end() && !it->second.empty() ? it->second : info->comm;
      }
      packet.Clear();
      packet.set_trusted_packet_sequence_id(kSequenceId);
      track = packet.mutable_track_descriptor();
      track->set_uuid(thread_track_uuid(pid, tid));
      track->set_parent_uuid(process_track_uuid(pid));
      if (!thread_name.empty()) track->set_name(thread_name);
      pb::ThreadDescriptor* thread = track->mutable_thread();
      thread->set_pid(static_cast<int32_t>(pid));
      thread->set_tid(static_cast<int32_t>(tid));
      if (!thread_name.empty()) thread->set_thread_name(thread_name);
      append_framed(packet, &bytes);
      if (python_threads_.contains({pid, tid})) {
        packet.Clear();
        packet.set_trusted_packet_sequence_id(kSequenceId);
        track = packet.mutable_track_descriptor();
        track->set_uuid(python_track_uuid(pid, tid));
        track->set_parent_uuid(thread_track_uuid(pid, tid));
        track->set_name("Python (sampled)");
        append_framed(packet, &bytes);
      }
    }
  }
  return bytes;
}

Result<void> PerfettoWriter::finish(const Session& session) {
  if (finished_) return Error{"Perfetto trace " + path_ + " was already finished"};
  finished_ = true;
  for (auto& [key, thread] : threads_) flush_pending(&thread);
  flush_events_buffer();
  // After a failed write too: the header and the batches that reached the events file whole
  // are still a valid trace of fewer calls (when the disk has room for them).
  std::string header = descriptor_packets(session);
  if (gpu_) header += gpu_->descriptor_packets(session);
  bool written = std::fwrite(header.data(), 1, header.size(), out_) == header.size();
  if (!written) fail("writing " + path_ + ": " + std::strerror(errno));
  header_bytes_ = header.size();
  if (written) {
    Result<void> appended = assemble();
    written = appended.ok();
    if (!written) fail(appended.error().message);
  }
  if (written && std::fflush(out_) != 0) {
    written = false;
    fail("writing " + path_ + ": " + std::strerror(errno));
  }
  calls_in_trace_ = checkpoints_.empty() ? 0 : checkpoints_.back().calls;
  if (written) {
    if (std::fclose(out_) != 0) fail("closing " + path_ + ": " + std::strerror(errno));
    out_ = nullptr;
  } else {
    cut_to_whole_batches();
  }
  close_files();
  scratch_.reset();
  threads_.clear();
  if (!error_.empty()) return Error{"Perfetto trace incomplete: " + error_};
  return {};
}

// Appends the streamed event packets after the descriptors: the whole batches, no more (after a
// failed write, the events file may end in part of one).
Result<void> PerfettoWriter::assemble() {
  std::rewind(events_);
  std::vector<char> chunk(kCopyChunkBytes);
  uint64_t left = checkpoints_.empty() ? 0 : checkpoints_.back().bytes;
  while (left > 0) {
    const size_t n = std::fread(chunk.data(), 1, std::min<uint64_t>(chunk.size(), left), events_);
    if (n == 0) return Error{"reading " + events_path_ + ": " + std::strerror(errno)};
    if (std::fwrite(chunk.data(), 1, n, out_) != n) {
      return Error{"writing " + path_ + ": " + std::strerror(errno)};
    }
    left -= n;
  }
  return {};
}

void PerfettoWriter::cut_to_whole_batches() {
  // A write failed: what reached the file is all there is. Closed first, so that stdio's buffer
  // cannot reach it after the cut.
  (void)std::fclose(out_);
  out_ = nullptr;
  struct stat st {};
  const uint64_t size = stat(path_.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  uint64_t keep = 0;
  calls_in_trace_ = 0;
  if (header_bytes_ > 0 && size >= header_bytes_) {
    keep = header_bytes_;
    for (const Checkpoint& c : checkpoints_) {
      if (header_bytes_ + c.bytes > size) break;
      keep = header_bytes_ + c.bytes;
      calls_in_trace_ = c.calls;
    }
  }
  if (truncate(path_.c_str(), static_cast<off_t>(keep)) != 0) {
    // A trace that ends in half a packet does not open: an empty one does.
    calls_in_trace_ = 0;
    (void)!truncate(path_.c_str(), 0);
  }
}

std::vector<OutputLoss> PerfettoWriter::losses() const {
  if (error_.empty()) return {};
  return {{.output = std::filesystem::path(path_).filename().string(),
           .calls = calls_given_,
           .calls_lost = calls_given_ - std::min(calls_given_, calls_in_trace_),
           .error = error_}};
}

}  // namespace eacgm
