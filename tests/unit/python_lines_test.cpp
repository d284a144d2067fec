// Line numbers from CPython line tables, against what each CPython says about its own code
// objects (tests/data/python/linetables-<release>.json, from tests/python/dump_linetables.py).
#include "layers/python/python_lines.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "layers/python/python_layouts.h"

namespace eacgm {
namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

std::vector<nlohmann::json> load_fixtures() {
  std::vector<nlohmann::json> fixtures;
  for (const auto& entry : std::filesystem::directory_iterator(EACGM_TEST_DATA_DIR "/python")) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("linetables-")) continue;
    std::ifstream in(entry.path());
    fixtures.push_back(nlohmann::json::parse(in));
  }
  return fixtures;
}

TEST(PythonLinesTest, FixturesCoverEverySupportedVersion) {
  std::set<uint32_t> versions;
  for (const nlohmann::json& fixture : load_fixtures()) {
    versions.insert(fixture.at("version").get<uint32_t>());
  }
  for (const eacgm_py_layout& layout : python_layouts()) {
    EXPECT_TRUE(versions.count(layout.version)) << "no line tables of " << layout.version;
  }
}

// Every instruction offset of every code object of the sample, for every recorded interpreter.
TEST(PythonLinesTest, EveryOffsetMatchesCPython) {
  for (const nlohmann::json& fixture : load_fixtures()) {
    const uint32_t version = fixture.at("version");
    SCOPED_TRACE("CPython " + fixture.at("release").get<std::string>());
    size_t checked = 0;
    for (const nlohmann::json& code : fixture.at("codes")) {
      SCOPED_TRACE(code.at("name").get<std::string>());
      const std::vector<uint8_t> table = from_hex(code.at("linetable"));
      const int firstlineno = code.at("firstlineno");
      const uint64_t size = code.at("code_size");
      std::vector<int> expected(size, -1);
      for (const nlohmann::json& range : code.at("lines")) {
        for (uint64_t offset = range[0]; offset < range[1]; ++offset) expected[offset] = range[2];
      }
      int mismatches = 0;
      for (uint64_t offset = 0; offset < size; offset += 2, ++checked) {
        ASSERT_NE(expected[offset], -1) << "the fixture leaves offset " << offset << " out";
        const int line = python_line(version, table, firstlineno, offset);
        if (line != expected[offset] && ++mismatches <= 5) {
          ADD_FAILURE() << "offset " << offset << ": line " << line << ", CPython says "
                        << expected[offset];
        }
      }
      EXPECT_EQ(mismatches, 0);
      // PEP 626 tables end with the code: past it there is no line.
      if (version >= 310) {
        EXPECT_EQ(python_line(version, table, firstlineno, size), 0);
      }
    }
    EXPECT_GT(checked, 1000u);
  }
}

// BPF copies at most EACGM_PY_LINETABLE_LEN bytes: a cut table must give the right line or
// none (3.10+), never a wrong one.
TEST(PythonLinesTest, TruncatedTablesNeverGiveWrongLines) {
  for (const nlohmann::json& fixture : load_fixtures()) {
    const uint32_t version = fixture.at("version");
    if (version < 310) continue;  // co_lnotab has no end: the last line reached stands
    SCOPED_TRACE("CPython " + fixture.at("release").get<std::string>());
    for (const nlohmann::json& code : fixture.at("codes")) {
      std::vector<uint8_t> table = from_hex(code.at("linetable"));
      table.resize(table.size() / 2 + 1);
      const int firstlineno = code.at("firstlineno");
      for (const nlohmann::json& range : code.at("lines")) {
        for (uint64_t offset = range[0]; offset < range[1]; offset += 2) {
          const int line = python_line(version, table, firstlineno, offset);
          if (line != 0) {
            ASSERT_EQ(line, range[2].get<int>()) << "offset " << offset;
          }
        }
      }
    }
  }
}

