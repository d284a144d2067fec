// What `eacgm serve` exports: a Sink that folds every call, GPU reading and
// anomaly into bounded counters, histograms and gauges, and renders them as
// Prometheus text (/metrics) and recent anomalies as JSON (/anomalies).
//
// Memory and label cardinality are bounded by design, because the agent runs
// for days: durations go into fixed buckets; API and operator names are at
// most `max_names_per_layer` per layer (later ones count as "other"); series
// per process exist only while the process lives and for at most
// `max_processes` of them; pointers and kernel names are never labels.
//
// The main loop writes; HTTP threads read: every member is behind one mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "serve/exposition.h"
#include "session/overhead.h"
#include "sinks/sink.h"

namespace eacgm {

// Who a traced process is: its rank and job (from its environment) and its
// cgroup (its container or systemd unit).
struct ServedProcess {
  uint32_t pid = 0;
  std::string comm;
  std::optional<int> rank;
  std::optional<int> local_rank;
  std::optional<int> world_size;
  std::string job_id;  // TORCHELASTIC_RUN_ID, SLURM_JOB_ID or MASTER_ADDR:MASTER_PORT; may be empty
  std::string cgroup;  // cgroup v2 path, "/..."
  int64_t device_memory_bytes = 0;  // outstanding cudaMalloc'd bytes
  // Its environment was read and held something. A process in the middle of an exec shows none
  // for a moment: its identity is read again rather than kept without a rank or job.
  bool environment_read = false;
};

struct MetricFamilyInfo {
  std::string name;
  std::string_view type;  // counter, gauge, histogram
  std::string help;
};

class ServeMetrics : public Sink {
 public:
  struct Options {
    size_t max_processes = 256;
    size_t max_names_per_layer = 100;
    size_t max_anomalies = 64;  // recent anomalies kept for /anomalies and their gauge
    size_t max_communicators_per_process = 16;  // NCCL ranks followed per process
  };

  ServeMetrics(Options options, std::string version);

  // Sink: the main loop, as calls and readings are decoded.
  void on_call(const CallRecord& call) override;
  void on_entry(const CallRecord& entry) override;
  void on_gpu_sample(const GpuSample& sample) override;
  void on_gpu_event(const GpuEvent& event) override;
  Result<void> finish(const Session&) override { return {}; }

  // The main loop's view of the world.
  void on_anomaly(const Anomaly& anomaly, double unix_time_s);
  void update_process(ServedProcess process);
  void forget_process(uint32_t pid);
  void set_event_counts(uint64_t recorded, uint64_t dropped);
  void set_layer_active(Layer layer, bool active);
  // What tracing has cost so far (agent/overhead_meter.h).
  void set_overhead(TracingOverhead overhead);

  // Any thread. Durations still running (a rank inside a collective) are measured up to
  // `now_ns` (CLOCK_MONOTONIC, like events); render() takes the clock.
  std::string render() const;
  std::string render(uint64_t now_ns) const;
  std::string anomalies_json() const;
  size_t processes() const;

  // Every family render() can write, whether or not it has samples yet:
  // what the Grafana dashboard may query (checked by a test).
  static std::vector<MetricFamilyInfo> families();

 private:
  struct ApiStats {
    Layer layer;
    std::string name;  // the symbol, or "other"
    uint64_t calls = 0;
    uint64_t errors = 0;
    uint64_t bytes = 0;
    LatencyHistogram latency;
  };
  struct RankCollectives {
    int rank = -1;
    LatencyHistogram latency;
  };
  // Where one rank of one communicator is, for verdicts across nodes (eacgm cluster, the
  // alerting rules): only durations measured on this node and sequence numbers, which every
  // node counts alike, so that no two nodes' clocks are ever compared.
  struct NcclRank {
    int rank = -1;
    int nranks = 0;
    std::optional<uint64_t> entered_seq;      // known when the communicator's numbering is
    std::optional<uint64_t> completed_seq;    // (its creation was seen, or ranks were aligned)
    std::optional<uint64_t> inside_since_ns;  // entered the current collective at
    uint64_t progress_ns = 0;                 // latest entry or return
    uint64_t collectives = 0;                 // finished collective calls
    uint64_t inside_ns = 0;                   // time inside them
  };
  using NcclRankKey = std::pair<uint32_t, std::string>;  // pid, communicator id
  NcclRank* nccl_rank(const CallRecord& call);
  struct RecentAnomaly {
    Anomaly anomaly;
    std::string job_id;
    double unix_time_s = 0;
  };
  struct GpuDevice {
    std::array<std::optional<double>, kGpuMetricCount> values;
    std::optional<uint64_t> memory_total_bytes;
    std::map<std::string, uint64_t> events;  // by kind
  };

  ApiStats& api(const CallRecord& call);
  Labels process_labels(uint32_t pid) const;
  template <typename Family>
  void render_overhead(Exposition& out, Family& family) const;

  Options options_;
  std::string version_;
  mutable std::mutex mu_;
  std::unordered_map<const ProbeSpec*, ApiStats*> by_spec_;
  std::map<std::pair<Layer, std::string>, ApiStats> apis_;
  std::map<Layer, BoundedNames> names_;
  std::map<uint32_t, ServedProcess> processes_;
  std::map<uint32_t, RankCollectives> collectives_;  // by pid
  std::map<NcclRankKey, NcclRank> nccl_ranks_;
  std::map<std::pair<std::string, std::string>, uint64_t> anomaly_counts_;  // kind, layer
  std::deque<RecentAnomaly> recent_;
  std::map<uint32_t, GpuDevice> gpus_;
  std::map<Layer, bool> layers_;
  std::map<uint32_t, std::map<Layer, uint64_t>> calls_by_process_;  // live processes only
  std::optional<TracingOverhead> overhead_;
  uint64_t events_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace eacgm
