#include "layers/torch/torch_threads.h"

namespace eacgm {

bool is_backward_op(std::string_view name) {
  const size_t dot = name.find('.');
  return name.substr(0, dot).find("_backward") != std::string_view::npos;
}

void TorchThreads::on_op(const CallRecord& call) {
  Counts& c = threads_[{call.pid, call.tid}];
  ++c.ops;
  if (is_backward_op(call.name())) ++c.backward_ops;
}

nlohmann::json TorchThreads::finish(Session& session) const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, counts] : threads_) {
    const auto [pid, tid] = key;
    std::string name;
    ProcessInfo* proc = nullptr;
    if (auto it = session.processes.find(pid); it != session.processes.end()) {
      proc = &it->second;
      if (auto t = proc->threads.find(tid); t != proc->threads.end()) name = t->second;
    }
    const bool autograd =
        name.starts_with("pt_autograd") || (tid != pid && counts.backward_ops > 0);
    if (autograd && proc && !name.ends_with(" (autograd)")) {
      proc->threads[tid] = (name.empty() ? proc->comm : name) + " (autograd)";
    }
    out.push_back({{"pid", pid},
                   {"tid", tid},
                   {"name", name},
                   {"ops", counts.ops},
                   {"backward_ops", counts.backward_ops},
                   {"autograd", autograd}});
  }
  return out;
}

}  // namespace eacgm
