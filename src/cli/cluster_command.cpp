#include "cli/cluster_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "agent/trace_session.h"
#include "common/json_text.h"
#include "serve/prometheus_client.h"

namespace eacgm {
namespace {

struct ClusterArgs {
  std::string prometheus;
  std::string window = "1h";
  bool json = false;
};

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

int run_cluster(const ClusterArgs& args) {
  auto client = PrometheusClient::open(args.prometheus);
  if (!client) {
    fmt::print(stderr, "eacgm: error: {}\n", client.error().message);
    return kExitUsage;
  }
  auto nodes = client->query(
      fmt::format("max by (instance) (last_over_time(eacgm_processes_traced[{}]))", args.window));
  if (!nodes) {
    fmt::print(stderr, "eacgm: error: {}\n", nodes.error().message);
    return 1;
  }
  auto anomalies =
      client->query(fmt::format("max by (instance, kind, layer, rank, pid, job_id) "
                                "(last_over_time(eacgm_anomaly_timestamp_seconds[{}]))",
                                args.window));
  if (!anomalies) {
    fmt::print(stderr, "eacgm: error: {}\n", anomalies.error().message);
    return 1;
  }

  nlohmann::json out = {
      {"prometheus", args.prometheus},         {"nodes", nlohmann::json::array()},
      {"stragglers", nlohmann::json::array()}, {"hangs", nlohmann::json::array()},
      {"leaks", nlohmann::json::array()},      {"other", nlohmann::json::array()}};
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
  if (args.json) {
    fmt::print("{}\n", json_text(out, 2));
    return 0;
  }
  fmt::print("{} node(s) running eacgm serve seen by {} in the last {}\n", out["nodes"].size(),
             args.prometheus, args.window);
  for (const auto& n : out["nodes"]) {
    fmt::print("  {}: {} process(es) traced\n", n["node"].get<std::string>(),
               n["processes_traced"].get<long>());
  }
  const std::pair<const char*, const char*> sections[] = {
      {"stragglers", "straggler"}, {"hangs", "hung"}, {"leaks", "leaking device memory"}};
  for (const auto& [group, word] : sections) {
    for (const auto& f : out[group]) fmt::print("{}: {}\n", word, describe(f));
  }
  for (const auto& f : out["other"]) {
    fmt::print("{}: {}\n", f["kind"].get<std::string>(), describe(f));
  }
  if (out["stragglers"].empty() && out["hangs"].empty() && out["leaks"].empty() &&
      out["other"].empty()) {
    fmt::print("no anomalies\n");
  }
  return 0;
}

}  // namespace

void add_cluster_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<ClusterArgs>();
  CLI::App* cluster = app.add_subcommand(
      "cluster", "ask Prometheus which rank or node straggles, hangs or leaks, across nodes");
  cluster->add_option("--prometheus", args->prometheus, "Prometheus URL, e.g. http://prom:9090")
      ->required();
  cluster->add_option("--window", args->window, "how far back to look (a PromQL duration)")
      ->capture_default_str()
      ->check([](const std::string& w) {
        // It goes into the PromQL text: only a plain duration may.
        static const std::regex duration("[0-9]+(ms|s|m|h|d|w|y)");
        return std::regex_match(w, duration) ? std::string()
                                             : "expected a duration such as 30m, 1h or 7d";
      });
  cluster->add_flag("--json", args->json, "print the findings as JSON");
  cluster->callback([args, &run] { run = [args] { return run_cluster(*args); }; });
}

}  // namespace eacgm
