// The ring buffer consumer on memory laid out as the kernel lays it out: a
// consumer and a producer position and the data mapped twice in a row.
#include "reader/ring_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace eacgm {
namespace {

constexpr uint32_t kBusy = 1u << 31;
constexpr uint32_t kDiscard = 1u << 30;

// A ring of `size` bytes the test writes records into as the kernel would.
class FakeRing {
 public:
  explicit FakeRing(uint64_t size) : data_(2 * size), size_(size) {}
  RingView view() { return RingView{&consumer_, &producer_, data_.data(), size_ - 1}; }
  // Reserves and (unless `flags` says busy) commits one record holding `text`.
  void push(const std::string& text, uint32_t flags = 0) {
    const uint64_t at = producer_;
    uint32_t header[2] = {static_cast<uint32_t>(text.size()) | flags, 0};
    write(at, header, sizeof(header));
    write(at + 8, text.data(), text.size());
    producer_ += (8 + text.size() + 7) / 8 * 8;
  }
  void commit_at(uint64_t pos) {  // clears the busy bit of the record at `pos`
    uint32_t len = 0;
    std::memcpy(&len, &data_[pos & (size_ - 1)], 4);
    len &= ~kBusy;
    write(pos, &len, 4);
  }
  uint64_t consumer() const { return consumer_; }
  uint64_t producer() const { return producer_; }

 private:
  // Writes at ring position `pos`, into both copies of the data, as the
  // kernel's double mapping shows one physical page twice.
  void write(uint64_t pos, const void* bytes, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const uint64_t off = (pos + i) & (size_ - 1);
      data_[off] = data_[off + size_] = static_cast<const std::byte*>(bytes)[i];
    }
  }
  std::vector<std::byte> data_;
  uint64_t size_;
  uint64_t consumer_ = 0;
  uint64_t producer_ = 0;
};

std::vector<std::string> drain(FakeRing& ring, uint64_t release_bytes, size_t* handled) {
  std::vector<std::string> seen;
  *handled = consume_ring(ring.view(), release_bytes, [&](std::span<const std::byte> r) {
    seen.emplace_back(reinterpret_cast<const char*>(r.data()), r.size());
  });
  return seen;
}

TEST(RingReader, HandsOnEveryCommittedRecordInOrderAndReleasesTheSpace) {
  FakeRing ring(4096);
  ring.push("first");
  ring.push("a record of 24 bytes....");
  ring.push("");
  size_t handled = 0;
  EXPECT_EQ(drain(ring, 1 << 20, &handled),
            (std::vector<std::string>{"first", "a record of 24 bytes....", ""}));
  EXPECT_EQ(handled, 3u);
  EXPECT_EQ(ring.consumer(), ring.producer());
  EXPECT_EQ(ring.consumer(), 16u + 32u + 8u);  // each padded to 8 bytes after its header
  EXPECT_TRUE(drain(ring, 1 << 20, &handled).empty());
  EXPECT_EQ(handled, 0u);
}

TEST(RingReader, StopsAtARecordStillBeingWrittenAndResumesThere) {
  FakeRing ring(4096);
  ring.push("done");
  const uint64_t busy_at = ring.producer();
  ring.push("pending", kBusy);
  ring.push("after");  // committed, but behind the busy one: must wait for it
  size_t handled = 0;
  EXPECT_EQ(drain(ring, 1 << 20, &handled), (std::vector<std::string>{"done"}));
  EXPECT_EQ(ring.consumer(), busy_at);  // what was read is released
  ring.commit_at(busy_at);
  EXPECT_EQ(drain(ring, 1 << 20, &handled), (std::vector<std::string>{"pending", "after"}));
  EXPECT_EQ(ring.consumer(), ring.producer());
}

TEST(RingReader, SkipsDiscardedRecords) {
  FakeRing ring(4096);
  ring.push("kept");
  ring.push("discarded", kDiscard);
  ring.push("kept too");
  size_t handled = 0;
  EXPECT_EQ(drain(ring, 1 << 20, &handled), (std::vector<std::string>{"kept", "kept too"}));
  EXPECT_EQ(handled, 2u);
  EXPECT_EQ(ring.consumer(), ring.producer());
}

TEST(RingReader, RecordsThatWrapAroundTheEndReadWhole) {
  // A 256-byte ring, written and drained many times over: positions grow
  // without bound and records straddle the end of the data.
  FakeRing ring(256);
  size_t total = 0;
  for (int round = 0; round < 100; ++round) {
    std::vector<std::string> sent;
    for (int i = 0; i < 3; ++i) {
      sent.push_back(std::string(13 + (round * 7 + i) % 40, static_cast<char>('a' + i)));
      ring.push(sent.back());
    }
    size_t handled = 0;
    ASSERT_EQ(drain(ring, 1 << 20, &handled), sent) << "round " << round;
    total += handled;
  }
  EXPECT_EQ(total, 300u);
  EXPECT_GT(ring.consumer(), 256u * 50);
}

TEST(RingReader, ReleasesInBatchesAndOnceCaughtUp) {
  // The consumer position is stored every `release_bytes`, and at the end:
  // seen from the handler, it moves in steps, never past an unread record.
  FakeRing ring(1 << 16);
  for (int i = 0; i < 100; ++i) ring.push(std::string(56, 'x'));  // 64 bytes each
  std::vector<uint64_t> seen_consumer;
  RingView view = ring.view();
  consume_ring(view, 640,
               [&](std::span<const std::byte>) { seen_consumer.push_back(*view.consumer_pos); });
  ASSERT_EQ(seen_consumer.size(), 100u);
  for (size_t i = 0; i < seen_consumer.size(); ++i) {
    EXPECT_EQ(seen_consumer[i], i / 10 * 640) << "record " << i;
  }
  EXPECT_EQ(ring.consumer(), 6400u);
}

}  // namespace
}  // namespace eacgm
