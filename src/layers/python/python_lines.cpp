#include "layers/python/python_lines.h"

#include <cstddef>
#include <cstdint>

namespace eacgm {
namespace {

// Code objects are limited to INT_MAX bytes of bytecode; anything further is not an offset.
constexpr uint64_t kMaxOffset = 0x7fffffff;

// Lines are ints in CPython; a table that takes one below 1 is corrupt.
int positive(int64_t line) { return line > 0 && line <= INT32_MAX ? static_cast<int>(line) : 0; }

// 3.8, 3.9: the line accumulates the increments of every pair whose address (the running sum of
// address increments) is at or before the offset. Line increments are signed since 3.6.
int lnotab_line(std::span<const uint8_t> table, int64_t line, uint64_t offset) {
  uint64_t address = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    address += table[i];
    if (address > offset) break;
    line += static_cast<int8_t>(table[i + 1]);
  }
  return positive(line);
}

// 3.10: each pair covers [start, start + delta) with the line moved by a signed delta, or no
// line at all for -128 (which leaves the running line as it was). Pairs with a zero address
// delta only move the line: that is how jumps of more than 127 lines are written.
int linetable310_line(std::span<const uint8_t> table, int64_t line, uint64_t offset) {
  uint64_t start = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    const uint64_t end = start + table[i];
    const auto delta = static_cast<int8_t>(table[i + 1]);
    if (delta != -128) line += delta;
    if (offset >= start && offset < end) return delta == -128 ? 0 : positive(line);
    start = end;
  }
  return 0;
}

// Reader of the 3.11+ location table's variable-length integers: 6 bits a byte, least
// significant first, bit 6 set on every byte but the last.
class VarintReader {
 public:
  VarintReader(std::span<const uint8_t> table, size_t pos) : table_(table), pos_(pos) {}
  std::optional<uint64_t> unsigned_value() {
    uint64_t value = 0;
    for (unsigned shift = 0; pos_ < table_.size() && shift < 64; shift += 6) {
      const uint8_t byte = table_[pos_++];
      value |= static_cast<uint64_t>(byte & 63) << shift;
      if ((byte & 64) == 0) return value;
    }
    return std::nullopt;
  }
  // Signed values keep the sign in the lowest bit.
  std::optional<int64_t> signed_value() {
    std::optional<uint64_t> value = unsigned_value();
    if (!value) return std::nullopt;
    const auto magnitude = static_cast<int64_t>(*value >> 1);
    return (*value & 1) ? -magnitude : magnitude;
  }
  size_t pos() const { return pos_; }

 private:
  std::span<const uint8_t> table_;
  size_t pos_;
};

// 3.11+: every entry starts with a byte 1ccccnnn: it covers n + 1 code units, and the code c
// says what follows. 15: no location (the running line is kept for the next entry); 14: long
// form, signed line delta then end line delta, column and end column; 13: signed line delta, no
// columns; 10-12: line delta c - 10, then two column bytes; 0-9: same line, one column byte.
int locations_line(std::span<const uint8_t> table, int64_t line, uint64_t offset) {
  uint64_t start = 0;
  size_t pos = 0;
  while (pos < table.size()) {
    const uint8_t first = table[pos++];
    if ((first & 0x80) == 0) return 0;  // not at an entry: malformed
    const unsigned code = (first >> 3) & 15;
    const uint64_t end = start + 2 * ((first & 7) + 1);
    bool has_line = true;
    if (code == 15) {
      has_line = false;
    } else if (code == 14 || code == 13) {
      VarintReader reader(table, pos);
      std::optional<int64_t> delta = reader.signed_value();
      if (!delta) return 0;
      line += *delta;
      for (int skip = 0; code == 14 && skip < 3; ++skip) {
        if (!reader.unsigned_value()) return 0;
      }
      pos = reader.pos();
    } else if (code >= 10) {
      line += code - 10;
      pos += 2;
    } else {
      pos += 1;
    }
    if (offset >= start && offset < end) return has_line ? positive(line) : 0;
    start = end;
  }
  return 0;
}

}  // namespace

int python_line(uint32_t version, std::span<const uint8_t> linetable, int firstlineno,
                uint64_t offset) {
  if (version >= 308 && version <= 309) return lnotab_line(linetable, firstlineno, offset);
  if (version == 310) return linetable310_line(linetable, firstlineno, offset);
  if (version >= 311 && version <= 313) return locations_line(linetable, firstlineno, offset);
  return 0;
}

std::optional<uint32_t> python_instruction_offset(uint32_t version, const eacgm_py_layout& layout,
                                                  uint64_t code, uint64_t instr) {
  if (version >= 308 && version <= 310) {
    const auto lasti = static_cast<int32_t>(static_cast<uint32_t>(instr));
    if (lasti < 0) return std::nullopt;
    // 3.10 counts code units; kMaxOffset bounds it as bytes.
    const uint64_t offset =
        version == 310 ? uint64_t{2} * static_cast<uint64_t>(lasti) : static_cast<uint64_t>(lasti);
    if (offset > kMaxOffset) return std::nullopt;
    return static_cast<uint32_t>(offset);
  }
  if (version >= 311 && version <= 313 && layout.code_code != EACGM_PY_NONE) {
    const uint64_t first = code + layout.code_code;
    if (code == 0 || instr < first) return std::nullopt;
    const uint64_t offset = instr - first;
    if (offset > kMaxOffset || offset % 2 != 0) return std::nullopt;
    return static_cast<uint32_t>(offset);
  }
  return std::nullopt;
}

}  // namespace eacgm
