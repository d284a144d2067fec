#include "layers/nccl/collectives.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace eacgm {
namespace {

int64_t median_of(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// log10 of P(X >= k) for X ~ Binomial(n, p): how unlikely it is that a rank
// is last k times out of n if the arrival order were random.
double log10_binomial_tail(uint64_t n, uint64_t k, double p) {
  if (k == 0) return 0.0;
  double total = 0.0;
  for (uint64_t i = k; i <= n; ++i) {
    const double log_term = std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) +
                            i * std::log(p) + (n - i) * std::log1p(-p);
    const double term = std::exp(log_term);
    total += term;
    // Past the mode the terms only shrink; once one is below half an ulp of
    // the total, it and every later one round away: the sum is final. This
    // runs on every check, and n can be tens of thousands.
    if (static_cast<double>(i) >= (n + 1.0) * p && term < total * 0x1p-54) break;
  }
  return total > 0 ? std::log10(total) : -300.0;
}

// nccl-tests' bus bandwidth factors: the bytes each rank moves over its
// links per byte of the operation.
double bus_factor(std::string_view name, int n) {
  if (n <= 1) return 0.0;
  if (name == "ncclAllReduce") return 2.0 * (n - 1) / n;
  if (name == "ncclAllGather" || name == "ncclReduceScatter") return 1.0 * (n - 1);
  return 1.0;  // broadcast, reduce
}

std::string hex16(uint64_t a, uint64_t b) { return fmt::format("{:016x}{:016x}", a, b); }

// Per rank, at most this many ends and arrivals wait for the alignment.
constexpr size_t kMaxUnaligned = 4096;
// Consecutive collectives that must all overlap under a rank's offset.
constexpr size_t kAlignWindow = 16;
// Offsets tried on either side of the one the nearest end suggests.
constexpr size_t kAlignSlack = 2;

}  // namespace

void CollectiveTracker::Recent::add(int64_t lateness, uint64_t ts_ns, bool last_in,
                                    size_t capacity) {
  capacity = std::max<size_t>(capacity, 1);
  if (lateness_ns.size() < capacity) {
    lateness_ns.push_back(lateness);
    arrival_ns.push_back(ts_ns);
    was_last.push_back(last_in);
    if (lateness_ns.size() == capacity) {  // full: no room to spare from the vectors' doubling
      lateness_ns.shrink_to_fit();
      arrival_ns.shrink_to_fit();
      was_last.shrink_to_fit();
    }
  } else {
    if (was_last[next]) --last;
    lateness_ns[next] = lateness;
    arrival_ns[next] = ts_ns;
    was_last[next] = last_in;
    next = (next + 1) % lateness_ns.size();
  }
  if (last_in) ++last;
}

std::vector<int64_t> CollectiveTracker::Recent::latest_lateness(size_t n, bool absolute) const {
  std::vector<int64_t> out;
  out.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t l = lateness_ns[back(k)];
    out.push_back(absolute ? std::abs(l) : l);
  }
  return out;
}

CollectiveTracker::Comm* CollectiveTracker::comm_of(const CallRecord& call,
                                                    const ProcessInfo* process) {
  const uint64_t handle = call.raw.word(call.spec->comm_slot);
  auto it = comms_.find({call.pid, handle});
  if (it != comms_.end()) return &it->second;
  // A communicator created before we attached: if the launcher told the
  // process its rank and world size, assume the one world communicator.
  if (process && process->rank && process->world_size) {
    Comm comm{.id = std::string(kAssumedWorldComm),
              .rank = *process->rank,
              .nranks = *process->world_size,
              .next_seq = 0,
              .assumed = true};
    return &comms_.emplace(CommKey{call.pid, handle}, comm).first->second;
  }
  return nullptr;
}

