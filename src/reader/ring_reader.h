// Reads the BPF ring buffer straight from its memory mapping.
//
// libbpf's consumer stores the consumer position after every record. The
// kernel reads that position at every reservation, so while the reader
// drains, each event the traced process emits pulls the cache line back from
// the reader's CPU. This reader hands records to the handler in place and
// releases the space it has read in batches (every `release_bytes`, and when
// it has caught up), which keeps that line still for thousands of events.
//
// The record format is the kernel's (include/uapi/linux/bpf.h,
// kernel/bpf/ringbuf.c): an 8-byte header whose first word is the length with
// a busy bit (31: not committed yet) and a discard bit (30), the record, and
// padding to 8 bytes. The data pages are mapped twice in a row, so a record
// that wraps around the end reads as one contiguous span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "common/result.h"

namespace eacgm {

using RecordHandler = std::function<void(std::span<const std::byte>)>;

// The ring as this process sees it: the two positions and the doubly mapped data.
struct RingView {
  uint64_t* consumer_pos = nullptr;        // written by us
  const uint64_t* producer_pos = nullptr;  // written by the kernel
  const std::byte* data = nullptr;         // 2 * (mask + 1) bytes
  uint64_t mask = 0;                       // data size - 1 (a power of two)
};

// Hands every committed record from the consumer position on to `handle`,
// stopping at the first one still being written; stores the consumer position
// every `release_bytes` and at the end. Returns the records handed on
// (discarded ones are skipped, not counted). Pure memory: unit-tested on a
// buffer laid out as the kernel lays it out.
size_t consume_ring(const RingView& ring, uint64_t release_bytes, const RecordHandler& handle);

class RingReader {
 public:
  // Maps the ring buffer map `map_fd` (not owned; it must outlive the reader).
  static Result<std::unique_ptr<RingReader>> open(int map_fd, RecordHandler handler);
  ~RingReader();
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;

  // Handles every record there is now; returns how many.
  size_t consume();
  // Waits up to `timeout_ms` for data (the map's fd polls readable when
  // there is any), then consumes. Returns the records handled, or -errno.
  int poll(int timeout_ms);
  // For poll(2) in the caller's own loop.
  int fd() const { return map_fd_; }

 private:
  RingReader() = default;
  int map_fd_ = -1;
  RecordHandler handler_;
  void* consumer_page_ = nullptr;
  void* producer_area_ = nullptr;  // the producer page, then the data twice
  size_t producer_area_size_ = 0;
  size_t page_size_ = 0;
  RingView view_;
  uint64_t release_bytes_ = 0;
};

}  // namespace eacgm
