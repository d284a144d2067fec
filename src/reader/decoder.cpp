#include "reader/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "bpf/events.h"

namespace eacgm {

// The BPF side writes these structs; a layout change there that is not
// mirrored here must fail the build, not misdecode silently.
static_assert(sizeof(eacgm_header) == 24);
static_assert(offsetof(eacgm_header, ts_ns) == 16);
static_assert(sizeof(eacgm_call) == 24 + 8 + 64 + 8 + 8 + 4 + 4 + 2 * 8 + 4 + 4);
static_assert(offsetof(eacgm_call, flags) == 136);
static_assert(offsetof(eacgm_call, args) == 32);
static_assert(offsetof(eacgm_call, ret) == 104);
static_assert(offsetof(eacgm_call, func_id) == 112);
static_assert(sizeof(eacgm_proc) == 24 + 4 + 4 + EACGM_COMM_LEN);
static_assert(sizeof(eacgm_signal) == 24 + 6 * 4 + EACGM_COMM_LEN);
static_assert(offsetof(eacgm_signal, sender_comm) == 48);
static_assert(sizeof(eacgm_oom) ==
              24 + 5 * 8 + 6 * 4 + 2 * EACGM_COMM_LEN + EACGM_CGROUP_DEPTH * EACGM_CGROUP_NAME_LEN);
static_assert(offsetof(eacgm_oom, uid) == 64);
static_assert(offsetof(eacgm_oom, comm) == 88);
static_assert(offsetof(eacgm_oom, cgroup) == 120);
static_assert(sizeof(eacgm_mmap) == 24 + 6 * 8 + 4 * 4);
static_assert(offsetof(eacgm_mmap, ret) == 64);
static_assert(offsetof(eacgm_mmap, op) == 72);
static_assert(sizeof(eacgm_ioctl) == 24 + 4 * 8 + 2 * 4);
static_assert(offsetof(eacgm_ioctl, fd) == 56);
static_assert(sizeof(eacgm_py_frame) == 16);
static_assert(sizeof(eacgm_py_sample) == 24 + 16 + 8 + 8 + EACGM_PY_MAX_FRAMES * 16);
static_assert(offsetof(eacgm_py_code, name) == 40);
static_assert(sizeof(eacgm_py_code) ==
              40 + EACGM_PY_NAME_LEN + EACGM_PY_FILE_LEN + EACGM_PY_LINETABLE_LEN);
static_assert(sizeof(eacgm_py_function) == 40 + EACGM_PY_NAME_LEN + EACGM_PY_FILE_LEN);
static_assert(sizeof(eacgm_py_gc) == 24 + 8 + 8 + 4 + 4);
static_assert(sizeof(eacgm_name) == 24 + 8 + 8 + 4 + 4 + EACGM_NAME_LEN);
static_assert(offsetof(eacgm_name, name) == 48);

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

Result<Event> decode_call(std::span<const std::byte> data, bool finished,
                          const TorchOpTable* torch) {
  auto raw = read_struct<eacgm_call>(data, "call");
  if (!raw) return raw.error();
  const eacgm_call& c = *raw;
  const auto layer = static_cast<Layer>(c.hdr.layer);
  const ProbeSpec* spec = nullptr;
  if (layer == Layer::kTorch) {
    if (torch) spec = torch->row(c.func_id);
  } else if (std::span<const ProbeSpec> table = probe_table(layer); c.func_id < table.size()) {
    spec = &table[c.func_id];
  }
  if (!spec) {
    return Error{
        fmt::format("call record for unknown function {} of layer {}", c.func_id, c.hdr.layer)};
  }
  CallRecord call;
  call.pid = c.hdr.tgid;
  call.tid = c.hdr.tid;
  call.spec = spec;
  call.func_id = c.func_id;
  call.start_ns = c.hdr.ts_ns;
  call.duration_ns = c.duration_ns;
  call.depth = c.depth;
  call.announced = c.announced;
  call.finished = finished;
  std::memcpy(call.raw.args.data(), c.args, sizeof(c.args));
  call.py_code = c.py_code;
  call.py_instr = c.py_instr;
  call.inner = (c.flags & EACGM_CALL_INNER) != 0;
  call.raw.out_value = c.out_value;
  // Status codes (cudaError_t, ncclResult_t) are 32-bit ints: the upper half
  // of rax is garbage.
  call.raw.ret = call.spec->returns_status ? static_cast<int32_t>(c.ret) : c.ret;
  return Event{call};
}

Result<Event> decode_name(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_name>(data, "name");
  if (!raw) return raw.error();
  std::span<const ProbeSpec> table = probe_table(static_cast<Layer>(raw->hdr.layer));
  if (raw->func_id >= table.size() || table[raw->func_id].name_slot == kNoSlot) {
    return Error{fmt::format("name record for function {} of layer {}, which names nothing",
                             raw->func_id, raw->hdr.layer)};
  }
  HandleNameEvent e;
  e.pid = raw->hdr.tgid;
  e.tid = raw->hdr.tid;
  e.ts_ns = raw->hdr.ts_ns;
  e.spec = &table[raw->func_id];
  e.handle = raw->key;
  e.ret = e.spec->returns_status ? static_cast<int32_t>(raw->ret) : raw->ret;
  e.name.assign(raw->name, strnlen(raw->name, sizeof(raw->name)));
  return Event{std::move(e)};
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

Result<Event> decode_unwind_stop(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_unwind_stop>(data, "unwind stop");
  if (!raw) return raw.error();
  if (raw->n > EACGM_UNWIND_SLOTS) {
    return Error{
        fmt::format("unwind stop record with {} slots (at most {})", raw->n, EACGM_UNWIND_SLOTS)};
  }
  ProcEvent e;
  e.kind = ProcEvent::Kind::kUnwindStop;
  e.pid = raw->hdr.tgid;
  e.tid = raw->hdr.tid;
  e.ts_ns = raw->hdr.ts_ns;
  e.open_calls = raw->open_calls;
  for (uint32_t i = 0; i < raw->n; ++i) {
    if (raw->slot[i] != 0) e.return_slots.emplace_back(raw->slot[i], raw->orig[i]);
  }
  return Event{e};
}

std::string c_string(const char* text, size_t size) {
  return std::string(text, strnlen(text, size));
}

Result<Event> decode_signal(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_signal>(data, "signal");
  if (!raw) return raw.error();
  SignalEvent e;
  e.pid = raw->hdr.tgid;
  e.tid = raw->hdr.tid;
  e.ts_ns = raw->hdr.ts_ns;
  e.sig = raw->sig;
  e.code = raw->code;
  e.result = raw->result;
  e.group = raw->group != 0;
  e.sender_pid = raw->sender_tgid;
  e.sender_tid = raw->sender_tid;
  e.sender_comm = c_string(raw->sender_comm, sizeof(raw->sender_comm));
  return Event{e};
}

Result<Event> decode_oom(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_oom>(data, "OOM kill");
  if (!raw) return raw.error();
  const eacgm_oom& r = *raw;
  OomKillEvent e;
  e.pid = r.hdr.tgid;
  e.tid = r.hdr.tid;
  e.ts_ns = r.hdr.ts_ns;
  e.comm = c_string(r.comm, sizeof(r.comm));
  e.total_vm_bytes = r.total_vm_bytes;
  e.anon_rss_bytes = r.anon_rss_bytes;
  e.file_rss_bytes = r.file_rss_bytes;
  e.shmem_rss_bytes = r.shmem_rss_bytes;
  e.uid = r.uid;
  e.oom_score_adj = r.oom_score_adj;
  e.cgroup_id = r.cgroup_id;
  e.cgroup_v1 = r.cgroup_hierarchy != 0;
  e.killer_pid = r.killer_tgid;
  e.killer_comm = c_string(r.killer_comm, sizeof(r.killer_comm));
  // Components arrive leaf first; a path deeper than the event holds lost its top.
  const uint32_t names = std::min<uint32_t>(r.cgroup_names, EACGM_CGROUP_DEPTH);
  std::string path = names < r.cgroup_level ? "/..." : "";
  for (uint32_t i = names; i-- > 0;) {
    // Appended piece by piece: `"/" + string` makes GCC 12 at -O3 warn -Wrestrict (a false
    // positive of its string inlining, GCC bug 105329).
    path += '/';
    path += c_string(r.cgroup[i], EACGM_CGROUP_NAME_LEN);
  }
  e.cgroup = path.empty() ? "/" : path;
  return Event{e};
}

Result<Event> decode_mmap(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_mmap>(data, "mmap");
  if (!raw) return raw.error();
  const eacgm_mmap& r = *raw;
  MmapEvent e;
  switch (r.op) {
    case EACGM_MMAP:
      e.op = MmapEvent::Op::kMmap;
      break;
    case EACGM_MUNMAP:
      e.op = MmapEvent::Op::kMunmap;
      break;
    case EACGM_MREMAP:
      e.op = MmapEvent::Op::kMremap;
      break;
    default:
      return Error{fmt::format("mmap record with unknown operation {}", r.op)};
  }
  e.pid = r.hdr.tgid;
  e.tid = r.hdr.tid;
  e.ts_ns = r.hdr.ts_ns;
  e.duration_ns = r.duration_ns;
  e.addr = r.addr;
  e.len = r.len;
  e.old_addr = r.old_addr;
  e.old_len = r.old_len;
  e.ret = r.ret;
  e.prot = r.prot;
  e.flags = r.flags;
  e.fd = r.fd;
  return Event{e};
}

Result<Event> decode_ioctl(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_ioctl>(data, "ioctl");
  if (!raw) return raw.error();
  IoctlEvent e;
  e.pid = raw->hdr.tgid;
  e.tid = raw->hdr.tid;
  e.ts_ns = raw->hdr.ts_ns;
  e.duration_ns = raw->duration_ns;
  e.request = raw->request;
  e.arg = raw->arg;
  e.ret = raw->ret;
  e.fd = raw->fd;
  e.rdev = raw->rdev;
  return Event{e};
}

Result<Event> decode_py_sample(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_py_sample>(data, "python sample");
  if (!raw) return raw.error();
  PySampleEvent e;
  e.pid = raw->hdr.tgid;
  e.tid = raw->hdr.tid;
  e.ts_ns = raw->hdr.ts_ns;
  switch (raw->thread_state) {
    case EACGM_PY_RUNNING:
      e.state = PySampleEvent::State::kRunning;
      break;
    case EACGM_PY_UNINTERRUPTIBLE:
      e.state = PySampleEvent::State::kUninterruptible;
      break;
    case EACGM_PY_STOPPED:
      e.state = PySampleEvent::State::kStopped;
      break;
    default:
      e.state = PySampleEvent::State::kSleeping;
      break;
  }
  e.truncated = raw->truncated != 0;
  e.voluntary_switches = raw->voluntary_switches;
  e.run_delay_ns = raw->run_delay_ns;
  const uint32_t n = std::min<uint32_t>(raw->nframes, EACGM_PY_MAX_FRAMES);
  e.frames.reserve(n);
  for (uint32_t i = 0; i < n; ++i) e.frames.push_back({raw->frames[i].code, raw->frames[i].instr});
  return Event{std::move(e)};
}

Result<Event> decode_py_code(std::span<const std::byte> data) {
  // 4 KiB of line table: read in place rather than copied whole onto the stack.
  if (data.size() < sizeof(eacgm_py_code)) {
    return Error{fmt::format("truncated python code record: {} bytes, need {}", data.size(),
                             sizeof(eacgm_py_code))};
  }
  // Fields read where they lie: a record need not be aligned for the struct (the ring buffer's
  // are, bytes from elsewhere need not be).
  const std::byte* base = data.data();
  auto field = [base](size_t offset, auto& out) { std::memcpy(&out, base + offset, sizeof(out)); };
  eacgm_header hdr{};
  field(offsetof(eacgm_py_code, hdr), hdr);
  PyCodeEvent e;
  e.pid = hdr.tgid;
  e.ts_ns = hdr.ts_ns;
  field(offsetof(eacgm_py_code, code), e.code);
  field(offsetof(eacgm_py_code, firstlineno), e.firstlineno);
  uint32_t linetable_len = 0;
  field(offsetof(eacgm_py_code, linetable_len), linetable_len);
  const auto* name = reinterpret_cast<const char*>(base + offsetof(eacgm_py_code, name));
  const auto* file = reinterpret_cast<const char*>(base + offsetof(eacgm_py_code, file));
  const auto* linetable =
      reinterpret_cast<const uint8_t*>(base + offsetof(eacgm_py_code, linetable));
  e.name = c_string(name, EACGM_PY_NAME_LEN);
  e.file = c_string(file, EACGM_PY_FILE_LEN);
  const uint32_t kept = std::min<uint32_t>(linetable_len, EACGM_PY_LINETABLE_LEN);
  e.linetable.assign(linetable, linetable + kept);
  e.linetable_complete = linetable_len <= EACGM_PY_LINETABLE_LEN;
  return Event{std::move(e)};
}

Result<Event> decode_py_function(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_py_function>(data, "python function");
  if (!raw) return raw.error();
  PyFunctionEvent e;
  e.pid = raw->hdr.tgid;
  e.ts_ns = raw->hdr.ts_ns;
  e.file_ptr = raw->file_ptr;
  e.name_ptr = raw->name_ptr;
  e.name = c_string(raw->name, sizeof(raw->name));
  e.file = c_string(raw->file, sizeof(raw->file));
  return Event{std::move(e)};
}

Result<Event> decode_py_gc(std::span<const std::byte> data) {
  auto raw = read_struct<eacgm_py_gc>(data, "python gc");
  if (!raw) return raw.error();
  PyGcEvent e;
  e.pid = raw->hdr.tgid;
  e.tid = raw->hdr.tid;
  e.ts_ns = raw->hdr.ts_ns;
  e.duration_ns = raw->duration_ns;
  e.collected = raw->collected;
  e.generation = raw->generation;
  return Event{e};
}

}  // namespace

std::optional<Layer> layer_of(const Event& event) {
  return std::visit(
      [](const auto& e) -> std::optional<Layer> {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, CallRecord>) {
          return e.layer();
        } else if constexpr (std::is_same_v<T, HandleNameEvent>) {
          return e.spec != nullptr ? std::optional(e.spec->layer) : std::nullopt;
        } else if constexpr (std::is_same_v<T, ProcEvent>) {
          return std::nullopt;
        } else {
          return T::kLayer;
        }
      },
      event);
}

