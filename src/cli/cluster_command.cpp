#include "cli/cluster_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ranges>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "common/exit_codes.h"
#include "common/json_text.h"
#include "serve/cross_node.h"
#include "serve/prometheus_client.h"

namespace eacgm {
namespace {

struct ClusterArgs {
  std::string prometheus;
  std::string window = "1h";
  std::string straggler_window = "3m";
  int straggler_slices = 3;
  double hang_timeout_s = 60;
  bool json = false;
  bool watch = false;
  double interval_s = 5;
};

// Seconds in a PromQL duration the option check let through ("90s", "5m").
double duration_s(const std::string& d) {
  static const std::map<std::string, double> kUnits = {
      {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"w", 604800}, {"y", 31536000}};
  const size_t unit = d.find_first_not_of("0123456789");
  return std::stod(d.substr(0, unit)) * kUnits.at(d.substr(unit));
}

// One finding: a labelled series of eacgm_anomaly_timestamp_seconds.
nlohmann::json finding(const nlohmann::json& series) {
  const nlohmann::json& m = series["metric"];
  auto label = [&m](const char* name) { return m.value(name, std::string()); };
  nlohmann::json f = {{"node", label("instance")}, {"kind", label("kind")},
                      {"layer", label("layer")},   {"job_id", label("job_id")},
                      {"rank", nullptr},           {"pid", nullptr}};
  if (!label("rank").empty()) f["rank"] = std::stoi(label("rank"));
  if (!label("pid").empty()) f["pid"] = std::stoul(label("pid"));
  f["time"] = std::stod(series["value"][1].get<std::string>());
  return f;
}

std::string describe(const nlohmann::json& f) {
  std::string who = f["rank"].is_null() ? "" : fmt::format("rank {}", f["rank"].get<int>());
  if (!f["pid"].is_null()) {
    who += fmt::format("{}pid {}", who.empty() ? "" : ", ", f["pid"].get<uint64_t>());
  }
  if (!f["job_id"].get<std::string>().empty()) {
    who += fmt::format(", job {}", f["job_id"].get<std::string>());
  }
  return fmt::format("{} on node {}", who.empty() ? "a process" : who,
                     f["node"].get<std::string>());
}

using SeriesKey = std::tuple<std::string, std::string, std::string>;  // node, pid, communicator
using Series = std::map<SeriesKey, double>;

// Which rank of which communicator on which node a series of serve's is about.
SeriesKey series_key(const nlohmann::json& labels) {
  return {labels.value("instance", ""), labels.value("pid", ""), labels.value("communicator", "")};
}

// One value per (node, pid, communicator) of an instant query over eacgm_nccl_rank_* series.
Result<Series> rank_values(const PrometheusClient& client, const std::string& promql) {
  auto result = client.query(promql);
  if (!result) return result.error();
  Series out;
  for (const nlohmann::json& s : *result) {
    const nlohmann::json& m = s["metric"];
    out[series_key(m)] = std::stod(s["value"][1].get<std::string>());
  }
  return out;
}

// Where every rank of every communicator is now, as each node exports it.
Result<std::vector<RankReport>> rank_reports(const PrometheusClient& client) {
  auto sizes = client.query("eacgm_nccl_rank_communicator_size");
  if (!sizes) return sizes.error();
  std::map<std::string, Series> values;
  for (const char* name :
       {"entered_seq", "completed_seq", "inside_seconds", "progress_age_seconds"}) {
    auto v = rank_values(client, fmt::format("eacgm_nccl_rank_{}", name));
    if (!v) return v.error();
    values[name] = std::move(*v);
  }
  auto value = [&](const char* name, const auto& key) -> std::optional<double> {
    const Series& series = values[name];
    auto it = series.find(key);
    return it == series.end() ? std::nullopt : std::optional<double>(it->second);
  };
  std::vector<RankReport> out;
  for (const nlohmann::json& s : *sizes) {
    const nlohmann::json& m = s["metric"];
    RankReport r;
    r.node = m.value("instance", "");
    r.job_id = m.value("job_id", "");
    r.comm = m.value("communicator", "");
    r.rank = std::stoi(m.value("rank", "-1"));
    r.pid = static_cast<uint32_t>(std::stoul(m.value("pid", "0")));
    r.nranks = static_cast<int>(std::stod(s["value"][1].get<std::string>()));
    const SeriesKey key = series_key(m);
    if (auto v = value("entered_seq", key)) r.entered_seq = static_cast<uint64_t>(*v);
    if (auto v = value("completed_seq", key)) r.completed_seq = static_cast<uint64_t>(*v);
    r.inside_s = value("inside_seconds", key).value_or(0);
    r.progress_age_s = value("progress_age_seconds", key).value_or(0);
    out.push_back(std::move(r));
  }
  return out;
}

// Each rank's mean wait per collective over consecutive slices of the straggler window,
// newest first.
Result<std::vector<std::vector<RankWait>>> rank_waits(const PrometheusClient& client,
                                                      const ClusterArgs& args) {
  const long slice_s = std::max(
      1L, std::lround(duration_s(args.straggler_window) / std::max(args.straggler_slices, 1)));
  std::vector<std::vector<RankWait>> slices;
  for (int i = 0; i < args.straggler_slices; ++i) {
    const std::string offset = i == 0 ? "" : fmt::format(" offset {}s", i * slice_s);
    auto count = client.query(
        fmt::format("increase(eacgm_nccl_rank_collectives_total[{}s]{})", slice_s, offset));
    if (!count) return count.error();
    auto seconds = rank_values(client, fmt::format("increase(eacgm_nccl_rank_collective_seconds_"
                                                   "total[{}s]{})",
                                                   slice_s, offset));
    if (!seconds) return seconds.error();
    std::vector<RankWait> slice;
    for (const nlohmann::json& s : *count) {
      const nlohmann::json& m = s["metric"];
      const double n = std::stod(s["value"][1].get<std::string>());
      auto t = seconds->find(series_key(m));
      if (t == seconds->end() || !(n > 0)) continue;
      slice.push_back({.node = m.value("instance", ""),
                       .job_id = m.value("job_id", ""),
                       .comm = m.value("communicator", ""),
                       .rank = std::stoi(m.value("rank", "-1")),
                       .pid = static_cast<uint32_t>(std::stoul(m.value("pid", "0"))),
                       .collectives = n,
                       .mean_s = t->second / n});
    }
    slices.push_back(std::move(slice));
  }
  return slices;
}

nlohmann::json rank_json(const std::string& node, uint32_t pid, int rank) {
  return {{"node", node}, {"pid", pid}, {"rank", rank}};
}

nlohmann::json hang_json(const CrossNodeHang& h) {
  nlohmann::json culprits = nlohmann::json::array(), waiting = nlohmann::json::array();
  for (const RankReport& r : h.culprits) {
    nlohmann::json j = rank_json(r.node, r.pid, r.rank);
    j["last_completed_seq"] = r.completed_seq ? nlohmann::json(*r.completed_seq) : nullptr;
    j["progress_age_s"] = r.progress_age_s;
    culprits.push_back(std::move(j));
  }
  for (const RankReport& r : h.waiting) waiting.push_back(rank_json(r.node, r.pid, r.rank));
  return {{"job_id", h.job_id},
          {"comm", h.comm},
          {"nranks", h.nranks},
          {"kind", h.kind},
          {"seq", h.seq ? nlohmann::json(*h.seq) : nullptr},
          {"waited_s", h.waited_s},
          {"whole_node", h.whole_node ? nlohmann::json(*h.whole_node) : nullptr},
          {"culprits", std::move(culprits)},
          {"untraced_ranks", h.untraced_ranks},
          {"waiting", std::move(waiting)},
          {"message", describe(h)}};
}

nlohmann::json straggler_json(const CrossNodeStraggler& s) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankWait& r : s.stragglers) {
    nlohmann::json j = rank_json(r.node, r.pid, r.rank);
    j["mean_wait_s"] = r.mean_s;
    j["collectives"] = r.collectives;
    ranks.push_back(std::move(j));
  }
  return {{"job_id", s.job_id},
          {"comm", s.comm},
          {"whole_node", s.whole_node ? nlohmann::json(*s.whole_node) : nullptr},
          {"stragglers", std::move(ranks)},
          {"straggler_mean_wait_s", s.straggler_mean_s},
          {"others_mean_wait_s", s.others_mean_s},
          {"slices_agreeing", s.slices_agreeing},
          {"slices_with_data", s.slices_with_data},
          {"message", describe(s)}};
}

