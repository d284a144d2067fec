// Coverage-guided fuzzing (clang's libFuzzer) of what eacgm reads from the kernel and from the
// processes it traces: an input is a run of ring-buffer records (record_framing.h). Each goes
// through the decoder; the python layer's on into one profile, as the recorder feeds it, which
// then reports and serialises what it made of them. Nothing may crash, trip ASan or UBSan, or
// throw: every string a target held must come out as strict JSON (valid UTF-8). CTest runs it
// for a bounded time from the seeds record_seeds writes (tests/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <variant>

#include "layers/python/python_profile.h"
#include "reader/decoder.h"
#include "record_framing.h"
#include "session/session.h"

namespace {

const eacgm::TorchOpTable& torch_rows() {
  static const eacgm::TorchOpTable table = [] {
    eacgm::TorchOpTable t;
    for (const char* op : {"aten::mm", "aten::conv2d", "aten::add_.Tensor"}) t.intern(op);
    return t;
  }();
  return table;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace eacgm;
  PythonProfile profile({.rate_hz = 99, .slow_call_ns = 1'000'000});
  std::set<uint32_t> interpreters;
  uint64_t last_ns = 0;
  fuzz::for_each_record(data, size, [&](std::span<const std::byte> record) {
    Result<Event> event = decode_event(record, &torch_rows());
    if (!event) return;
    std::visit(
        [&](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, PyCodeEvent> || std::is_same_v<T, PySampleEvent> ||
                        std::is_same_v<T, PyFunctionEvent> || std::is_same_v<T, PyGcEvent>) {
            // Every supported CPython, chosen by pid: line tables and layouts differ by version.
            if (interpreters.insert(e.pid).second) {
              profile.add_interpreter(
                  {e.pid, static_cast<int>(308 + e.pid % 6), "/usr/bin/python3", true, ""});
            }
            last_ns = std::max(last_ns, e.ts_ns);
            if constexpr (std::is_same_v<T, PyCodeEvent>) profile.on_code(e);
            if constexpr (std::is_same_v<T, PySampleEvent>) (void)profile.on_sample(e);
            if constexpr (std::is_same_v<T, PyFunctionEvent>) profile.on_function(e);
            if constexpr (std::is_same_v<T, PyGcEvent>) profile.on_gc(e);
          }
        },
        *event);
  });
  Session session;
  for (const Anomaly& a : profile.take_anomalies(session, last_ns, true)) {
    (void)a.evidence.dump();
    (void)nlohmann::json(a.message).dump();
  }
  (void)profile.close_stacks();
  (void)profile.figures().dump();
  return 0;
}
