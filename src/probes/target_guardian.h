// Whatever eacgm pauses, something outside eacgm resumes if eacgm dies.
//
// The BPF programs stop a target for a moment (core.bpf.c: after the loader maps a library;
// torch.bpf.c: as a thread begins to unwind) and eacgm's SIGCONT ends the stop. An agent can die
// at any moment (SIGKILL, the OOM killer, a node drain, a bug), and a target stopped then would
// stay stopped forever. So the Tracer starts a guardian first: a small process of its own
// (double-forked and in its own session, so neither eacgm's exit nor a signal to eacgm's process
// group takes it along) that holds one end of a socket pair and learns every target eacgm adds.
// When eacgm's end closes without a word, eacgm is gone and its BPF links go with it: the
// guardian resumes every stopped target and every stopped descendant of one (a target's children
// become targets in the kernel before eacgm hears of them), again a little later for stops that
// were still in flight, says so on stderr, and exits. A clean end tells it there is nothing to do.
//
// The guardian also takes over links that can never stop a target (probes/tracer.cpp): the
// kernel releases a perf-event link only after an RCU grace period, one at a time, ~50 ms each
// here; handed over, they are released in the guardian's time after a clean end, not the user's.
//
// The child runs only system calls, no allocation: it is forked from a process with threads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>

#include "common/result.h"

namespace eacgm {

class TargetGuardian {
 public:
  // Forks the guardian. Error when the system refuses the socket pair or the fork.
  static Result<TargetGuardian> start();
  TargetGuardian(TargetGuardian&& other) noexcept;
  TargetGuardian& operator=(TargetGuardian&& other) noexcept;
  TargetGuardian(const TargetGuardian&) = delete;
  TargetGuardian& operator=(const TargetGuardian&) = delete;
  // A clean end: the guardian exits without touching any process.
  ~TargetGuardian();

  // `pid` may be stopped by eacgm from now on (it and the children it forks).
  void watch(uint32_t pid);
  // The BPF map of targets (tgid keys): serve's notice (bpf/core.bpf.c) makes a process a target
  // and stops it before eacgm hears of it, so should eacgm die, every process in this map and
  // its descendants are resumed too. The guardian keeps its own copy of the fd (a map, not a
  // link: it stops nothing). False when it could not be sent.
  bool watch_targets(int map_fd);
  // Gives the guardian its own copies of `link_fds`, which it closes after the clean end (or
  // at once, when eacgm dies); the caller's own close is then cheap. Only for links that never
  // stop a target: the guardian must not hold one that does. False when they could not all be
  // sent (the caller's close is then the last, and waits).
  bool hand_over(std::span<const int> link_fds);
  // The guardian's pid, for tests and for `doctor`.
  pid_t pid() const { return pid_; }

 private:
  TargetGuardian(int fd, pid_t pid) : fd_(fd), pid_(pid) {}
  // Sends `fds` with the word `what` (a hand-over, or the targets map), at most a message's
  // worth of fds each time.
  bool send_fds(uint32_t what, std::span<const int> fds);
  int fd_ = -1;
  pid_t pid_ = 0;
};

}  // namespace eacgm
