#include "reader/decoder.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>

#include "bpf/events.h"

namespace eacgm {

// The BPF side writes these structs; a layout change there that is not
// mirrored here must fail the build, not misdecode silently.
static_assert(sizeof(eacgm_header) == 24);
static_assert(offsetof(eacgm_header, ts_ns) == 16);
static_assert(sizeof(eacgm_call) == 24 + 8 + 64 + 8 + 8 + 4 + 4);
static_assert(offsetof(eacgm_call, args) == 32);
static_assert(offsetof(eacgm_call, ret) == 104);
static_assert(offsetof(eacgm_call, func_id) == 112);
static_assert(sizeof(eacgm_proc) == 24 + 4 + 4 + EACGM_COMM_LEN);

namespace {

template <typename T>
Result<T> read_struct(std::span<const std::byte> data, std::string_view what) {
  if (data.size() < sizeof(T)) {
    return Error{
        fmt::format("truncated {} record: {} bytes, need {}", what, data.size(), sizeof(T))};
  }
  T out;
  std::memcpy(&out, data.data(), sizeof(T));
  return out;
}

Result<Event> decode_call(std::span<const std::byte> data, bool finished) {
  auto raw = read_struct<eacgm_call>(data, "call");
  if (!raw) return raw.error();
  const eacgm_call& c = *raw;
  const auto layer = static_cast<Layer>(c.hdr.layer);
  std::span<const ProbeSpec> table = probe_table(layer);
  if (c.func_id >= table.size()) {
    return Error{
        fmt::format("call record for unknown function {} of layer {}", c.func_id, c.hdr.layer)};
  }
  CallRecord call;
  call.pid = c.hdr.tgid;
  call.tid = c.hdr.tid;
  call.spec = &table[c.func_id];
  call.func_id = c.func_id;
  call.start_ns = c.hdr.ts_ns;
  call.duration_ns = c.duration_ns;
  call.depth = c.depth;
  call.finished = finished;
  std::memcpy(call.raw.args.data(), c.args, sizeof(c.args));
  call.raw.out_value = c.out_value;
  // Status codes (cudaError_t, ncclResult_t) are 32-bit ints: the upper half
  // of rax is garbage.
  call.raw.ret = call.spec->returns_status ? static_cast<int32_t>(c.ret) : c.ret;
  return Event{call};
}

Result<Event> decode_proc(std::span<const std::byte> data, ProcEvent::Kind kind) {
  auto raw = read_struct<eacgm_proc>(data, "process");
  if (!raw) return raw.error();
  ProcEvent e;
  e.kind = kind;
  e.pid = raw->hdr.tgid;
  e.tid = raw->hdr.tid;
  e.ppid = raw->ppid;
  e.status = raw->exit_code;
  e.ts_ns = raw->hdr.ts_ns;
  e.comm.assign(raw->comm, strnlen(raw->comm, sizeof(raw->comm)));
  return Event{e};
}

}  // namespace

Result<Event> decode_event(std::span<const std::byte> data) {
  auto header = read_struct<eacgm_header>(data, "event");
  if (!header) return header.error();
  switch (header->kind) {
    case EACGM_EV_CALL:
      return decode_call(data, true);
    case EACGM_EV_CALL_BEGIN:
      return decode_call(data, false);
    case EACGM_EV_PROC_FORK:
      return decode_proc(data, ProcEvent::Kind::kFork);
    case EACGM_EV_PROC_EXEC:
      return decode_proc(data, ProcEvent::Kind::kExec);
    case EACGM_EV_PROC_EXIT:
      return decode_proc(data, ProcEvent::Kind::kExit);
    case EACGM_EV_DL_STOP:
      return decode_proc(data, ProcEvent::Kind::kLoaderStop);
    default:
      return Error{fmt::format("unknown event kind {}", header->kind)};
  }
}

}  // namespace eacgm
