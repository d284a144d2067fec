#include "agent/flight_recorder.h"

#include <fmt/format.h>

#include <algorithm>

namespace eacgm {
namespace {

using nlohmann::json;

// A ring per layer, and ring 0 (no layer has id 0) for the process events, which have none.
size_t ring_of(const Event& event) {
  const std::optional<Layer> layer = layer_of(event);
  if (!layer) return 0;
  const auto id = static_cast<size_t>(*layer);
  return id < EACGM_LAYER_ID_END ? id : 0;
}

uint64_t time_of(const Event& event) {
  return std::visit(
      [](const auto& e) -> uint64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(e)>, CallRecord>) {
          return e.start_ns;
        } else {
          return e.ts_ns;
        }
      },
      event);
}

std::string mmap_flags(uint32_t flags) {
  static constexpr std::pair<uint32_t, const char*> kNames[] = {
      {0x01, "MAP_SHARED"},       {0x02, "MAP_PRIVATE"},
      {0x10, "MAP_FIXED"},        {0x20, "MAP_ANONYMOUS"},
      {0x100, "MAP_GROWSDOWN"},   {0x800, "MAP_DENYWRITE"},
      {0x1000, "MAP_EXECUTABLE"}, {0x2000, "MAP_LOCKED"},
      {0x4000, "MAP_NORESERVE"},  {0x8000, "MAP_POPULATE"},
      {0x10000, "MAP_NONBLOCK"},  {0x20000, "MAP_STACK"},
      {0x40000, "MAP_HUGETLB"},   {0x100000, "MAP_FIXED_NOREPLACE"}};
  std::string out;
  for (auto [bit, name] : kNames) {
    if ((flags & bit) == 0) continue;
    if (!out.empty()) out += '|';
    out += name;
    flags &= ~bit;
  }
  if (flags != 0) out += fmt::format("{}{:#x}", out.empty() ? "" : "|", flags);
  return out.empty() ? "0" : out;
}

json entry_json(const Event& event, uint64_t start_ns,
                const std::map<uint32_t, std::string>& devices) {
  auto t = [start_ns](uint64_t ns) { return ns > start_ns ? (ns - start_ns) / 1e9 : 0.0; };
  if (const auto* c = std::get_if<CallRecord>(&event)) {
    json args = json::object();
    for (const DecodedArg& a : decode_args(*c->spec, c->raw)) args[std::string(a.name)] = a.text;
    json e = {
        {"t_s", t(c->start_ns)}, {"layer", layer_name(c->layer())}, {"tid", c->tid},
        {"event", c->name()},    {"duration_ns", c->duration_ns},   {"args", std::move(args)}};
    if (!c->finished) {
      e["finished"] = false;  // its start, announced: it had not returned
    } else {
      e["ret"] = c->raw.ret;
      if (c->failed()) e["error"] = status_name(c->layer(), c->raw.ret);
    }
    return e;
  }
  if (const auto* p = std::get_if<ProcEvent>(&event)) {
    static constexpr const char* kNames[] = {"fork",        "exec",        "exit",
                                             "loader_stop", "unwind_stop", "loader_notice"};
    json e = {{"t_s", t(p->ts_ns)},
              {"layer", "process"},
              {"tid", p->tid},
              {"event", kNames[static_cast<int>(p->kind)]},
              {"comm", p->comm}};
    if (p->kind == ProcEvent::Kind::kFork) e["ppid"] = p->ppid;
    if (p->kind == ProcEvent::Kind::kExit) e["wait_status"] = p->status;
    if (p->kind == ProcEvent::Kind::kUnwindStop) {
      e["open_calls"] = p->open_calls;
      e["return_addresses"] = p->return_slots.size();
    }
    return e;
  }
  if (const auto* s = std::get_if<SignalEvent>(&event)) {
    return {{"t_s", t(s->ts_ns)},
            {"layer", "os"},
            {"tid", s->tid},
            {"event", "signal"},
            {"signal", signal_name(s->sig)},
            {"code", s->code},
            {"result", s->result},
            {"sender", {{"pid", s->sender_pid}, {"comm", s->sender_comm}}}};
  }
  if (const auto* o = std::get_if<OomKillEvent>(&event)) {
    return {{"t_s", t(o->ts_ns)},
            {"layer", "os"},
            {"tid", o->tid},
            {"event", "oom_kill"},
            {"anon_rss_bytes", o->anon_rss_bytes},
            {"cgroup", o->cgroup}};
  }
  if (const auto* m = std::get_if<MmapEvent>(&event)) {
    static constexpr const char* kOps[] = {"mmap", "munmap", "mremap"};
    json e = {{"t_s", t(m->ts_ns)},
              {"layer", "os"},
              {"tid", m->tid},
              {"event", kOps[static_cast<int>(m->op)]},
              {"duration_ns", m->duration_ns},
              {"addr", fmt::format("{:#x}", m->addr)},
              {"len", m->len},
              {"ret", m->ret}};
    if (m->op == MmapEvent::Op::kMmap) {
      e["flags"] = mmap_flags(m->flags);
      e["fd"] = m->fd;
    }
    if (m->op == MmapEvent::Op::kMremap) {
      e["old_addr"] = fmt::format("{:#x}", m->old_addr);
      e["old_len"] = m->old_len;
    }
    return e;
  }
  const auto& i = std::get<IoctlEvent>(event);
  auto dev = devices.find(i.rdev);
  return {{"t_s", t(i.ts_ns)},
          {"layer", "os"},
          {"tid", i.tid},
          {"event", "ioctl"},
          {"device", dev != devices.end() ? dev->second : device_number(i.rdev)},
          {"request", fmt::format("{:#x}", i.request)},
          {"duration_ns", i.duration_ns},
          {"ret", i.ret}};
}

}  // namespace

