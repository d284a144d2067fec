#include "merge/session_merge.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "analysis/session_db.h"
#include "common/atomic_file.h"
#include "common/json_fields.h"
#include "common/json_text.h"
#include "common/sqlite_handles.h"
#include "layers/nccl/collectives.h"
#include "merge/clock_alignment.h"
#include "merge/merged_layers.h"
#include "merge/merged_trace.h"
#include "session/session_schema.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

// Columns that hold an instant of CLOCK_MONOTONIC, by the schema's naming (docs/SQLITE_SCHEMA.md):
// shifted onto the reference clock. Every other *_ns column is a duration.
bool is_instant(const std::string& column) {
  return column == "start_ns" || column == "end_ns" || column == "ts_ns";
}

std::string quoted(const std::string& name) { return "\"" + name + "\""; }

// A collective a rank entered and had not returned from when its node's recording ended
// (summary.json layers.nccl.open_collectives): the database holds only calls that returned.
struct OpenEntry {
  CollectiveRef ref;
  uint32_t pid = 0;
  std::string name;
  uint64_t entered_ns = 0;  // the node's own clock
};

struct Source {
  std::string dir;
  std::string node;  // the directory's name: which node recorded it
  std::map<std::string, std::string> meta;
  SessionClock clock;
  std::vector<OpenEntry> open;
  bool has_open_collectives = false;  // its summary lists them (none open is an empty list)
  nlohmann::json summary;             // its summary.json; null for a crashed recorder's
};

Result<Source> read_source(const std::string& dir) {
  auto database = open_session_directory(dir);
  if (!database) return database.error();
  const std::string& path = (*database)->path;
  const SqliteDb& db = (*database)->db;
  Source s;
  s.dir = dir;
  const fs::path normal = fs::path(dir).lexically_normal();
  s.node = (normal.has_filename() ? normal.filename() : normal.parent_path().filename()).string();
  auto meta = sqlite_rows(db.db, "SELECT key, value FROM meta");
  if (!meta) {
    return Error{fmt::format("{}: not a session database ({})", path, meta.error().message)};
  }
  for (const auto& r : *meta) {
    if (r[0] && r[1]) s.meta[*r[0]] = *r[1];
  }
  if (!s.meta.contains("realtime_offset_ns")) {
    return Error{
        fmt::format("{}: no realtime_offset_ns in its meta table: the session's clock "
                    "cannot be placed",
                    path)};
  }
  s.clock.realtime_offset_ns = std::stoll(s.meta["realtime_offset_ns"]);
  // A crashed recorder's session has no summary, and sessions of an older eacgm no open
  // collectives: then hangs across nodes are not judged (the merged summary says so).
  std::ifstream summary_file(fs::path(dir) / "summary.json");
  s.summary = nlohmann::json::parse(summary_file, nullptr, /*allow_exceptions=*/false);
  if (!s.summary.is_object()) s.summary = nullptr;
  const nlohmann::json nccl = json_object(json_object(s.summary, "layers"), "nccl");
  s.has_open_collectives = nccl.contains("open_collectives");
  for (const nlohmann::json& e : json_array(nccl, "open_collectives")) {
    OpenEntry o;
    o.ref = {json_string(e, "communicator"), json_number<uint64_t>(e, "seq"),
             json_number<int>(e, "rank", -1), json_number<int>(e, "nranks")};
    o.pid = json_number<uint32_t>(e, "pid");
    o.name = json_string(e, "collective");
    o.entered_ns = json_number<uint64_t>(e, "entered_ns");
    if (!o.ref.comm_id.empty() && o.ref.rank >= 0 && o.ref.nranks > 0) s.open.push_back(o);
  }
  // Communicators assumed after attach ("world") are numbered from wherever each session began:
  // their numbers are not comparable across sessions.
  auto spans =
      sqlite_rows(db.db,
                  "SELECT k.comm, k.seq, k.rank, c.start_ns, c.start_ns + c.duration_ns "
                  "FROM collectives k JOIN calls c ON c.id = k.call_id WHERE k.comm != 'world'");
  if (!spans) {
    return Error{fmt::format("{}: cannot read its collectives: {}", path, spans.error().message)};
  }
  for (const auto& r : *spans) {
    s.clock.collectives.push_back({.comm = r[0].value_or(""),
                                   .seq = std::stoull(r[1].value_or("0")),
                                   .rank = std::stoi(r[2].value_or("-1")),
                                   .start_ns = std::stoull(r[3].value_or("0")),
                                   .end_ns = std::stoull(r[4].value_or("0"))});
  }
  return s;
}

