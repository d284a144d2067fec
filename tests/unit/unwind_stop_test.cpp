// Putting back return addresses before a thread unwinds (layers/torch/unwind_stop.h), on this
// process's own memory: each slot gets its newest entry's address, older entries for a slot are
// ignored, and an address that cannot be written is an error that says what is at stake.
#include "layers/torch/unwind_stop.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace eacgm {
namespace {

uint64_t address_of(volatile uint64_t* p) { return reinterpret_cast<uint64_t>(p); }

TEST(UnwindStop, WritesTheNewestEntryOfEachSlot) {
  volatile uint64_t stack[3] = {0xaaaa, 0xbbbb, 0xcccc};
  const std::vector<std::pair<uint64_t, uint64_t>> slots = {
      {address_of(&stack[0]), 0x401000},
      {address_of(&stack[2]), 0x402000},
      {address_of(&stack[0]), 0x999999},  // an abandoned frame's older record: not written
  };
  auto written = restore_return_addresses(static_cast<uint32_t>(getpid()), slots);
  ASSERT_TRUE(written.ok()) << written.error().message;
  EXPECT_EQ(*written, 2u);
  EXPECT_EQ(stack[0], 0x401000u);
  EXPECT_EQ(stack[1], 0xbbbbu);
  EXPECT_EQ(stack[2], 0x402000u);
}

TEST(UnwindStop, NothingToWriteIsNoError) {
  auto written = restore_return_addresses(static_cast<uint32_t>(getpid()), {});
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 0u);
}

TEST(UnwindStop, AnUnwritableSlotIsAnError) {
  const std::vector<std::pair<uint64_t, uint64_t>> slots = {{0x10, 0x401000}};  // unmapped
  auto written = restore_return_addresses(static_cast<uint32_t>(getpid()), slots);
  ASSERT_FALSE(written.ok());
  EXPECT_NE(written.error().message.find("may end it"), std::string::npos)
      << written.error().message;
}

}  // namespace
}  // namespace eacgm
