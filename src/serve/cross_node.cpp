#include "serve/cross_node.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace eacgm {
namespace {

using GroupKey = std::pair<std::string, std::string>;  // job id, communicator

template <typename Rank>
std::map<GroupKey, std::vector<Rank>> by_communicator(const std::vector<Rank>& ranks) {
  std::map<GroupKey, std::vector<Rank>> groups;
  for (const Rank& r : ranks) groups[{r.job_id, r.comm}].push_back(r);
  for (auto& [key, group] : groups) {
    std::ranges::sort(group, [](const Rank& a, const Rank& b) { return a.rank < b.rank; });
  }
  return groups;
}

// The node all of `culprits` live on, when they are at least two and every rank of the
// communicator on that node is among them, and some rank lives elsewhere.
template <typename Rank>
std::optional<std::string> whole_node_of(const std::vector<Rank>& culprits,
                                         const std::vector<Rank>& group) {
  if (culprits.size() < 2) return std::nullopt;
  const std::string& node = culprits.front().node;
  if (!std::ranges::all_of(culprits, [&](const Rank& r) { return r.node == node; })) {
    return std::nullopt;
  }
  const auto on_node = std::ranges::count_if(group, [&](const Rank& r) { return r.node == node; });
  if (static_cast<size_t>(on_node) != culprits.size() ||
      static_cast<size_t>(on_node) == group.size()) {
    return std::nullopt;
  }
  return node;
}

// The straggler test on one slice of one communicator: the ranks below the widest gap between
// consecutive mean waits, when they are at most half, the gap is wide enough, and it dwarfs the
// spread on either side of it. Ranks by (node, rank), empty for no verdict.
std::vector<RankWait> low_group(std::vector<RankWait> ranks, const CrossNodeOptions& options) {
  std::erase_if(ranks, [&](const RankWait& r) {
    return r.collectives < options.straggler_min_collectives || !(r.mean_s >= 0);
  });
  if (ranks.size() < 2) return {};
  std::ranges::sort(ranks,
                    [](const RankWait& a, const RankWait& b) { return a.mean_s < b.mean_s; });
  size_t split = 1;
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i].mean_s - ranks[i - 1].mean_s > ranks[split].mean_s - ranks[split - 1].mean_s) {
      split = i;
    }
  }
  const double gap = ranks[split].mean_s - ranks[split - 1].mean_s;
  const double spread = std::max(ranks[split - 1].mean_s - ranks.front().mean_s,
                                 ranks.back().mean_s - ranks[split].mean_s);
  if (split > ranks.size() / 2 || gap < options.straggler_min_gap_s ||
      gap < options.straggler_gap_to_spread * spread) {
    return {};
  }
  ranks.resize(split);
  return ranks;
}

std::set<std::pair<std::string, int>> who(const std::vector<RankWait>& ranks) {
  std::set<std::pair<std::string, int>> out;
  for (const RankWait& r : ranks) out.emplace(r.node, r.rank);
  return out;
}

std::string short_comm(const std::string& comm) {
  return comm.size() > 12 ? comm.substr(0, 12) + "…" : comm;
}

std::string where(const std::string& job_id, const std::string& comm) {
  return fmt::format("{}communicator {}", job_id.empty() ? "" : fmt::format("job {}, ", job_id),
                     short_comm(comm));
}

template <typename Rank>
std::string rank_list(const std::vector<Rank>& ranks) {
  std::string out;
  for (const Rank& r : ranks) {
    out += fmt::format("{}{}", out.empty() ? "" : ", ", r.rank);
  }
  return out;
}

}  // namespace

