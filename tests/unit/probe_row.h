// The probe table row of a traced function, for tests that build calls by hand.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "probes/probe_table.h"

namespace eacgm {

inline const ProbeSpec& probe_row(Layer layer, std::string_view symbol) {
  for (const ProbeSpec& spec : probe_table(layer)) {
    if (spec.symbol == symbol) return spec;
  }
  throw std::runtime_error("no probe table row for " + std::string(symbol));
}

inline const ProbeSpec& cuda_row(std::string_view symbol) {
  return probe_row(Layer::kCuda, symbol);
}
inline const ProbeSpec& nccl_row(std::string_view symbol) {
  return probe_row(Layer::kNccl, symbol);
}

}  // namespace eacgm
