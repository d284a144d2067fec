#include "sinks/async_sinks.h"

#include <fmt/format.h>
#include <pthread.h>

#include <string>

namespace eacgm {

AsyncSinks::AsyncSinks(std::vector<std::unique_ptr<Sink>> sinks, Options options)
    : sinks_(std::move(sinks)), options_(options) {
  options_.batch = std::max<size_t>(options_.batch, 1);
  options_.max_queued = std::max(options_.max_queued, options_.batch);
  batch_.reserve(options_.batch);
  writer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "eacgm-writer");
    run();
  });
}

AsyncSinks::~AsyncSinks() { stop(); }

void AsyncSinks::push(Item item) {
  if (batch_.empty()) batch_started_ = std::chrono::steady_clock::now();
  batch_.push_back(std::move(item));
  // A slow trickle is handed over at the first multiple of 64 items after
  // the batch is 100 ms old (the clock is read only then); fewer than 64
  // wait for finish(), which writes them like the rest.
  if (batch_.size() >= options_.batch ||
      (batch_.size() % 64 == 0 &&
       std::chrono::steady_clock::now() - batch_started_ > std::chrono::milliseconds(100))) {
    hand_over();
  }
}

void AsyncSinks::hand_over() {
  if (batch_.empty()) return;
  std::unique_lock lock(mu_);
  if (queued_ + batch_.size() > options_.max_queued) {
    ++waits_;
    room_.wait(lock, [this] { return queued_ + batch_.size() <= options_.max_queued; });
  }
  queued_ += batch_.size();
  queue_.push_back(std::move(batch_));
  lock.unlock();
  work_.notify_one();
  batch_ = {};
  batch_.reserve(options_.batch);
}

void AsyncSinks::run() {
  for (;;) {
    std::vector<Item> items;
    {
      std::unique_lock lock(mu_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything is written
      items = std::move(queue_.front());
      queue_.pop_front();
    }
    for (const Item& item : items) {
      for (auto& sink : sinks_) {
        std::visit(
            [&sink](const auto& v) {
              using T = std::decay_t<decltype(v)>;
              if constexpr (std::is_same_v<T, CallRecord>) {
                if (v.finished) {
                  sink->on_call(v);
                } else {
                  sink->on_entry(v);
                }
              }
              if constexpr (std::is_same_v<T, GpuSample>) sink->on_gpu_sample(v);
              if constexpr (std::is_same_v<T, GpuEvent>) sink->on_gpu_event(v);
              if constexpr (std::is_same_v<T, PythonStackChange>) sink->on_python_stack(v);
            },
            item);
      }
    }
    {
      std::lock_guard lock(mu_);
      queued_ -= items.size();
    }
    room_.notify_one();
  }
}

void AsyncSinks::stop() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_.notify_one();
  writer_.join();
}

Result<void> AsyncSinks::finish(const Session& session) {
  hand_over();
  stop();
  std::string errors;
  for (auto& sink : sinks_) {
    if (auto r = sink->finish(session); !r) {
      errors += errors.empty() ? r.error().message : "; " + r.error().message;
    }
  }
  if (!errors.empty()) return Error{errors};
  return {};
}

std::vector<OutputLoss> AsyncSinks::losses() const {
  std::vector<OutputLoss> out;
  for (const auto& sink : sinks_) {
    for (OutputLoss& loss : sink->losses()) out.push_back(std::move(loss));
  }
  return out;
}

uint64_t AsyncSinks::waits() const {
  std::lock_guard lock(mu_);
  return waits_;
}

}  // namespace eacgm