std::vector<CrossNodeHang> find_cross_node_hangs(const std::vector<RankReport>& ranks,
                                                 const CrossNodeOptions& options) {
  std::vector<CrossNodeHang> out;
  for (const auto& [key, group] : by_communicator(ranks)) {
    CrossNodeHang hang;
    hang.job_id = key.first;
    hang.comm = key.second;
    double waited = group.front().progress_age_s;
    std::set<int> seen;
    for (const RankReport& r : group) {
      hang.nranks = std::max(hang.nranks, r.nranks);
      waited = std::min(waited, r.progress_age_s);
      seen.insert(r.rank);
    }
    // Something moved on the communicator within the timeout: not hung (yet).
    if (!(waited >= options.hang_timeout_s)) continue;
    hang.waited_s = waited;
    for (int r = 0; r < hang.nranks; ++r) {
      if (!seen.contains(r)) hang.untraced_ranks.push_back(r);
    }
    const bool anyone_inside =
        std::ranges::any_of(group, [](const RankReport& r) { return r.inside_s > 0; });
    const bool numbered =
        std::ranges::all_of(group, [](const RankReport& r) { return r.entered_seq.has_value(); });
    if (numbered) {
      // The ranks behind the furthest one never entered the collective it waits in.
      uint64_t furthest = 0;
      for (const RankReport& r : group) furthest = std::max(furthest, *r.entered_seq);
      hang.seq = furthest;
      for (const RankReport& r : group) {
        (*r.entered_seq < furthest ? hang.culprits : hang.waiting).push_back(r);
      }
    } else {
      // Unnumbered (serve attached after the communicator was made): the ranks inside a
      // collective wait for the ones that are in none.
      if (!anyone_inside) continue;
      for (const RankReport& r : group)
        (r.inside_s > 0 ? hang.waiting : hang.culprits).push_back(r);
    }
    if (!hang.culprits.empty()) {
      hang.kind = "missing";
    } else if (!hang.untraced_ranks.empty()) {
      // Ranks no node reports, while the others wait inside a collective: a rank may as well
      // have finished and gone, so a reported rank must be waiting.
      if (!anyone_inside) continue;
      hang.kind = "untraced";
    } else if (std::ranges::all_of(group, [](const RankReport& r) {
                 return r.inside_s > 0 &&
                        (!r.completed_seq || !r.entered_seq || *r.completed_seq < *r.entered_seq);
               })) {
      hang.kind = "stuck";
    } else {
      continue;  // every rank is level and out of collectives: idle, not hung
    }
    hang.whole_node = whole_node_of(hang.culprits, group);
    out.push_back(std::move(hang));
  }
  return out;
}

std::vector<CrossNodeStraggler> find_cross_node_stragglers(
    const std::vector<std::vector<RankWait>>& slices, const CrossNodeOptions& options) {
  // Per communicator, the verdict of each slice with data, newest first, weighed by the
  // collectives it rests on (the fewest any judged rank finished in it).
  struct SliceVerdict {
    std::vector<RankWait> low;    // the stragglers, empty for none
    std::vector<RankWait> ranks;  // every rank judged
    double weight = 0;
  };
  std::map<GroupKey, std::vector<SliceVerdict>> verdicts;
  for (const std::vector<RankWait>& slice : slices) {
    for (const auto& [key, group] : by_communicator(slice)) {
      SliceVerdict v;
      for (const RankWait& r : group) {
        if (r.collectives < options.straggler_min_collectives) continue;
        v.ranks.push_back(r);
        v.weight = v.ranks.size() == 1 ? r.collectives : std::min(v.weight, r.collectives);
      }
      if (v.ranks.size() < 2) continue;
      v.low = low_group(group, options);
      verdicts[key].push_back(std::move(v));
    }
  }
  std::vector<CrossNodeStraggler> out;
  for (const auto& [key, v] : verdicts) {
    // The newest slice with a fair share of the data decides: one that caught only the last
    // moments of a job (a few collectives) is too thin to overrule the slices before it.
    double heaviest = 0, total = 0;
    for (const SliceVerdict& slice : v) {
      heaviest = std::max(heaviest, slice.weight);
      total += slice.weight;
    }
    const auto deciding = std::ranges::find_if(
        v, [&](const SliceVerdict& slice) { return slice.weight >= 0.25 * heaviest; });
    if (deciding == v.end() || deciding->low.empty()) continue;
    const auto stragglers = who(deciding->low);
    CrossNodeStraggler s;
    s.job_id = key.first;
    s.comm = key.second;
    s.stragglers = deciding->low;
    double agreeing = 0;
    for (const SliceVerdict& slice : v) {
      ++s.slices_with_data;
      if (who(slice.low) == stragglers) {
        ++s.slices_agreeing;
        agreeing += slice.weight;
      }
    }
    // Persistent: the slices that say so hold most of the evidence.
    if (2 * agreeing <= total) continue;
    const std::vector<RankWait>& judged = deciding->ranks;
    s.others_mean_s = -1;
    for (const RankWait& r : judged) {
      if (stragglers.contains({r.node, r.rank})) {
        s.straggler_mean_s = std::max(s.straggler_mean_s, r.mean_s);
      } else if (s.others_mean_s < 0 || r.mean_s < s.others_mean_s) {
        s.others_mean_s = r.mean_s;
      }
    }
    std::ranges::sort(s.stragglers,
                      [](const RankWait& a, const RankWait& b) { return a.rank < b.rank; });
    s.whole_node = whole_node_of(s.stragglers, judged);
    out.push_back(std::move(s));
  }
  return out;
}

