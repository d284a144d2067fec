// Window-level anomaly detection, live (Recorder::tick) and offline (eacgm analyze): calls become
// one-second windows per worker (features.h); each worker's first windows after its setup second
// are its warm-up, from which its baseline is learned (detector_model.h), unless a model learned
// from healthy runs supplies it; every later window is scored by three detectors:
//   - "latency": one API's median duration in the window far above its baseline median (at least
//     min_ratio times, and beyond k robust deviations), in `persist` consecutive windows;
//   - "throughput": calls per second far below the baseline (by more than min_drop, and beyond k
//     robust deviations), in `persist` consecutive windows;
//   - "gmm": the window's log-likelihood under the worker's mixture below the calibrated threshold
//     in `persist` consecutive windows, explained by the features that deviate most.
// Each anomaly names the worker (pid, rank), the API where there is one, the time window, the
// deviating features with their z-scores, and a suggested action. An episode is reported once; the
// detector re-arms after `persist` normal windows.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "analysis/detector_model.h"
#include "analysis/features.h"
#include "session/session.h"

namespace eacgm {

struct AnalyzerOptions {
  uint64_t window_ns = 1'000'000'000;
  size_t warmup_windows = 10;  // scored windows start after these (and after the setup second)
  int persist = 2;             // consecutive anomalous windows before a report
  double latency_min_ratio = 2.0;
  double latency_mad_k = 6.0;
  double throughput_min_drop = 0.5;
  double throughput_mad_k = 6.0;
  // A window the GMM finds unlikely is reported only if some feature is also worse than the
  // baseline by this many of the training data's standard deviations: a job that got faster,
  // or one that moved within its own baseline's spread, is nothing to act on.
  double gmm_min_worse_z = 3.0;
  // Work begins: a window with at least work_min_call_rate calls per second and
  // work_rate_ratio times the warm-up's median rate starts the warm-up again from itself, and
  // ends a baseline learned from a warm-up this idle. A real job's first seconds are its
  // imports and set-up (`import torch` takes seconds); a baseline learned from them would call
  // the training that follows an anomaly. A busy baseline is never dropped this way.
  double work_min_call_rate = 50;
  double work_rate_ratio = 10;
  bool latency = true, throughput = true, gmm = true;
  BaselineOptions baseline;
};

// What to do about an API of `layer` that got slower (robust_z: how far, in robust deviations).
std::string latency_suggestion(Layer layer, double robust_z);

// Who a process is, for naming it and for finding its baseline in a model.
struct EntityInfo {
  std::optional<int> rank;
  std::string comm;
  std::string role;  // process_role(): a worker's baseline is never its parent's
};
// "rank:R" when the process has a rank, else "comm:NAME"; "worker:" before either for a worker
// (a DataLoader worker of rank 0 is "worker:rank:0").
std::string entity_key(const EntityInfo& info);

class WindowAnalyzer {
 public:
  using Lookup = std::function<EntityInfo(uint32_t pid)>;

  // With `model` (not owned), baselines come from it and no warm-up is needed.
  explicit WindowAnalyzer(AnalyzerOptions options = {}, const DetectorModel* model = nullptr);

  void set_lookup(Lookup lookup) { lookup_ = std::move(lookup); }
  void set_session_start(uint64_t start_ns) { session_start_ns_ = start_ns; }
  void on_call(const CallSample& call) {
    if (call.pid != last_pid_) {  // calls come in runs of one process: one lookup a run
      seen_.insert(call.pid);
      last_pid_ = call.pid;
    }
    windows_.add(call);
  }
  void end_process(uint32_t pid, uint64_t end_ns) { windows_.end_process(pid, end_ns); }
  // Drops everything kept about a process (a long-running agent must not keep the dead).
  void forget(uint32_t pid) {
    windows_.forget(pid);
    entities_.erase(pid);
    seen_.erase(pid);
    last_pid_ = 0;
  }
  // Windows that overlap [from_ns, to_ns) are neither learned from nor scored: not all of their
  // calls were traced (--overhead-budget's off-phases). An interval under way ends at UINT64_MAX
  // until end_untraced() closes it.
  void add_untraced(uint64_t from_ns, uint64_t to_ns = UINT64_MAX) {
    untraced_.emplace_back(from_ns, to_ns);
  }
  void end_untraced(uint64_t at_ns) {
    if (!untraced_.empty() && untraced_.back().second == UINT64_MAX)
      untraced_.back().second = at_ns;
  }
  // Anomalies clear from the windows complete by `now_ns`.
  std::vector<Anomaly> advance(uint64_t now_ns);
  // The session ended: the remaining complete windows.
  std::vector<Anomaly> finish(uint64_t end_ns);

  // What each worker got: windows, warm-up, baseline source (for `eacgm analyze`'s report).
  nlohmann::json report() const;
  // The processes with calls that no baseline judged: they ended before their warm-up did, the
  // warm-up could not give one, or the model has none for them.
  std::set<uint32_t> unjudged() const;

 private:
  struct Episode {
    int hits = 0, misses = 0;
    bool active = false;
    uint64_t first_hit_ns = 0;
  };
  struct Entity {
    EntityInfo info;
    std::string key;
    std::vector<Window> warmup;
    std::optional<EntityBaseline> learned;
    const EntityBaseline* baseline = nullptr;
    bool gave_up = false;  // the warm-up could not give a baseline
    size_t windows = 0, scored = 0, untraced = 0;
    size_t warmup_restarts = 0;  // work began after an idle start (AnalyzerOptions)
    Episode gmm, throughput;
    std::map<std::string, Episode> latency;
    // The layer most of its calls belong to (by the last window with calls): what a throughput
    // or GMM anomaly is about, and which advice fits.
    Layer main_layer = Layer::kCuda;
  };

  std::vector<Anomaly> process(std::vector<Window> windows);
  bool overlaps_untraced(const Window& w) const;
  // True when `w` is where the work of `e` begins (AnalyzerOptions::work_min_call_rate).
  bool work_begins(const Entity& e, const Window& w) const;
  void score(Entity& e, const Window& w, std::vector<Anomaly>& out);
  // Counts a hit or a miss; true when this window starts a reportable episode.
  bool step(Episode& ep, bool hit, const Window& w) const;
  Anomaly base_anomaly(const Entity& e, uint32_t pid, const Episode& ep, const Window& w) const;

  AnalyzerOptions options_;
  const DetectorModel* model_;
  WindowAggregator windows_;
  Lookup lookup_;
  uint64_t session_start_ns_ = 0;
  std::map<uint32_t, Entity> entities_;
  std::set<uint32_t> seen_;  // every process with a call, windowed or not
  uint32_t last_pid_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> untraced_;  // in order, [from, to)
};

}  // namespace eacgm
