// The writer thread behind the SQLite and Perfetto sinks: every item reaches
// every sink in the order it came, on the writer's thread, before finish; a
// full queue makes the reader wait instead of growing; errors are kept.
#include "sinks/async_sinks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "probe_row.h"

namespace eacgm {
namespace {

// Remembers what it was given and where, and can be made slow or failing.
class RecordingSink : public Sink {
 public:
  struct Seen {
    std::vector<uint64_t> calls;  // start_ns of each call, in order
    std::vector<uint64_t> samples;
    std::vector<uint64_t> stacks;
    std::set<std::thread::id> threads;
    bool finished = false;
    size_t calls_at_finish = 0;
  };
  RecordingSink(Seen* seen, std::chrono::microseconds delay = {}, std::string error = "")
      : seen_(seen), delay_(delay), error_(std::move(error)) {}
  void on_call(const CallRecord& call) override {
    if (delay_.count()) std::this_thread::sleep_for(delay_);
    seen_->calls.push_back(call.start_ns);
    seen_->threads.insert(std::this_thread::get_id());
  }
  void on_gpu_sample(const GpuSample& sample) override { seen_->samples.push_back(sample.ts_ns); }
  void on_python_stack(const PythonStackChange& change) override {
    seen_->stacks.push_back(change.ts_ns);
  }
  Result<void> finish(const Session&) override {
    seen_->finished = true;
    seen_->calls_at_finish = seen_->calls.size();
    if (!error_.empty()) return Error{error_};
    return {};
  }

 private:
  Seen* seen_;
  std::chrono::microseconds delay_;
  std::string error_;
};

CallRecord call_at(uint64_t t) {
  CallRecord c;
  c.pid = 1;
  c.tid = 1;
  c.spec = &cuda_row("cudaLaunchKernel");
  c.start_ns = t;
  return c;
}

TEST(AsyncSinks, EveryItemReachesEverySinkInOrderOnTheWriterThread) {
  RecordingSink::Seen a, b;
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<RecordingSink>(&a));
  sinks.push_back(std::make_unique<RecordingSink>(&b));
  AsyncSinks async(std::move(sinks), {.batch = 100, .max_queued = 1000});
  std::vector<uint64_t> sent;
  for (uint64_t i = 0; i < 10'007; ++i) {  // not a whole number of batches
    async.on_call(call_at(i));
    sent.push_back(i);
    if (i % 1000 == 0) {
      GpuSample sample;
      sample.ts_ns = i;
      async.on_gpu_sample(sample);
    }
  }
  async.on_python_stack(
      PythonStackChange{.pid = 1, .tid = 1, .ts_ns = 77, .ended = 0, .begun = {}});
  ASSERT_TRUE(async.finish(Session{}).ok());
  for (const RecordingSink::Seen* s : {&a, &b}) {
    EXPECT_EQ(s->calls, sent);
    EXPECT_EQ(s->samples.size(), 11u);
    EXPECT_EQ(s->stacks, std::vector<uint64_t>{77});
    EXPECT_TRUE(s->finished);
    EXPECT_EQ(s->calls_at_finish, sent.size());  // finish comes after the last call
    ASSERT_EQ(s->threads.size(), 1u);
    EXPECT_NE(*s->threads.begin(), std::this_thread::get_id());
  }
}

TEST(AsyncSinks, AFullQueueMakesTheReaderWaitAndLosesNothing) {
  // A writer at 20 us per call behind a queue of 500: the reader outruns it,
  // waits for room, and nothing is dropped.
  RecordingSink::Seen seen;
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<RecordingSink>(&seen, std::chrono::microseconds(20)));
  AsyncSinks async(std::move(sinks), {.batch = 50, .max_queued = 500});
  for (uint64_t i = 0; i < 3'000; ++i) async.on_call(call_at(i));
  EXPECT_GT(async.waits(), 0u);
  ASSERT_TRUE(async.finish(Session{}).ok());
  EXPECT_EQ(seen.calls.size(), 3'000u);
  EXPECT_EQ(seen.calls.back(), 2'999u);
}

TEST(AsyncSinks, FinishReportsEverySinksError) {
  RecordingSink::Seen a, b;
  std::vector<std::unique_ptr<Sink>> sinks;
  sinks.push_back(std::make_unique<RecordingSink>(&a, std::chrono::microseconds(0), "disk full"));
  sinks.push_back(std::make_unique<RecordingSink>(&b, std::chrono::microseconds(0), "bad trace"));
  AsyncSinks async(std::move(sinks));
  async.on_call(call_at(1));
  auto r = async.finish(Session{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "disk full; bad trace");
  EXPECT_EQ(a.calls.size(), 1u);
  EXPECT_TRUE(b.finished);
}

}  // namespace
}  // namespace eacgm
