// The gpu layer without a GPU: the aggregation and the detectors on made-up
// samples, the sampler on a fake NVML (function table) and on the simulated
// libnvidia-ml.so.1, and the GPU rows of the SQLite and Perfetto sinks read
// back exactly.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "layers/gpu/gpu_layer.h"
#include "layers/gpu/gpu_monitor.h"
#include "layers/gpu/gpu_report.h"
#include "layers/gpu/nvml_library.h"
#include "layers/gpu/nvml_sampler.h"
#include "sinks/perfetto_gpu.h"
#include "sinks/perfetto_proto.h"
#include "sinks/perfetto_writer.h"
#include "sinks/sqlite_writer.h"
#include "sinks/summary.h"
#include "test_support.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

GpuSample sample(uint32_t device, uint64_t ts_ns, double temperature) {
  GpuSample s;
  s.device = device;
  s.ts_ns = ts_ns;
  s[GpuMetric::kTemperature] = temperature;
  return s;
}

TEST(MetricStats, MinMaxMeanAndIntegersStayIntegers) {
  MetricStats st;
  for (int i = 0; i < 5; ++i) st.add(71);
  const json j = st.json();
  EXPECT_EQ(j, json({{"min", 71}, {"max", 71}, {"mean", 71}}));
  EXPECT_TRUE(j["mean"].is_number_integer());
  st.add(76);
  EXPECT_EQ(st.min, 71);
  EXPECT_EQ(st.max, 76);
  EXPECT_DOUBLE_EQ(st.mean(), (71.0 * 5 + 76) / 6);
  EXPECT_TRUE(st.json()["mean"].is_number_float());
  EXPECT_EQ(MetricStats{}.mean(), 0.0);
}

TEST(ThrottleDetector, ReportsOnceWhenThrottlingLasts) {
  ThrottleDetector d(2 * kS);
  // Idle and application clocks are not throttling.
  EXPECT_FALSE(d.observe(0, 0x1 | 0x2));
  std::optional<ThrottleDetector::Episode> episode;
  int reports = 0;
  for (uint64_t t = 1 * kS; t <= 5 * kS; t += kS / 10) {
    if (auto e = d.observe(t, 0x20 | 0x1)) {
      episode = e;
      ++reports;
    }
  }
  ASSERT_TRUE(episode);
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(episode->start_ns, 1 * kS);
  EXPECT_EQ(episode->now_ns, 3 * kS);
  EXPECT_EQ(episode->reasons, 0x20u);  // the idle bit is not a reason to report
  // A sample without it ends the episode; the next one is reported again.
  EXPECT_FALSE(d.observe(6 * kS, 0));
  EXPECT_FALSE(d.observe(7 * kS, 0x4));
  EXPECT_TRUE(d.observe(9 * kS, 0x4));
}

TEST(ThrottleDetector, ShortBlipsAreNotReported) {
  ThrottleDetector d(2 * kS);
  for (uint64_t t = 0; t < 20 * kS; t += kS / 10) {
    const bool on = (t / kS) % 2 == 0;  // 1 s on, 1 s off
    EXPECT_FALSE(d.observe(t, on ? 0x40 : 0)) << t;
  }
}

Session session_with(std::initializer_list<uint32_t> pids) {
  Session s;
  s.start_ns = 0;
  for (uint32_t pid : pids) {
    ProcessInfo& p = s.process(pid);
    p.comm = "train";
    p.rank = static_cast<int>(pid % 10);
  }
  return s;
}

