#include "analysis/session_db.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "analysis/leak_detector.h"
#include "probes/probe_table.h"
#include "session/session.h"
#include "session/session_database.h"

namespace eacgm {
namespace {

using Stmt = SqliteStmt;

// What replaying an API needs of its probe row: its class, its effect on device memory, and the
// argument holding the pointer it allocates or frees.
struct ApiRole {
  ApiClass api_class = ApiClass::kOther;
  MemoryEffect effect = MemoryEffect::kNone;
  std::string pointer_arg;
};

ApiRole api_role(Layer layer, std::string_view name) {
  const ProbeSpec* spec = find_probe(layer, name);
  if (!spec) return {};
  const Slot slot =
      spec->memory == MemoryEffect::kDeviceAlloc ? spec->out_slot : spec->memory_ptr_slot;
  for (const ArgSpec& arg : spec->args) {
    if (arg.slot == slot) return {spec->api_class, spec->memory, std::string(arg.name)};
  }
  return {spec->api_class, spec->memory, ""};
}

uint64_t pointer_arg(const char* args_json, const std::string& name) {
  if (!args_json || name.empty()) return 0;
  const nlohmann::json args = nlohmann::json::parse(args_json, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object() || !args.contains(name)) return 0;
  const auto& v = args[name];
  if (v.is_number_unsigned() || v.is_number_integer()) return v.get<uint64_t>();
  if (v.is_string()) return std::strtoull(v.get<std::string>().c_str(), nullptr, 16);
  return 0;
}

}  // namespace

Result<std::unique_ptr<RecordedSession>> load_recorded_session(const std::string& dir,
                                                               bool with_places) {
  auto database = open_session_directory(dir);
  if (!database) return database.error();
  const std::string& path = (*database)->path;
  sqlite3* const db = (*database)->handle();
  auto prepare = [&](const char* sql, Stmt& s) -> Result<void> {
    if (sqlite3_prepare_v2(db, sql, -1, &s.stmt, nullptr) != SQLITE_OK) {
      return Error{
          fmt::format("{} is not an eacgm session database: {}", path, sqlite3_errmsg(db))};
    }
    return {};
  };
  auto session = std::make_unique<RecordedSession>();
  session->dir = dir;
  // A newer version was refused at open; 0 is a database from before eacgm wrote one.
  if ((*database)->schema_version != kSessionSchemaVersion) {
    return Error{
        fmt::format("{}: not an eacgm session database of schema {}", path, kSessionSchemaVersion)};
  }
  {
    Stmt s;
    if (auto r = prepare("SELECT key, value FROM meta", s); !r) return r.error();
    int rc;
    while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
      const auto* key_text = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0));
      const std::string_view key = key_text ? key_text : "";
      const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 1));
      const uint64_t value = text ? std::strtoull(text, nullptr, 10) : 0;
      if (key == meta_key::kStartNs) session->start_ns = value;
      if (key == meta_key::kEndNs) session->end_ns = value;
    }
    if (rc != SQLITE_DONE) {
      return Error{fmt::format("cannot read {}: {}", path, sqlite3_errmsg(db))};
    }
  }
  {
    Stmt s;
    // `role` came later (sessions of eacgm 0.1 have none: their workers share a key).
    const char* sql = (*database)->has_column("processes", "role")
                          ? "SELECT pid, rank, comm, end_ns, role FROM processes"
                          : "SELECT pid, rank, comm, end_ns, NULL FROM processes";
    if (auto r = prepare(sql, s); !r) return r.error();
    while (sqlite3_step(s.stmt) == SQLITE_ROW) {
      const auto pid = static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 0));
      EntityInfo& info = session->processes[pid];
      if (sqlite3_column_type(s.stmt, 1) != SQLITE_NULL) info.rank = sqlite3_column_int(s.stmt, 1);
      if (const auto* comm = sqlite3_column_text(s.stmt, 2)) {
        info.comm = reinterpret_cast<const char*>(comm);
      }
      if (sqlite3_column_type(s.stmt, 3) != SQLITE_NULL) {
        session->process_end_ns[pid] = static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 3));
      }
      if (const auto* role = sqlite3_column_text(s.stmt, 4)) {
        info.role = reinterpret_cast<const char*>(role);
      }
    }
  }
  Stmt s;
  // A driver call inside a runtime call (`inner_call`) is that call's own work: replayed once, as
  // the live run counted it. Sessions before the driver layer have no such column and no such row.
  // The kernel column came with the driver layer too: older sessions name no kernel.
  const std::string columns =
      "pid, layer, name, start_ns, duration_ns, bytes, error IS NOT NULL, args";
  const bool has_kernel = (*database)->has_column("calls", "kernel");
  const std::string sql =
      fmt::format("SELECT {}{} FROM calls{} ORDER BY id", columns,
                  !with_places ? ""
                  : has_kernel ? ", tid, depth, kernel"
                               : ", tid, depth, NULL",
                  (*database)->has_column("calls", "inner_call") ? " WHERE inner_call = 0" : "");
  if (auto r = prepare(sql.c_str(), s); !r) return r.error();
  std::map<std::pair<Layer, std::string_view>, ApiRole> roles;
  std::unordered_map<uint32_t, DeviceMemory> memory;
  int rc;
  while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
    CallSample c;
    c.pid = static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 0));
    const auto* layer_text = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 1));
    const auto* name_text = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 2));
    const std::optional<Layer> layer = layer_from_name(layer_text ? layer_text : "");
    if (!layer || !name_text) continue;
    c.layer = *layer;
    c.name = *session->names.emplace(name_text).first;
    c.start_ns = static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 3));
    c.duration_ns = static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 4));
    c.bytes = static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 5));
    c.failed = sqlite3_column_int(s.stmt, 6) != 0;
    auto role = roles.find({c.layer, c.name});
    if (role == roles.end())
      role = roles.emplace(std::pair{c.layer, c.name}, api_role(c.layer, c.name)).first;
    c.api_class = role->second.api_class;
    DeviceMemory& mem = memory[c.pid];
    if (!c.failed && role->second.effect == MemoryEffect::kDeviceAlloc) {
      mem.on_alloc(pointer_arg(reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 7)),
                               role->second.pointer_arg),
                   c.bytes);
    } else if (!c.failed && role->second.effect == MemoryEffect::kDeviceFree) {
      mem.on_free(pointer_arg(reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 7)),
                              role->second.pointer_arg));
    }
    c.outstanding_bytes = mem.outstanding_bytes;
    c.memory_event = !c.failed && (role->second.effect == MemoryEffect::kDeviceAlloc ||
                                   role->second.effect == MemoryEffect::kDeviceFree);
    session->calls.push_back(c);
    if (with_places) {
      CallPlace place;
      place.tid = static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 8));
      place.depth = static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 9));
      if (const auto* kernel = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 10))) {
        if (*kernel != '\0') place.kernel = *session->names.emplace(kernel).first;
      }
      session->places.push_back(place);
    }
  }
  if (rc != SQLITE_DONE) {
    return Error{fmt::format("cannot read the calls of {}: {}", path, sqlite3_errmsg(db))};
  }
  if (session->end_ns == 0 && !session->calls.empty()) {  // a crashed recording: no end written
    for (const CallSample& c : session->calls)
      session->end_ns = std::max(session->end_ns, c.end_ns());
  }
  return session;
}

