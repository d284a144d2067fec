// PerfettoWriter: the file is parsed back with the generated classes and the
// slices are rebuilt the way trace_processor does (all packets sorted by
// timestamp, file order among equal timestamps, END closes the innermost open
// slice of its track), then compared with the calls that went in.
#include "sinks/perfetto_writer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "layers/python/python_profile.h"
#include "sinks/perfetto_proto.h"
#include "test_support.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;
namespace pb = ::eacgm::perfetto;

// Rows made here rather than taken from the probe table, so the test fixes
// exactly which formats are involved.
const ProbeSpec kMalloc{
    .symbol = "cudaMalloc",
    .layer = Layer::kCuda,
    .args = {{"devPtr", kRdi, ArgFormat::kOutPointer}, {"size", kRsi, ArgFormat::kSize}},
    .bytes_slot = kRsi,
    .out_slot = kRdi,
    .memory = MemoryEffect::kDeviceAlloc};
const ProbeSpec kMemcpy{.symbol = "cudaMemcpy",
                        .layer = Layer::kCuda,
                        .args = {{"dst", kRdi, ArgFormat::kPointer},
                                 {"src", kRsi, ArgFormat::kPointer},
                                 {"count", kRdx, ArgFormat::kSize},
                                 {"kind", kRcx, ArgFormat::kMemcpyKind}},
                        .bytes_slot = kRdx};
const ProbeSpec kMemset{.symbol = "cudaMemset",
                        .layer = Layer::kCuda,
                        .args = {{"devPtr", kRdi, ArgFormat::kPointer},
                                 {"value", kRsi, ArgFormat::kInt},
                                 {"count", kRdx, ArgFormat::kSize}},
                        .bytes_slot = kRdx};
const ProbeSpec kStep{
    .symbol = "train.py:step", .layer = Layer::kPython, .args = {}, .returns_status = false};
const ProbeSpec kMm{
    .symbol = "aten::mm", .layer = Layer::kTorch, .args = {}, .returns_status = false};
const ProbeSpec kAllReduce{
    .symbol = "ncclAllReduce", .layer = Layer::kNccl, .args = {{"count", kRdx, ArgFormat::kSize}}};

CallRecord make_call(uint32_t pid, uint32_t tid, const ProbeSpec& spec, uint64_t start,
                     uint64_t end, uint32_t depth, RawCall raw = {}) {
  CallRecord call;
  call.pid = pid;
  call.tid = tid;
  call.spec = &spec;
  call.start_ns = start;
  call.duration_ns = end - start;
  call.depth = depth;
  call.raw = raw;
  return call;
}

// Two processes (one with a rank), three threads they know of, and one
// process the session never heard of. Calls in the order they return.
struct Fixture {
  Session session;
  std::vector<CallRecord> calls;

  Fixture() {
    ProcessInfo& a = session.process(100);
    a.comm = "python";
    a.rank = 0;
    a.cmdline = {"python", "train.py", "--epochs=1"};
    a.threads = {{100, "python"}, {101, "pt_worker"}};
    ProcessInfo& b = session.process(200);
    b.comm = "torchrun";
    b.cmdline = {"torchrun", "--nproc=2"};
    b.threads = {{200, ""}};  // unnamed thread: falls back to comm
    session.realtime_offset_ns = 1'700'000'000'000'000'000;

    RawCall memcpy_raw;
    memcpy_raw.args = {0x7f0000001000, 0x5555aaaa0000, 4096, 1};
    RawCall malloc_raw;
    malloc_raw.args = {0x7ffd12345678, 1 << 20};
    malloc_raw.out_value = 0x7f0000200000;
    RawCall memset_raw;
    memset_raw.args = {0x7f0000001000, static_cast<uint64_t>(-1), 64};
    RawCall failed_raw;
    failed_raw.args = {0x7ffd00000000, 256};
    failed_raw.ret = 35;
    RawCall nccl_raw;
    nccl_raw.args = {0, 0, 1024};

    // Thread 100: step [1000, 5000] holds mm [1500, 2000] and mm [2500, 3000],
    // the second holding a memcpy [2600, 2700]. Then a step that begins in the
    // same nanosecond as its first child, a tie trace_processor resolves by
    // file order.
    calls.push_back(make_call(100, 100, kMm, 1500, 2000, 1));
    calls.push_back(make_call(100, 100, kMemcpy, 2600, 2700, 2, memcpy_raw));
    calls.push_back(make_call(100, 100, kMm, 2500, 3000, 1));
    calls.push_back(make_call(100, 100, kStep, 1000, 5000, 0));
    calls.push_back(make_call(100, 100, kMalloc, 6000, 6500, 1, malloc_raw));
    calls.push_back(make_call(100, 100, kStep, 6000, 7000, 0));
    // Thread 101: back to back, the second starting when the first ends.
    calls.push_back(make_call(100, 101, kMemset, 1000, 2000, 0, memset_raw));
    calls.push_back(make_call(100, 101, kMemset, 2000, 3000, 0, memset_raw));
    // Thread 200: a failed call, then NCCL.
    calls.push_back(make_call(200, 200, kMalloc, 1200, 1300, 0, failed_raw));
    calls.push_back(make_call(200, 200, kAllReduce, 1400, 9000, 0, nccl_raw));
    // A process and thread known only from a call.
    calls.push_back(make_call(300, 301, kMm, 500, 600, 0));
  }
};

