// Protocol buffer wire format, written directly into a byte string.
//
// The Perfetto writer emits two packets for every recorded call. Building them as generated
// protobuf messages (allocate the nested messages and their strings, size them, serialize, free)
// cost more than everything else the writer does per call (bench/sink_cost). These helpers
// append fields the way the generated serializer does (minimal varints, fields in the order the
// caller gives), so a packet written with them is byte for byte the one the message classes
// would write; tests/unit/perfetto_writer_test.cpp holds the two against each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace eacgm::proto_wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2 };

constexpr size_t varint_size(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

constexpr uint64_t tag(uint32_t field, WireType type) {
  return (static_cast<uint64_t>(field) << 3) | type;
}

// Appends fields to a string. Bytes gather in a small buffer of its own and reach the string in
// one append when it fills, at flush() and when the writer goes away: a packet is a few dozen
// varints of a byte or two, and appending them one by one cost more than encoding them. Read
// the string only after flush().
class WireWriter {
 public:
  explicit WireWriter(std::string& out) : out_(out) {}
  ~WireWriter() { flush(); }
  WireWriter(const WireWriter&) = delete;
  WireWriter& operator=(const WireWriter&) = delete;

  void varint(uint64_t value) {
    if (used_ > sizeof(buffer_) - kMaxVarintBytes) flush();
    while (value >= 0x80) {
      buffer_[used_++] = static_cast<char>((value & 0x7f) | 0x80);
      value >>= 7;
    }
    buffer_[used_++] = static_cast<char>(value);
  }
  // uint32, uint64 and enum fields; int32 and int64 as well, whose negative values take ten
  // bytes (their two's complement as a uint64), as protobuf encodes them.
  void uint_field(uint32_t field, uint64_t value) {
    varint(tag(field, kVarint));
    varint(value);
  }
  void int_field(uint32_t field, int64_t value) { uint_field(field, static_cast<uint64_t>(value)); }
  void fixed64_field(uint32_t field, uint64_t value) {
    varint(tag(field, kFixed64));
    if (used_ > sizeof(buffer_) - 8) flush();
    for (int i = 0; i < 8; ++i) buffer_[used_++] = static_cast<char>(value >> (8 * i));
  }
  // The tag and length of a length-delimited field whose bytes follow.
  void length_delimited(uint32_t field, size_t length) {
    varint(tag(field, kLengthDelimited));
    varint(length);
  }
  // A string, bytes or an embedded message that is already serialized.
  void bytes_field(uint32_t field, std::string_view bytes) {
    length_delimited(field, bytes.size());
    if (bytes.size() <= sizeof(buffer_) - used_) {
      bytes.copy(buffer_ + used_, bytes.size());
      used_ += bytes.size();
    } else {
      flush();
      out_.append(bytes);
    }
  }
  void flush() {
    out_.append(buffer_, used_);
    used_ = 0;
  }

 private:
  static constexpr size_t kMaxVarintBytes = 10;
  std::string& out_;
  char buffer_[256];
  size_t used_ = 0;
};

// The encoded size of such fields, for a message whose length must precede it.
constexpr size_t uint_field_size(uint32_t field, uint64_t value) {
  return varint_size(tag(field, kVarint)) + varint_size(value);
}
constexpr size_t bytes_field_size(uint32_t field, size_t length) {
  return varint_size(tag(field, kLengthDelimited)) + varint_size(length) + length;
}

}  // namespace eacgm::proto_wire
