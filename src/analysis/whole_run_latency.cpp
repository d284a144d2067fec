#include "analysis/whole_run_latency.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

#include "analysis/features.h"
#include "analysis/window_analyzer.h"
#include "common/human_text.h"

namespace eacgm {
namespace {

struct ApiBaseline {
  double median_log_ns = 0;
  double allowed_excess = 0;  // log units above the median a normal call may reach
  double robust_sd = 0;
};

ApiBaseline baseline_of(const std::vector<const CallSample*>& calls, const WholeRunOptions& o) {
  std::vector<double> logs;
  logs.reserve(calls.size());
  for (const CallSample* c : calls) logs.push_back(log_ns(c->duration_ns));
  ApiBaseline b;
  b.median_log_ns = median(logs);
  b.robust_sd = 1.4826 * median_absolute_deviation(logs, b.median_log_ns);
  b.allowed_excess = std::max(std::log(o.min_ratio), o.mad_k * b.robust_sd);
  return b;
}

// A stretch of slow calls of one API, from its first slow call to its last.
struct Episode {
  std::vector<const CallSample*> slow;
  size_t normal_streak = 0;
};

class EpisodeFinder {
 public:
  EpisodeFinder(const RecordedSession& session, const WholeRunOptions& options,
                uint64_t lifetime_ns)
      : session_(session), options_(options), lifetime_ns_(lifetime_ns) {}

  void judge(std::string_view api, const std::vector<const CallSample*>& calls,
             std::vector<Anomaly>& out) {
    if (calls.size() < options_.min_api_calls) return;
    const ApiBaseline b = baseline_of(calls, options_);
    Episode ep;
    for (const CallSample* c : calls) {
      if (log_ns(c->duration_ns) - b.median_log_ns > b.allowed_excess) {
        ep.slow.push_back(c);
        ep.normal_streak = 0;
      } else if (!ep.slow.empty() && ++ep.normal_streak >= options_.gap) {
        close(api, b, ep, out);
      }
    }
    if (!ep.slow.empty()) close(api, b, ep, out);
  }

 private:
  void close(std::string_view api, const ApiBaseline& b, Episode& ep, std::vector<Anomaly>& out) {
    const double base_ns = std::expm1(b.median_log_ns);
    double added_ns = 0;
    std::vector<double> logs;
    for (const CallSample* c : ep.slow) {
      added_ns += static_cast<double>(c->duration_ns) - base_ns;
      logs.push_back(log_ns(c->duration_ns));
    }
    const double needed = std::max(static_cast<double>(options_.min_added_ns),
                                   options_.min_added_share * static_cast<double>(lifetime_ns_));
    if (ep.slow.size() >= options_.min_slow_calls && added_ns >= needed) {
      out.push_back(anomaly(api, b, ep.slow, median(std::move(logs)), added_ns));
    }
    ep = Episode{};
  }

  double seconds(uint64_t ns) const {
    return ns > session_.start_ns ? static_cast<double>(ns - session_.start_ns) / 1e9 : 0.0;
  }

  Anomaly anomaly(std::string_view api, const ApiBaseline& b,
                  const std::vector<const CallSample*>& slow, double median_log,
                  double added_ns) const {
    const CallSample& first = *slow.front();
    const auto info = session_.processes.find(first.pid);
    const double now_ns = std::expm1(median_log), base_ns = std::expm1(b.median_log_ns);
    const double excess = median_log - b.median_log_ns;
    const double robust_z = excess / std::max(b.robust_sd, 1e-3);
    const double from_s = seconds(first.start_ns), to_s = seconds(slow.back()->end_ns());
    Anomaly a;
    a.kind = "latency";
    a.layer = first.layer;
    a.pid = first.pid;
    if (info != session_.processes.end()) a.rank = info->second.rank;
    a.t_s = from_s;
    a.score = -excess;
    a.evidence["api"] = std::string(api);
    a.evidence["calls"] = slow.size();
    a.evidence["median_ns"] = now_ns;
    a.evidence["baseline_median_ns"] = base_ns;
    a.evidence["ratio"] = now_ns / std::max(base_ns, 1.0);
    a.evidence["added_ns"] = added_ns;
    a.evidence["window_s"] = {from_s, to_s};
    a.evidence["baseline"] = "whole run";
    a.evidence["features"] = nlohmann::json::array({{{"name", std::string(api) + " median log_ns"},
                                                     {"value", median_log},
                                                     {"baseline", b.median_log_ns},
                                                     {"z", robust_z}}});
    const std::string who = a.rank ? fmt::format("pid {} (rank {})", first.pid, *a.rank)
                                   : fmt::format("pid {}", first.pid);
    a.message = fmt::format(
        "{}: {} takes {} (median of {} slow calls in a row, {:.1f}-{:.1f} s, {} added), {:.1f}x "
        "its median over the whole run {} (the process ended before its warm-up: its whole run "
        "is its baseline)",
        who, api, human_ns(now_ns), slow.size(), from_s, to_s, human_ns(added_ns),
        now_ns / std::max(base_ns, 1.0), human_ns(base_ns));
    a.suggestion = latency_suggestion(a.layer, robust_z);
    return a;
  }

  const RecordedSession& session_;
  const WholeRunOptions& options_;
  uint64_t lifetime_ns_;
};

}  // namespace

std::vector<Anomaly> whole_run_latency_episodes(const RecordedSession& session,
                                                const std::set<uint32_t>& pids,
                                                const WholeRunOptions& options) {
  struct Process {
    uint64_t first_ns = UINT64_MAX, last_ns = 0;
    std::map<std::string_view, std::vector<const CallSample*>> apis;
  };
  std::map<uint32_t, Process> processes;
  for (const CallSample& c : session.calls) {
    if (!pids.contains(c.pid)) continue;
    Process& p = processes[c.pid];
    p.first_ns = std::min(p.first_ns, c.start_ns);
    p.last_ns = std::max(p.last_ns, c.end_ns());
  }
  for (const CallSample& c : session.calls) {
    // A failed call's duration says how it failed, not how fast the API is.
    if (c.failed) continue;
    const auto it = processes.find(c.pid);
    if (it == processes.end() || c.start_ns < it->second.first_ns + options.setup_ns) continue;
    it->second.apis[c.name].push_back(&c);
  }
  std::vector<Anomaly> out;
  for (auto& [pid, p] : processes) {
    EpisodeFinder finder(session, options, p.last_ns - p.first_ns);
    for (auto& [api, calls] : p.apis) {
      // Calls arrive as they end; an episode is a stretch in the order they began.
      std::stable_sort(calls.begin(), calls.end(), [](const CallSample* l, const CallSample* r) {
        return l->start_ns < r->start_ns;
      });
      finder.judge(api, calls, out);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Anomaly& a, const Anomaly& b) { return a.t_s < b.t_s; });
  return out;
}

}  // namespace eacgm
