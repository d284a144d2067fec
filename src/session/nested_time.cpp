#include "session/nested_time.h"

#include <algorithm>

namespace eacgm {

uint64_t NestedTime::children_ns(uint32_t tid, uint64_t start_ns, uint64_t duration_ns,
                                 uint32_t depth) {
  auto it = pending_.find(tid);
  uint64_t children = 0;
  if (it != pending_.end()) {
    std::vector<Span>& spans = it->second;
    while (!spans.empty() && spans.back().start_ns >= start_ns) {
      children += spans.back().duration_ns;
      spans.pop_back();
    }
    // Nothing was open when this call began, so what is left started outside any traced call
    // that could still claim it.
    if (depth == 0) spans.clear();
    if (spans.empty() && depth == 0) pending_.erase(it);
  }
  if (depth > 0) {
    std::vector<Span>& spans = pending_[tid];
    if (spans.size() >= kMaxPending) spans.erase(spans.begin());
    spans.push_back({start_ns, duration_ns});
  }
  return std::min(children, duration_ns);
}

}  // namespace eacgm