TEST(GpuMonitor, AggregatesPerDeviceAndPerTracedProcess) {
  Session session = session_with({101});
  GpuMonitor m;
  m.add_device({0, "GPU A", "GPU-a", 0});
  for (int i = 0; i < 10; ++i) {
    GpuSample s = sample(0, i * kS / 10, 71);
    s[GpuMetric::kMemoryUsed] = 1e9 + i * 1e8;  // memory creeping up
    s.memory_total_bytes = 80ull << 30;
    s.clock_event_reasons = 0x1;
    s.processes.push_back({.pid = 101,
                           .memory_used_bytes = 512ull << 20,
                           .sm_util_pct = 40,
                           .memory_util_pct = 10,
                           .traced = true});
    s.processes.push_back({.pid = 999,
                           .memory_used_bytes = 1,
                           .sm_util_pct = {},
                           .memory_util_pct = {},
                           .traced = false});
    m.on_sample(s);
  }
  const json devices = m.devices_json(session, {{0, {"fan_pct"}}});
  ASSERT_EQ(devices.size(), 1u);
  const json& d = devices[0];
  EXPECT_EQ(d["index"], 0);
  EXPECT_EQ(d["name"], "GPU A");
  EXPECT_EQ(d["uuid"], "GPU-a");
  EXPECT_EQ(d["samples"], 10);
  EXPECT_EQ(d["temperature_c"], json({{"min", 71}, {"max", 71}, {"mean", 71}}));
  EXPECT_EQ(d["memory_used_bytes"]["min"], 1000000000);
  EXPECT_EQ(d["memory_used_bytes"]["max"], 1900000000);
  EXPECT_EQ(d["memory_used_bytes"]["mean"], 1450000000);
  EXPECT_EQ(d["memory_total_bytes"], 80ull << 30);
  EXPECT_FALSE(d.contains("fan_pct"));
  EXPECT_EQ(d["unsupported"], json({"fan_pct"}));
  EXPECT_EQ(d["clock_events"]["throttled_s"], 0.0);
  EXPECT_NEAR(d["clock_events"]["reasons_s"]["gpu_idle"].get<double>(), 0.9, 1e-9);
  ASSERT_EQ(d["processes"].size(), 1u);
  const json& p = d["processes"][0];
  EXPECT_EQ(p["pid"], 101);
  EXPECT_EQ(p["comm"], "train");
  EXPECT_EQ(p["rank"], 1);
  EXPECT_EQ(p["memory_used_bytes"],
            json({{"min", 536870912}, {"max", 536870912}, {"mean", 536870912}}));
  EXPECT_EQ(p["sm_util_pct"]["mean"], 40);
  EXPECT_EQ(d["other_processes"], 1);
  EXPECT_TRUE(m.take_anomalies(session).empty());
}

TEST(GpuMonitor, XidIsAnAnomalyNamingTheProcessOnTheDevice) {
  Session session = session_with({101});
  session.start_ns = 5 * kS;
  GpuMonitor m;
  m.set_session_start(session.start_ns);
  m.add_device({1, "GPU B", "GPU-b", 0x8});
  GpuSample s = sample(1, 6 * kS, 60);
  s.processes.push_back({.pid = 101,
                         .memory_used_bytes = {},
                         .sm_util_pct = {},
                         .memory_util_pct = {},
                         .traced = true});
  m.on_sample(s);
  m.on_event({.device = 1, .ts_ns = 7 * kS + kS / 2, .kind = GpuEvent::Kind::kXid, .code = 79});
  const std::vector<Anomaly> a = m.take_anomalies(session);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "xid");
  EXPECT_EQ(a[0].layer, Layer::kGpu);
  EXPECT_DOUBLE_EQ(a[0].t_s, 2.5);
  EXPECT_EQ(a[0].pid, 101u);
  EXPECT_EQ(a[0].rank, 1);
  EXPECT_EQ(a[0].evidence["xid"], 79);
  EXPECT_EQ(a[0].evidence["device"], 1);
  EXPECT_EQ(a[0].evidence["description"], "GPU has fallen off the bus");
  EXPECT_NE(a[0].message.find("XID 79"), std::string::npos);
  EXPECT_FALSE(a[0].suggestion.empty());
  EXPECT_TRUE(m.take_anomalies(session).empty());  // reported once
  const json d = m.devices_json(session, {})[0];
  EXPECT_EQ(d["events"]["xid"], 1);
  EXPECT_EQ(d["xids"][0]["xid"], 79);
}

TEST(GpuMonitor, ThermalThrottlingThatLastsIsAnAnomaly) {
  Session session = session_with({});
  GpuMonitor m;
  m.add_device({0, "GPU A", "GPU-a", 0});
  for (uint64_t t = 0; t <= 4 * kS; t += kS / 10) {
    GpuSample s = sample(0, t, 88);
    s.clock_event_reasons = t >= kS ? 0x40 : 0x0;
    m.on_sample(s);
  }
  const std::vector<Anomaly> a = m.take_anomalies(session);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, "throttle");
  EXPECT_DOUBLE_EQ(a[0].t_s, 1.0);
  EXPECT_EQ(a[0].evidence["reasons"], json({"hw_thermal_slowdown"}));
  EXPECT_EQ(a[0].evidence["temperature_c"], 88);
  EXPECT_NE(a[0].message.find("thermally"), std::string::npos);
  const json d = m.devices_json(session, {})[0];
  EXPECT_NEAR(d["clock_events"]["throttled_s"].get<double>(), 3.0, 1e-9);
}

