// Source lines of Python instructions, from the code object's own line table.
//
// The BPF side samples a frame as (code object, instruction word) and sends each code object's
// line table once (struct eacgm_py_code); the line is worked out here, in user space, the way
// CPython's PyCode_Addr2Line does. The table format changed twice:
//   3.8, 3.9   co_lnotab: (address increment, signed line increment) byte pairs
//   3.10       co_linetable (PEP 626): (address delta, signed line delta) pairs, -128 = no line
//   3.11+      the location table of Objects/locations.md: entries of varying length, each
//              covering 1 to 8 code units, with a line delta and optional columns
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "bpf/events.h"

namespace eacgm {

// The line of the instruction at byte `offset` of the bytecode of a code object of CPython
// `version` (311) whose line table is `linetable` and co_firstlineno `firstlineno`. 0 when the
// instruction has no line (3.10+: compiler-made instructions), when the offset lies beyond the
// table (which may have been truncated by the BPF copy), for a malformed table or for an
// unsupported version. Before 3.10 every offset has a line, even past the end of the code.
int python_line(uint32_t version, std::span<const uint8_t> linetable, int firstlineno,
                uint64_t offset);

// The byte offset into the bytecode of the instruction a sampled frame is at, from the frame's
// instruction word as BPF read it (struct eacgm_py_frame.instr) and the code object's address:
//   3.8, 3.9   f_lasti (low 32 bits, an int) is a byte offset
//   3.10       f_lasti counts 2-byte code units
//   3.11, 3.12 prev_instr points at the last instruction started, inside the code object at
//              `layout.code_code` (co_code_adaptive)
//   3.13       instr_ptr points at the instruction executing, likewise
// nullopt when the frame has not started (f_lasti -1, prev_instr before the first instruction),
// for words that cannot be an instruction of that code object, and for unsupported versions.
std::optional<uint32_t> python_instruction_offset(uint32_t version, const eacgm_py_layout& layout,
                                                  uint64_t code, uint64_t instr);

}  // namespace eacgm