uint64_t CollectiveTracker::call_number(const CallRecord& call, const CommKey& key, Comm& comm,
                                        bool* at_begin) {
  auto [it, first] = threads_.try_emplace({call.pid, call.tid});
  ThreadCursor& t = it->second;
  *at_begin = false;
  if (!first && call.finished && t.open_local && t.comm == key && t.announced == call.announced &&
      t.open_start_ns == call.start_ns) {
    *at_begin = true;
    return *std::exchange(t.open_local, std::nullopt);
  }
  if (!first && t.comm != key) t.one_comm = false;
  // Calls the thread made between its previous one and this, of which no event arrived.
  if (!first && t.one_comm && call.announced > t.announced + 1) {
    comm.next_seq += call.announced - t.announced - 1;
  }
  const uint64_t local = ++comm.next_seq;
  t.announced = call.announced;
  t.comm = key;
  t.open_local = call.finished ? std::nullopt : std::optional<uint64_t>(local);
  t.open_start_ns = call.start_ns;
  return local;
}

std::optional<CollectiveRef> CollectiveTracker::enter(const CallRecord& call, const Comm& comm,
                                                      uint64_t local) {
  uint64_t seq = local;
  if (comm.assumed) {
    WorldRank& w = world_[comm.rank];
    if (!world_aligned_) {
      w.pid = call.pid;
      w.nranks = comm.nranks;
      if (w.begins.size() < kMaxUnaligned) {
        w.begins.push_back({local, call.start_ns, std::string(call.name())});
      }
      return std::nullopt;
    }
    if (!w.offset || static_cast<int64_t>(local) + *w.offset < 1) return std::nullopt;
    seq = static_cast<uint64_t>(static_cast<int64_t>(local) + *w.offset);
  }
  arrive(comm.id, comm.rank, comm.nranks, seq, call.start_ns, call.pid, call.name());
  return CollectiveRef{comm.id, seq, comm.rank, comm.nranks};
}

std::optional<CollectiveRef> CollectiveTracker::on_begin(const CallRecord& call,
                                                         const ProcessInfo* process) {
  if (call.spec->role != CallRole::kCollective) return std::nullopt;
  Comm* comm = comm_of(call, process);
  if (!comm) return std::nullopt;
  bool at_begin = false;
  const uint64_t local =
      call_number(call, {call.pid, call.raw.word(call.spec->comm_slot)}, *comm, &at_begin);
  return enter(call, *comm, local);
}

void CollectiveTracker::arrive(const std::string& comm_id, int rank, int nranks, uint64_t seq,
                               uint64_t ts_ns, uint32_t pid, std::string_view name) {
  RankStats& stats = ranks_[{comm_id, rank}];
  stats.pid = pid;
  stats.comm_id = comm_id;
  auto it = pending_.find({comm_id, seq});
  if (it == pending_.end()) {
    size_t& waiting = pending_per_comm_[comm_id];
    if (waiting >= std::max<size_t>(options_.max_pending_per_comm, 1)) {
      // Some rank is missing from every one of them (untraced, or gone):
      // the oldest has been reported as a hang by now; give up on it.
      auto oldest = pending_.lower_bound({comm_id, 0});
      if (seq < oldest->first.second) return;  // older still: given up on already
      erase_pending(oldest);
    }
    it = pending_.try_emplace({comm_id, seq}).first;
    ++pending_per_comm_[comm_id];
  }
  Pending& pending = it->second;
  if (pending.arrivals.empty()) {
    pending.name = std::string(name);
    pending.nranks = nranks;
    pending.first_ns = ts_ns;
  }
  pending.first_ns = std::min(pending.first_ns, ts_ns);
  pending.arrivals[rank] = Arrival{ts_ns, pid};
  if (static_cast<int>(pending.arrivals.size()) == pending.nranks) {
    resolve_hang(comm_id, seq, ts_ns);
    // (A rank that has finished it already, seen before the last rank's entry, means it moved.)
    bool finished = false;
    for (auto r = ranks_.lower_bound({comm_id, std::numeric_limits<int>::min()});
         r != ranks_.end() && r->first.first == comm_id; ++r) {
      finished |= r->second.last_completed && r->second.last_completed->first >= seq;
    }
    InFlight& flight = in_flight_[comm_id];
    if (finished) {
      if (flight.pids.empty()) in_flight_.erase(comm_id);
    } else if (seq > flight.seq) {
      flight = InFlight{.seq = seq, .name = pending.name, .all_in_ns = 0, .pids = {}};
      for (const auto& [r, arrival] : pending.arrivals) {
        flight.all_in_ns = std::max(flight.all_in_ns, arrival.ts_ns);
        flight.pids[r] = arrival.pid;
      }
    }
    settle(comm_id, seq, pending);
    erase_pending(it);
  }
}

