// The hand-written layout table against gdb's measurements of real CPython builds
// (tests/data/python/layouts.json, written by tests/python/dump_layouts.py).
#include "layers/python/python_layouts.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

namespace eacgm {
namespace {

nlohmann::json load_measured() {
  std::ifstream in(EACGM_TEST_DATA_DIR "/python/layouts.json");
  EXPECT_TRUE(in) << "missing layouts.json";
  return nlohmann::json::parse(in);
}

// Every field of the contract, by its name in the JSON.
const std::pair<const char*, uint32_t eacgm_py_layout::*> kFields[] = {
    {"runtime_interpreters_head", &eacgm_py_layout::runtime_interpreters_head},
    {"interp_threads_head", &eacgm_py_layout::interp_threads_head},
    {"tstate_next", &eacgm_py_layout::tstate_next},
    {"tstate_thread_id", &eacgm_py_layout::tstate_thread_id},
    {"tstate_native_thread_id", &eacgm_py_layout::tstate_native_thread_id},
    {"tstate_frame", &eacgm_py_layout::tstate_frame},
    {"cframe_current_frame", &eacgm_py_layout::cframe_current_frame},
    {"frame_back", &eacgm_py_layout::frame_back},
    {"frame_code", &eacgm_py_layout::frame_code},
    {"frame_instr", &eacgm_py_layout::frame_instr},
    {"frame_owner", &eacgm_py_layout::frame_owner},
    {"frame_owner_cstack", &eacgm_py_layout::frame_owner_cstack},
    {"code_filename", &eacgm_py_layout::code_filename},
    {"code_name", &eacgm_py_layout::code_name},
    {"code_qualname", &eacgm_py_layout::code_qualname},
    {"code_firstlineno", &eacgm_py_layout::code_firstlineno},
    {"code_linetable", &eacgm_py_layout::code_linetable},
    {"code_code", &eacgm_py_layout::code_code},
    {"unicode_state", &eacgm_py_layout::unicode_state},
    {"unicode_ascii_data", &eacgm_py_layout::unicode_ascii_data},
    {"bytes_size", &eacgm_py_layout::bytes_size},
    {"bytes_data", &eacgm_py_layout::bytes_data},
};
static_assert(sizeof(kFields) / sizeof(kFields[0]) * sizeof(uint32_t) ==
                  sizeof(eacgm_py_layout) - sizeof(uint32_t),
              "every field of eacgm_py_layout but `version` is compared");

TEST(PythonLayoutsTest, TableEqualsGdbMeasurements) {
  const nlohmann::json measured = load_measured();
  ASSERT_FALSE(measured.empty());
  for (const nlohmann::json& entry : measured) {
    const uint32_t version = entry.at("version").get<uint32_t>();
    SCOPED_TRACE("CPython " + entry.at("release").get<std::string>());
    std::optional<uint32_t> index = python_layout_index(version);
    ASSERT_TRUE(index.has_value()) << "no layout for a measured version";
    const eacgm_py_layout& layout = python_layouts()[*index];
    EXPECT_EQ(layout.version, version);
    for (const auto& [name, field] : kFields) {
      const nlohmann::json& value = entry.at(name);
      const uint32_t expected = value.is_null() ? EACGM_PY_NONE : value.get<uint32_t>();
      EXPECT_EQ(layout.*field, expected) << name;
    }
    // The BPF side tests these bits of PyASCIIObject.state for compact ASCII strings.
    EXPECT_EQ(entry.at("unicode_compact_bit").get<int>(), 5);
    EXPECT_EQ(entry.at("unicode_ascii_bit").get<int>(), 6);
  }
}

TEST(PythonLayoutsTest, EveryTableVersionWasMeasured) {
  std::set<uint32_t> measured;
  for (const nlohmann::json& entry : load_measured()) {
    measured.insert(entry.at("version").get<uint32_t>());
  }
  for (const eacgm_py_layout& layout : python_layouts()) {
    EXPECT_TRUE(measured.count(layout.version)) << layout.version;
  }
}

TEST(PythonLayoutsTest, LookupByVersion) {
  ASSERT_EQ(python_layouts().size(), 6u);
  for (uint32_t minor = 8; minor <= 13; ++minor) {
    std::optional<uint32_t> index = python_layout_index(python_version_id(3, minor));
    ASSERT_TRUE(index.has_value()) << minor;
    EXPECT_EQ(python_layouts()[*index].version, 300 + minor);
    EXPECT_EQ(python_layout(300 + minor), &python_layouts()[*index]);
  }
  for (uint32_t version : {0u, 207u, 307u, 314u, 400u}) {  // 0 marks an unused BPF map slot
    EXPECT_FALSE(python_layout_index(version).has_value()) << version;
    EXPECT_EQ(python_layout(version), nullptr) << version;
  }
}

}  // namespace
}  // namespace eacgm