pb::Trace read_trace(const fs::path& path) {
  pb::Trace trace;
  EXPECT_TRUE(trace.ParseFromString(read_bytes(path))) << path;
  return trace;
}

struct Slice {
  uint64_t track = 0;
  std::string name;
  std::string category;
  uint64_t start = 0;
  uint64_t end = 0;
  uint32_t depth = 0;  // nesting on its track
  const pb::TrackEvent* begin = nullptr;
};

// Rebuilds slices as trace_processor does.
std::vector<Slice> build_slices(const pb::Trace& trace) {
  struct Event {
    uint64_t ts;
    size_t index;
    const pb::TrackEvent* event;
  };
  std::vector<Event> events;
  for (int i = 0; i < trace.packet_size(); ++i) {
    const pb::TracePacket& p = trace.packet(i);
    if (p.has_track_event()) events.push_back({p.timestamp(), size_t(i), &p.track_event()});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.ts < b.ts; });
  std::vector<Slice> slices;
  std::map<uint64_t, std::vector<Slice>> open;
  for (const Event& e : events) {
    std::vector<Slice>& stack = open[e.event->track_uuid()];
    if (e.event->type() == pb::TrackEvent::TYPE_SLICE_BEGIN) {
      Slice s{.track = e.event->track_uuid(),
              .name = e.event->name(),
              .category = e.event->categories_size() ? e.event->categories(0) : "",
              .start = e.ts,
              .end = 0,
              .depth = static_cast<uint32_t>(stack.size()),
              .begin = e.event};
      stack.push_back(s);
    } else {
      EXPECT_EQ(e.event->type(), pb::TrackEvent::TYPE_SLICE_END);
      EXPECT_FALSE(stack.empty()) << "END without BEGIN at " << e.ts;
      if (stack.empty()) continue;
      Slice s = stack.back();
      stack.pop_back();
      s.end = e.ts;
      slices.push_back(s);
    }
  }
  for (const auto& [track, stack] : open) EXPECT_TRUE(stack.empty()) << "unclosed on " << track;
  return slices;
}