CollectiveTracker::PendingMap::iterator CollectiveTracker::erase_pending(PendingMap::iterator it) {
  auto count = pending_per_comm_.find(it->first.first);
  if (count != pending_per_comm_.end() && --count->second == 0) pending_per_comm_.erase(count);
  return pending_.erase(it);
}

void CollectiveTracker::align_world() {
  if (world_aligned_ || world_.empty()) return;
  const int nranks = world_.begin()->second.nranks;
  if (nranks < 2 || static_cast<int>(world_.size()) < nranks) return;
  // The reference: the rank whose first seen collective ended last. Every
  // other rank has finished that collective too, and has seen it.
  int ref = -1;
  for (const auto& [rank, w] : world_) {
    if (w.ends.empty()) return;
    if (ref < 0 || w.ends.front().end_ns > world_[ref].ends.front().end_ns) ref = rank;
  }
  const std::vector<WorldRank::Span>& anchor = world_[ref].ends;
  if (anchor.size() < kAlignWindow) return;
  const auto overlap = [](const WorldRank::Span& a, const WorldRank::Span& b) {
    return a.start_ns <= b.end_ns && b.start_ns <= a.end_ns;
  };
  std::map<int, size_t> first;  // per rank: its call of the reference's first collective
  for (const auto& [rank, w] : world_) {
    if (rank == ref) {
      first[rank] = 0;
      continue;
    }
    const uint64_t t = anchor.front().end_ns;
    const auto gap = [t](const WorldRank::Span& s) {
      return s.end_ns > t ? s.end_ns - t : t - s.end_ns;
    };
    size_t nearest = 0;
    for (size_t j = 1; j < w.ends.size(); ++j) {
      if (gap(w.ends[j]) < gap(w.ends[nearest])) nearest = j;
    }
    // Wait for a full window after every candidate.
    if (w.ends.size() < nearest + kAlignSlack + kAlignWindow) return;
    size_t best = nearest, best_score = 0;
    const size_t lo = nearest > kAlignSlack ? nearest - kAlignSlack : 0;
    for (size_t d = lo; d <= nearest + kAlignSlack; ++d) {
      size_t score = 0;
      for (size_t k = 0; k < kAlignWindow; ++k) score += overlap(w.ends[d + k], anchor[k]) ? 1 : 0;
      const auto distance = [nearest](size_t x) { return x > nearest ? x - nearest : nearest - x; };
      if (score > best_score || (score == best_score && distance(d) < distance(best))) {
        best = d;
        best_score = score;
      }
    }
    first[rank] = best;
  }
  for (auto& [rank, w] : world_) {
    // The reference's first collective is this rank's end number `first`: sequence 1.
    w.offset = 1 - static_cast<int64_t>(w.ends[first[rank]].local);
  }
  world_aligned_ = true;
  const std::string id(kAssumedWorldComm);
  for (auto& [rank, w] : world_) {
    for (const WorldRank::Begin& b : w.begins) {
      const int64_t seq = static_cast<int64_t>(b.local) + *w.offset;
      if (seq >= 1) arrive(id, rank, w.nranks, static_cast<uint64_t>(seq), b.ts_ns, w.pid, b.name);
    }
    const int64_t completed = static_cast<int64_t>(w.ends.back().local) + *w.offset;
    if (completed >= 1) {
      RankStats& stats = ranks_[{id, rank}];
      stats.pid = w.pid;
      stats.comm_id = id;
      std::string name;
      for (const WorldRank::Begin& b : w.begins) {
        if (static_cast<int64_t>(b.local) + *w.offset == completed) name = b.name;
      }
      stats.last_completed = {static_cast<uint64_t>(completed), name};
    }
    w.begins.clear();
    w.begins.shrink_to_fit();
    w.ends.clear();
    w.ends.shrink_to_fit();
  }
}

