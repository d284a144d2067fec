// Runs sinks on a thread of their own.
//
// The SQLite row and the Perfetto slice of a call cost the reader ~3 µs
// (docs/PERFORMANCE.md, bench/sink_cost): most of its work per event. On the
// draining thread that caps the rate eacgm records without drops. Behind this
// decorator the reader only copies each call into a batch; a writer thread
// hands the batches to the sinks in the order they came. The queue is bounded:
// when the writer falls that far behind, the reader waits for it, and the
// ring buffer, not memory, absorbs the rest (and counts what it cannot).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "sinks/sink.h"

namespace eacgm {

class AsyncSinks : public Sink {
 public:
  struct Options {
    size_t batch = 1024;             // items handed over at once
    size_t max_queued = 256 * 1024;  // items waiting for the writer before the reader waits
  };
  AsyncSinks(std::vector<std::unique_ptr<Sink>> sinks, Options options);
  explicit AsyncSinks(std::vector<std::unique_ptr<Sink>> sinks)
      : AsyncSinks(std::move(sinks), Options{}) {}
  ~AsyncSinks() override;
  AsyncSinks(const AsyncSinks&) = delete;
  AsyncSinks& operator=(const AsyncSinks&) = delete;

  void on_call(const CallRecord& call) override { push(call); }
  void on_entry(const CallRecord& entry) override { push(entry); }  // `finished` tells them apart
  void on_gpu_sample(const GpuSample& sample) override { push(sample); }
  void on_gpu_event(const GpuEvent& event) override { push(event); }
  void on_python_stack(const PythonStackChange& change) override { push(change); }
  // Writes everything queued, stops the writer, then finishes each sink on
  // this thread (the session is not shared with the writer). The errors of
  // every sink that failed, in one message.
  Result<void> finish(const Session& session) override;
  // Every sink's, after finish().
  std::vector<OutputLoss> losses() const override;

  // How often the reader had to wait for the writer (for tests and reports).
  uint64_t waits() const;

 private:
  using Item = std::variant<CallRecord, GpuSample, GpuEvent, PythonStackChange>;
  void push(Item item);
  void hand_over();  // the current batch to the writer; waits while the queue is full
  void stop();
  void run();

  std::vector<std::unique_ptr<Sink>> sinks_;
  Options options_;
  std::vector<Item> batch_;  // the reader's own, not shared
  std::chrono::steady_clock::time_point batch_started_;

  mutable std::mutex mu_;
  std::condition_variable work_;  // the writer waits for batches
  std::condition_variable room_;  // the reader waits for the queue to shrink
  std::deque<std::vector<Item>> queue_;
  size_t queued_ = 0;  // items in queue_ and in the batch the writer is on
  bool stopping_ = false;
  uint64_t waits_ = 0;
  std::thread writer_;
};

}  // namespace eacgm