std::vector<Anomaly> replay_session(const RecordedSession& session, WindowAnalyzer& analyzer,
                                    LeakDetector* leaks) {
  std::vector<Anomaly> out;
  auto take = [&out](std::vector<Anomaly> found) {
    for (Anomaly& a : found) out.push_back(std::move(a));
  };
  analyzer.set_session_start(session.start_ns);
  analyzer.set_lookup([&session](uint32_t pid) {
    auto it = session.processes.find(pid);
    return it == session.processes.end() ? EntityInfo{} : it->second;
  });
  // Exits are known up front here; live, each arrives before any window after it closes.
  for (const auto& [pid, end] : session.process_end_ns) analyzer.end_process(pid, end);
  uint64_t clock = 0, leak_checked = 0;
  for (const CallSample& c : session.calls) {
    analyzer.on_call(c);
    if (leaks && c.memory_event) leaks->on_memory(c.pid, c.end_ns(), c.outstanding_bytes);
    // The live loop ticks every 100 ms; the calls' own clock stands in for it.
    if (c.end_ns() >= clock + 100'000'000) {
      clock = c.end_ns();
      take(analyzer.advance(clock));
      if (leaks && clock >= leak_checked + 1'000'000'000) {
        leak_checked = clock;
        take(leaks->check(session.start_ns));
      }
    }
  }
  take(analyzer.finish(session.end_ns));
  if (leaks) take(leaks->check(session.start_ns));
  return out;
}

std::map<std::string, std::vector<Window>> session_windows(const RecordedSession& session,
                                                           uint64_t window_ns) {
  WindowAggregator aggregator(window_ns);
  for (const auto& [pid, end] : session.process_end_ns) aggregator.end_process(pid, end);
  for (const CallSample& c : session.calls) aggregator.add(c);
  std::map<std::string, std::vector<Window>> out;
  for (Window& w : aggregator.finish(session.end_ns)) {
    if (w.index < 1) continue;  // setup
    auto it = session.processes.find(w.pid);
    out[entity_key(it == session.processes.end() ? EntityInfo{} : it->second)].push_back(
        std::move(w));
  }
  return out;
}

}  // namespace eacgm