// Copies every table of `source` (attached as `src`) into the merged database, shifted.
Result<void> copy_tables(sqlite3* db, size_t index, const Source& source, int64_t shift) {
  auto tables =
      sqlite_rows(db,
                  "SELECT name FROM src.sqlite_master WHERE type = 'table' AND name != 'meta' "
                  "AND name NOT LIKE 'sqlite_%' ORDER BY name");
  if (!tables) return tables.error();
  // Ids continue after those of the sessions copied before.
  std::map<std::string, int64_t> id_offset;
  for (const char* t : {"calls", "os_events"}) {
    auto max = sqlite_rows(db, fmt::format("SELECT COALESCE(MAX(id), 0) FROM main.{}", t));
    id_offset[t] = max && !max->empty() && (*max)[0][0] ? std::stoll(*(*max)[0][0]) : 0;
  }
  for (const auto& t : *tables) {
    const std::string table = *t[0];
    auto columns = sqlite_rows(
        db, fmt::format("SELECT name, type FROM pragma_table_info('{}', 'src')", table));
    if (!columns) return columns.error();
    auto existing =
        sqlite_rows(db, fmt::format("SELECT name FROM pragma_table_info('{}', 'main')", table));
    if (!existing) return existing.error();
    std::set<std::string> have;
    for (const auto& c : *existing) have.insert(*c[0]);
    // merged_schema() has every table this eacgm knows; a newer eacgm's session may bring more,
    // and more columns: they are kept, as the session had them.
    if (have.empty()) {
      auto created =
          sqlite_exec(db, fmt::format("CREATE TABLE main.{}(session INTEGER NOT NULL, node "
                                      "TEXT NOT NULL)",
                                      quoted(table)));
      if (!created) return created;
    }
    std::string names = "session, node", values = fmt::format("{}, ?", index);
    for (const auto& c : *columns) {
      const std::string& name = *c[0];
      if (!have.contains(name) && name != "session" && name != "node") {
        auto added = sqlite_exec(db, fmt::format("ALTER TABLE main.{} ADD COLUMN {} {}",
                                                 quoted(table), quoted(name), c[1].value_or("")));
        if (!added) return added;
      }
      if (name == "session" || name == "node") continue;
      names += ", " + quoted(name);
      std::string value = quoted(name);
      if (is_instant(name)) {
        value = fmt::format("{} + ({})", quoted(name), shift);
      } else if (name == "id" && id_offset.contains(table)) {
        value = fmt::format("id + {}", id_offset[table]);
      } else if (name == "call_id") {
        value = fmt::format("call_id + {}", id_offset["calls"]);
      }
      values += ", " + value;
    }
    SqliteStmt insert;
    const std::string sql = fmt::format("INSERT INTO main.{}({}) SELECT {} FROM src.{}",
                                        quoted(table), names, values, quoted(table));
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &insert.stmt, nullptr) != SQLITE_OK) {
      return Error{fmt::format("table {}: {}", table, sqlite3_errmsg(db))};
    }
    sqlite3_bind_text(insert.stmt, 1, source.node.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(insert.stmt) != SQLITE_DONE) {
      return Error{fmt::format("table {}: {}", table, sqlite3_errmsg(db))};
    }
  }
  return {};
}