void FlightRecorder::add(uint32_t pid, const Event& event) {
  if (per_layer_ == 0) return;
  Ring& ring = rings_[pid][ring_of(event)];
  if (ring.items.size() < per_layer_) {
    ring.items.push_back(event);
    return;
  }
  ring.items[ring.next] = event;
  ring.next = (ring.next + 1) % per_layer_;
}

json FlightRecorder::events_json(uint32_t pid, uint64_t start_ns,
                                 const std::map<uint32_t, std::string>& devices) const {
  json out = json::array();
  auto it = rings_.find(pid);
  if (it == rings_.end()) return out;
  std::vector<const Event*> all;
  for (const Ring& ring : it->second) {
    for (const Event& e : ring.items) all.push_back(&e);
  }
  // Calls are stamped with their start, other events with their moment:
  // ordered by that, a call appears where it began.
  std::stable_sort(all.begin(), all.end(),
                   [](const Event* a, const Event* b) { return time_of(*a) < time_of(*b); });
  for (const Event* e : all) out.push_back(entry_json(*e, start_ns, devices));
  return out;
}

json FlightRecorder::report(const ProcessInfo& p, uint64_t start_ns,
                            const std::map<uint32_t, std::string>& devices) const {
  json exit = nullptr;
  if (p.exit) {
    exit = {{"code", p.exit->code ? json(*p.exit->code) : json(nullptr)},
            {"signal", p.exit->signal ? json(*p.exit->signal) : json(nullptr)},
            {"cause", p.exit->cause},
            {"sender", p.exit->sender
                           ? json{{"pid", p.exit->sender->pid}, {"comm", p.exit->sender->comm}}
                           : json(nullptr)}};
  }
  return {{"pid", p.pid},
          {"comm", p.comm},
          {"cmdline", p.cmdline},
          {"exit", std::move(exit)},
          {"end_s", p.end_ns > start_ns ? (p.end_ns - start_ns) / 1e9 : 0.0},
          {"kept_per_layer", per_layer_},
          {"events", events_json(p.pid, start_ns, devices)}};
}

}  // namespace eacgm