TEST(GpuMonitor, EccCountGrowthIsAnEventOnlyWithoutEccEvents) {
  Session session = session_with({});
  for (uint64_t registered : {uint64_t{0}, uint64_t{0x2}}) {
    GpuMonitor m;
    m.add_device({0, "", "", registered});
    GpuSample s = sample(0, kS, 50);
    s.ecc_uncorrected = 3;
    s.ecc_corrected = 10;
    m.on_sample(s);
    s.ts_ns = 2 * kS;
    s.ecc_uncorrected = 4;
    m.on_sample(s);
    const std::vector<Anomaly> a = m.take_anomalies(session);
    EXPECT_EQ(a.size(), registered ? 0u : 1u);
    if (!a.empty()) {
      EXPECT_EQ(a[0].kind, "ecc");
    }
    const json d = m.devices_json(session, {})[0];
    EXPECT_EQ(d["ecc_errors"]["uncorrected_during_session"], 1);
    EXPECT_EQ(d["ecc_errors"]["corrected_during_session"], 0);
  }
}

// --- A fake NVML: a function table with some readings unsupported ---

std::atomic<int> g_fan_calls{0};
std::atomic<int> g_xids_left{0};
std::atomic<int> g_process_calls{0};
nvml::DeviceSt* const kDevice0 = reinterpret_cast<nvml::DeviceSt*>(0x1000);

