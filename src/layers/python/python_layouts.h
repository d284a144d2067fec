// Where CPython keeps what a stack walker needs, per minor version.
//
// The BPF side reads CPython's own structures (bpf/events.h, struct eacgm_py_layout): which
// bytes those are changes with minor versions, not within one, so there is one row per minor
// version, checked against what gdb computes from the DWARF of real builds
// (tests/python/dump_layouts.py -> tests/data/python/layouts.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "bpf/events.h"

namespace eacgm {

// Version ids are major * 100 + minor (311), as in eacgm_py_layout.version.
constexpr uint32_t python_version_id(uint32_t major, uint32_t minor) { return major * 100 + minor; }

// One layout per supported version (3.8 to 3.13, x86-64 release builds with the GIL), in
// ascending version order. This is what user space loads into the BPF side's layout map.
std::span<const eacgm_py_layout> python_layouts();

// Index in python_layouts() of the layout for `version` (311): the value of
// eacgm_py_proc.layout. nullopt when the version is not supported.
std::optional<uint32_t> python_layout_index(uint32_t version);

// The layout for `version`; nullptr when the version is not supported.
const eacgm_py_layout* python_layout(uint32_t version);

}  // namespace eacgm
