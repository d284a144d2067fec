#include "merge/merged_layers.h"

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_fields.h"
#include "common/sqlite_handles.h"
#include "session/nested_time.h"
#include "session/percentile.h"

namespace eacgm {
namespace {

// The key under which a layer lists its calls in summary.json, as sinks/summary.cpp names it.
std::string merged_calls_key(std::string_view layer) {
  if (layer == "torch") return "ops";
  if (layer == "python") return "functions";
  return "calls";
}

// Layers whose summary has no call table of calls traced one by one: os and gpu have figures of
// their own, python's `functions` are a sampled profile.
bool merged_has_call_table(std::string_view layer) {
  return layer != "os" && layer != "gpu" && layer != "python";
}

std::string_view merged_column_text(sqlite3_stmt* stmt, int i) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
  return text ? std::string_view(text, static_cast<size_t>(sqlite3_column_bytes(stmt, i)))
              : std::string_view();
}

uint64_t merged_column_u64(sqlite3_stmt* stmt, int i) {
  const int64_t v = sqlite3_column_int64(stmt, i);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

// One API over every node, as CallStats holds it for one session.
struct MergedApiStats {
  uint64_t count = 0;
  uint64_t errors = 0;
  uint64_t total_ns = 0;
  uint64_t bytes = 0;
  std::map<std::string, uint64_t> errors_by_code;  // by the database's `error` name
  std::vector<uint64_t> durations_ns;
};

nlohmann::json merged_api_json(const MergedApiStats& st) {
  nlohmann::json c = {{"count", st.count},
                      {"errors", st.errors},
                      {"total_ns", st.total_ns},
                      {"p50_ns", nearest_rank_percentile(st.durations_ns, 50)},
                      {"p99_ns", nearest_rank_percentile(st.durations_ns, 99)},
                      {"bytes", st.bytes}};
  if (!st.errors_by_code.empty()) c["errors_by_code"] = st.errors_by_code;
  return c;
}

struct MergedCallFigures {
  std::map<std::string, nlohmann::json> tables;                  // layer -> {api: figures}
  std::map<std::string, std::map<std::string, uint64_t>> inner;  // layer -> {api: count}
  std::map<std::string, std::set<size_t>> sessions;              // layer -> sessions with calls
};

// The one error a reader of the merged calls reports.
Error merged_read_error(const Error& error) {
  return Error{fmt::format("reading calls: {}", error.message)};
}

// Every API's figures, one API's rows at a time (the database sorts them by layer and name).
Result<void> read_api_figures(sqlite3* db, const std::string& outer, MergedCallFigures& out) {
  const std::string sql = fmt::format(
      "SELECT layer, name, session, duration_ns, bytes, error FROM calls WHERE {} "
      "ORDER BY layer, name",
      outer);
  std::string layer, name;
  MergedApiStats api;
  std::set<size_t>* sessions = nullptr;
  auto flush = [&] {
    if (api.count > 0) out.tables[layer][name] = merged_api_json(api);
    api = {};
  };
  auto read = sqlite_each_row(db, sql, [&](sqlite3_stmt* row) {
    const std::string_view row_layer = merged_column_text(row, 0);
    const std::string_view row_name = merged_column_text(row, 1);
    if (sessions == nullptr || row_layer != layer || row_name != name) {
      flush();
      layer = row_layer;
      name = row_name;
      sessions = &out.sessions[layer];
    }
    sessions->insert(static_cast<size_t>(sqlite3_column_int64(row, 2)));
    const uint64_t duration = merged_column_u64(row, 3);
    ++api.count;
    api.total_ns += duration;
    api.durations_ns.push_back(duration);
    if (sqlite3_column_type(row, 5) != SQLITE_NULL) {
      ++api.errors;  // a failed call moved no bytes
      ++api.errors_by_code[std::string(merged_column_text(row, 5))];
    } else {
      api.bytes += merged_column_u64(row, 4);
    }
  });
  if (!read) return merged_read_error(read.error());
  flush();
  return {};
}

// Torch operators' self time: each session's operators replayed in the order it recorded them
// (`id`) through the NestedTime a session uses, per session since threads of different nodes
// share numbers.
Result<void> read_torch_self_ns(sqlite3* db, const std::string& outer, MergedCallFigures& out) {
  auto table = out.tables.find("torch");
  if (table == out.tables.end()) return {};
  const std::string sql = fmt::format(
      "SELECT session, tid, start_ns, duration_ns, depth, name FROM calls "
      "WHERE layer = 'torch' AND {} ORDER BY session, id",
      outer);
  std::map<std::string, uint64_t, std::less<>> self_ns;
  NestedTime nesting;
  int64_t session = -1;
  auto read = sqlite_each_row(db, sql, [&](sqlite3_stmt* row) {
    if (const int64_t s = sqlite3_column_int64(row, 0); s != session) {
      nesting = NestedTime{};
      session = s;
    }
    const uint64_t duration = merged_column_u64(row, 3);
    const uint64_t children = nesting.children_ns(
        static_cast<uint32_t>(sqlite3_column_int64(row, 1)), merged_column_u64(row, 2), duration,
        static_cast<uint32_t>(sqlite3_column_int64(row, 4)));
    const std::string_view name = merged_column_text(row, 5);
    auto it = self_ns.find(name);
    if (it == self_ns.end()) it = self_ns.emplace(std::string(name), 0).first;
    it->second += duration - children;
  });
  if (!read) return merged_read_error(read.error());
  for (auto& [name, figures] : table->second.items()) {
    auto it = self_ns.find(name);
    figures["self_ns"] = it == self_ns.end() ? 0 : it->second;
  }
  return {};
}

Result<MergedCallFigures> read_call_figures(sqlite3* db) {
  MergedCallFigures out;
  // Every merged database has the column (merged_schema()); sessions of an eacgm that did not
  // mark inner calls have NULL there: none of theirs is one.
  const std::string outer = "COALESCE(inner_call, 0) = 0";
  if (auto r = read_api_figures(db, outer, out); !r) return r.error();
  if (auto r = read_torch_self_ns(db, outer, out); !r) return r.error();
  auto inner = sqlite_rows(db,
                           "SELECT layer, name, session, COUNT(*) FROM calls WHERE inner_call = 1 "
                           "GROUP BY layer, name, session");
  if (!inner) return inner.error();
  for (const auto& r : *inner) {
    const std::string layer = r[0].value_or("");
    out.inner[layer][r[1].value_or("")] += std::stoull(r[3].value_or("0"));
    out.sessions[layer].insert(std::stoul(r[2].value_or("0")));
  }
  return out;
}

}  // namespace

Result<nlohmann::json> merged_layers(sqlite3* db, const std::vector<MergedNodeLayers>& nodes) {
  auto figures = read_call_figures(db);
  if (!figures) return figures.error();
  std::set<std::string> names;
  for (const MergedNodeLayers& n : nodes) {
    if (!n.layers.is_object()) continue;
    for (const auto& [layer, value] : n.layers.items()) names.insert(layer);
  }
  for (const auto& [layer, sessions] : figures->sessions) names.insert(layer);

  nlohmann::json out = nlohmann::json::object();
  for (const std::string& layer : names) {
    const auto with_calls = figures->sessions.find(layer);
    nlohmann::json active_on = nlohmann::json::array();
    std::set<std::string> listed;
    nlohmann::json first;  // the first node's own entry for the layer
    for (size_t i = 0; i < nodes.size(); ++i) {
      const bool has_entry = nodes[i].layers.is_object() && nodes[i].layers.contains(layer);
      const nlohmann::json entry =
          has_entry ? json_object(nodes[i].layers, layer.c_str()) : nlohmann::json::object();
      if (has_entry && first.is_null()) first = entry;
      const bool active = json_string(entry, "status") == "active" ||
                          (with_calls != figures->sessions.end() && with_calls->second.contains(i));
      if (active && listed.insert(nodes[i].node).second) active_on.push_back(nodes[i].node);
    }
    nlohmann::json l = nlohmann::json::object();
    if (!active_on.empty()) {
      l["status"] = "active";
    } else {
      l["status"] = json_string(first, "status", "disabled");
      if (const std::string reason = json_string(first, "reason"); !reason.empty()) {
        l["reason"] = reason;
      }
    }
    l["nodes"] = std::move(active_on);
    if (l["status"] == "active") {
      auto table = figures->tables.find(layer);
      if (table != figures->tables.end()) {
        l[merged_calls_key(layer)] = std::move(table->second);
      } else if (merged_has_call_table(layer)) {
        l[merged_calls_key(layer)] = nlohmann::json::object();
      }
      if (auto inner = figures->inner.find(layer); inner != figures->inner.end()) {
        l["inner_calls"] = inner->second;
      }
    }
    out[layer] = std::move(l);
  }
  return out;
}

}  // namespace eacgm
