#include "cli/agent_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <sstream>
#include <string_view>
#include <vector>

#include "cli/numeric_flags.h"

namespace eacgm {

std::optional<std::set<Layer>> parse_layers(const std::string& text, std::string& error) {
  std::set<Layer> layers;
  std::stringstream ss(text);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    auto layer = layer_from_name(name);
    if (!layer) {
      std::vector<std::string_view> known;
      for (Layer l : all_layers()) known.push_back(layer_name(l));
      error = fmt::format("unknown layer '{}' (known: {})", name, fmt::join(known, ", "));
      return std::nullopt;
    }
    layers.insert(*layer);
  }
  if (layers.empty()) {
    error = "no layer selected";
    return std::nullopt;
  }
  return layers;
}

std::string layer_names(bool (*keep)(const LayerInfo&)) {
  std::vector<std::string_view> names;
  for (const LayerInfo* layer : layer_registry()) {
    if (!keep || keep(*layer)) names.push_back(layer->name);
  }
  return fmt::format("{}", fmt::join(names, ","));
}

void add_agent_flags(CLI::App* cmd, AgentOptions& options, std::string& layers,
                     const AgentFlagDefaults& defaults) {
  cmd->add_option("--layers", layers, "comma-separated layers to trace")
      ->default_val(defaults.layers);
  cmd->add_option("--ioctl-devices", options.ioctl_devices,
                  "os layer: device files whose ioctls are timed (comma-separated globs)")
      ->default_val("/dev/nvidia*");
  cmd->add_option(
      "--nvml-lib", options.nvml_lib,
      "gpu layer: NVML library to load (default: libnvidia-ml.so.1 on the search path)");
  cmd->add_option("--gpu-rate", options.gpu_rate_hz, "gpu layer: samples per second per GPU")
      ->default_val(defaults.gpu_rate_hz)
      ->check(bounded(kMinGpuRateHz, kMaxGpuRateHz, "samples per second"));
  cmd->add_option("--hang-timeout", options.hang_timeout_s,
                  "seconds a collective may wait for missing ranks, or every rank inside it, "
                  "before it is a hang (reported as resolved if it moves later)")
      ->default_val(3.0)
      ->check(bounded(kMinHangTimeoutS, kMaxHangTimeoutS, "seconds (at most a day)"));
  cmd->add_option("--torch-ops", options.torch_ops, kTorchOpsHelp)
      ->default_val("default")
      ->check(torch_ops_filter());
  if (defaults.python) {
    cmd->add_option("--python-rate", options.python_rate_hz,
                    "python layer: stack samples per second of every thread that runs Python")
        ->default_val(99.0)
        ->check(bounded(1, 1000, "samples per second"));
    cmd->add_option("--python-slow-ms", options.python_slow_ms,
                    "python layer: a call that stays the innermost Python frame longer than "
                    "this is a slow_call anomaly")
        ->default_val(100.0)
        ->check(bounded(1, 3'600'000, "milliseconds (1 ms to 1 hour)"));
    cmd->add_flag("--python-calls", options.python_calls,
                  "python layer: count every Python function call through the interpreter's "
                  "USDT probes (where it has them; costs about a microsecond per call)");
  }
  cmd->add_option("--overhead-budget", options.overhead_budget_pct,
                  "keep what tracing costs each traced process under this share of its time "
                  "(1% or 1): launches, copies, syncs and torch operators are then traced part "
                  "of the time, and their counts marked sampled (summary.json, "
                  "eacgm_traced_ratio; docs/PERFORMANCE.md)")
      ->transform(overhead_budget_percent());
  cmd->add_option("--btf", options.btf_path, "kernel BTF file (default: the running kernel's)");
  if (defaults.python) {
    cmd->add_flag(
        "--no-stop-on-dlopen", [&options](int64_t) { options.stop_on_dlopen = false; },
        "never pause a target to probe a library it just loaded (record probes the libraries "
        "on the job's search path before it starts instead)");
  }
  cmd->add_flag("-v,--verbose", options.verbose,
                "show libbpf's diagnostics (serve: and each process as it is traced)");
}

}  // namespace eacgm
