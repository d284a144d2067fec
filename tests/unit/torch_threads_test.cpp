// What the torch layer keeps per thread is released with its process (eacgm serve runs for days).
#include "layers/torch/torch_threads.h"

#include <gtest/gtest.h>

#include "session/nested_time.h"

namespace eacgm {
namespace {

TEST(TorchThreads, ForgettingAProcessReleasesOnlyItsThreads) {
  ProbeSpec mm{};
  mm.layer = Layer::kTorch;
  mm.symbol = "aten::mm";
  TorchThreads threads;
  for (uint32_t pid : {10u, 11u, 12u}) {
    for (uint32_t tid = pid; tid < pid + 3; ++tid) {
      CallRecord call;
      call.pid = pid;
      call.tid = tid * 100;
      call.spec = &mm;
      threads.on_op(call);
    }
  }
  EXPECT_EQ(threads.threads(), 9u);
  threads.forget(11);
  EXPECT_EQ(threads.threads(), 6u);
  Session session;
  const nlohmann::json left = threads.finish(session);
  for (const auto& t : left) EXPECT_NE(t["pid"], 11);
}

TEST(NestedTime, ForgettingAThreadDropsWhatItLeftUnclaimed) {
  NestedTime nesting;
  // Children whose parent never returns (the thread died inside an operator).
  EXPECT_EQ(nesting.children_ns(7, 100, 10, 1), 0u);
  EXPECT_EQ(nesting.children_ns(8, 100, 10, 1), 0u);
  EXPECT_EQ(nesting.threads(), 2u);
  nesting.forget_thread(7);
  EXPECT_EQ(nesting.threads(), 1u);
  // The parent on thread 8 still finds its child.
  EXPECT_EQ(nesting.children_ns(8, 90, 50, 0), 10u);
}

}  // namespace
}  // namespace eacgm
