// The flags of the live modes, registered in one place: `record`, `attach` and `serve` fill the
// same AgentOptions fields from the same flags, so a flag means the same in each.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "agent/agent_options.h"

namespace CLI {
class App;
}

namespace eacgm {

// "cuda,nccl" -> layers, or nullopt with `error` set: an unknown name, or none at all.
std::optional<std::set<Layer>> parse_layers(const std::string& text, std::string& error);
// The registered layers' names that `keep` accepts (every layer without it), joined by commas:
// --layers' defaults and the lists in messages.
std::string layer_names(bool (*keep)(const LayerInfo&) = nullptr);

// The defaults that differ between the modes: serve samples GPUs less often and cannot take the
// python layer (per-function figures have no bounded set of metric labels).
struct AgentFlagDefaults {
  std::string layers;
  double gpu_rate_hz = 10.0;
  bool python = true;  // the python layer's flags, and --no-stop-on-dlopen (serve stops always)
};

// Registers the flags on `cmd`; --layers' text goes to `layers`, to parse_layers once parsed.
void add_agent_flags(CLI::App* cmd, AgentOptions& options, std::string& layers,
                     const AgentFlagDefaults& defaults);

}  // namespace eacgm
