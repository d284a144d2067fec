#include "cli/merge_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "cli/numeric_flags.h"
#include "common/exit_codes.h"
#include "common/json_text.h"
#include "merge/session_merge.h"

namespace eacgm {
namespace {

struct MergeArgs {
  MergeOptions options;
  bool json = false;
};

std::string microseconds(const nlohmann::json& ns) {
  return ns.is_null() ? "unknown" : fmt::format("{:.1f} µs", ns.get<double>() / 1e3);
}

int run_merge(const MergeArgs& args) {
  auto summary = merge_sessions(args.options);
  if (!summary) return fail(kExitUsage, summary.error().message);
  const nlohmann::json& nccl = (*summary)["nccl"];
  const bool aligned = nccl["not_overlapping"].get<uint64_t>() == 0;
  if (args.json) {
    fmt::print("{}\n", json_text(*summary, 2));
    return aligned ? 0 : 1;
  }
  fmt::print("merged {} sessions into {}\n", (*summary)["sessions"].size(), args.options.out_dir);
  for (const auto& s : (*summary)["sessions"]) {
    const std::string method = s["method"];
    std::string how;
    if (method == "reference") {
      how = "the reference clock";
    } else if (method == "collectives") {
      how = fmt::format(
          "shifted {:.6f} s, from {} shared collectives: {:+.3f} ms against the realtime "
          "clocks, error within {}{}",
          s["shift_ns"].get<double>() / 1e9, s["collectives_shared"].get<uint64_t>(),
          s["realtime_correction_ns"].get<double>() / 1e6, microseconds(s["residual_ns"]),
          s["conflicts"].get<uint64_t>()
              ? fmt::format(" ({} collectives conflict)", s["conflicts"].get<uint64_t>())
              : "");
    } else {
      how = fmt::format("shifted {:.6f} s by the realtime clocks alone (no collective shared)",
                        s["shift_ns"].get<double>() / 1e9);
    }
    fmt::print("  {}: {}\n", s["dir"].get<std::string>(), how);
  }
  fmt::print("{} of {} collectives seen by two sessions or more overlap on every pair of ranks\n",
             nccl["overlapping_on_every_pair"].get<uint64_t>(),
             nccl["collectives_across_sessions"].get<uint64_t>());
  if (!aligned) {
    fmt::print(
        "the clocks could not be aligned: {} collectives do not overlap (worst gap {:.3f} "
        "ms); clock drift during the sessions, or sessions of different jobs\n",
        nccl["not_overlapping"].get<uint64_t>(), nccl["worst_gap_ns"].get<double>() / 1e6);
  }
  // The verdicts on the whole job: a straggler or a hang named with the node its rank ran on.
  for (const auto& a : nccl["anomalies"]) {
    const std::string node = a.value("node", nlohmann::json()).is_string()
                                 ? fmt::format(" [node {}]", a["node"].get<std::string>())
                                 : "";
    fmt::print("anomaly [{}]{}: {}\n", a["kind"].get<std::string>(), node,
               a["message"].get<std::string>());
  }
  if (nccl.contains("hangs_note")) fmt::print("note: {}\n", nccl["hangs_note"].get<std::string>());
  return aligned ? 0 : 1;
}

}  // namespace

void add_merge_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* merge = app.add_subcommand(
      "merge", "sessions recorded on several nodes of one job become one, on one clock");
  merge->add_option("sessions", args->options.sessions, "session directories, one per node")
      ->required();
  merge->add_option("-o,--output", args->options.out_dir, "the merged session's directory (new)")
      ->required();
  merge
      ->add_option("--reference", args->options.reference,
                   "whose clock the merged session keeps: its index among the sessions")
      ->capture_default_str();
  merge
      ->add_option("--hang-timeout", args->options.hang_timeout_s,
                   "seconds a collective may wait for missing ranks, or every rank inside it, "
                   "before the recordings ended, before it is a hang (as record's)")
      ->capture_default_str()
      ->check(bounded(kMinHangTimeoutS, kMaxHangTimeoutS, "seconds"));
  merge->add_flag("--json", args->json, "print the merged summary as JSON");
  merge->callback([args, &run] { run = [args] { return run_merge(*args); }; });
}

}  // namespace eacgm