void CollectiveTracker::resolve_hang(const std::string& comm_id, uint64_t seq, uint64_t now_ns) {
  auto open = hang_reported_.find(comm_id);
  if (open == hang_reported_.end() || open->second.seq > seq) return;
  const uint64_t since = open->second.since_ns;
  resolutions_.push_back({comm_id, open->second.seq, now_ns > since ? (now_ns - since) / 1e9 : 0});
  hang_reported_.erase(open);
}

void CollectiveTracker::settle(const std::string& comm_id, uint64_t seq, Pending& pending) {
  (void)seq;
  std::vector<int64_t> times;
  for (const auto& [rank, a] : pending.arrivals) times.push_back(static_cast<int64_t>(a.ts_ns));
  const int64_t median = median_of(times);
  int last_rank = -1;
  uint64_t last_ts = 0;
  for (const auto& [rank, a] : pending.arrivals) {
    if (last_rank < 0 || a.ts_ns > last_ts) {
      last_rank = rank;
      last_ts = a.ts_ns;
    }
  }
  // A rank eacgm stopped since its previous arrival came late for eacgm: this collective says
  // nothing about who is slow (nor does the median it moved), so none of its ranks is judged.
  bool paused = false;
  for (const auto& [rank, a] : pending.arrivals) {
    auto stats = ranks_.find({comm_id, rank});
    const uint64_t previous = stats == ranks_.end() ? 0 : stats->second.arrived_ns;
    paused = paused || paused_between(a.pid, previous, a.ts_ns);
  }
  for (const auto& [rank, a] : pending.arrivals) {
    RankStats& stats = ranks_[{comm_id, rank}];
    ++stats.collectives;
    stats.arrived_ns = a.ts_ns;
    if (paused) {
      ++stats.paused;
      continue;
    }
    const int64_t lateness = static_cast<int64_t>(a.ts_ns) - median;
    stats.recent.add(lateness, a.ts_ns, rank == last_rank, options_.straggler_window);
    stats.lateness_sum_ns += static_cast<double>(lateness);
    if (rank == last_rank) ++stats.last;
  }
}

std::optional<CollectiveRef> CollectiveTracker::on_end(const CallRecord& call,
                                                       const ProcessInfo* process) {
  const ProbeSpec& spec = *call.spec;
  switch (spec.role) {
    case CallRole::kCommInit: {
      if (call.failed() || call.raw.out_value == 0) return std::nullopt;
      // The first 16 bytes of the ncclUniqueId: the two stack words.
      Comm comm{.id = hex16(call.raw.args[kStack0], call.raw.args[kStack1]),
                .rank = static_cast<int32_t>(call.raw.word(spec.rank_slot)),
                .nranks = static_cast<int32_t>(call.raw.word(spec.nranks_slot)),
                .next_seq = 0};
      comms_[{call.pid, call.raw.out_value}] = comm;
      return std::nullopt;
    }
    case CallRole::kCommDestroy:
      comms_.erase({call.pid, call.raw.word(spec.comm_slot)});
      return std::nullopt;
    case CallRole::kCollective:
      break;
    default:
      return std::nullopt;
  }
  Comm* found = comm_of(call, process);
  if (!found) return std::nullopt;
  Comm& comm = *found;
  bool at_begin = false;
  const uint64_t local =
      call_number(call, {call.pid, call.raw.word(spec.comm_slot)}, comm, &at_begin);
  // Its begin event was lost: the end carries the start, so the rank's arrival is still known.
  if (!at_begin) enter(call, comm, local);
  uint64_t seq = local;
  if (comm.assumed) {
    WorldRank& w = world_[comm.rank];
    if (!world_aligned_) {
      w.pid = call.pid;
      w.nranks = comm.nranks;
      if (w.ends.size() < kMaxUnaligned) {
        w.ends.push_back({local, call.start_ns, call.start_ns + call.duration_ns});
      }
      align_world();
    }
    // Ends before the anchor, or before the alignment is known, are not
    // numbered: a wrong number would link different collectives.
    if (!world_aligned_ || !w.offset || static_cast<int64_t>(local) + *w.offset < 1) {
      return std::nullopt;
    }
    seq = static_cast<uint64_t>(static_cast<int64_t>(local) + *w.offset);
  }
  const CollectiveRef ref{comm.id, seq, comm.rank, comm.nranks};
  complete(ref, call.pid, call.name(), call.start_ns + call.duration_ns, call.duration_ns,
           call.failed() ? 0 : call.bytes(), call.failed());
  return ref;
}