NvmlFunctions fake_nvml() {
  NvmlFunctions f;
  f.init = [] { return nvml::kSuccess; };
  f.shutdown = [] { return nvml::kSuccess; };
  f.device_count = [](unsigned* n) {
    *n = 1;
    return nvml::kSuccess;
  };
  f.device_handle = [](unsigned, nvml::Device* d) {
    *d = kDevice0;
    return nvml::kSuccess;
  };
  f.temperature = [](nvml::Device, int, unsigned* c) {
    *c = 71;
    return nvml::kSuccess;
  };
  f.power_usage = [](nvml::Device, unsigned* mw) {
    *mw = 250500;
    return nvml::kSuccess;
  };
  f.fan_speed = [](nvml::Device, unsigned*) {
    ++g_fan_calls;
    return nvml::kErrorNotSupported;
  };
  // Three processes, but the first call offers room for fewer: must grow and retry.
  f.compute_processes = [](nvml::Device, unsigned* count, void* out) {
    ++g_process_calls;
    if (*count < 3) {
      *count = 3;
      return nvml::kErrorInsufficientSize;
    }
    *count = 3;
    auto* infos = static_cast<nvml::ProcessInfo*>(out);
    for (unsigned i = 0; i < 3; ++i) infos[i] = {100 + i, (i + 1) << 20, 0, 0};
    infos[2].usedGpuMemory = nvml::kValueNotAvailable;
    return nvml::kSuccess;
  };
  f.event_set_create = [](nvml::EventSet* set) {
    *set = reinterpret_cast<nvml::EventSet>(0x2000);
    return nvml::kSuccess;
  };
  f.register_events = [](nvml::Device, unsigned long long types, nvml::EventSet) {
    // ECC events unsupported: registration of all three fails as a whole.
    return types == nvml::kEventTypeXidCriticalError ? nvml::kSuccess : nvml::kErrorNotSupported;
  };
  f.event_set_wait = [](nvml::EventSet, void* data, unsigned timeout_ms) {
    if (g_xids_left.fetch_sub(1) > 0) {
      auto* e = static_cast<nvml::EventData*>(data);
      e->device = kDevice0;
      e->eventType = nvml::kEventTypeXidCriticalError;
      e->eventData = 48;
      return nvml::kSuccess;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return nvml::kErrorTimeout;
  };
  f.event_set_free = [](nvml::EventSet) { return nvml::kSuccess; };
  return f;
}

TEST(NvmlSampler, SkipsUnsupportedAndMissingReadingsAndDeliversEvents) {
  g_fan_calls = 0;
  g_process_calls = 0;
  g_xids_left = 1;
  auto lib = NvmlLibrary::from_functions(fake_nvml());
  ASSERT_TRUE(lib) << lib.error().message;
  std::shared_ptr<const NvmlLibrary> shared = std::move(*lib);
  auto devices = shared->devices();
  ASSERT_TRUE(devices);
  ASSERT_EQ(devices->size(), 1u);
  NvmlSampler::Options options;
  options.rate_hz = 100;
  options.event_wait_ms = 10;
  NvmlSampler sampler(shared, *devices, options);
  EXPECT_EQ(sampler.registered_events().at(0), nvml::kEventTypeXidCriticalError);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sampler.stop();
  const NvmlSampler::Batch batch = sampler.take();
  ASSERT_GE(batch.samples.size(), 5u);
  for (const GpuSample& s : batch.samples) {
    EXPECT_EQ(s[GpuMetric::kTemperature], 71.0);
    EXPECT_EQ(s[GpuMetric::kPower], 250.5);
    EXPECT_FALSE(s[GpuMetric::kFan]);
    EXPECT_FALSE(s[GpuMetric::kUtil]);  // the library lacks the function
    ASSERT_EQ(s.processes.size(), 3u);
    EXPECT_EQ(s.processes[0].pid, 100u);
    EXPECT_EQ(s.processes[1].memory_used_bytes, 2u << 20);
    EXPECT_FALSE(s.processes[2].memory_used_bytes);  // NVML_VALUE_NOT_AVAILABLE
  }
  EXPECT_EQ(g_fan_calls, 1);  // never asked again once it said "not supported"
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(batch.events[0].kind, GpuEvent::Kind::kXid);
  EXPECT_EQ(batch.events[0].code, 48u);
  const auto unsupported = sampler.unsupported().at(0);
  for (const char* name : {"fan_pct", "util_pct", "memory_util_pct", "ecc_errors"}) {
    EXPECT_NE(std::find(unsupported.begin(), unsupported.end(), name), unsupported.end()) << name;
  }
  EXPECT_EQ(std::find(unsupported.begin(), unsupported.end(), "temperature_c"), unsupported.end());
  EXPECT_TRUE(sampler.take().samples.empty());
}

TEST(NvmlLibrary, MissingLibraryIsAnErrorNamingIt) {
  auto lib = NvmlLibrary::open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(lib);
  EXPECT_NE(lib.error().message.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  NvmlFunctions f;
  EXPECT_FALSE(NvmlLibrary::from_functions(f));  // no nvmlInit: not NVML
}

TEST(GpuLayer, UnavailableWithoutNvml) {
  GpuLayer::Options options;
  options.library = "/nonexistent/libnvidia-ml.so.1";
  auto layer = GpuLayer::start(options, 0);
  EXPECT_FALSE(layer->active());
  Session session;
  layer->finish(session, {}, [](Anomaly) { FAIL(); });
  const LayerState& state = session.layers.at(Layer::kGpu);
  EXPECT_EQ(state.status, LayerStatus::kUnavailable);
  EXPECT_NE(state.reason.find("cannot load NVML"), std::string::npos);
  const json summary = summary_json(session);
  EXPECT_EQ(summary["layers"]["gpu"], json({{"status", "unavailable"}, {"reason", state.reason}}));
  EXPECT_NE(text_report(session).find("[gpu] unavailable: cannot load NVML"), std::string::npos);
}

// --- The simulated libnvidia-ml.so.1 end to end through GpuLayer ---

TEST(GpuLayer, SimulatedNvmlReadingsAndXidReachTheSession) {
  // The simulated library reads its script at the process's first nvmlInit: this is the only
  // test in this binary that loads it.
  setenv("SIMGPU_DEVICE_COUNT", "2", 1);
  setenv("SIMGPU_RULES",
         "nvml set temperature 71; nvml device=1 unsupported fan; nvml device=1 xid 31 at=100ms",
         1);
  GpuLayer::Options options;
  options.library = std::string(EACGM_SIMGPU_LIB_DIR) + "/libnvidia-ml.so.1";
  options.rate_hz = 50;
  Session session;
  session.start_ns = 1;
  auto layer = GpuLayer::start(options, session.start_ns);
  ASSERT_TRUE(layer->active()) << layer->reason();
  std::vector<Anomaly> anomalies;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (anomalies.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    layer->poll(session, {}, [&](Anomaly a) { anomalies.push_back(std::move(a)); });
  }
  layer->finish(session, {}, [&](Anomaly a) { anomalies.push_back(std::move(a)); });
  unsetenv("SIMGPU_RULES");
  unsetenv("SIMGPU_DEVICE_COUNT");
  ASSERT_EQ(anomalies.size(), 1u);
  EXPECT_EQ(anomalies[0].kind, "xid");
  EXPECT_EQ(anomalies[0].evidence["xid"], 31);
  EXPECT_EQ(anomalies[0].evidence["device"], 1);
  const LayerState& state = session.layers.at(Layer::kGpu);
  EXPECT_EQ(state.status, LayerStatus::kActive);
  EXPECT_EQ(state.extra["driver"], "999.0.0-simgpu");
  const json& devices = state.extra["devices"];
  ASSERT_EQ(devices.size(), 2u);
  for (const json& d : devices) {
    EXPECT_GT(d["samples"].get<int>(), 0);
    EXPECT_EQ(d["temperature_c"], json({{"min", 71}, {"max", 71}, {"mean", 71}}));
    EXPECT_EQ(d["power_w"]["mean"], 60);
  }
  EXPECT_TRUE(devices[0].contains("fan_pct"));
  EXPECT_FALSE(devices[1].contains("fan_pct"));
  EXPECT_EQ(devices[1]["unsupported"], json({"fan_pct"}));
  const std::string report = text_report(session);
  EXPECT_NE(report.find("[gpu] NVML driver 999.0.0-simgpu, 2 GPUs"), std::string::npos) << report;
  EXPECT_NE(report.find("not supported: fan_pct"), std::string::npos) << report;
}

// --- Sinks ---

GpuSample full_sample(uint64_t ts_ns) {
  GpuSample s = sample(0, ts_ns, 71);
  s[GpuMetric::kPower] = 250.5;
  s[GpuMetric::kMemoryUsed] = 1073741824;
  s.memory_total_bytes = 80ull << 30;
  s.clock_event_reasons = 0x40;
  s.ecc_corrected = 2;
  s.ecc_uncorrected = 0;
  s.processes.push_back({.pid = 42,
                         .memory_used_bytes = 1 << 20,
                         .sm_util_pct = 33,
                         .memory_util_pct = {},
                         .traced = true});
  s.processes.push_back({.pid = 43,
                         .memory_used_bytes = {},
                         .sm_util_pct = {},
                         .memory_util_pct = {},
                         .traced = false});
  return s;
}

Session gpu_session() {
  Session session = session_with({42});
  LayerState& gpu = session.layers[Layer::kGpu];
  gpu.status = LayerStatus::kActive;
  gpu.extra["devices"] = json::array({{{"index", 0},
                                       {"name", "GPU A"},
                                       {"uuid", "GPU-a"},
                                       {"samples", 2},
                                       {"memory_total_bytes", 80ull << 30},
                                       {"unsupported", {"fan_pct"}}}});
  return session;
}

TEST(SqliteGpuTables, SamplesProcessesEventsAndDevicesAsWritten) {
  TempDir dir;
  const std::string path = (dir.path() / "events.sqlite").string();
  auto writer = SqliteWriter::open(path);
  ASSERT_TRUE(writer) << writer.error().message;
  (*writer)->on_gpu_sample(full_sample(kS));
  (*writer)->on_gpu_sample(full_sample(2 * kS));
  (*writer)->on_gpu_event({.device = 0, .ts_ns = 3 * kS, .kind = GpuEvent::Kind::kXid, .code = 79});
  ASSERT_TRUE((*writer)->finish(gpu_session()).ok());

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto rows = [db](const char* sql) {
    std::vector<std::vector<std::string>> out;
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
        const unsigned char* text = sqlite3_column_text(stmt, i);
        row.push_back(text ? reinterpret_cast<const char*>(text) : "NULL");
      }
      out.push_back(row);
    }
    sqlite3_finalize(stmt);
    return out;
  };
  using Rows = std::vector<std::vector<std::string>>;
  EXPECT_EQ(rows("SELECT device, ts_ns, temperature_c, power_w, memory_used_bytes, fan_pct, "
                 "memory_total_bytes, clock_event_reasons, ecc_corrected, ecc_uncorrected, "
                 "typeof(temperature_c) FROM gpu_samples ORDER BY id"),
            (Rows{{"0", "1000000000", "71", "250.5", "1073741824", "NULL", "85899345920", "64", "2",
                   "0", "integer"},
                  {"0", "2000000000", "71", "250.5", "1073741824", "NULL", "85899345920", "64", "2",
                   "0", "integer"}}));
  EXPECT_EQ(rows("SELECT sample_id, pid, traced, memory_used_bytes, sm_util_pct, memory_util_pct "
                 "FROM gpu_process_samples ORDER BY sample_id, pid"),
            (Rows{{"1", "42", "1", "1048576", "33", "NULL"},
                  {"1", "43", "0", "NULL", "NULL", "NULL"},
                  {"2", "42", "1", "1048576", "33", "NULL"},
                  {"2", "43", "0", "NULL", "NULL", "NULL"}}));
  EXPECT_EQ(rows("SELECT device, ts_ns, kind, code, description FROM gpu_events"),
            (Rows{{"0", "3000000000", "xid", "79", "GPU has fallen off the bus"}}));
  EXPECT_EQ(rows("SELECT device, name, uuid, memory_total_bytes, samples, unsupported "
                 "FROM gpu_devices"),
            (Rows{{"0", "GPU A", "GPU-a", "85899345920", "2", "[\"fan_pct\"]"}}));
  sqlite3_close(db);
}

