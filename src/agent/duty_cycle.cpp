#include "agent/duty_cycle.h"

#include <algorithm>
#include <cmath>

namespace eacgm {

DutyCycle::DutyCycle(Options options, uint64_t start_ns)
    : options_(options),
      start_ns_(start_ns),
      phase_start_ns_(start_ns),
      measured_since_ns_(start_ns) {}

void DutyCycle::end_on_phase(uint64_t now_ns) {
  const double on = static_cast<double>(now_ns - phase_start_ns_);
  const double measured = static_cast<double>(now_ns - measured_since_ns_);
  const double budget = options_.budget;
  double worst = 0, worst_always = 0, fraction = 1, repay_ns = 0;
  for (const auto& [pid, c] : cost_) {
    const double cycled = c.cycled_ns / on, always = c.always_ns / measured;
    worst = std::max(worst, cycled + always);
    worst_always = std::max(worst_always, always);
    if (cycled > 0) fraction = std::min(fraction, (budget - always) / cycled);
    Account& account = accounts_.try_emplace(pid, Account{0, measured_since_ns_}).first->second;
    account.cost_ns += c.cycled_ns + c.always_ns;
    Seen& seen = seen_[pid];
    seen.calls += c.cycled_calls;
    seen.on_ns += on;
    seen.cycled_ns += c.cycled_ns;
    seen.always_ns += c.always_ns;
    seen.on_always_calls += c.always_calls;
    // What the process paid beyond the budget since it was first measured (the first on-phase
    // traces a job's start at full cost), and what the next on-phase will: paid in the off-phase,
    // in which only its always-traced calls cost it. So from the second on-phase on, the account
    // stays within the budget even if the job ends in the middle of one.
    const double owed = account.cost_ns - budget * static_cast<double>(now_ns - account.since_ns);
    const double next =
        std::max(0.0, (cycled + always - budget) * static_cast<double>(options_.min_on_ns));
    if (owed + next > 0 && always < budget) {
      repay_ns = std::max(repay_ns, (owed + next) / (budget - always));
    }
  }
  cost_.clear();
  measured_since_ns_ = now_ns;
  traced_ns_ += now_ns - phase_start_ns_;
  slowdown_while_traced_ = worst;
  always_traced_slowdown_ = worst_always;
  phase_start_ns_ = now_ns;
  fraction = std::max(fraction, kMinFraction);
  // Off long enough for the cycle to keep the budget, and for what is owed to be paid; never
  // longer than the least traced share allows.
  const double off = std::min(std::max(on * (1 - fraction) / fraction, repay_ns),
                              on * (1 - kMinFraction) / kMinFraction);
  if (off <= 0) return;  // within the budget traced all the time: measure on
  on_ = false;
  off_until_ns_ = now_ns + static_cast<uint64_t>(std::ceil(off));
  off_listed_ = untraced_.size() < Figures::kMaxUntraced;
  if (off_listed_) untraced_.emplace_back(now_ns - start_ns_, off_until_ns_ - start_ns_);
}

bool DutyCycle::tick(uint64_t now_ns) {
  if (now_ns < phase_start_ns_) return on_;
  if (on_ && now_ns - phase_start_ns_ >= options_.min_on_ns) {
    end_on_phase(now_ns);
  } else if (!on_ && now_ns >= off_until_ns_) {
    // As it was: ticks come a little after the due time.
    if (off_listed_) untraced_.back().second = now_ns - start_ns_;
    for (auto& [pid, seen] : seen_) seen.off_ns += static_cast<double>(now_ns - phase_start_ns_);
    for (auto& [pid, c] : cost_) {
      if (const auto seen = seen_.find(pid); seen != seen_.end()) {
        seen->second.off_always_calls += c.always_calls;
      }
      c.always_calls = 0;
    }
    on_ = true;
    phase_start_ns_ = now_ns;
    ++on_phases_;
  }
  return on_;
}

double DutyCycle::count_scale(double traced_fraction, uint64_t now_ns) const {
  if (traced_fraction <= 0 || traced_fraction >= 1) return 1;
  std::map<uint32_t, Seen> seen = seen_;
  const double now = now_ns > phase_start_ns_ ? static_cast<double>(now_ns - phase_start_ns_) : 0;
  for (const auto& [pid, c] : cost_) {
    Seen& s = seen[pid];
    s.calls += c.cycled_calls;
    s.cycled_ns += c.cycled_ns;
    s.always_ns += c.always_ns;
    (on_ ? s.on_always_calls : s.off_always_calls) += c.always_calls;
    if (on_) s.on_ns += now;
  }
  if (!on_) {
    for (auto& [pid, s] : seen) {
      if (seen_.contains(pid)) s.off_ns += now;
    }
  }
  // A process makes its calls at the rate its work allows, faster untraced than traced. Where it
  // makes enough always-traced calls (NCCL collectives, allocations) both while the cycled calls
  // are traced and while not, their rates say by how much. Else its traps' cost does: they took
  // the share c of its traced time, and the always-traced calls' the share a of all of it, so it
  // runs (1 - a) / (1 - a - c) times as fast untraced. Each call seen stands for 1 + (1 - f) / f
  // times that many, f the traced share; the session's scale weighs each process by the calls it
  // was seen to make.
  constexpr uint64_t kEnoughCalls = 30;
  double seen_calls = 0, estimated_calls = 0;
  for (const auto& [pid, s] : seen) {
    if (s.calls == 0 || s.on_ns <= 0) continue;
    double speedup;
    if (s.on_always_calls >= kEnoughCalls && s.off_always_calls >= kEnoughCalls) {
      speedup = (static_cast<double>(s.off_always_calls) / s.off_ns) /
                (static_cast<double>(s.on_always_calls) / s.on_ns);
    } else {
      const auto account = accounts_.find(pid);
      const uint64_t since = account != accounts_.end() ? account->second.since_ns : start_ns_;
      const double lived = now_ns > since ? static_cast<double>(now_ns - since) : s.on_ns;
      const double always = std::min(s.always_ns / lived, 0.5);
      const double cycled = s.cycled_ns / s.on_ns;
      // Traps that took nearly all of its traced time say little of its untraced rate.
      speedup = (1 - always) / std::max(1 - always - cycled, 0.05);
    }
    seen_calls += static_cast<double>(s.calls);
    estimated_calls +=
        static_cast<double>(s.calls) * (1 + (1 - traced_fraction) / traced_fraction * speedup);
  }
  return seen_calls > 0 ? estimated_calls / seen_calls : 1 / traced_fraction;
}

DutyCycle::Figures DutyCycle::figures(uint64_t now_ns) const {
  Figures f;
  f.budget = options_.budget;
  f.on_phases = on_phases_;
  f.slowdown_while_traced = slowdown_while_traced_;
  f.always_traced_slowdown = always_traced_slowdown_;
  f.untraced = untraced_;
  uint64_t traced = traced_ns_;
  if (on_ && now_ns > phase_start_ns_) traced += now_ns - phase_start_ns_;
  if (!on_ && off_listed_) f.untraced.back().second = std::max(phase_start_ns_, now_ns) - start_ns_;
  const double total = now_ns > start_ns_ ? static_cast<double>(now_ns - start_ns_) : 0;
  if (total <= 0) return f;
  f.traced_fraction = std::min(1.0, static_cast<double>(traced) / total);
  std::map<uint32_t, double> cost;
  for (const auto& [pid, account] : accounts_) cost[pid] = account.cost_ns;
  for (const auto& [pid, c] : cost_) cost[pid] += c.cycled_ns + c.always_ns;
  for (const auto& [pid, c] : cost)
    f.estimated_slowdown = std::max(f.estimated_slowdown, c / total);
  f.count_scale = count_scale(f.traced_fraction, now_ns);
  return f;
}

}  // namespace eacgm