// Whether each collective seen by two or more sessions overlaps on every pair of its ranks now;
// and the cross-rank analysis of `record` (collectives.h) on the merged job, on one clock: each
// rank's lateness, the straggler, and hangs: the collectives ranks were still inside when their
// node's recording ended (`open`, shifted onto the merged clock) are arrivals without a return,
// judged as of `end_ns`, the merged session's end.
Result<nlohmann::json> analyse_collectives(sqlite3* db, uint64_t session_start_ns, uint64_t end_ns,
                                           const std::vector<std::pair<size_t, OpenEntry>>& open,
                                           const std::vector<Source>& sources,
                                           uint64_t hang_timeout_ns) {
  auto spans =
      sqlite_rows(db,
                  "SELECT k.comm, k.seq, k.rank, k.nranks, k.session, k.node, c.pid, c.name, "
                  "c.start_ns, c.duration_ns, c.bytes, c.error IS NOT NULL FROM collectives k "
                  "JOIN calls c ON c.id = k.call_id WHERE k.comm != 'world' ORDER BY k.comm, "
                  "k.seq");
  if (!spans) return spans.error();
  struct Call {
    CollectiveRef ref;
    size_t session = 0;
    std::string node;
    uint32_t pid = 0;
    std::string name;
    uint64_t start = 0, duration = 0, bytes = 0;
    bool failed = false;
  };
  std::vector<Call> calls;
  for (const auto& r : *spans) {
    calls.push_back({.ref = {*r[0], std::stoull(*r[1]), std::stoi(*r[2]), std::stoi(*r[3])},
                     .session = std::stoul(*r[4]),
                     .node = r[5].value_or(""),
                     .pid = static_cast<uint32_t>(std::stoul(r[6].value_or("0"))),
                     .name = r[7].value_or(""),
                     .start = std::stoull(*r[8]),
                     .duration = std::stoull(*r[9]),
                     .bytes = std::stoull(r[10].value_or("0")),
                     .failed = r[11].value_or("0") != "0"});
  }
  // Overlap, per collective seen by two sessions or more.
  uint64_t across = 0, overlapping = 0, worst_gap = 0;
  for (size_t i = 0; i < calls.size();) {
    size_t j = i;
    std::set<size_t> sessions;
    uint64_t latest_start = 0, earliest_end = UINT64_MAX;
    for (; j < calls.size() && calls[j].ref.comm_id == calls[i].ref.comm_id &&
           calls[j].ref.seq == calls[i].ref.seq;
         ++j) {
      sessions.insert(calls[j].session);
      latest_start = std::max(latest_start, calls[j].start);
      earliest_end = std::min(earliest_end, calls[j].start + calls[j].duration);
    }
    if (sessions.size() >= 2) {
      ++across;
      if (latest_start <= earliest_end) {
        ++overlapping;
      } else {
        worst_gap = std::max(worst_gap, latest_start - earliest_end);
      }
    }
    i = j;
  }
  // Every arrival and return in time order, as the live tracker would have seen them had one
  // eacgm traced every node.
  struct Event {
    uint64_t ts = 0;
    bool end = false;
    const Call* call = nullptr;
  };
  std::vector<Event> events;
  std::map<std::pair<std::string, int>, const Call*> where;  // a call of each (comm, rank)
  for (const Call& c : calls) {
    events.push_back({c.start, false, &c});
    events.push_back({c.start + c.duration, true, &c});
    where[{c.ref.comm_id, c.ref.rank}] = &c;
  }
  std::vector<Call> entered;  // never returned
  entered.reserve(open.size());
  for (const auto& [session, o] : open) {
    entered.push_back({.ref = o.ref,
                       .session = session,
                       .node = sources[session].node,
                       .pid = o.pid,
                       .name = o.name,
                       .start = o.entered_ns,
                       .duration = 0,
                       .bytes = 0,
                       .failed = false});
  }
  for (const Call& c : entered) {
    events.push_back({c.start, false, &c});
    where.try_emplace({c.ref.comm_id, c.ref.rank}, &c);
  }
  std::ranges::stable_sort(events, [](const Event& a, const Event& b) { return a.ts < b.ts; });
  CollectiveTracker::Options tracker_options;
  tracker_options.hang_timeout_ns = hang_timeout_ns;
  CollectiveTracker tracker(tracker_options);
  tracker.set_session_start(session_start_ns);
  for (const Event& e : events) {
    const Call& c = *e.call;
    if (e.end) {
      tracker.replay_end(c.ref, c.pid, c.name, e.ts, c.duration, c.bytes, c.failed);
    } else {
      tracker.replay_begin(c.ref, c.pid, c.name, e.ts);
    }
  }
  auto node_of = [&](const std::string& comm, int rank) -> std::pair<nlohmann::json, std::string> {
    auto it = where.find({comm, rank});
    if (it == where.end()) return {nullptr, ""};
    return {it->second->session, it->second->node};
  };
  nlohmann::json ranks = tracker.rank_figures();
  for (nlohmann::json& r : ranks) {
    auto [session, node] = node_of(r["communicator"], r["rank"]);
    r["session"] = session;
    r["node"] = node;
  }
  nlohmann::json anomalies = nlohmann::json::array();
  const uint64_t last = std::max(end_ns, events.empty() ? 0 : events.back().ts);
  for (const Anomaly& a : tracker.check(last)) {
    nlohmann::json j = {{"kind", a.kind},
                        {"rank", a.rank ? nlohmann::json(*a.rank) : nullptr},
                        {"pid", a.pid ? nlohmann::json(*a.pid) : nullptr},
                        {"t_s", a.t_s},
                        {"message", a.message},
                        {"suggestion", a.suggestion},
                        {"evidence", a.evidence}};
    if (a.rank && a.evidence.contains("communicator")) {
      auto [session, node] = node_of(a.evidence["communicator"], *a.rank);
      j["session"] = session;
      j["node"] = node;
    }
    anomalies.push_back(std::move(j));
  }
  return nlohmann::json{{"collectives_across_sessions", across},
                        {"overlapping_on_every_pair", overlapping},
                        {"not_overlapping", across - overlapping},
                        {"worst_gap_ns", worst_gap},
                        {"ranks", std::move(ranks)},
                        {"anomalies", std::move(anomalies)}};
}