void CollectiveTracker::complete(const CollectiveRef& ref, uint32_t pid, std::string_view name,
                                 uint64_t end_ns, uint64_t duration_ns, uint64_t bytes,
                                 bool failed) {
  RankStats& stats = ranks_[{ref.comm_id, ref.rank}];
  stats.pid = pid;
  stats.comm_id = ref.comm_id;
  stats.last_completed = {ref.seq, std::string(name)};
  // One rank finished it: whatever holds the others, the collective itself moved.
  if (auto flight = in_flight_.find(ref.comm_id);
      flight != in_flight_.end() && flight->second.seq <= ref.seq) {
    in_flight_.erase(flight);
  }
  resolve_hang(ref.comm_id, ref.seq, end_ns);
  if (!failed) {
    stats.busy_ns += duration_ns;
    stats.bus_bytes +=
        static_cast<uint64_t>(static_cast<double>(bytes) * bus_factor(name, ref.nranks));
  }
}

void CollectiveTracker::replay_begin(const CollectiveRef& ref, uint32_t pid, std::string_view name,
                                     uint64_t start_ns) {
  arrive(ref.comm_id, ref.rank, ref.nranks, ref.seq, start_ns, pid, name);
}

void CollectiveTracker::replay_end(const CollectiveRef& ref, uint32_t pid, std::string_view name,
                                   uint64_t end_ns, uint64_t duration_ns, uint64_t bytes,
                                   bool failed) {
  complete(ref, pid, name, end_ns, duration_ns, bytes, failed);
}

std::optional<Anomaly> CollectiveTracker::straggler_in(const std::string& comm_id) {
  int nranks = 0;
  for (const auto& [key, stats] : ranks_) {
    if (key.first == comm_id) ++nranks;
  }
  if (nranks < 2) return std::nullopt;
  for (const auto& [key, stats] : ranks_) {
    const size_t kept = stats.recent.size();
    if (key.first != comm_id || kept < options_.straggler_min_collectives) continue;
    // The recent windows, shortest first, then everything kept (the whole
    // session, when it is shorter than straggler_window).
    const size_t shortest = std::max<size_t>(options_.straggler_min_window, 1);
    for (size_t n = shortest;; n *= 4) {
      const size_t judged = std::min(n, kept);
      if (auto a = straggler_over(comm_id, key.second, stats, judged, nranks)) return a;
      if (judged == kept) break;
    }
  }
  return std::nullopt;
}

