// How the record fuzzer's inputs hold a run of ring-buffer records: each as a little-endian
// 16-bit length and that many bytes. One definition for the fuzzer and its seed writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace eacgm::fuzz {

inline void append_record(std::vector<uint8_t>& out, std::span<const std::byte> record) {
  const size_t n = std::min<size_t>(record.size(), 0xffff);
  out.push_back(static_cast<uint8_t>(n & 0xff));
  out.push_back(static_cast<uint8_t>(n >> 8));
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(record[i]));
}

// Calls `f` with each record of `data`; a length running past the end gives what is left.
template <typename F>
void for_each_record(const uint8_t* data, size_t size, F f) {
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t n = std::min<size_t>(data[at] | (size_t{data[at + 1]} << 8), size - at - 2);
    f(std::span(reinterpret_cast<const std::byte*>(data + at + 2), n));
    at += 2 + n;
  }
}

}  // namespace eacgm::fuzz
