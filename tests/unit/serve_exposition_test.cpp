// The Prometheus text format as eacgm serve writes it: escaping, values,
// histogram buckets (cumulative, le as <=), bounded label values, and the
// families the Grafana dashboard may use.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "probe_row.h"
#include "serve/discovery.h"
#include "serve/exposition.h"
#include "serve/http_server.h"
#include "serve/serve_metrics.h"

namespace eacgm {
namespace {

TEST(ServeExposition, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_help("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
  Exposition e;
  e.family("m_total", "counter", "Help with\nnewline.");
  e.sample("m_total", {{"api", "say \"hi\""}, {"layer", "cuda"}}, 3);
  EXPECT_EQ(e.text(),
            "# HELP m_total Help with\\nnewline.\n# TYPE m_total counter\n"
            "m_total{api=\"say \\\"hi\\\"\",layer=\"cuda\"} 3\n");
}

TEST(ServeExposition, FormatsValues) {
  EXPECT_EQ(format_value(12345678901.0), "12345678901");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(1e-6), "1e-06");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(ServeHistogram, BucketsAreCumulativeAndInclusive) {
  LatencyHistogram h;
  h.observe(1'000);           // exactly 1 µs: in le="1e-06"
  h.observe(1'001);           // just above: le="2.5e-06"
  h.observe(3'000'000);       // 3 ms: le="0.005"
  h.observe(60'000'000'000);  // 60 s: only +Inf
  EXPECT_EQ(h.count(), 4u);
  EXPECT_EQ(h.cumulative(0), 1u);
  EXPECT_EQ(h.cumulative(1), 2u);
  EXPECT_EQ(h.cumulative(LatencyHistogram::kBuckets - 1), 3u);
  Exposition e;
  e.histogram("d_seconds", {{"api", "x"}}, h);
  const std::string& t = e.text();
  EXPECT_NE(t.find("d_seconds_bucket{api=\"x\",le=\"1e-06\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_bucket{api=\"x\",le=\"0.0025\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_bucket{api=\"x\",le=\"0.005\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_bucket{api=\"x\",le=\"10\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_bucket{api=\"x\",le=\"+Inf\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_count{api=\"x\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_sum{api=\"x\"} 60.003002001\n"), std::string::npos) << t;
  // Bounds strictly increase: Prometheus rejects anything else.
  const auto bounds = LatencyHistogram::bounds_s();
  for (size_t i = 1; i < bounds.size(); ++i) EXPECT_LT(bounds[i - 1], bounds[i]);
}

TEST(ServeHistogram, MemoryDoesNotGrowWithObservations) {
  LatencyHistogram h;
  const size_t size = sizeof(h);
  for (uint64_t i = 0; i < 1'000'000; ++i) h.observe(i * 37);
  EXPECT_EQ(sizeof(h), size);
  EXPECT_EQ(h.count(), 1'000'000u);
}

TEST(ServeExposition, BoundedNamesFoldIntoOther) {
  BoundedNames names(2);
  EXPECT_EQ(names.admit("a"), "a");
  EXPECT_EQ(names.admit("b"), "b");
  EXPECT_EQ(names.admit("c"), "other");
  EXPECT_EQ(names.admit("a"), "a");
}

TEST(ServeMetricsTest, ProcessSeriesGoAwayWithTheProcess) {
  ServeMetrics m({.max_processes = 2}, "9.9");
  for (uint32_t pid : {10u, 11u, 12u}) {
    ServedProcess p;
    p.pid = pid;
    p.comm = "train";
    p.rank = static_cast<int>(pid - 10);
    p.job_id = "job\"1";
    p.device_memory_bytes = 1024 * pid;
    m.update_process(p);
  }
  std::string t = m.render();
  EXPECT_NE(t.find("eacgm_processes_traced 3\n"), std::string::npos);
  // Per-process series are capped.
  EXPECT_NE(t.find("eacgm_process_device_memory_bytes{pid=\"10\",rank=\"0\",job_id=\"job\\\"1\"} "
                   "10240\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("eacgm_process_device_memory_bytes{pid=\"12\""), std::string::npos);
  m.forget_process(10);
  t = m.render();
  EXPECT_EQ(t.find("pid=\"10\""), std::string::npos);
  EXPECT_NE(t.find("eacgm_process_device_memory_bytes{pid=\"12\""), std::string::npos);
}

TEST(ServeMetricsTest, AnomaliesAreCountedAndRecentOnesKept) {
  ServeMetrics m({.max_anomalies = 2}, "9.9");
  for (int rank : {1, 2, 3}) {
    Anomaly a;
    a.kind = "straggler";
    a.layer = Layer::kNccl;
    a.rank = rank;
    a.pid = 100 + rank;
    m.on_anomaly(a, 1000.0 + rank);
  }
  const std::string t = m.render();
  EXPECT_NE(t.find("eacgm_anomalies_total{kind=\"straggler\",layer=\"nccl\"} 3\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("rank=\"1\""), std::string::npos) << t;  // the oldest is gone
  EXPECT_NE(t.find("eacgm_anomaly_timestamp_seconds{kind=\"straggler\",layer=\"nccl\",rank=\"3\","
                   "pid=\"103\",job_id=\"\"} 1003\n"),
            std::string::npos)
      << t;
  const auto j = nlohmann::json::parse(m.anomalies_json());
  ASSERT_EQ(j["anomalies"].size(), 2u);
  EXPECT_EQ(j["anomalies"][1]["rank"], 3);
}

TEST(ServeMetricsTest, OverheadOfTheAgentAndOfEachTracedProcess) {
  ServeMetrics m({}, "9.9");
  ServedProcess p;
  p.pid = 42;
  m.update_process(p);
  CallRecord call;
  call.pid = 42;
  call.spec = &cuda_row("cudaLaunchKernel");
  for (int i = 0; i < 1000; ++i) m.on_call(call);
  TracingOverhead o;
  o.programs = {{.group = "cuda", .hits = 4000, .bpf_ns = 400'000, .traps = true},
                {.group = "os", .hits = 10, .bpf_ns = 5'000}};
  o.trap_ns_per_hit = 900;
  o.agent_cpu_s = 1.5;
  o.agent_peak_rss_bytes = 1 << 26;
  m.set_overhead(o);
  const std::string t = m.render();
  EXPECT_NE(t.find("eacgm_probe_hits_total{layer=\"cuda\"} 4000\n"), std::string::npos) << t;
  EXPECT_NE(t.find("eacgm_probe_bpf_seconds_total{layer=\"os\"} 5e-06\n"), std::string::npos) << t;
  EXPECT_NE(t.find("eacgm_probe_trap_seconds 9e-07\n"), std::string::npos) << t;
  // 4000 traps of 900 ns and 0.405 ms of programs.
  EXPECT_NE(t.find("eacgm_estimated_added_seconds_total 0.004005\n"), std::string::npos) << t;
  // The process made 1000 of the calls: 2000 hits of 900 + 100 ns.
  EXPECT_NE(t.find("eacgm_process_estimated_added_seconds_total{pid=\"42\",rank=\"\",job_id="
                   "\"\"} 0.002\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("eacgm_agent_cpu_seconds_total 1.5\n"), std::string::npos) << t;
  m.forget_process(42);
  EXPECT_EQ(m.render().find("pid=\"42\""), std::string::npos);
}

// Where each rank of each communicator is, for verdicts across nodes: sequence numbers and
// durations measured here, per (process, communicator); gone with the process.
TEST(ServeMetricsTest, NcclRankSeriesSayWhereEachRankIs) {
  ServeMetrics m({}, "9.9");
  ServedProcess p;
  p.pid = 7;
  p.rank = 2;
  p.world_size = 4;
  p.job_id = "j";
  m.update_process(p);
  const std::string comm = "00112233445566778899aabbccddeeff";
  CallRecord c;
  c.pid = 7;
  c.spec = &nccl_row("ncclAllReduce");
  auto collective = [&](uint64_t seq, uint64_t start_ms, uint64_t duration_ms) {
    c.collective = CollectiveRef{comm, seq, 1, 4};  // rank 1 of the communicator
    c.start_ns = start_ms * 1'000'000;
    c.finished = false;
    c.duration_ns = 0;
    m.on_entry(c);
    c.finished = true;
    c.duration_ns = duration_ms * 1'000'000;
    m.on_call(c);
  };
  collective(1, 1000, 10);
  collective(2, 1100, 30);
  // The third is entered at 1200 ms and has not returned.
  c.collective = CollectiveRef{comm, 3, 1, 4};
  c.start_ns = 1'200'000'000;
  c.finished = false;
  m.on_entry(c);
  const std::string t = m.render(3'700'000'000);
  const std::string labels = "{pid=\"7\",rank=\"1\",job_id=\"j\",communicator=\"" + comm + "\"}";
  for (const std::string& line : {"eacgm_nccl_rank_communicator_size" + labels + " 4\n",
                                  "eacgm_nccl_rank_entered_seq" + labels + " 3\n",
                                  "eacgm_nccl_rank_completed_seq" + labels + " 2\n",
                                  "eacgm_nccl_rank_inside_seconds" + labels + " 2.5\n",
                                  "eacgm_nccl_rank_progress_age_seconds" + labels + " 2.5\n",
                                  "eacgm_nccl_rank_collective_seconds_total" + labels + " 0.04\n",
                                  "eacgm_nccl_rank_collectives_total" + labels + " 2\n"}) {
    EXPECT_NE(t.find(line), std::string::npos) << line << t;
  }
  // It returns: no longer inside; progress counts from the return.
  c.finished = true;
  c.duration_ns = 500'000'000;
  m.on_call(c);
  const std::string after = m.render(3'700'000'000);
  EXPECT_NE(after.find("eacgm_nccl_rank_inside_seconds" + labels + " 0\n"), std::string::npos)
      << after;
  EXPECT_NE(after.find("eacgm_nccl_rank_progress_age_seconds" + labels + " 2\n"), std::string::npos)
      << after;
  EXPECT_NE(after.find("eacgm_nccl_rank_completed_seq" + labels + " 3\n"), std::string::npos);
  m.forget_process(7);
  EXPECT_EQ(m.render().find("eacgm_nccl_rank_communicator_size{"), std::string::npos);
}

// A communicator made before serve attached, unaligned: the world communicator assumed from the
// process's RANK and WORLD_SIZE, with durations but no sequence numbers; a process without a
// rank is not followed at all.
TEST(ServeMetricsTest, NcclRankOfAnUnknownCommunicatorHasNoSequenceNumbers) {
  ServeMetrics m({}, "9.9");
  ServedProcess ranked;
  ranked.pid = 8;
  ranked.rank = 3;
  ranked.world_size = 4;
  m.update_process(ranked);
  ServedProcess anonymous;
  anonymous.pid = 9;
  m.update_process(anonymous);
  CallRecord c;
  c.spec = &nccl_row("ncclAllReduce");
  c.start_ns = 1'000'000'000;
  c.finished = false;
  for (uint32_t pid : {8u, 9u}) {
    c.pid = pid;
    m.on_entry(c);
  }
  const std::string t = m.render(4'000'000'000);
  EXPECT_NE(
      t.find(
          "eacgm_nccl_rank_inside_seconds{pid=\"8\",rank=\"3\",job_id=\"\",communicator=\"world\"} "
          "3\n"),
      std::string::npos)
      << t;
  EXPECT_NE(
      t.find("eacgm_nccl_rank_communicator_size{pid=\"8\",rank=\"3\",job_id=\"\",communicator="
             "\"world\"} 4\n"),
      std::string::npos);
  EXPECT_EQ(t.find("eacgm_nccl_rank_entered_seq{"), std::string::npos) << t;
  EXPECT_EQ(t.find("eacgm_nccl_rank_inside_seconds{pid=\"9\""), std::string::npos) << t;
}

// One process cannot grow the series without bound by making communicators.
TEST(ServeMetricsTest, NcclRanksPerProcessAreBounded) {
  ServeMetrics m({.max_communicators_per_process = 3}, "9.9");
  ServedProcess p;
  p.pid = 5;
  m.update_process(p);
  CallRecord c;
  c.pid = 5;
  c.spec = &nccl_row("ncclAllReduce");
  c.finished = false;
  for (int i = 0; i < 10; ++i) {
    c.collective = CollectiveRef{"comm" + std::to_string(i), 1, 0, 2};
    m.on_entry(c);
  }
  const std::string t = m.render(0);
  size_t series = 0;
  for (size_t at = t.find("eacgm_nccl_rank_communicator_size{"); at != std::string::npos;
       at = t.find("eacgm_nccl_rank_communicator_size{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 3u) << t;
}

TEST(ServeMetricsTest, EveryRenderedFamilyIsDeclaredOnceWithHelpAndType) {
  ServeMetrics m({}, "9.9");
  const std::string t = m.render();
  std::set<std::string> declared;
  for (const MetricFamilyInfo& f : ServeMetrics::families()) declared.insert(f.name);
  std::set<std::string> typed;
  std::istringstream in(t);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# TYPE ")) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(typed.insert(name).second) << name << " declared twice";
      EXPECT_TRUE(declared.contains(name)) << name;
    }
  }
  EXPECT_EQ(typed, declared);
}

// GPU readings in Prometheus's base units; the names of 0.1.0 stay one release, in NVML's units,
// their HELP naming the replacement.
TEST(ServeMetricsTest, GpuReadingsInBaseUnitsAndTheOldNamesDeprecated) {
  ServeMetrics m({}, "9.9");
  GpuSample s;
  s.device = 0;
  s[GpuMetric::kUtil] = 57;
  s[GpuMetric::kMemoryUtil] = 3;
  s[GpuMetric::kTemperature] = 71;
  s[GpuMetric::kPower] = 250.5;
  s[GpuMetric::kSmClock] = 1410;
  s[GpuMetric::kFan] = 30;
  s[GpuMetric::kPcieTx] = 2000;
  s[GpuMetric::kMemoryUsed] = 1 << 30;
  m.on_gpu_sample(s);
  const std::string t = m.render();
  for (const char* sample : {
           "eacgm_gpu_util_ratio{device=\"0\"} 0.57\n",
           "eacgm_gpu_memory_util_ratio{device=\"0\"} 0.03\n",
           "eacgm_gpu_temperature_celsius{device=\"0\"} 71\n",
           "eacgm_gpu_power_watts{device=\"0\"} 250.5\n",
           "eacgm_gpu_sm_clock_hertz{device=\"0\"} 1410000000\n",
           "eacgm_gpu_fan_ratio{device=\"0\"} 0.3\n",
           "eacgm_gpu_pcie_tx_bytes_per_second{device=\"0\"} 2048000\n",
           "eacgm_gpu_memory_used_bytes{device=\"0\"} 1073741824\n",
           // The old names, old units.
           "eacgm_gpu_util_pct{device=\"0\"} 57\n",
           "eacgm_gpu_temperature_c{device=\"0\"} 71\n",
           "eacgm_gpu_sm_clock_mhz{device=\"0\"} 1410\n",
           "eacgm_gpu_pcie_tx_kb_per_s{device=\"0\"} 2000\n",
           "# HELP eacgm_gpu_temperature_c deprecated: use eacgm_gpu_temperature_celsius",
           "# HELP eacgm_gpu_pcie_rx_kb_per_s deprecated: use eacgm_gpu_pcie_rx_bytes_per_second",
           "# HELP eacgm_gpu_util_ratio Latest NVML reading of each GPU: utilization, in a ratio",
       }) {
    EXPECT_NE(t.find(sample), std::string::npos) << sample << " not in\n" << t;
  }
  // memory_used_bytes was in base units already: one family, not a deprecated twin.
  size_t families = 0;
  for (size_t at = t.find("# TYPE eacgm_gpu_memory_used_bytes "); at != std::string::npos;
       at = t.find("# TYPE eacgm_gpu_memory_used_bytes ", at + 1)) {
    ++families;
  }
  EXPECT_EQ(families, 1u);
  // Every family has a name in base units or is deprecated in favour of one.
  for (const MetricFamilyInfo& f : ServeMetrics::families()) {
    if (!f.name.starts_with("eacgm_gpu_")) continue;
    const bool deprecated = f.help.starts_with("deprecated: use eacgm_gpu_");
    const std::regex base(".*_(ratio|celsius|watts|hertz|bytes|bytes_per_second|total)");
    EXPECT_TRUE(deprecated || std::regex_match(f.name, base)) << f.name;
  }
}

// The dashboard in deploy/ must query only what /metrics exports.
TEST(ServeDashboard, QueriesOnlyExportedMetrics) {
  // CMake compiles this file by its absolute path: the repository is two levels up.
  const auto repo = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  std::ifstream f(repo / "deploy/grafana/eacgm-dashboard.json");
  ASSERT_TRUE(f) << "deploy/grafana/eacgm-dashboard.json not found";
  const nlohmann::json dashboard = nlohmann::json::parse(f);
  std::set<std::string> exported, deprecated;
  for (const MetricFamilyInfo& fam : ServeMetrics::families()) {
    exported.insert(fam.name);
    if (fam.help.starts_with("deprecated")) deprecated.insert(fam.name);
    if (fam.type == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) exported.insert(fam.name + suffix);
    }
  }
  size_t queries = 0;
  const std::regex metric("eacgm_[a-z0-9_]+");
  for (const auto& panel : dashboard.at("panels")) {
    for (const auto& target : panel.value("targets", nlohmann::json::array())) {
      const std::string expr = target.at("expr");
      ++queries;
      size_t names = 0;
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric);
           it != std::sregex_iterator(); ++it) {
        ++names;
        EXPECT_TRUE(exported.contains(it->str()))
            << "panel '" << panel.value("title", "") << "' queries " << it->str()
            << ", which /metrics does not export";
        EXPECT_FALSE(deprecated.contains(it->str()))
            << "panel '" << panel.value("title", "") << "' queries " << it->str()
            << ", which is deprecated";
      }
      EXPECT_GT(names, 0u) << expr;
    }
  }
  EXPECT_GE(queries, 5u);
}

// One request on a fresh connection; the whole answer. By hand: httplib.h, included here, would
// define resolv.h's _res macro in the unity build of the tests, which breaks Eigen's headers.
std::string http_request(uint16_t port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) answer.append(buf, n);
  }
  close(fd);
  return answer;
}

// Read-only: POST, PUT and DELETE are 405 Method Not Allowed with the methods that are, not 400.
TEST(ServeHttp, OtherMethodsAreNotAllowed) {
  auto server = HttpServer::start({.host = "127.0.0.1", .port = 0},
                                  {.metrics = [] { return std::string("m 1\n"); },
                                   .anomalies = [] { return std::string("{}"); },
                                   .health = [] { return std::string("{}"); }});
  ASSERT_TRUE(server) << server.error().message;
  const uint16_t port = (*server)->port();
  const std::string get = http_request(port,
                                       "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                       "Connection: close\r\n\r\n");
  EXPECT_TRUE(get.starts_with("HTTP/1.1 200 OK\r\n")) << get;
  EXPECT_TRUE(get.ends_with("\r\n\r\nm 1\n")) << get;
  for (const char* request :
       {"POST /metrics", "PUT /metrics", "DELETE /healthz", "POST /nowhere", "PATCH /anomalies"}) {
    const std::string answer =
        http_request(port, std::string(request) +
                               " HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                               "Connection: close\r\n\r\nx");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 405 Method Not Allowed\r\n")) << request << answer;
    EXPECT_NE(answer.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos) << answer;
  }
  const std::string head = http_request(port,
                                        "HEAD /metrics HTTP/1.1\r\nHost: x\r\n"
                                        "Connection: close\r\n\r\n");
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200 OK\r\n")) << head;
}

TEST(ServeListen, ParsesAndRejects) {
  auto a = parse_listen_address("127.0.0.1:9412");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9412);
  auto b = parse_listen_address("[::1]:0");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_FALSE(parse_listen_address("9412"));
  EXPECT_FALSE(parse_listen_address("localhost:9412"));
  EXPECT_FALSE(parse_listen_address("127.0.0.1:99999"));
  EXPECT_FALSE(parse_listen_address("127.0.0.1:http"));
}

TEST(ServeDiscovery, CgroupsAndJobs) {
  EXPECT_EQ(cgroup2_mount("tmpfs /sys/fs/cgroup tmpfs rw 0 0\n"
                          "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"),
            "/sys/fs/cgroup/unified");
  EXPECT_FALSE(cgroup2_mount("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n"));
  EXPECT_EQ(cgroup_v2_path("4:memory:/x\n0::/kubepods/pod1/c2\n"), "/kubepods/pod1/c2");
  EXPECT_TRUE(cgroup_within("/a/b", "/a"));
  EXPECT_TRUE(cgroup_within("/a", "/a"));
  EXPECT_FALSE(cgroup_within("/ab", "/a"));
  EXPECT_TRUE(cgroup_within("/anything", "/"));
  EXPECT_EQ(job_id_from_environment({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}),
            "10.0.0.1:29500");
  EXPECT_EQ(job_id_from_environment({{"TORCHELASTIC_RUN_ID", "r1"}, {"MASTER_ADDR", "h"}}), "r1");
  EXPECT_EQ(job_id_from_environment({}), "");
}

}  // namespace
}  // namespace eacgm