TEST(PerfettoGpuTracks, CounterTracksPerDeviceAndMetricWithExactValues) {
  TempDir dir;
  const std::string path = (dir.path() / "trace.perfetto-trace").string();
  auto writer = PerfettoWriter::open(path);
  ASSERT_TRUE(writer) << writer.error().message;
  (*writer)->on_gpu_sample(full_sample(kS));
  (*writer)->on_gpu_sample(full_sample(2 * kS));
  (*writer)->on_gpu_event({.device = 0, .ts_ns = 3 * kS, .kind = GpuEvent::Kind::kXid, .code = 79});
  ASSERT_TRUE((*writer)->finish(gpu_session()).ok());

  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  perfetto::Trace trace;
  ASSERT_TRUE(trace.ParseFromString(bytes.str()));
  std::map<uint64_t, perfetto::TrackDescriptor> tracks;
  std::map<std::string, std::vector<double>> values;
  std::vector<std::string> instants;
  for (const auto& p : trace.packet()) {
    if (p.has_track_descriptor()) tracks[p.track_descriptor().uuid()] = p.track_descriptor();
  }
  for (const auto& p : trace.packet()) {
    if (!p.has_track_event()) continue;
    const auto& e = p.track_event();
    ASSERT_TRUE(tracks.contains(e.track_uuid())) << "event before/without its descriptor";
    EXPECT_EQ(p.timestamp_clock_id(), 3u);
    if (e.type() == perfetto::TrackEvent::TYPE_COUNTER) {
      EXPECT_TRUE(tracks[e.track_uuid()].has_counter());
      values[tracks[e.track_uuid()].name()].push_back(e.double_counter_value());
    } else if (e.type() == perfetto::TrackEvent::TYPE_INSTANT) {
      instants.push_back(e.name());
      EXPECT_EQ(tracks[e.track_uuid()].name(), "GPU 0: GPU A");
    }
  }
  EXPECT_EQ(values["GPU 0 temperature (°C)"], (std::vector<double>{71, 71}));
  EXPECT_EQ(values["GPU 0 power (W)"], (std::vector<double>{250.5, 250.5}));
  EXPECT_EQ(values["GPU 0 memory used (bytes)"], (std::vector<double>{1073741824, 1073741824}));
  EXPECT_EQ(values["GPU 0 throttled (1 = thermal or power)"], (std::vector<double>{1, 1}));
  EXPECT_EQ(values["GPU 0 memory (bytes)"], (std::vector<double>{1048576, 1048576}));  // pid 42
  EXPECT_EQ(values["GPU 0 SM utilization (%)"], (std::vector<double>{33, 33}));
  EXPECT_FALSE(values.contains("GPU 0 fan (%)"));
  EXPECT_EQ(instants, (std::vector<std::string>{"XID 79"}));
  const auto mem = tracks[PerfettoGpuTracks::device_counter_uuid(
      0, static_cast<uint32_t>(GpuMetric::kMemoryUsed))];
  EXPECT_EQ(mem.counter().unit(), perfetto::CounterDescriptor::UNIT_SIZE_BYTES);
  EXPECT_EQ(mem.parent_uuid(), PerfettoGpuTracks::device_track_uuid(0));
  const auto proc = tracks[PerfettoGpuTracks::process_counter_uuid(42, 0, 0)];
  EXPECT_EQ(proc.parent_uuid(), PerfettoWriter::process_track_uuid(42));
  EXPECT_TRUE(tracks.contains(PerfettoWriter::process_track_uuid(42)));
}

}  // namespace
}  // namespace eacgm