std::optional<Anomaly> CollectiveTracker::straggler_over(const std::string& comm_id, int rank,
                                                         const RankStats& stats, size_t n,
                                                         int nranks) {
  const Recent& recent = stats.recent;
  uint64_t last = 0;
  if (n == recent.size()) {
    last = recent.last;
  } else {
    for (size_t k = 0; k < n; ++k) last += recent.was_last[recent.back(k)] ? 1 : 0;
  }
  const double share = static_cast<double>(last) / static_cast<double>(n);
  if (share < options_.straggler_min_share) return std::nullopt;
  const double log10_p = log10_binomial_tail(n, last, 1.0 / nranks);
  if (log10_p > std::log10(options_.straggler_max_p)) return std::nullopt;
  const int64_t lateness = median_of(recent.latest_lateness(n, false));
  // The other ranks over the same collectives (each rank's last n: every
  // rank takes part in every collective of the communicator).
  std::vector<int64_t> others;
  for (auto r = ranks_.lower_bound({comm_id, std::numeric_limits<int>::min()});
       r != ranks_.end() && r->first.first == comm_id; ++r) {
    if (r->first.second == rank) continue;
    const Recent& other = r->second.recent;
    std::vector<int64_t> l = other.latest_lateness(std::min(n, other.size()), true);
    others.insert(others.end(), l.begin(), l.end());
  }
  const int64_t typical = median_of(others);
  if (lateness < static_cast<int64_t>(options_.straggler_min_lateness_ns) ||
      static_cast<double>(lateness) < options_.straggler_min_ratio * static_cast<double>(typical)) {
    return std::nullopt;
  }
  // Since when: the oldest collective of the window this rank was last in by
  // a clear margin.
  uint64_t started = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = recent.back(k);
    if (recent.was_last[i] &&
        recent.lateness_ns[i] >= static_cast<int64_t>(options_.straggler_min_lateness_ns)) {
      started = recent.arrival_ns[i];
    }
  }
  if (started == 0) started = session_start_ns_;
  Anomaly a;
  a.kind = "straggler";
  a.layer = Layer::kNccl;
  a.pid = stats.pid;
  a.rank = rank;
  a.t_s = started > session_start_ns_ ? (started - session_start_ns_) / 1e9 : 0.0;
  a.score = log10_p;
  a.evidence = {{"communicator", comm_id},
                {"collectives", n},
                {"collectives_seen", stats.collectives},
                {"arrived_last", last},
                {"median_lateness_ns", lateness},
                {"other_ranks_median_lateness_ns", typical},
                {"log10_p_random_order", log10_p}};
  a.message = fmt::format(
      "rank {} (pid {}) arrives last at {} of its last {} collectives, {:.1f} ms after the median "
      "rank",
      rank, stats.pid, last, n, lateness / 1e6);
  a.suggestion =
      "the other ranks wait for this one: look at what it does between collectives (data "
      "loading, a slower GPU or host, CPU contention), or at its link if its collectives are "
      "slow too (NCCL_DEBUG=INFO, NCCL_ALGO)";
  return a;
}

std::map<std::string, uint64_t> CollectiveTracker::newest_completed() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [key, stats] : ranks_) {
    if (!stats.last_completed) continue;
    uint64_t& newest = out[key.first];
    newest = std::max(newest, stats.last_completed->first);
  }
  return out;
}

