// Which threads ran PyTorch operators, and which of them are autograd threads.
//
// Backward operators enter through the same at::_ops entry points as forward ones, so the
// operator alone does not say where backward ran. The thread does: PyTorch runs the backward
// pass of CUDA (and other device) tensors on its own autograd worker threads, which releases
// from 2.1 on name "pt_autograd_<device>"; CPU backward runs on the thread that called
// backward(). The rule, in that order: a thread whose name starts with "pt_autograd" is an
// autograd thread; so is any thread other than the process's main thread that ran an operator
// named *_backward* (an unnamed worker of an older release, or a Python thread the job
// started to run backward). The main thread is never marked: it is the job itself.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "session/session.h"

namespace eacgm {

class TorchThreads {
 public:
  void on_op(const CallRecord& call);
  // The per-thread figures for summary.json (layers.torch.threads), and " (autograd)" appended
  // to the names of autograd threads in `session`, so the Perfetto and SQLite thread names say
  // it too.
  nlohmann::json finish(Session& session) const;
  // The process is gone (serve releases it).
  void forget(uint32_t pid) {
    threads_.erase(threads_.lower_bound({pid, 0}), threads_.lower_bound({pid + 1, 0}));
  }
  size_t threads() const { return threads_.size(); }

 private:
  struct Counts {
    uint64_t ops = 0;
    uint64_t backward_ops = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, Counts> threads_;  // (pid, tid)
};

// Whether an operator name is a backward kernel ("aten::threshold_backward",
// "aten::_softmax_backward_data", "aten::convolution_backward.out").
bool is_backward_op(std::string_view name);

}  // namespace eacgm
