#include "layers/nccl/nccl_runtime.h"

#include <fmt/format.h>

#include "layers/nccl/collectives.h"

namespace eacgm {
namespace {

class NcclRuntime : public LayerRuntime {
 public:
  NcclRuntime(const LayerRuntimeSetup& setup, LayerHost& host)
      : host_(host),
        collectives_({.hang_timeout_ns = static_cast<uint64_t>(setup.options.hang_timeout_s * 1e9),
                      .straggler_window = setup.mode.straggler_window}) {}

  void on_call_entry(CallRecord& entry, ProcessInfo& process) override {
    entry.collective = collectives_.on_begin(entry, &process);
  }

  void on_call(CallRecord& call, ProcessInfo& process) override {
    if (call.layer() != Layer::kNccl) return;
    call.collective = collectives_.on_end(call, &process);
    // A communicator's rank is the job's rank where no RANK variable said one.
    if (call.spec->role == CallRole::kCommInit && !call.failed() && !process.rank) {
      process.rank = static_cast<int32_t>(call.raw.word(call.spec->rank_slot));
    }
  }

  // A rank eacgm kept stopped is late by eacgm's doing: never a straggler for it.
  void on_pause(uint32_t pid, uint64_t from_ns, uint64_t to_ns) override {
    collectives_.note_pause(pid, from_ns, to_ns);
  }

  void forget(uint32_t pid) override { collectives_.forget_process(pid); }

  void tick(uint64_t now_ns, bool /*final*/) override {
    collectives_.set_session_start(host_.session().start_ns);
    for (Anomaly& a : collectives_.check(now_ns)) host_.report(std::move(a));
    for (const CollectiveTracker::HangResolution& r : collectives_.take_resolutions()) {
      resolve_hang(r);
    }
  }

  void finish() override {
    LayerState& state = host_.session().layers[Layer::kNccl];
    state.extra["ranks"] = collectives_.rank_figures();
    state.extra["open_collectives"] = collectives_.open_collectives();
  }

 private:
  // A hang reported earlier moved after all: its anomaly says so.
  void resolve_hang(const CollectiveTracker::HangResolution& resolution) {
    for (Anomaly& a : host_.session().anomalies) {
      if (a.kind != "hang" || a.evidence.value("communicator", "") != resolution.communicator ||
          a.evidence.value("seq", uint64_t{0}) != resolution.seq ||
          a.evidence.contains("resolved_after_s")) {
        continue;
      }
      a.evidence["resolved_after_s"] = resolution.waited_s;
      a.message +=
          fmt::format("; it moved on after {:.1f} s: a stall, not a hang", resolution.waited_s);
      fmt::print(stderr, "eacgm: anomaly [hang] resolved: {}\n", a.message);
      return;
    }
  }

  LayerHost& host_;
  CollectiveTracker collectives_;
};

}  // namespace

std::unique_ptr<LayerRuntime> make_nccl_runtime(const LayerRuntimeSetup& setup, LayerHost& host) {
  return std::make_unique<NcclRuntime>(setup, host);
}

}  // namespace eacgm
