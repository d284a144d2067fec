#include "merge/merged_trace.h"

#include <fmt/format.h>

#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/sqlite_handles.h"
#include "session/session.h"
#include "sinks/perfetto_writer.h"

namespace eacgm {
namespace {

constexpr uint32_t kPidSpace = 4194304;  // PID_MAX_LIMIT on 64-bit Linux

std::string text(sqlite3_stmt* s, int i) {
  const auto* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

// Rows of the database stand for calls: one table row per (layer, name, failed), its arguments
// already decoded (the database keeps them decoded, not the registers).
class Specs {
 public:
  const ProbeSpec* of(Layer layer, const std::string& name, bool failed) {
    auto key = std::make_tuple(layer, name, failed);
    if (auto it = specs_.find(key); it != specs_.end()) return it->second;
    ProbeSpec& spec = rows_.emplace_back();
    spec.symbol = *names_.insert(name).first;
    spec.layer = layer;
    spec.returns_status = failed;  // so that failed() holds exactly for the rows with an error
    spec.bytes_slot = kRdi;        // the row's bytes, placed there
    specs_.emplace(key, &spec);
    return &spec;
  }
  std::string_view intern(const std::string& s) { return *names_.insert(s).first; }

 private:
  std::map<std::tuple<Layer, std::string, bool>, const ProbeSpec*> specs_;
  std::deque<ProbeSpec> rows_;
  std::set<std::string, std::less<>> names_;
};

}  // namespace

Result<void> write_merged_trace(sqlite3* db, const std::string& path, int64_t realtime_offset_ns) {
  // A pid two sessions share is moved into a range of its own per session.
  std::map<uint32_t, std::set<int64_t>> sessions_of_pid;
  {
    SqliteStmt s;
    sqlite3_prepare_v2(
        db, "SELECT DISTINCT pid, session FROM calls UNION SELECT pid, session FROM processes", -1,
        &s.stmt, nullptr);
    while (sqlite3_step(s.stmt) == SQLITE_ROW) {
      sessions_of_pid[static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 0))].insert(
          sqlite3_column_int64(s.stmt, 1));
    }
  }
  auto trace_pid = [&](uint32_t pid, int64_t session) {
    auto it = sessions_of_pid.find(pid);
    return it != sessions_of_pid.end() && it->second.size() > 1
               ? pid + kPidSpace * static_cast<uint32_t>(session + 1)
               : pid;
  };

  Session session;
  session.realtime_offset_ns = realtime_offset_ns;
  {
    SqliteStmt s;
    if (sqlite3_prepare_v2(db, "SELECT session, node, pid, comm, cmdline, rank FROM processes", -1,
                           &s.stmt, nullptr) != SQLITE_OK) {
      return Error{fmt::format("cannot read processes: {}", sqlite3_errmsg(db))};
    }
    while (sqlite3_step(s.stmt) == SQLITE_ROW) {
      const uint32_t pid = trace_pid(static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 2)),
                                     sqlite3_column_int64(s.stmt, 0));
      ProcessInfo& p = session.process(pid);
      p.comm = fmt::format("{}: {}", text(s.stmt, 1), text(s.stmt, 3));
      const nlohmann::json cmdline = nlohmann::json::parse(text(s.stmt, 4), nullptr, false);
      if (cmdline.is_array()) {
        for (const auto& a : cmdline) {
          if (a.is_string()) p.cmdline.push_back(a.get<std::string>());
        }
      }
      if (sqlite3_column_type(s.stmt, 5) != SQLITE_NULL) {
        p.rank = static_cast<int>(sqlite3_column_int64(s.stmt, 5));
      }
    }
  }
  {
    SqliteStmt s;
    if (sqlite3_prepare_v2(db, "SELECT session, pid, tid, name FROM threads", -1, &s.stmt,
                           nullptr) == SQLITE_OK) {
      while (sqlite3_step(s.stmt) == SQLITE_ROW) {
        const uint32_t pid = trace_pid(static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 1)),
                                       sqlite3_column_int64(s.stmt, 0));
        session.process(pid).threads[static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 2))] =
            text(s.stmt, 3);
      }
    }
  }

  auto writer = PerfettoWriter::open(path);
  if (!writer) return writer.error();
  Specs specs;
  std::set<std::string> kernels;  // CallRecord::kernel points here
  SqliteStmt s;
  // In each session's arrival order, which keeps a thread's nested calls before their parent.
  if (sqlite3_prepare_v2(db,
                         "SELECT c.session, c.pid, c.tid, c.layer, c.name, c.start_ns, "
                         "c.duration_ns, c.ret, c.error IS NOT NULL, c.bytes, c.depth, c.args, "
                         "c.kernel, k.comm, k.seq, k.rank, k.nranks FROM calls c LEFT JOIN "
                         "collectives k ON k.call_id = c.id ORDER BY c.id",
                         -1, &s.stmt, nullptr) != SQLITE_OK) {
    return Error{fmt::format("cannot read calls: {}", sqlite3_errmsg(db))};
  }
  while (sqlite3_step(s.stmt) == SQLITE_ROW) {
    const std::optional<Layer> layer = layer_from_name(text(s.stmt, 3));
    if (!layer) continue;
    CallRecord call;
    call.pid = trace_pid(static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 1)),
                         sqlite3_column_int64(s.stmt, 0));
    call.tid = static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 2));
    const bool failed = sqlite3_column_int64(s.stmt, 8) != 0;
    call.spec = specs.of(*layer, text(s.stmt, 4), failed);
    call.start_ns = static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 5));
    call.duration_ns = static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 6));
    call.raw.ret = sqlite3_column_int64(s.stmt, 7);
    call.raw.args[kRdi] = static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 9));
    call.depth = static_cast<uint32_t>(sqlite3_column_int64(s.stmt, 10));
    std::vector<DecodedArg> args;
    const nlohmann::json decoded = nlohmann::json::parse(text(s.stmt, 11), nullptr, false);
    if (decoded.is_object()) {
      for (const auto& [name, value] : decoded.items()) {
        DecodedArg a;
        a.name = specs.intern(name);
        a.text = value.is_string() ? value.get<std::string>() : value.dump();
        if (value.is_number_integer()) a.number = value.get<int64_t>();
        args.push_back(std::move(a));
      }
    }
    call.decoded_args_ = std::move(args);
    if (sqlite3_column_type(s.stmt, 12) != SQLITE_NULL) {
      call.kernel = &*kernels.insert(text(s.stmt, 12)).first;
    }
    if (sqlite3_column_type(s.stmt, 13) != SQLITE_NULL) {
      call.collective =
          CollectiveRef{text(s.stmt, 13), static_cast<uint64_t>(sqlite3_column_int64(s.stmt, 14)),
                        static_cast<int>(sqlite3_column_int64(s.stmt, 15)),
                        static_cast<int>(sqlite3_column_int64(s.stmt, 16))};
    }
    (*writer)->on_call(call);
  }
  return (*writer)->finish(session);
}

}  // namespace eacgm
