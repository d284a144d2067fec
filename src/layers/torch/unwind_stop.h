// Puts back the return addresses the kernel's return probes replaced in a thread that is about
// to unwind its stack (src/layers/torch/torch.bpf.c on_unwind_start explains why the job would die
// otherwise). The thread's process is stopped while this runs.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "common/result.h"

namespace eacgm {

// Writes each original address to its stack slot in process `pid`'s memory; `slots` is
// (slot, original address), newest first, and only the first entry for a slot is written.
// Returns how many slots were written.
Result<size_t> restore_return_addresses(uint32_t pid,
                                        std::span<const std::pair<uint64_t, uint64_t>> slots);

}  // namespace eacgm