std::string describe(const CrossNodeHang& hang) {
  const std::string seq = hang.seq ? fmt::format("collective {}", *hang.seq) : "a collective";
  std::string text;
  if (hang.kind == "stuck") {
    text = fmt::format(
        "every rank of {} ({} ranks) entered {} and none returned for {:.0f} s: "
        "a transport stuck or a GPU that stopped",
        where(hang.job_id, hang.comm), hang.nranks, seq, hang.waited_s);
  } else {
    std::string missing;
    for (const RankReport& r : hang.culprits) {
      const std::string last = r.completed_seq
                                   ? fmt::format("last completed collective {}", *r.completed_seq)
                                   : std::string("in no collective");
      missing +=
          fmt::format("{}rank {} (pid {} on node {}, {}, for {:.0f} s)",
                      missing.empty() ? "" : ", ", r.rank, r.pid, r.node, last, r.progress_age_s);
    }
    if (hang.whole_node)
      missing = fmt::format("every rank of node {}: {}", *hang.whole_node, missing);
    if (!hang.untraced_ranks.empty()) {
      std::string list;
      for (int r : hang.untraced_ranks) list += fmt::format("{}{}", list.empty() ? "" : ", ", r);
      missing += fmt::format(
          "{}ranks {} (reported by no node: no eacgm serve there, or the "
          "process is gone)",
          missing.empty() ? "" : "; ", list);
    }
    text = fmt::format("{} ({} ranks) waits in {} for {:.0f} s; never entered it: {}",
                       where(hang.job_id, hang.comm), hang.nranks, seq, hang.waited_s, missing);
  }
  return text;
}

std::string describe(const CrossNodeStraggler& s) {
  std::string who_text;
  if (s.whole_node) {
    who_text = fmt::format("node {} (ranks {})", *s.whole_node, rank_list(s.stragglers));
  } else {
    for (const RankWait& r : s.stragglers) {
      who_text += fmt::format("{}rank {} (pid {} on node {})", who_text.empty() ? "" : ", ", r.rank,
                              r.pid, r.node);
    }
  }
  return fmt::format(
      "{} of {} waits least: {:.1f} ms per collective against at least {:.1f} ms for the others "
      "(the others wait for it), in {} of {} time slices",
      who_text, where(s.job_id, s.comm), s.straggler_mean_s * 1e3, s.others_mean_s * 1e3,
      s.slices_agreeing, s.slices_with_data);
}

}  // namespace eacgm
