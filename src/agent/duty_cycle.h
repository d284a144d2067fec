// --overhead-budget: keeps what tracing costs each traced process under a budget by tracing the
// frequent, stateless calls (probes/probe_table.h may_duty_cycle) only part of the time.
//
// Every traced call adds its cost (its traps and programs) to its process: the cycled calls' in
// on-phases only, the always-traced calls' (allocations, frees, NCCL, kernel registrations) all
// the time. At the end of an on-phase each process's slowdown is its cost over the time it was
// measured in: the cycled calls' over the on-phase, the others' since the last on-phase ended.
// The cycled calls are then traced the share f of the time that keeps every process within the
// budget: always + f x cycled <= budget, the probes coming off for on x (1 - f) / f. So the
// budget holds over each whole on/off cycle. The account of each process (its cost since it was
// first measured) is kept too: the off-phase lasts, if that is longer, until the process has paid
// back what it spent beyond the budget and paid ahead for the next on-phase, so that from the
// second on-phase on its account is within the budget even when the job ends in the middle of
// one. (The first on-phase, which measures the job's start, is paid for after it.) The next
// on-phase measures again, so a job whose call rate changes gets a new off-phase. An on-phase lasts
// at least `min_on_ns`, so that it holds a whole analysis window of every process (the detectors
// skip windows that were not traced whole); f is never below kMinFraction, which bounds an
// off-phase (when the always-traced calls alone cost a process the budget, the budget cannot hold,
// and the figures say so).
//
// Pure: the caller feeds calls and time and attaches or detaches the probes when tick() says so;
// the unit tests drive it by hand.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "session/overhead.h"

namespace eacgm {

class DutyCycle {
 public:
  struct Options {
    double budget = 0.01;  // a fraction of each process's time
    uint64_t min_on_ns = 2'000'000'000;
  };
  static constexpr double kMinFraction = 0.01;

  DutyCycle(Options options, uint64_t start_ns);

  // A traced call returned in `pid`, having cost it `cost_ns`; `cycled`: of a row traced part of
  // the time.
  void on_call(uint32_t pid, double cost_ns, bool cycled) {
    Cost& c = cost_[pid];
    (cycled ? c.cycled_ns : c.always_ns) += cost_ns;
    ++(cycled ? c.cycled_calls : c.always_calls);
  }
  // Moves the phases on to `now_ns`; returns whether the cycled probes should now be attached.
  bool tick(uint64_t now_ns);
  bool on() const { return on_; }
  double budget() const { return options_.budget; }
  // The costliest process's slowdown from the always-traced calls, at the last on-phase's end.
  double always_traced_slowdown() const { return always_traced_slowdown_; }

  // The account so far; the last off-phase, if one is under way, ends at `now_ns`.
  using Figures = DutyCycleFigures;
  Figures figures(uint64_t now_ns) const;

 private:
  struct Cost {
    double cycled_ns = 0;  // in the on-phase under way
    double always_ns = 0;  // since the last on-phase ended
    uint64_t cycled_calls = 0;
    uint64_t always_calls = 0;  // since the phase under way, on or off, began
  };
  void end_on_phase(uint64_t now_ns);
  double count_scale(double traced_fraction, uint64_t now_ns) const;

  Options options_;
  uint64_t start_ns_;
  bool on_ = true;
  uint64_t phase_start_ns_;
  uint64_t measured_since_ns_;  // the always-traced calls' costs are since then
  uint64_t off_until_ns_ = 0;
  uint64_t traced_ns_ = 0;  // in finished on-phases
  uint64_t on_phases_ = 1;
  double slowdown_while_traced_ = 0;
  double always_traced_slowdown_ = 0;
  std::map<uint32_t, Cost> cost_;  // being measured, per process
  struct Account {
    double cost_ns = 0;     // measured before, in all
    uint64_t since_ns = 0;  // from the start of the phase it was first measured in
  };
  std::map<uint32_t, Account> accounts_;
  // What each process's cycled calls were seen over, for the count scale (figures()).
  struct Seen {
    uint64_t calls = 0;    // cycled calls, in finished on-phases
    double on_ns = 0;      // the on-phases they were measured in
    double cycled_ns = 0;  // what they cost
    double always_ns = 0;  // what the always-traced calls cost, since `account.since_ns`
    // The always-traced calls in the on-phases, and in the off-phases after the process was
    // first measured, and those off-phases' length: their rates say how much faster the process
    // runs untraced.
    uint64_t on_always_calls = 0;
    uint64_t off_always_calls = 0;
    double off_ns = 0;
  };
  std::map<uint32_t, Seen> seen_;
  std::vector<std::pair<uint64_t, uint64_t>> untraced_;  // from start_ns_
  bool off_listed_ = false;  // the off-phase under way is untraced_.back()
};

}  // namespace eacgm
