#include "layers/python/python_layouts.h"

#include <array>

namespace eacgm {
namespace {

constexpr uint32_t kNone = EACGM_PY_NONE;

// The walk per version, in short:
//   3.8-3.10  tstate->frame is a PyFrameObject; f_lasti counts bytes (3.8, 3.9) or code units
//             (3.10); threads are told apart only by thread_id (pthread_self); line numbers
//             come from co_lnotab (3.8, 3.9) or co_linetable (3.10).
//   3.11      frames are _PyInterpreterFrame, reached through tstate->cframe->current_frame;
//             prev_instr points into co_code_adaptive; co_qualname and native_thread_id appear.
//   3.12      the same, with frames owned by the C stack (owner == FRAME_OWNED_BY_CSTACK, shims
//             between C and Python calls) to skip, and a PyASCIIObject shorter by the removed
//             wstr pointer (48 -> 40 bytes).
//   3.13      no _PyCFrame: tstate->current_frame; the frame's code is f_executable and its
//             instruction pointer (instr_ptr) points at the instruction executing, not the
//             previous one.
// The values are gdb's answers on the DWARF of pyenv builds (3.8.18, 3.9.18, 3.10.13, 3.11.7,
// 3.12.1, 3.13.0); python_layouts_test compares every one with tests/data/python/layouts.json,
// which tests/python/dump_layouts.py regenerates. CPython keeps these structs stable within a
// minor version (Debian's 3.11.2 is walked with the 3.11 row in python_binary_test).
constexpr std::array<eacgm_py_layout, 6> kLayouts = {{
    {.version = 308,
     .runtime_interpreters_head = 32,
     .interp_threads_head = 8,
     .tstate_next = 8,
     .tstate_thread_id = 176,
     .tstate_native_thread_id = kNone,
     .tstate_frame = 24,
     .cframe_current_frame = kNone,
     .frame_back = 24,
     .frame_code = 32,
     .frame_instr = 104,
     .frame_owner = kNone,
     .frame_owner_cstack = kNone,
     .code_filename = 104,
     .code_name = 112,
     .code_qualname = kNone,
     .code_firstlineno = 40,
     .code_linetable = 120,
     .code_code = kNone,
     .unicode_state = 32,
     .unicode_ascii_data = 48,
     .bytes_size = 16,
     .bytes_data = 32},
    {.version = 309,
     .runtime_interpreters_head = 32,
     .interp_threads_head = 8,
     .tstate_next = 8,
     .tstate_thread_id = 176,
     .tstate_native_thread_id = kNone,
     .tstate_frame = 24,
     .cframe_current_frame = kNone,
     .frame_back = 24,
     .frame_code = 32,
     .frame_instr = 104,
     .frame_owner = kNone,
     .frame_owner_cstack = kNone,
     .code_filename = 104,
     .code_name = 112,
     .code_qualname = kNone,
     .code_firstlineno = 40,
     .code_linetable = 120,
     .code_code = kNone,
     .unicode_state = 32,
     .unicode_ascii_data = 48,
     .bytes_size = 16,
     .bytes_data = 32},
    {.version = 310,
     .runtime_interpreters_head = 32,
     .interp_threads_head = 8,
     .tstate_next = 8,
     .tstate_thread_id = 176,
     .tstate_native_thread_id = kNone,
     .tstate_frame = 24,
     .cframe_current_frame = kNone,
     .frame_back = 24,
     .frame_code = 32,
     .frame_instr = 96,
     .frame_owner = kNone,
     .frame_owner_cstack = kNone,
     .code_filename = 104,
     .code_name = 112,
     .code_qualname = kNone,
     .code_firstlineno = 40,
     .code_linetable = 120,
     .code_code = kNone,
     .unicode_state = 32,
     .unicode_ascii_data = 48,
     .bytes_size = 16,
     .bytes_data = 32},
    {.version = 311,
     .runtime_interpreters_head = 40,
     .interp_threads_head = 16,
     .tstate_next = 8,
     .tstate_thread_id = 152,
     .tstate_native_thread_id = 160,
     .tstate_frame = 56,
     .cframe_current_frame = 8,
     .frame_back = 48,
     .frame_code = 32,
     .frame_instr = 56,
     // 3.11 frames have an owner byte, but no C-stack frames: entry frames are real frames.
     .frame_owner = kNone,
     .frame_owner_cstack = kNone,
     .code_filename = 112,
     .code_name = 120,
     .code_qualname = 128,
     .code_firstlineno = 72,
     .code_linetable = 136,
     .code_code = 184,
     .unicode_state = 32,
     .unicode_ascii_data = 48,
     .bytes_size = 16,
     .bytes_data = 32},
    {.version = 312,
     .runtime_interpreters_head = 40,
     .interp_threads_head = 72,
     .tstate_next = 8,
     .tstate_thread_id = 136,
     .tstate_native_thread_id = 144,
     .tstate_frame = 56,
     .cframe_current_frame = 0,
     .frame_back = 8,
     .frame_code = 0,
     .frame_instr = 56,
     .frame_owner = 70,
     .frame_owner_cstack = 3,
     .code_filename = 112,
     .code_name = 120,
     .code_qualname = 128,
     .code_firstlineno = 68,
     .code_linetable = 136,
     .code_code = 192,
     .unicode_state = 32,
     .unicode_ascii_data = 40,
     .bytes_size = 16,
     .bytes_data = 32},
    {.version = 313,
     .runtime_interpreters_head = 632,
     .interp_threads_head = 7344,
     .tstate_next = 8,
     .tstate_thread_id = 152,
     .tstate_native_thread_id = 160,
     .tstate_frame = 72,
     .cframe_current_frame = kNone,
     .frame_back = 8,
     .frame_code = 0,
     .frame_instr = 56,
     .frame_owner = 70,
     .frame_owner_cstack = 3,
     .code_filename = 112,
     .code_name = 120,
     .code_qualname = 128,
     .code_firstlineno = 68,
     .code_linetable = 136,
     .code_code = 200,
     .unicode_state = 32,
     .unicode_ascii_data = 40,
     .bytes_size = 16,
     .bytes_data = 32},
}};

static_assert(kLayouts.size() <= EACGM_PY_MAX_LAYOUTS, "the BPF layout map holds them all");

}  // namespace

std::span<const eacgm_py_layout> python_layouts() { return kLayouts; }

std::optional<uint32_t> python_layout_index(uint32_t version) {
  for (uint32_t i = 0; i < kLayouts.size(); ++i) {
    if (kLayouts[i].version == version) return i;
  }
  return std::nullopt;
}

const eacgm_py_layout* python_layout(uint32_t version) {
  std::optional<uint32_t> index = python_layout_index(version);
  return index ? &kLayouts[*index] : nullptr;
}

}  // namespace eacgm