Result<Event> decode_event(std::span<const std::byte> data, const TorchOpTable* torch) {
  auto header = read_struct<eacgm_header>(data, "event");
  if (!header) return header.error();
  switch (header->kind) {
    case EACGM_EV_CALL:
      return decode_call(data, true, torch);
    case EACGM_EV_CALL_BEGIN:
      return decode_call(data, false, torch);
    case EACGM_EV_PROC_FORK:
      return decode_proc(data, ProcEvent::Kind::kFork);
    case EACGM_EV_PROC_EXEC:
      return decode_proc(data, ProcEvent::Kind::kExec);
    case EACGM_EV_PROC_EXIT:
      return decode_proc(data, ProcEvent::Kind::kExit);
    case EACGM_EV_DL_STOP:
      return decode_proc(data, ProcEvent::Kind::kLoaderStop);
    case EACGM_EV_DL_NOTICE:
      return decode_proc(data, ProcEvent::Kind::kNotice);
    case EACGM_EV_UNWIND_STOP:
      return decode_unwind_stop(data);
    case EACGM_EV_SIGNAL:
      return decode_signal(data);
    case EACGM_EV_OOM_KILL:
      return decode_oom(data);
    case EACGM_EV_MMAP:
      return decode_mmap(data);
    case EACGM_EV_IOCTL:
      return decode_ioctl(data);
    case EACGM_EV_PY_SAMPLE:
      return decode_py_sample(data);
    case EACGM_EV_PY_CODE:
      return decode_py_code(data);
    case EACGM_EV_PY_FUNCTION:
      return decode_py_function(data);
    case EACGM_EV_PY_GC:
      return decode_py_gc(data);
    case EACGM_EV_NAME:
      return decode_name(data);
    default:
      return Error{fmt::format("unknown event kind {}", header->kind)};
  }
}

}  // namespace eacgm
