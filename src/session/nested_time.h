// Self time of calls that nest on a thread (a torch operator calling others): the call's
// duration minus that of the traced calls it contains.
//
// Calls arrive as they return, so on one thread a child always arrives before its parent, and
// the children of a call are exactly the calls that arrived since and started no earlier than
// it did. Each thread keeps the finished calls no parent has claimed yet, in arrival order;
// they are disjoint in time, so a parent's children are a suffix. This needs no depth, so
// calls of other layers in between (a Python function between two operators) do not matter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace eacgm {

class NestedTime {
 public:
  // Folds in one finished call of `tid`; returns the time its traced children took.
  // `depth` 0 means nothing was open on the thread when it started: no parent will claim it.
  uint64_t children_ns(uint32_t tid, uint64_t start_ns, uint64_t duration_ns, uint32_t depth);
  // The thread is gone (serve releases its process): drop what it left unclaimed.
  void forget_thread(uint32_t tid) { pending_.erase(tid); }
  size_t threads() const { return pending_.size(); }

 private:
  struct Span {
    uint64_t start_ns;
    uint64_t duration_ns;
  };
  // A parent whose return was lost would leave its children here: bounded per thread.
  static constexpr size_t kMaxPending = 4096;
  std::unordered_map<uint32_t, std::vector<Span>> pending_;
};

}  // namespace eacgm