// What each node's own summary says, on the merged job: its processes and its anomalies, each with
// its node and session, the anomalies' times counted from the merged start, then the verdicts on
// the whole job (nccl.anomalies, `scope` "job"); how long the job ran, and how it ended (the first
// node whose job did not exit 0, else 0). Device memory and the os layer, which a node keys by pid,
// are listed per session with its node (`memory.per_session`, `layers.os.per_session`). The layers
// and their per-API call figures are not taken from the nodes' summaries (percentiles of different
// nodes do not add up): write_merged computes them from the merged database's calls
// (merge/merged_layers.h).
void add_node_figures(nlohmann::json& out, const std::vector<Source>& sources,
                      const std::vector<SessionShift>& shifts, int64_t merged_start_ns) {
  nlohmann::json processes = nlohmann::json::array(), anomalies = nlohmann::json::array();
  // The figures a node's summary keys by pid (device memory; the os layer's mappings, ioctls,
  // signals and OOM kills) stay with their node: pids of different nodes may be the same.
  nlohmann::json memory = nlohmann::json::array(), os = nlohmann::json::array();
  // The job's exit: known while every node's is, the first that was not 0.
  bool exit_known = true;
  int exit_code = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const Source& s = sources[i];
    out["sessions"][i]["command"] = json_array(s.summary, "command");
    if (!s.summary.is_object()) {
      exit_known = false;  // that node's recorder did not finish
      continue;
    }
    if (nlohmann::json m = json_object(s.summary, "memory"); !m.empty()) {
      m["node"] = s.node;
      m["session"] = i;
      memory.push_back(std::move(m));
    }
    if (nlohmann::json o = json_object(json_object(s.summary, "layers"), "os"); !o.empty()) {
      o["node"] = s.node;
      o["session"] = i;
      os.push_back(std::move(o));
    }
    for (nlohmann::json p : json_array(s.summary, "processes")) {
      if (!p.is_object()) continue;
      p["node"] = s.node;
      p["session"] = i;
      processes.push_back(std::move(p));
    }
    // The node's seconds count from its own start; on the merged clock it began this much later.
    const auto start = s.meta.find("start_ns");
    const bool placed = start != s.meta.end() && !start->second.empty() &&
                        merged_start_ns != std::numeric_limits<int64_t>::max();
    const double offset_s = placed ? static_cast<double>(std::stoll(start->second) +
                                                         shifts[i].shift_ns - merged_start_ns) /
                                         1e9
                                   : 0.0;
    for (nlohmann::json a : json_array(s.summary, "anomalies")) {
      if (!a.is_object()) continue;
      a["t_s"] = json_number<double>(a, "t_s") + offset_s;
      a["node"] = s.node;
      a["session"] = i;
      a["scope"] = "node";
      anomalies.push_back(std::move(a));
    }
    const auto code = s.summary.find("exit_code");
    if (code == s.summary.end() || !code->is_number_integer()) {
      exit_known = false;
    } else if (exit_code == 0) {
      exit_code = code->get<int>();
    }
  }
  for (nlohmann::json a : out["nccl"]["anomalies"]) {
    a["layer"] = "nccl";
    a["scope"] = "job";
    anomalies.push_back(std::move(a));
  }
  out["memory"] = {{"per_session", std::move(memory)}};
  if (!os.empty()) out["layers"]["os"]["per_session"] = std::move(os);
  out["processes"] = std::move(processes);
  out["anomalies"] = std::move(anomalies);
  out["exit_code"] = exit_known ? nlohmann::json(exit_code) : nlohmann::json();
  const int64_t end = out["end_ns"].get<int64_t>();
  out["duration_s"] = end > merged_start_ns ? static_cast<double>(end - merged_start_ns) / 1e9 : 0;
}

