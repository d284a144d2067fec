// A minimal fork-join loop for the analysis code: tasks are handed out dynamically to a few
// std::threads (the caller is one of them). Callers that reduce results keep one slot per task and
// combine the slots in task order, so results never depend on the number of threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace eacgm::detail {

// `requested` threads, or every hardware thread when it is 0 or less.
inline int resolve_threads(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Calls fn(task) once for every task in [0, n_tasks), on up to `threads` threads.
// fn must not throw.
template <typename Fn>
void parallel_for(std::size_t n_tasks, int threads, Fn&& fn) {
  const std::size_t n_threads =
      std::min<std::size_t>(n_tasks, static_cast<std::size_t>(std::max(1, threads)));
  if (n_threads <= 1) {
    for (std::size_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t t = next.fetch_add(1, std::memory_order_relaxed); t < n_tasks;
         t = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(t);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n_threads - 1);
  for (std::size_t i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

}  // namespace eacgm::detail