std::vector<Anomaly> CollectiveTracker::check(uint64_t now_ns) {
  std::vector<Anomaly> found;
  const std::map<std::string, uint64_t> completed = newest_completed();
  for (auto entry = pending_.begin(); entry != pending_.end();) {
    const auto& [key, pending] = *entry;
    const auto& [comm_id, seq] = key;
    if (now_ns < pending.first_ns + options_.hang_timeout_ns) {
      ++entry;
      continue;
    }
    // A rank returned from this collective, or a later one, so every rank entered it: the ranks
    // this tracker never saw arrive are traced elsewhere (another node's eacgm), not missing.
    // Long past the time any rank would still arrive, it waits for no one: let it go.
    if (const auto c = completed.find(comm_id); c != completed.end() && c->second >= seq) {
      entry = erase_pending(entry);
      continue;
    }
    ++entry;
    if (hang_reported_.contains(comm_id)) continue;
    std::vector<int> arrived, missing;
    std::vector<uint32_t> waiting_pids;
    for (int r = 0; r < pending.nranks; ++r) {
      (pending.arrivals.contains(r) ? arrived : missing).push_back(r);
      if (auto it = pending.arrivals.find(r); it != pending.arrivals.end()) {
        waiting_pids.push_back(it->second.pid);
      }
    }
    nlohmann::json last_completed = nlohmann::json::object();
    for (const auto& [rk, stats] : ranks_) {
      if (rk.first != comm_id) continue;
      last_completed[std::to_string(rk.second)] =
          stats.last_completed ? nlohmann::json{{"seq", stats.last_completed->first},
                                                {"collective", stats.last_completed->second}}
                               : nlohmann::json(nullptr);
    }
    Anomaly a;
    a.kind = "hang";
    a.layer = Layer::kNccl;
    if (!missing.empty()) {
      a.rank = missing.front();
      if (auto it = ranks_.find({comm_id, missing.front()}); it != ranks_.end())
        a.pid = it->second.pid;
    }
    a.t_s = pending.first_ns > session_start_ns_ ? (pending.first_ns - session_start_ns_) / 1e9 : 0;
    a.score = -std::log10(1.0 + (now_ns - pending.first_ns) / 1e9);
    a.evidence = {{"communicator", comm_id},      {"seq", seq},
                  {"collective", pending.name},   {"waiting_ranks", arrived},
                  {"missing_ranks", missing},     {"waiting_s", (now_ns - pending.first_ns) / 1e9},
                  {"waiting_pids", waiting_pids}, {"last_completed", last_completed}};
    a.message = fmt::format("{} #{} on communicator {}: ranks {} have waited {:.1f} s for ranks {}",
                            pending.name, seq, comm_id.substr(0, 8), fmt::join(arrived, ","),
                            (now_ns - pending.first_ns) / 1e9, fmt::join(missing, ","));
    a.suggestion =
        "the missing ranks never entered this collective: inspect them (py-spy dump, gdb) for a "
        "stuck data loader, a deadlock, or a different code path; NCCL would only time out after "
        "its watchdog (often 30 minutes)";
    hang_reported_[comm_id] = {seq, pending.first_ns};
    found.push_back(std::move(a));
  }
  for (const auto& [comm_id, flight] : in_flight_) {
    if (hang_reported_.contains(comm_id) || flight.pids.empty()) continue;
    if (now_ns < flight.all_in_ns + options_.hang_timeout_ns) continue;
    std::vector<int> ranks;
    std::vector<uint32_t> pids;  // every rank's process is stuck in it
    for (const auto& [r, pid] : flight.pids) {
      ranks.push_back(r);
      pids.push_back(pid);
    }
    const double waiting_s = (now_ns - flight.all_in_ns) / 1e9;
    Anomaly a;
    a.kind = "hang";
    a.layer = Layer::kNccl;
    a.rank = ranks.front();
    a.pid = flight.pids.begin()->second;
    a.t_s = flight.all_in_ns > session_start_ns_ ? (flight.all_in_ns - session_start_ns_) / 1e9 : 0;
    a.score = -std::log10(1.0 + waiting_s);
    a.evidence = {{"communicator", comm_id},   {"seq", flight.seq},
                  {"collective", flight.name}, {"waiting_ranks", ranks},
                  {"waiting_pids", pids},      {"missing_ranks", nlohmann::json::array()},
                  {"inside_collective", true}, {"waiting_s", waiting_s}};
    a.message = fmt::format(
        "{} #{} on communicator {}: every rank ({}) entered it {:.1f} s ago and none has "
        "returned",
        flight.name, flight.seq, comm_id.substr(0, 8), fmt::join(ranks, ","), waiting_s);
    a.suggestion =
        "the collective itself is stuck, not a rank: check the interconnect (NCCL_DEBUG=INFO, "
        "InfiniBand/NVLink counters, a peer's network link) and the GPUs (an XID, a hung "
        "kernel); NCCL would only time out after its watchdog";
    hang_reported_[comm_id] = {flight.seq, flight.all_in_ns};
    found.push_back(std::move(a));
  }
  std::set<std::string> comm_ids;
  for (const auto& [key, stats] : ranks_) comm_ids.insert(key.first);
  for (const std::string& id : comm_ids) {
    if (straggler_reported_.contains(id)) continue;
    if (auto a = straggler_in(id)) {
      straggler_reported_.insert(id);
      found.push_back(std::move(*a));
    }
  }
  return found;
}

nlohmann::json CollectiveTracker::rank_figures() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, stats] : ranks_) {
    // The mean is over every collective; the median over the recent ones
    // (every one, in a session shorter than the window).
    double mean = stats.lateness_sum_ns;
    if (const uint64_t judged = stats.collectives - stats.paused)
      mean /= static_cast<double>(judged);
    nlohmann::json r = {{"communicator", key.first},
                        {"rank", key.second},
                        {"pid", stats.pid},
                        {"collectives", stats.collectives},
                        {"arrived_last", stats.last},
                        {"not_judged_after_eacgm_paused", stats.paused},
                        {"mean_lateness_ns", static_cast<int64_t>(mean)},
                        {"median_lateness_ns", median_of(stats.recent.lateness_ns)}};
    r["bus_bandwidth_gbps"] =
        stats.busy_ns ? nlohmann::json(static_cast<double>(stats.bus_bytes) / stats.busy_ns)
                      : nlohmann::json(nullptr);
    out.push_back(std::move(r));
  }
  return out;
}