Result<nlohmann::json> write_merged(const std::vector<Source>& sources,
                                    const std::vector<SessionShift>& shifts,
                                    const MergeOptions& options) {
  const std::string path = options.out_dir + "/events.sqlite";
  SqliteDb db;
  if (sqlite3_open_v2(path.c_str(), &db.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    return Error{fmt::format("{}: cannot create: {}", path, sqlite3_errmsg(db.db))};
  }
  if (auto r = sqlite_exec(db.db, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; BEGIN; " +
                                      merged_schema_sql() + "COMMIT");
      !r) {
    return Error{fmt::format("{}: cannot create its tables: {}", path, r.error().message)};
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    SqliteStmt attach;
    sqlite3_prepare_v2(db.db, "ATTACH DATABASE ? AS src", -1, &attach.stmt, nullptr);
    const std::string source_path = sources[i].dir + "/events.sqlite";
    sqlite3_bind_text(attach.stmt, 1, source_path.c_str(), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(attach.stmt) != SQLITE_DONE) {
      return Error{fmt::format("{}: cannot attach: {}", source_path, sqlite3_errmsg(db.db))};
    }
    // One transaction per session: a database cannot be detached inside one.
    if (auto r = sqlite_exec(db.db, "BEGIN"); !r) return r.error();
    if (auto r = copy_tables(db.db, i, sources[i], shifts[i].shift_ns); !r) {
      return Error{fmt::format("{}: {}", source_path, r.error().message)};
    }
    if (auto r = sqlite_exec(db.db, "COMMIT; DETACH DATABASE src"); !r) return r.error();
  }
  nlohmann::json sessions = nlohmann::json::array();
  int64_t start = std::numeric_limits<int64_t>::max(), end = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < sources.size(); ++i) {
    const SessionShift& s = shifts[i];
    auto meta_ns = [&](std::string_view key) -> std::optional<int64_t> {
      auto it = sources[i].meta.find(std::string(key));
      if (it == sources[i].meta.end() || it->second.empty()) return std::nullopt;
      return std::stoll(it->second) + s.shift_ns;
    };
    if (auto v = meta_ns(meta_key::kStartNs)) start = std::min(start, *v);
    if (auto v = meta_ns(meta_key::kEndNs)) end = std::max(end, *v);
    sessions.push_back(
        {{"session", i},
         {"dir", sources[i].dir},
         {"node", sources[i].node},
         {"shift_ns", s.shift_ns},
         {"method", s.method},
         {"residual_ns", s.residual_ns ? nlohmann::json(*s.residual_ns) : nlohmann::json()},
         {"collectives_shared", s.collectives_shared},
         {"conflicts", s.conflicts},
         {"realtime_correction_ns", s.realtime_correction_ns}});
  }
  const std::string& ref_offset = sources[options.reference].meta.at("realtime_offset_ns");
  if (auto r = sqlite_exec(db.db, "BEGIN"); !r) return r.error();
  // A merged session is read as a session is: the same version.
  const std::vector<std::pair<std::string, std::string>> meta = {
      {std::string(meta_key::kSchemaVersion), std::to_string(kSessionSchemaVersion)},
      {"version", EACGM_VERSION},
      {"merged_sessions", sessions.dump()},
      {std::string(meta_key::kStartNs),
       start == std::numeric_limits<int64_t>::max() ? "" : std::to_string(start)},
      {std::string(meta_key::kEndNs),
       end == std::numeric_limits<int64_t>::min() ? "" : std::to_string(end)},
      {"realtime_offset_ns", ref_offset}};
  for (const auto& [key, value] : meta) {
    SqliteStmt insert;
    sqlite3_prepare_v2(db.db, session_table("meta").insert_sql().c_str(), -1, &insert.stmt,
                       nullptr);
    sqlite3_bind_text(insert.stmt, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    if (value.empty()) {
      sqlite3_bind_null(insert.stmt, 2);
    } else {
      sqlite3_bind_text(insert.stmt, 2, value.c_str(), -1, SQLITE_TRANSIENT);
    }
    if (sqlite3_step(insert.stmt) != SQLITE_DONE) return Error{sqlite3_errmsg(db.db)};
  }
  // The collectives still open when each node stopped recording, on the merged clock.
  std::vector<std::pair<size_t, OpenEntry>> open;
  bool hangs_judged = true;
  for (size_t i = 0; i < sources.size(); ++i) {
    hangs_judged = hangs_judged && sources[i].has_open_collectives;
    for (OpenEntry o : sources[i].open) {
      o.entered_ns = static_cast<uint64_t>(static_cast<int64_t>(o.entered_ns) + shifts[i].shift_ns);
      open.emplace_back(i, std::move(o));
    }
  }
  auto check = analyse_collectives(
      db.db, start == std::numeric_limits<int64_t>::max() ? 0 : static_cast<uint64_t>(start),
      end == std::numeric_limits<int64_t>::min() ? 0 : static_cast<uint64_t>(end), open, sources,
      static_cast<uint64_t>(options.hang_timeout_s * 1e9));
  if (!check) return Error{fmt::format("{}: {}", path, check.error().message)};
  (*check)["open_collectives"] = open.size();
  (*check)["hangs_judged"] = hangs_judged;
  if (!hangs_judged) {
    (*check)["hangs_note"] =
        "a session has no summary.json or no layers.nccl.open_collectives (a crashed recorder, "
        "an older eacgm, or no nccl layer): hangs across nodes are not judged; each node's own "
        "summary has the hangs it saw";
  }
  if (auto r = sqlite_exec(db.db, std::string(merged_index_sql()) + "COMMIT"); !r) {
    return Error{fmt::format("{}: {}", path, r.error().message)};
  }
  if (auto r = write_merged_trace(db.db, options.out_dir + "/trace.perfetto-trace",
                                  std::stoll(ref_offset));
      !r) {
    return Error{fmt::format("{}/trace.perfetto-trace: {}", options.out_dir, r.error().message)};
  }
  // Every layer's per-API figures over every node's calls, after the index on names is built.
  std::vector<MergedNodeLayers> node_layers;
  for (const Source& s : sources) node_layers.push_back({s.node, json_object(s.summary, "layers")});
  auto layers = merged_layers(db.db, node_layers);
  if (!layers) return Error{fmt::format("{}: {}", path, layers.error().message)};
  nlohmann::json out = {{"merged", true},
                        {"reference", options.reference},
                        {"sessions", std::move(sessions)},
                        {"start_ns", start},
                        {"end_ns", end},
                        {"realtime_offset_ns", std::stoll(ref_offset)},
                        {"nccl", std::move(*check)},
                        {"layers", std::move(*layers)}};
  add_node_figures(out, sources, shifts, start);
  return out;
}

}  // namespace