const pb::DebugAnnotation* annotation(const pb::TrackEvent& event, const std::string& name) {
  for (const pb::DebugAnnotation& a : event.debug_annotations()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

TEST(PerfettoWriter, WritesTracksAndNestedSlices) {
  TempDir dir;
  const fs::path path = dir.path() / "trace.perfetto-trace";
  auto writer = PerfettoWriter::open(path.string());
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  EXPECT_TRUE(fs::exists(path.string() + ".events.tmp"));

  Fixture f;
  for (const CallRecord& call : f.calls) (*writer)->on_call(call);
  Result<void> done = (*writer)->finish(f.session);
  ASSERT_TRUE(done.ok()) << done.error().message;
  EXPECT_FALSE(fs::exists(path.string() + ".events.tmp"));

  const pb::Trace trace = read_trace(path);
  ASSERT_GT(trace.packet_size(), 0);

  // One sequence; the first packet clears incremental state and declares
  // CLOCK_MONOTONIC the trace clock.
  const pb::TracePacket& first = trace.packet(0);
  EXPECT_EQ(first.sequence_flags(), pb::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
  ASSERT_TRUE(first.has_clock_snapshot());
  EXPECT_EQ(first.clock_snapshot().primary_trace_clock(), pb::BUILTIN_CLOCK_MONOTONIC);
  std::map<uint32_t, uint64_t> clocks;
  for (const auto& c : first.clock_snapshot().clocks()) clocks[c.clock_id()] = c.timestamp();
  ASSERT_TRUE(clocks.count(pb::BUILTIN_CLOCK_MONOTONIC));
  EXPECT_TRUE(clocks.count(pb::BUILTIN_CLOCK_BOOTTIME));
  EXPECT_EQ(clocks.at(pb::BUILTIN_CLOCK_REALTIME),
            clocks.at(pb::BUILTIN_CLOCK_MONOTONIC) + f.session.realtime_offset_ns);
  for (int i = 0; i < trace.packet_size(); ++i) {
    EXPECT_EQ(trace.packet(i).trusted_packet_sequence_id(), PerfettoWriter::kSequenceId);
    if (i > 0) {
      EXPECT_EQ(trace.packet(i).sequence_flags(), 0u);
    }
  }

  // Descriptors come before every event, one per process and thread.
  std::map<uint64_t, const pb::TrackDescriptor*> tracks;
  int last_descriptor = -1, first_event = trace.packet_size();
  for (int i = 0; i < trace.packet_size(); ++i) {
    const pb::TracePacket& p = trace.packet(i);
    if (p.has_track_descriptor()) {
      EXPECT_TRUE(tracks.emplace(p.track_descriptor().uuid(), &p.track_descriptor()).second);
      last_descriptor = i;
    }
    if (p.has_track_event()) {
      first_event = std::min(first_event, i);
      EXPECT_EQ(p.timestamp_clock_id(), uint32_t{pb::BUILTIN_CLOCK_MONOTONIC});
    }
  }
  EXPECT_LT(last_descriptor, first_event);
  ASSERT_EQ(tracks.size(), 3u + 4u);

  struct ExpectedProcess {
    uint32_t pid;
    std::string name;
    std::vector<std::string> cmdline;
  };
  for (const ExpectedProcess& e :
       std::vector<ExpectedProcess>{{100, "python (rank 0)", {"python", "train.py", "--epochs=1"}},
                                    {200, "torchrun", {"torchrun", "--nproc=2"}},
                                    {300, "", {}}}) {
    SCOPED_TRACE(e.pid);
    const uint64_t uuid = PerfettoWriter::process_track_uuid(e.pid);
    ASSERT_TRUE(tracks.count(uuid));
    const pb::TrackDescriptor& t = *tracks.at(uuid);
    EXPECT_FALSE(t.has_parent_uuid());
    EXPECT_EQ(t.name(), e.name);
    ASSERT_TRUE(t.has_process());
    EXPECT_FALSE(t.has_thread());
    EXPECT_EQ(t.process().pid(), int32_t(e.pid));
    EXPECT_EQ(t.process().process_name(), e.name);
    EXPECT_EQ(std::vector<std::string>(t.process().cmdline().begin(), t.process().cmdline().end()),
              e.cmdline);
  }
  struct ExpectedThread {
    uint32_t pid, tid;
    std::string name;
  };
  for (const ExpectedThread& e : std::vector<ExpectedThread>{
           {100, 100, "python"}, {100, 101, "pt_worker"}, {200, 200, "torchrun"}, {300, 301, ""}}) {
    SCOPED_TRACE(e.tid);
    const uint64_t uuid = PerfettoWriter::thread_track_uuid(e.pid, e.tid);
    ASSERT_TRUE(tracks.count(uuid));
    const pb::TrackDescriptor& t = *tracks.at(uuid);
    EXPECT_EQ(t.parent_uuid(), PerfettoWriter::process_track_uuid(e.pid));
    EXPECT_EQ(t.name(), e.name);
    ASSERT_TRUE(t.has_thread());
    EXPECT_EQ(t.thread().pid(), int32_t(e.pid));
    EXPECT_EQ(t.thread().tid(), int32_t(e.tid));
    EXPECT_EQ(t.thread().thread_name(), e.name);
  }

  // Exactly one BEGIN/END pair per call, and each becomes its own slice with
  // the call's times, name, layer, track and nesting.
  int begins = 0, ends = 0;
  for (const pb::TracePacket& p : trace.packet()) {
    if (!p.has_track_event()) continue;
    begins += p.track_event().type() == pb::TrackEvent::TYPE_SLICE_BEGIN;
    ends += p.track_event().type() == pb::TrackEvent::TYPE_SLICE_END;
    EXPECT_TRUE(tracks.count(p.track_event().track_uuid()));
  }
  EXPECT_EQ(begins, int(f.calls.size()));
  EXPECT_EQ(ends, int(f.calls.size()));

  std::vector<Slice> slices = build_slices(trace);
  ASSERT_EQ(slices.size(), f.calls.size());
  for (const CallRecord& call : f.calls) {
    SCOPED_TRACE(std::string(call.name()) + " @" + std::to_string(call.start_ns));
    auto it = std::find_if(slices.begin(), slices.end(), [&](const Slice& s) {
      return s.track == PerfettoWriter::thread_track_uuid(call.pid, call.tid) &&
             s.start == call.start_ns && s.end == call.start_ns + call.duration_ns &&
             s.name == call.name();
    });
    ASSERT_NE(it, slices.end());
    EXPECT_EQ(it->category, layer_name(call.layer()));
    EXPECT_EQ(it->depth, call.depth);
    const pb::DebugAnnotation* depth = annotation(*it->begin, "depth");
    ASSERT_NE(depth, nullptr);
    EXPECT_EQ(depth->int_value(), int64_t(call.depth));
    const pb::DebugAnnotation* ret = annotation(*it->begin, "ret");
    ASSERT_NE(ret, nullptr);
    EXPECT_EQ(ret->int_value(), call.raw.ret);
    slices.erase(it);
  }

  // Per thread the file is already in begin order: parents before children.
  std::map<uint64_t, uint64_t> last_begin;
  for (const pb::TracePacket& p : trace.packet()) {
    if (!p.has_track_event() || p.track_event().type() != pb::TrackEvent::TYPE_SLICE_BEGIN) {
      continue;
    }
    uint64_t& last = last_begin[p.track_event().track_uuid()];
    EXPECT_GE(p.timestamp(), last);
    last = p.timestamp();
  }
}

TEST(PerfettoWriter, AnnotatesArgumentsReturnAndBytes) {
  TempDir dir;
  const fs::path path = dir.path() / "trace.perfetto-trace";
  auto writer = PerfettoWriter::open(path.string());
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  Fixture f;
  for (const CallRecord& call : f.calls) (*writer)->on_call(call);
  ASSERT_TRUE((*writer)->finish(f.session).ok());
  const pb::Trace trace = read_trace(path);

  auto begin_at = [&](uint64_t ts, std::string_view name) -> const pb::TrackEvent* {
    for (const pb::TracePacket& p : trace.packet()) {
      if (p.has_track_event() && p.timestamp() == ts && p.track_event().name() == name) {
        return &p.track_event();
      }
    }
    return nullptr;
  };

  const pb::TrackEvent* memcpy_event = begin_at(2600, "cudaMemcpy");
  ASSERT_NE(memcpy_event, nullptr);
  ASSERT_EQ(memcpy_event->debug_annotations_size(), 8);
  EXPECT_EQ(annotation(*memcpy_event, "dst")->pointer_value(), 0x7f0000001000u);
  EXPECT_EQ(annotation(*memcpy_event, "src")->pointer_value(), 0x5555aaaa0000u);
  EXPECT_EQ(annotation(*memcpy_event, "count")->int_value(), 4096);
  EXPECT_EQ(annotation(*memcpy_event, "kind")->string_value(), memcpy_kind_name(1));
  EXPECT_EQ(annotation(*memcpy_event, "ret")->int_value(), 0);
  EXPECT_EQ(annotation(*memcpy_event, "ret_name")->string_value(), "cudaSuccess");
  EXPECT_EQ(annotation(*memcpy_event, "bytes")->int_value(), 4096);
  EXPECT_EQ(annotation(*memcpy_event, "depth")->int_value(), 2);

  // cudaMalloc shows the pointer it returned, not the address it was given.
  const pb::TrackEvent* malloc_event = begin_at(6000, "cudaMalloc");
  ASSERT_NE(malloc_event, nullptr);
  EXPECT_EQ(annotation(*malloc_event, "devPtr")->pointer_value(), 0x7f0000200000u);
  EXPECT_EQ(annotation(*malloc_event, "size")->int_value(), 1 << 20);
  EXPECT_EQ(annotation(*malloc_event, "bytes")->int_value(), 1 << 20);

  const pb::TrackEvent* memset_event = begin_at(1000, "cudaMemset");
  ASSERT_NE(memset_event, nullptr);
  EXPECT_EQ(annotation(*memset_event, "value")->int_value(), -1);

  const pb::TrackEvent* failed = begin_at(1200, "cudaMalloc");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(annotation(*failed, "ret")->int_value(), 35);
  EXPECT_EQ(annotation(*failed, "ret_name")->string_value(), "cudaErrorInsufficientDriver");
  EXPECT_EQ(annotation(*failed, "bytes")->int_value(), 0);   // it allocated nothing
  EXPECT_EQ(annotation(*failed, "size")->int_value(), 256);  // what it asked for

  // NCCL status codes are named in NCCL's terms; no arguments for operators
  // without an arg spec.
  const pb::TrackEvent* nccl = begin_at(1400, "ncclAllReduce");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(annotation(*nccl, "ret_name")->string_value(), "ncclSuccess");
  EXPECT_EQ(annotation(*nccl, "count")->int_value(), 1024);
  EXPECT_EQ(nccl->categories(0), "nccl");
  const pb::TrackEvent* step = begin_at(1000, "train.py:step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->debug_annotations_size(), 3);  // ret, bytes, depth
}

// The call packets are written with proto_wire, not the generated classes. Parsed and
// serialized again by the generated code, the file must come out byte for byte the same: every
// field where protobuf puts it, every varint minimal. Covers each kind of annotation: pointers,
// negative numbers, text, a launch's kernel, a Python site with and without a line, and a
// collective's flow id.
TEST(PerfettoWriter, CallPacketsAreTheBytesTheGeneratedClassesWrite) {
  TempDir dir;
  const fs::path path = dir.path() / "trace.perfetto-trace";
  auto writer = PerfettoWriter::open(path.string());
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  Fixture f;
  const std::string kernel = "_Z6matmulPfS_S_i";
  const PythonSite with_line{.function = "train.py:step", .file = "/srv/train.py", .line = 42};
  const PythonSite without_line{
      .function = "train.py:<module>", .file = "/srv/train.py", .line = 0};
  f.calls[0].kernel = &kernel;
  f.calls[1].py_site = &with_line;
  f.calls[2].py_site = &without_line;
  f.calls[9].collective = CollectiveRef{.comm_id = "0x5eed", .seq = 7, .rank = 1, .nranks = 4};
  f.calls[9].raw.ret = -3;  // a negative int64 takes ten bytes
  for (const CallRecord& call : f.calls) (*writer)->on_call(call);
  // Python stack slices: a frame with a line, one not yet described, then both end.
  (*writer)->on_python_stack(
      {.pid = 7, .tid = 8, .ts_ns = 3000, .ended = 0, .begun = {&with_line, nullptr}});
  (*writer)->on_python_stack({.pid = 7, .tid = 8, .ts_ns = 3100, .ended = 2, .begun = {}});
  ASSERT_TRUE((*writer)->finish(f.session).ok());

  const std::string bytes = read_bytes(path);
  pb::Trace trace;
  ASSERT_TRUE(trace.ParseFromString(bytes));
  EXPECT_EQ(trace.SerializeAsString(), bytes);

  std::vector<const pb::TrackEvent*> python_begins;
  int python_ends = 0;
  for (const pb::TracePacket& p : trace.packet()) {
    if (!p.has_track_event()) continue;
    const pb::TrackEvent& e = p.track_event();
    if (e.track_uuid() != PerfettoWriter::python_track_uuid(7, 8)) continue;
    if (e.type() == pb::TrackEvent::TYPE_SLICE_BEGIN) {
      EXPECT_EQ(p.timestamp(), 3000u);
      python_begins.push_back(&e);
    } else if (e.type() == pb::TrackEvent::TYPE_SLICE_END) {
      EXPECT_EQ(p.timestamp(), 3100u);
      ++python_ends;
    }
  }
  ASSERT_EQ(python_begins.size(), 2u);
  EXPECT_EQ(python_ends, 2);
  EXPECT_EQ(python_begins[0]->name(), "train.py:step");
  ASSERT_EQ(python_begins[0]->categories_size(), 1);
  EXPECT_EQ(python_begins[0]->categories(0), "python");
  EXPECT_EQ(annotation(*python_begins[0], "file")->string_value(), "/srv/train.py");
  EXPECT_EQ(annotation(*python_begins[0], "line")->int_value(), 42);
  EXPECT_EQ(python_begins[1]->name(), "(Python code not yet described)");
  EXPECT_EQ(python_begins[1]->debug_annotations_size(), 0);

  // And the fields are the ones meant.
  const pb::TrackEvent* launch = nullptr;
  const pb::TrackEvent* nccl = nullptr;
  for (const pb::TracePacket& p : trace.packet()) {
    if (!p.has_track_event() || p.track_event().type() != pb::TrackEvent::TYPE_SLICE_BEGIN)
      continue;
    EXPECT_EQ(p.timestamp_clock_id(), static_cast<uint32_t>(pb::BUILTIN_CLOCK_MONOTONIC));
    EXPECT_EQ(p.trusted_packet_sequence_id(), PerfettoWriter::kSequenceId);
    if (p.timestamp() == 1500) launch = &p.track_event();
    if (p.timestamp() == 1400) nccl = &p.track_event();
  }
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ(launch->name(), "matmul(float*, float*, float*, int)");
  EXPECT_EQ(annotation(*launch, "kernel")->string_value(), kernel);
  EXPECT_EQ(annotation(*launch, "api")->string_value(), "aten::mm");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(annotation(*nccl, "ret")->int_value(), -3);
  EXPECT_EQ(annotation(*nccl, "comm")->string_value(), "0x5eed");
  EXPECT_EQ(annotation(*nccl, "seq")->int_value(), 7);
  EXPECT_EQ(annotation(*nccl, "rank")->int_value(), 1);
  ASSERT_EQ(nccl->flow_ids_size(), 1);
  EXPECT_EQ(nccl->flow_ids(0), collective_flow_id(*f.calls[9].collective));
  const pb::TrackEvent* memcpy_event = nullptr;
  const pb::TrackEvent* mm_event = nullptr;
  for (const pb::TracePacket& p : trace.packet()) {
    if (!p.has_track_event() || p.track_event().type() != pb::TrackEvent::TYPE_SLICE_BEGIN)
      continue;
    if (p.timestamp() == 2600) memcpy_event = &p.track_event();
    if (p.timestamp() == 2500) mm_event = &p.track_event();
  }
  ASSERT_NE(memcpy_event, nullptr);
  EXPECT_EQ(annotation(*memcpy_event, "python")->string_value(), "train.py:step line 42");
  ASSERT_NE(mm_event, nullptr);
  EXPECT_EQ(annotation(*mm_event, "python")->string_value(), "train.py:<module>");
}

TEST(PerfettoWriter, ManyNestedCallsStayBoundedAndNested) {
  // Deep trees whose root never returns: children are flushed when the
  // per-thread bound is hit and at finish, and still pair up.
  TempDir dir;
  const fs::path path = dir.path() / "trace.perfetto-trace";
  auto writer = PerfettoWriter::open(path.string());
  ASSERT_TRUE(writer.ok());
  Session session;
  const int kCalls = 20000;
  for (int i = 0; i < kCalls; ++i) {
    const uint64_t start = 1000 + uint64_t(i) * 10;
    (*writer)->on_call(make_call(7, 7, kMm, start, start + 5, 1));
  }
  ASSERT_TRUE((*writer)->finish(session).ok());
  const pb::Trace trace = read_trace(path);
  EXPECT_EQ(build_slices(trace).size(), size_t(kCalls));
}

TEST(PerfettoWriter, EmptySessionIsAValidTrace) {
  TempDir dir;
  const fs::path path = dir.path() / "trace.perfetto-trace";
  auto writer = PerfettoWriter::open(path.string());
  ASSERT_TRUE(writer.ok());
  Session session;
  ASSERT_TRUE((*writer)->finish(session).ok());
  const pb::Trace trace = read_trace(path);
  ASSERT_EQ(trace.packet_size(), 1);  // the clock snapshot
  EXPECT_FALSE((*writer)->finish(session).ok());
}

TEST(PerfettoWriter, WithoutFinishLeavesNoTemporaryFile) {
  TempDir dir;
  const fs::path path = dir.path() / "trace.perfetto-trace";
  {
    auto writer = PerfettoWriter::open(path.string());
    ASSERT_TRUE(writer.ok());
    Fixture f;
    (*writer)->on_call(f.calls.front());
  }
  EXPECT_FALSE(fs::exists(path.string() + ".events.tmp"));
  EXPECT_TRUE(fs::exists(path));
}

TEST(PerfettoWriter, OpenFailsOnUnwritableDirectory) {
  TempDir dir;
  // A regular file as the parent directory fails even for root.
  const fs::path file = dir.path() / "not-a-directory";
  std::ofstream(file) << "x";
  const std::string path = (file / "trace.perfetto-trace").string();
  auto writer = PerfettoWriter::open(path);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.error().message.find(path), std::string::npos) << writer.error().message;

  const std::string missing = (dir.path() / "no" / "such" / "dir" / "trace").string();
  auto writer2 = PerfettoWriter::open(missing);
  ASSERT_FALSE(writer2.ok());
  EXPECT_NE(writer2.error().message.find(missing), std::string::npos);
}

}  // namespace
}  // namespace eacgm