void CollectiveTracker::note_pause(uint32_t pid, uint64_t from_ns, uint64_t to_ns) {
  auto& pauses = pauses_[pid];
  pauses.emplace_back(from_ns, to_ns);
  if (pauses.size() > kPausesKept) pauses.pop_front();
}

bool CollectiveTracker::paused_between(uint32_t pid, uint64_t after_ns, uint64_t before_ns) const {
  auto it = pauses_.find(pid);
  if (it == pauses_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [&](const auto& pause) {
    return pause.second > after_ns && pause.first < before_ns;
  });
}

void CollectiveTracker::forget_process(uint32_t pid) {
  pauses_.erase(pid);
  std::erase_if(threads_, [pid](const auto& entry) { return entry.first.first == pid; });
  std::erase_if(comms_, [pid](const auto& entry) { return entry.first.first == pid; });
  std::erase_if(ranks_, [pid](const auto& entry) { return entry.second.pid == pid; });
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::erase_if(it->second.arrivals,
                  [pid](const auto& entry) { return entry.second.pid == pid; });
    it = it->second.arrivals.empty() ? erase_pending(it) : std::next(it);
  }
  // The assumed world is one per tracker: once none of its ranks is left,
  // a later job's ranks must be aligned among themselves, not on the old ones.
  if (std::ranges::none_of(comms_, [](const auto& entry) { return entry.second.assumed; })) {
    world_.clear();
    world_aligned_ = false;
  }
  // A communicator no rank and no waiting collective refers to is over.
  const auto over = [this](const std::string& id) {
    const auto rank = ranks_.lower_bound({id, std::numeric_limits<int>::min()});
    const bool ranks_left = rank != ranks_.end() && rank->first.first == id;
    return !ranks_left && !pending_per_comm_.contains(id);
  };
  std::erase_if(hang_reported_, [&over](const auto& entry) { return over(entry.first); });
  std::erase_if(straggler_reported_, over);
  for (auto& [id, flight] : in_flight_)
    std::erase_if(flight.pids, [pid](const auto& e) { return e.second == pid; });
  std::erase_if(in_flight_, [](const auto& entry) { return entry.second.pids.empty(); });
}

nlohmann::json CollectiveTracker::open_collectives() const {
  nlohmann::json out = nlohmann::json::array();
  const std::map<std::string, uint64_t> completed = newest_completed();
  const auto add = [&out](const std::string& comm, uint64_t seq, const std::string& name, int rank,
                          int nranks, uint32_t pid, uint64_t entered_ns) {
    out.push_back({{"communicator", comm},
                   {"seq", seq},
                   {"collective", name},
                   {"rank", rank},
                   {"nranks", nranks},
                   {"pid", pid},
                   {"entered_ns", entered_ns}});
  };
  for (const auto& [key, pending] : pending_) {
    if (key.first == kAssumedWorldComm) continue;
    // Returned on some rank (check() lets such collectives go only after the hang timeout).
    if (const auto c = completed.find(key.first); c != completed.end() && c->second >= key.second) {
      continue;
    }
    for (const auto& [rank, a] : pending.arrivals) {
      add(key.first, key.second, pending.name, rank, pending.nranks, a.pid, a.ts_ns);
    }
  }
  for (const auto& [comm, flight] : in_flight_) {
    if (comm == kAssumedWorldComm) continue;
    // Every rank is inside: when each entered is no longer kept, only when the last one did.
    for (const auto& [rank, pid] : flight.pids) {
      add(comm, flight.seq, flight.name, rank, static_cast<int>(flight.pids.size()), pid,
          flight.all_in_ns);
    }
  }
  return out;
}

CollectiveTracker::Footprint CollectiveTracker::footprint() const {
  Footprint f;
  f.communicators = comms_.size();
  f.ranks = ranks_.size();
  for (const auto& [key, stats] : ranks_) f.lateness_samples += stats.recent.size();
  f.pending = pending_.size();
  f.in_flight = in_flight_.size();
  f.world_ranks = world_.size();
  return f;
}

}  // namespace eacgm