Result<nlohmann::json> merge_sessions(const MergeOptions& options) {
  if (options.sessions.size() < 2) {
    return Error{"merge needs two sessions or more: eacgm merge SESSION SESSION... -o DIR"};
  }
  if (options.reference >= options.sessions.size()) {
    return Error{fmt::format("--reference {} names no session: there are {} (0 to {})",
                             options.reference, options.sessions.size(),
                             options.sessions.size() - 1)};
  }
  std::vector<Source> sources;
  for (const std::string& dir : options.sessions) {
    auto s = read_source(dir);
    if (!s) return s.error();
    sources.push_back(std::move(*s));
  }
  std::error_code ec;
  if (fs::exists(options.out_dir, ec) &&
      (!fs::is_directory(options.out_dir, ec) || !fs::is_empty(options.out_dir, ec))) {
    return Error{
        fmt::format("-o {}: exists and is not an empty directory (merge never writes "
                    "over a session)",
                    options.out_dir)};
  }
  const bool created = fs::create_directories(options.out_dir, ec);
  if (ec) return Error{fmt::format("-o {}: cannot create: {}", options.out_dir, ec.message())};

  std::vector<SessionClock> clocks;
  for (const Source& s : sources) clocks.push_back(s.clock);
  const std::vector<SessionShift> shifts = align_clocks(clocks, options.reference);
  auto summary = write_merged(sources, shifts, options);
  auto give_up = [&](const std::string& why) -> Error {
    for (const char* file :
         {"/events.sqlite", "/trace.perfetto-trace", "/trace.perfetto-trace.events.tmp"}) {
      fs::remove(options.out_dir + file, ec);
    }
    fs::remove(options.out_dir + "/summary.json.tmp", ec);
    if (created) fs::remove(options.out_dir, ec);
    return Error{why};
  };
  if (!summary) return give_up(summary.error().message);
  const std::string path = options.out_dir + "/summary.json";
  if (auto written = write_file_atomically(path, json_text(*summary, 2) + '\n'); !written) {
    return give_up(written.error().message);
  }
  return summary;
}

}  // namespace eacgm
