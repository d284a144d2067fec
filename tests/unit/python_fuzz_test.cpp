// The python layer's decoding fed what a racing walker can read: random bytes and bit-flipped
// real records (code objects of every supported CPython, samples through them), through the
// ring-record decoder and the profile to every output. Nothing may crash (the unit tests run
// under ASan and UBSan), and nothing the target held may reach an output unchecked: the
// figures serialise as strict JSON (valid UTF-8) and every function named passes the check.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "layers/python/python_profile.h"
#include "reader/decoder.h"
#include "session/session.h"
#include "test_support.h"

namespace eacgm {
namespace {

struct RealCode {
  uint32_t version;
  std::string name;
  std::vector<uint8_t> linetable;
  uint32_t firstlineno;
};

std::vector<RealCode> real_codes() {
  std::vector<RealCode> codes;
  for (const auto& entry : std::filesystem::directory_iterator(EACGM_TEST_DATA_DIR "/python")) {
    if (!entry.path().filename().string().starts_with("linetables-")) continue;
    std::ifstream in(entry.path());
    const nlohmann::json fixture = nlohmann::json::parse(in);
    for (const nlohmann::json& code : fixture.at("codes")) {
      RealCode c{fixture.at("version"), code.at("name"), {}, code.at("firstlineno")};
      const std::string hex = code.at("linetable");
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        c.linetable.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
      }
      codes.push_back(std::move(c));
    }
  }
  return codes;
}

void flip_bits(std::vector<std::byte>& data, std::mt19937_64& rng, size_t flips) {
  // The header's kind stays: the point is to reach the python decoders.
  for (size_t i = 0; i < flips; ++i) {
    const size_t at = sizeof(eacgm_header) + rng() % (data.size() - sizeof(eacgm_header));
    data[at] ^= static_cast<std::byte>(1u << (rng() % 8));
  }
}

void feed(PythonProfile& profile, const std::vector<std::byte>& data) {
  Result<Event> event = decode_event(data);
  if (!event) return;
  if (auto* code = std::get_if<PyCodeEvent>(&*event)) profile.on_code(*code);
  if (auto* sample = std::get_if<PySampleEvent>(&*event)) profile.on_sample(*sample);
  if (auto* function = std::get_if<PyFunctionEvent>(&*event)) profile.on_function(*function);
}

TEST(PythonFuzz, RandomAndBitFlippedRecordsNeverReachAnOutputUnchecked) {
  const std::vector<RealCode> codes = real_codes();
  ASSERT_FALSE(codes.empty());
  std::mt19937_64 rng(20261202);
  constexpr uint32_t kPid = 4242;
  PythonProfile profile({.rate_hz = 100, .slow_call_ns = 50'000'000});
  // One process per supported version: line tables decode by version.
  for (uint32_t version = 308; version <= 313; ++version) {
    profile.add_interpreter(
        {kPid + version, static_cast<int>(version), "/usr/bin/python3", true, ""});
  }
  Session session;
  uint64_t ts = 1'000'000'000;
  for (int round = 0; round < 4000; ++round) {
    const RealCode& real = codes[rng() % codes.size()];
    const uint32_t pid = kPid + real.version;
    const uint64_t code_addr = 0x7f0000000000ull + 16 * (rng() % 64);
    eacgm_py_code code{};
    code.hdr = {EACGM_EV_PY_CODE, pid, pid, EACGM_LAYER_PYTHON, ts};
    code.code = code_addr;
    code.firstlineno = real.firstlineno;
    std::snprintf(code.name, sizeof(code.name), "%s", real.name.c_str());
    std::snprintf(code.file, sizeof(code.file), "/job/train.py");
    code.linetable_len = static_cast<uint32_t>(real.linetable.size());
    if (!real.linetable.empty()) {
      std::memcpy(code.linetable, real.linetable.data(),
                  std::min(real.linetable.size(), sizeof(code.linetable)));
    }
    std::vector<std::byte> data = bytes_of(code);
    switch (rng() % 3) {
      case 0:
        break;  // a real one: the flipped ones around it must not spoil it
      case 1:
        flip_bits(data, rng, 1 + rng() % 16);
        break;
      default:  // random bytes after the header
        for (size_t i = sizeof(eacgm_header); i < data.size(); ++i) {
          data[i] = static_cast<std::byte>(rng());
        }
    }
    feed(profile, data);

    eacgm_py_sample sample{};
    sample.hdr = {EACGM_EV_PY_SAMPLE, pid, pid + static_cast<uint32_t>(rng() % 3),
                  EACGM_LAYER_PYTHON, ts};
    sample.nframes = 1 + rng() % EACGM_PY_MAX_FRAMES;
    sample.thread_state = rng() % 5;  // 4 is no state at all
    for (auto& frame : sample.frames) {
      frame.code = 0x7f0000000000ull + 16 * (rng() % 64);
      // Instruction words near the code object (3.11+ pointers) or small offsets (3.8-3.10).
      frame.instr = rng() % 2 ? frame.code + rng() % 8192 : rng() % 4096;
    }
    data = bytes_of(sample);
    if (rng() % 4 == 0) flip_bits(data, rng, 1 + rng() % 8);
    feed(profile, data);
    ts += 10'000'000 + rng() % 2'000'000;
    if (round % 500 == 0) (void)profile.take_anomalies(session, ts, false);
  }
  std::vector<Anomaly> anomalies = profile.take_anomalies(session, ts, true);
  (void)profile.close_stacks();

  const nlohmann::json figures = profile.figures();
  EXPECT_NO_THROW((void)figures.dump());  // strict: throws on invalid UTF-8
  for (const Anomaly& a : anomalies) {
    EXPECT_NO_THROW((void)a.evidence.dump());
    EXPECT_NO_THROW((void)nlohmann::json(a.message).dump());
  }
  EXPECT_GT(figures["samples"].get<uint64_t>(), 0u);
  EXPECT_GT(figures["samples_rejected"].get<uint64_t>(), 0u);
  EXPECT_GT(figures["codes_rejected"].get<uint64_t>(), 0u);
  for (const auto& [key, f] : profile.functions()) {
    const size_t colon = key.rfind(':');
    ASSERT_NE(colon, std::string::npos) << key;
    EXPECT_TRUE(plausible_python_code(key.substr(colon + 1), f.file, f.first_line)) << key;
  }
  // Sites (what other layers' calls are attributed to) come from the same checked codes.
  for (uint32_t version = 308; version <= 313; ++version) {
    for (uint64_t i = 0; i < 64; ++i) {
      const uint64_t addr = 0x7f0000000000ull + 16 * i;
      if (const PythonSite* site = profile.site(kPid + version, addr, addr + 2 * i)) {
        EXPECT_GE(site->line, 0) << site->function;
        EXPECT_NO_THROW((void)nlohmann::json(site->function).dump());
      }
    }
  }
}

}  // namespace
}  // namespace eacgm