// Everything `eacgm cluster` knows now: each node's own anomalies, and the verdicts across
// nodes.
Result<nlohmann::json> evaluate(const PrometheusClient& client, const ClusterArgs& args) {
  auto nodes = client.query(
      fmt::format("max by (instance) (last_over_time(eacgm_processes_traced[{}]))", args.window));
  if (!nodes) return nodes.error();
  auto anomalies =
      client.query(fmt::format("max by (instance, kind, layer, rank, pid, job_id) "
                               "(last_over_time(eacgm_anomaly_timestamp_seconds[{}]))",
                               args.window));
  if (!anomalies) return anomalies.error();
  auto ranks = rank_reports(client);
  if (!ranks) return ranks.error();
  auto waits = rank_waits(client, args);
  if (!waits) return waits.error();

  nlohmann::json out = {{"prometheus", args.prometheus},
                        {"nodes", nlohmann::json::array()},
                        {"stragglers", nlohmann::json::array()},
                        {"hangs", nlohmann::json::array()},
                        {"leaks", nlohmann::json::array()},
                        {"other", nlohmann::json::array()},
                        {"cross_node_hangs", nlohmann::json::array()},
                        {"cross_node_stragglers", nlohmann::json::array()}};
  for (const nlohmann::json& s : *nodes) {
    out["nodes"].push_back(
        {{"node", s["metric"].value("instance", std::string())},
         {"processes_traced", std::lround(std::stod(s["value"][1].get<std::string>()))}});
  }
  for (const nlohmann::json& s : *anomalies) {
    nlohmann::json f = finding(s);
    const std::string kind = f["kind"];
    const char* group = kind == "straggler" ? "stragglers"
                        : kind == "hang"    ? "hangs"
                        : kind == "leak"    ? "leaks"
                                            : "other";
    out[group].push_back(std::move(f));
  }
  const CrossNodeOptions options{.hang_timeout_s = args.hang_timeout_s};
  for (const CrossNodeHang& h : find_cross_node_hangs(*ranks, options)) {
    out["cross_node_hangs"].push_back(hang_json(h));
  }
  for (const CrossNodeStraggler& s : find_cross_node_stragglers(*waits, options)) {
    out["cross_node_stragglers"].push_back(straggler_json(s));
  }
  return out;
}