TEST(PythonLinesTest, HandWrittenTables) {
  // 3.8: +6 bytes +1 line, +250 bytes -2 lines (0xfe as a signed byte).
  const std::vector<uint8_t> lnotab = {6, 1, 250, 0xfe};
  EXPECT_EQ(python_line(308, lnotab, 10, 0), 10);
  EXPECT_EQ(python_line(308, lnotab, 10, 6), 11);
  EXPECT_EQ(python_line(309, lnotab, 10, 255), 11);
  EXPECT_EQ(python_line(309, lnotab, 10, 256), 9);
  // 3.10: 4 bytes on line +1, 2 bytes with no line, 0 bytes +127 lines, 2 bytes +3 lines.
  const std::vector<uint8_t> linetable = {4, 1, 2, 0x80, 0, 127, 2, 3};
  EXPECT_EQ(python_line(310, linetable, 1, 2), 2);
  EXPECT_EQ(python_line(310, linetable, 1, 4), 0);
  EXPECT_EQ(python_line(310, linetable, 1, 6), 132);
  EXPECT_EQ(python_line(310, linetable, 1, 8), 0);
  // 3.11+: one-line form +1 over 2 units; no location over 1 unit; long form over 1 unit with
  // line delta -3 (signed varint 7: sign in bit 0), end-line 0, columns 1 and 2; no-columns
  // form over 1 unit, line delta +40 as a two-byte varint (16 with the continue bit 64, then 1:
  // 16 + (1 << 6) = 80, signed +40).
  const std::vector<uint8_t> locations = {
      0x80 | 11 << 3 | 1, 0,       4, 0x80 | 15 << 3, 0x80 | 14 << 3, 7, 0, 1, 2,
      0x80 | 13 << 3,     16 | 64, 1};
  for (uint32_t version : {311u, 312u, 313u}) {
    EXPECT_EQ(python_line(version, locations, 20, 0), 21);
    EXPECT_EQ(python_line(version, locations, 20, 2), 21);
    EXPECT_EQ(python_line(version, locations, 20, 4), 0);
    EXPECT_EQ(python_line(version, locations, 20, 6), 18);
    EXPECT_EQ(python_line(version, locations, 20, 8), 58);
    EXPECT_EQ(python_line(version, locations, 20, 10), 0);
  }
}

TEST(PythonLinesTest, MalformedTablesGiveNoLine) {
  const std::vector<uint8_t> not_an_entry = {0x10, 0x80};
  EXPECT_EQ(python_line(311, not_an_entry, 5, 0), 0);
  const std::vector<uint8_t> unfinished_varint = {0x80 | 13 << 3, 0x41};
  EXPECT_EQ(python_line(312, unfinished_varint, 5, 0), 0);
  const std::vector<uint8_t> odd = {4};
  EXPECT_EQ(python_line(310, odd, 5, 0), 0);
  EXPECT_EQ(python_line(307, {}, 5, 0), 0);
  EXPECT_EQ(python_line(314, {}, 5, 0), 0);
}

TEST(PythonLinesTest, InstructionOffsets) {
  auto layout = [](uint32_t version) { return *python_layout(version); };
  // f_lasti: the low 32 bits of the word; the high half is f_lineno.
  EXPECT_EQ(python_instruction_offset(308, layout(308), 0x1000, 0x0000002a'00000010), 16u);
  EXPECT_EQ(python_instruction_offset(309, layout(309), 0x1000, 24), 24u);
  EXPECT_EQ(python_instruction_offset(310, layout(310), 0x1000, 0x00000007'00000011), 34u);
  EXPECT_FALSE(python_instruction_offset(308, layout(308), 0x1000, 0xffffffff));  // -1: not started
  EXPECT_FALSE(python_instruction_offset(310, layout(310), 0x1000, 0x80000000));
  // Pointers into co_code_adaptive.
  for (uint32_t version : {311u, 312u, 313u}) {
    const eacgm_py_layout& l = layout(version);
    const uint64_t code = 0x7f0000001000;
    EXPECT_EQ(python_instruction_offset(version, l, code, code + l.code_code), 0u);
    EXPECT_EQ(python_instruction_offset(version, l, code, code + l.code_code + 46), 46u);
    // 3.11/3.12 point one unit before the first instruction until it starts.
    EXPECT_FALSE(python_instruction_offset(version, l, code, code + l.code_code - 2));
    EXPECT_FALSE(python_instruction_offset(version, l, code, 0));
    EXPECT_FALSE(python_instruction_offset(version, l, code, code + l.code_code + 3));
    EXPECT_FALSE(
        python_instruction_offset(version, l, code, code + l.code_code + (uint64_t{1} << 40)));
    EXPECT_FALSE(python_instruction_offset(version, l, 0, l.code_code + 8));
  }
  EXPECT_FALSE(python_instruction_offset(314, layout(313), 0x1000, 0x1000 + 200));
}

}  // namespace
}  // namespace eacgm
