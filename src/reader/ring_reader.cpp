#include "reader/ring_reader.h"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace eacgm {
namespace {

// The kernel's record header flags and size (include/uapi/linux/bpf.h).
constexpr uint32_t kBusyBit = 1u << 31;
constexpr uint32_t kDiscardBit = 1u << 30;
constexpr uint64_t kHeaderSize = 8;

uint64_t load_acquire(const uint64_t* p) {
  return std::atomic_ref<const uint64_t>(*p).load(std::memory_order_acquire);
}

uint32_t load_acquire(const uint32_t* p) {
  return std::atomic_ref<const uint32_t>(*p).load(std::memory_order_acquire);
}

void store_release(uint64_t* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release);
}

}  // namespace

size_t consume_ring(const RingView& ring, uint64_t release_bytes, const RecordHandler& handle) {
  size_t handled = 0;
  uint64_t cons = load_acquire(ring.consumer_pos);
  uint64_t released = cons;
  // Records committed while we handle earlier ones are taken in the same call.
  for (uint64_t prod = load_acquire(ring.producer_pos); cons < prod;
       prod = load_acquire(ring.producer_pos)) {
    while (cons < prod) {
      const std::byte* header = ring.data + (cons & ring.mask);
      const uint32_t len_word = load_acquire(reinterpret_cast<const uint32_t*>(header));
      if (len_word & kBusyBit) {  // reserved, not committed yet: the rest waits for it
        if (cons != released) store_release(ring.consumer_pos, cons);
        return handled;
      }
      const uint32_t len = len_word & ~(kBusyBit | kDiscardBit);
      if (!(len_word & kDiscardBit)) {
        handle(std::span<const std::byte>(header + kHeaderSize, len));
        ++handled;
      }
      cons += (kHeaderSize + len + 7) & ~uint64_t{7};
      if (cons - released >= release_bytes) {
        store_release(ring.consumer_pos, cons);
        released = cons;
      }
    }
  }
  if (cons != released) store_release(ring.consumer_pos, cons);
  return handled;
}

Result<std::unique_ptr<RingReader>> RingReader::open(int map_fd, RecordHandler handler) {
  bpf_map_info info{};
  uint32_t info_len = sizeof(info);
  if (bpf_obj_get_info_by_fd(map_fd, &info, &info_len) != 0) {
    return Error{fmt::format("cannot read the ring buffer's size: {}", std::strerror(errno))};
  }
  if (info.type != BPF_MAP_TYPE_RINGBUF || info.max_entries == 0 ||
      (info.max_entries & (info.max_entries - 1)) != 0) {
    return Error{fmt::format("map {} is not a BPF ring buffer", map_fd)};
  }
  std::unique_ptr<RingReader> r(new RingReader());
  r->map_fd_ = map_fd;
  r->handler_ = std::move(handler);
  r->page_size_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* consumer = mmap(nullptr, r->page_size_, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
  if (consumer == MAP_FAILED) {
    return Error{
        fmt::format("cannot map the ring buffer's consumer page: {}", std::strerror(errno))};
  }
  r->consumer_page_ = consumer;
  r->producer_area_size_ = r->page_size_ + 2 * static_cast<size_t>(info.max_entries);
  void* producer = mmap(nullptr, r->producer_area_size_, PROT_READ, MAP_SHARED, map_fd,
                        static_cast<off_t>(r->page_size_));
  if (producer == MAP_FAILED) {
    return Error{fmt::format("cannot map the ring buffer's data: {}", std::strerror(errno))};
  }
  r->producer_area_ = producer;
  r->view_ = RingView{
      .consumer_pos = static_cast<uint64_t*>(consumer),
      .producer_pos = static_cast<const uint64_t*>(producer),
      .data = static_cast<const std::byte*>(producer) + r->page_size_,
      .mask = info.max_entries - 1,
  };
  // An eighth of the ring: the kernel still sees room freed long before it fills.
  r->release_bytes_ = info.max_entries / 8;
  return r;
}

RingReader::~RingReader() {
  if (producer_area_) munmap(producer_area_, producer_area_size_);
  if (consumer_page_) munmap(consumer_page_, page_size_);
}

size_t RingReader::consume() { return consume_ring(view_, release_bytes_, handler_); }

int RingReader::poll(int timeout_ms) {
  pollfd p{.fd = map_fd_, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, timeout_ms) < 0 && errno != EINTR) return -errno;
  return static_cast<int>(consume());
}

}  // namespace eacgm