// The findings, one line each, keyed by what stays the same while a finding lasts (not its
// durations), so that --watch prints only what changed.
std::vector<std::pair<std::string, std::string>> finding_lines(const nlohmann::json& out) {
  std::vector<std::pair<std::string, std::string>> lines;
  const std::pair<const char*, const char*> sections[] = {
      {"stragglers", "straggler"}, {"hangs", "hung"}, {"leaks", "leaking device memory"}};
  for (const auto& [group, word] : sections) {
    for (const auto& f : out[group]) {
      std::string line = fmt::format("{}: {}", word, describe(f));
      lines.emplace_back(line, line);
    }
  }
  for (const auto& f : out["other"]) {
    std::string line = fmt::format("{}: {}", f["kind"].get<std::string>(), describe(f));
    lines.emplace_back(line, line);
  }
  auto ranks_key = [](const nlohmann::json& list) {
    std::string key;
    for (const auto& r : list) {
      key += fmt::format(" {}/{}", r["node"].get<std::string>(), r["rank"].get<int>());
    }
    return key;
  };
  for (const auto& h : out["cross_node_hangs"]) {
    lines.emplace_back(fmt::format("hang {} {} {} {}{}", h["job_id"].get<std::string>(),
                                   h["comm"].get<std::string>(), h["kind"].get<std::string>(),
                                   h["seq"].dump(), ranks_key(h["culprits"])),
                       "cross-node hang: " + h["message"].get<std::string>());
  }
  for (const auto& s : out["cross_node_stragglers"]) {
    lines.emplace_back(fmt::format("straggler {} {}{}", s["job_id"].get<std::string>(),
                                   s["comm"].get<std::string>(), ranks_key(s["stragglers"])),
                       "cross-node straggler: " + s["message"].get<std::string>());
  }
  return lines;
}

void print_report(const nlohmann::json& out, const ClusterArgs& args) {
  fmt::print("{} node(s) running eacgm serve seen by {} in the last {}\n", out["nodes"].size(),
             args.prometheus, args.window);
  for (const auto& n : out["nodes"]) {
    fmt::print("  {}: {} process(es) traced\n", n["node"].get<std::string>(),
               n["processes_traced"].get<long>());
  }
  const auto lines = finding_lines(out);
  for (const auto& [key, line] : lines) fmt::print("{}\n", line);
  if (lines.empty()) fmt::print("no anomalies\n");
}

std::atomic<bool> g_stop_watching{false};

std::string clock_now() {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char text[16];
  std::strftime(text, sizeof(text), "%H:%M:%S", &local);
  return text;
}

// Re-evaluates every interval until SIGINT or SIGTERM; prints the whole report once, then what
// appeared and what went away. With --json, one JSON document per line each time anything
// changed.
int watch(const PrometheusClient& client, const ClusterArgs& args, nlohmann::json first) {
  std::signal(SIGINT, [](int) { g_stop_watching = true; });
  std::signal(SIGTERM, [](int) { g_stop_watching = true; });
  auto keys_of = [](const nlohmann::json& out) {
    std::map<std::string, std::string> keys;
    for (auto& [key, line] : finding_lines(out)) keys.emplace(std::move(key), std::move(line));
    return keys;
  };
  std::map<std::string, std::string> shown = keys_of(first);
  if (args.json) {
    fmt::print("{}\n", first.dump());
  } else {
    print_report(first, args);
  }
  std::fflush(stdout);
  std::string last_error;
  while (!g_stop_watching) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(std::lround(args.interval_s * 1000));
    while (!g_stop_watching && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (g_stop_watching) break;
    auto out = evaluate(client, args);
    if (!out) {
      // Prometheus restarting or a network blip: say so once, keep watching.
      if (out.error().message != last_error) {
        fmt::print(stderr, "eacgm: {} {} (still watching)\n", clock_now(), out.error().message);
        last_error = out.error().message;
      }
      continue;
    }
    last_error.clear();
    std::map<std::string, std::string> now = keys_of(*out);
    if (args.json) {
      if (std::ranges::equal(now | std::views::keys, shown | std::views::keys)) continue;
      fmt::print("{}\n", out->dump());
    } else {
      for (const auto& [key, line] : now) {
        if (!shown.contains(key)) fmt::print("{} + {}\n", clock_now(), line);
      }
      for (const auto& [key, line] : shown) {
        if (!now.contains(key)) fmt::print("{} - over: {}\n", clock_now(), line);
      }
    }
    std::fflush(stdout);
    shown = std::move(now);
  }
  return 0;
}

int run_cluster(const ClusterArgs& args) {
  auto client = PrometheusClient::open(args.prometheus);
  if (!client) {
    fmt::print(stderr, "eacgm: error: {}\n", client.error().message);
    return kExitUsage;
  }
  auto out = evaluate(*client, args);
  if (!out) {
    fmt::print(stderr, "eacgm: error: {}\n", out.error().message);
    return 1;
  }
  if (args.watch) return watch(*client, args, std::move(*out));
  if (args.json) {
    fmt::print("{}\n", json_text(*out, 2));
    return 0;
  }
  print_report(*out, args);
  return 0;
}

}  // namespace

void add_cluster_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<ClusterArgs>();
  // Durations go into the PromQL text: only a plain duration may.
  auto duration_check = [](const std::string& w) {
    static const std::regex duration("[0-9]+(ms|s|m|h|d|w|y)");
    return std::regex_match(w, duration) && duration_s(w) > 0
               ? std::string()
               : "expected a duration such as 30m, 1h or 7d";
  };
  CLI::App* cluster = app.add_subcommand(
      "cluster", "ask Prometheus which rank or node straggles, hangs or leaks, across nodes");
  cluster->add_option("--prometheus", args->prometheus, "Prometheus URL, e.g. http://prom:9090")
      ->required();
  cluster->add_option("--window", args->window, "how far back to look (a PromQL duration)")
      ->capture_default_str()
      ->check(duration_check);
  cluster
      ->add_option("--straggler-window", args->straggler_window,
                   "the time a straggler across nodes is judged over, in slices that must agree")
      ->capture_default_str()
      ->check(duration_check);
  cluster->add_option("--straggler-slices", args->straggler_slices, "slices of --straggler-window")
      ->capture_default_str()
      ->check(CLI::Range(1, 60));
  cluster
      ->add_option("--hang-timeout", args->hang_timeout_s,
                   "seconds nothing may move on a communicator whose ranks wait before it is a "
                   "hang across nodes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cluster->add_flag("--json", args->json, "print the findings as JSON");
  cluster->add_flag("--watch", args->watch,
                    "evaluate again every --interval seconds and print what changed, until "
                    "interrupted");
  cluster->add_option("--interval", args->interval_s, "seconds between evaluations with --watch")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 3600.0));
  cluster->callback([args, &run] { run = [args] { return run_cluster(*args); }; });
}

}  // namespace eacgm
