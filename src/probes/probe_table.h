// Probes are data: one row per traced function says where its arguments are,
// how to show them, how many bytes the call moves and what it does to device
// memory. The BPF side is generic (it captures the argument registers, copies
// the memory a row names at entry, and reads one pointee at return);
// everything specific lives here.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/events.h"
#include "layers/layer.h"

namespace eacgm {

// Index into the captured words: registers rdi, rsi, rdx, rcx, r8, r9, then
// the first, second and third stack words above the return address. The third
// is the extra word (bpf/events.h EACGM_CALL_WORDS), which a row with an
// out-pointer cannot use. A row's MemoryRead may fill any words instead.
enum Slot : uint8_t {
  kRdi = 0,
  kRsi,
  kRdx,
  kRcx,
  kR8,
  kR9,
  kStack0,
  kStack1,
  kStack2,
  kNoSlot = 0xff
};
constexpr Slot kExtra = kStack2;

enum class ArgFormat : uint8_t {
  kInt,           // signed 32-bit value
  kUInt,          // unsigned 64-bit value
  kUInt32,        // unsigned 32-bit value (the upper half of its register or stack word is garbage)
  kPointer,       // shown as hex
  kSize,          // byte count
  kMemcpyKind,    // cudaMemcpyKind, shown by name
  kDim3,          // a dim3 passed by value: x and y packed in `slot`, z in the next slot
  kOutPointer,    // a T** whose pointee is read at return (shown as the value written)
  kNcclDataType,  // ncclDataType_t, shown by name
  kNcclRedOp,     // ncclRedOp_t, shown by name
  kCString,       // a NUL-terminated string argument: its address (the string comes as a name)
  kDim3Split,     // three unsigned arguments x, y, z in `slot` and the two after it
  kDim3High,      // three packed unsigned ints: x in the upper half of `slot`, y and z the next
};

struct ArgSpec {
  std::string_view name;
  Slot slot;
  ArgFormat format;
};

// Arguments passed in memory, copied by BPF at entry: `words` 8-byte words from
// `offset_words` words past the pointer in `from` (or past the return address when
// `from` is kStackArgs) into the captured words from `into` on. Rows that take
// more than six integer arguments read the stack without saying so (bpf_entry_read).
struct MemoryRead {
  static constexpr Slot kStackArgs = static_cast<Slot>(0xf);
  Slot from = kNoSlot;
  uint8_t offset_words = 0;
  Slot into = kNoSlot;
  uint8_t words = 0;
};

enum class MemoryEffect : uint8_t { kNone, kDeviceAlloc, kDeviceFree, kHostAlloc, kHostFree };

// What a call means for cross-process analysis (NCCL communicators).
enum class CallRole : uint8_t {
  kPlain,
  kCommInit,      // creates a communicator: written to out_slot, rank and nranks in slots
  kCommDestroy,   // ends the communicator in comm_slot
  kCollective,    // every rank of comm_slot must enter it: arrivals are compared
  kPointToPoint,  // send/recv with one peer
  // Sets the GPU up for the process (cuInit, a context's creation): once, at its first use, and
  // slow by nature (100s of ms on a big GPU). Always traced: what happens inside it (a driver
  // ioctl, a Python call waiting on it) is start-up, not a stall.
  kSetUp,
};

// What a call does, for the analysis that treats calls alike whatever their layer or name (the
// window features count launches, syncs, copies and collectives).
enum class ApiClass : uint8_t { kOther, kLaunch, kSync, kCopy, kAlloc, kFree, kCollective };

struct ProbeSpec {
  std::string_view symbol;
  Layer layer;
  ApiClass api_class = ApiClass::kOther;
  std::vector<ArgSpec> args;
  Slot bytes_slot = kNoSlot;  // argument holding the bytes (or elements) the call moves
  Slot dtype_slot = kNoSlot;  // if set, bytes_slot counts elements of this NCCL datatype
  Slot out_slot = kNoSlot;    // pointer argument whose pointee BPF reads at return
  MemoryEffect memory = MemoryEffect::kNone;
  Slot memory_ptr_slot = kNoSlot;  // for frees: the pointer being released
  bool returns_status = true;      // return value is a 32-bit status code, 0 = success
  bool emit_entry = false;         // announce the start (the call may never return)
  CallRole role = CallRole::kPlain;
  Slot comm_slot = kNoSlot;    // the communicator handle
  Slot rank_slot = kNoSlot;    // kCommInit: this process's rank
  Slot nranks_slot = kNoSlot;  // kCommInit: the communicator's size
  // Kernels by name. A row that names a handle (__cudaRegisterFunction, cuModuleGetFunction)
  // says which argument holds the C string and which the handle it names: `name_key_slot`, or
  // the out-pointer's pointee when that slot is out_slot. BPF sends the string (EACGM_ROW_NAMES).
  Slot name_slot = kNoSlot;
  Slot name_key_slot = kNoSlot;
  // cuKernelGetFunction: the handle written through out_slot is the kernel in this argument.
  Slot alias_slot = kNoSlot;
  // A launch: the argument holding the kernel (a host stub, a CUfunction or a CUkernel).
  Slot kernel_slot = kNoSlot;
  // Bytes moved are bytes_slot's value times this (cuMemsetD32: 4 bytes per element).
  uint8_t bytes_scale = 1;
  // ... and times these arguments' values (cuMemcpy2D: WidthInBytes x Height).
  std::array<Slot, 2> bytes_times = {kNoSlot, kNoSlot};
  // A struct's fields read at entry (cuLaunchKernelEx's CUlaunchConfig).
  std::optional<MemoryRead> read = std::nullopt;
};

// The fixed rows of one layer (LayerInfo::rows); a row's index is its attach cookie and func_id.
std::span<const ProbeSpec> probe_table(Layer layer);
// The row of `layer` probing `symbol`; nullptr when no row does (a torch operator, a name from a
// session recorded by another version).
const ProbeSpec* find_probe(Layer layer, std::string_view symbol);
// The class of a call known only by its name (a session read back); kOther for unknown names.
ApiClass api_class(Layer layer, std::string_view symbol);

// Whether a file is a C++ unwinder (libgcc_s, LLVM's libunwind), which the torch layer must
// guard (see Tracer::attach_unwind_guard).
bool is_unwinder_library(std::string_view path);

// Whether a row may be traced part of the time under --overhead-budget (agent/duty_cycle.h): a
// frequent call whose meaning depends on no other call. Allocations and frees (outstanding memory
// would drift), rows that name kernels (launches would lose their names), NCCL (ranks' sequences
// of collectives would disagree) and rows whose start is announced (a hang must be seen) are
// always traced; so is every row of a layer whose LayerInfo::duty_cycled is false.
bool may_duty_cycle(const ProbeSpec& spec);

// The row's EACGM_ROW_* flags for the BPF side (bpf/events.h): whether its
// start is announced and whether it names a handle.
uint8_t bpf_row_flags(const ProbeSpec& spec);
// The row's `entry_read` word for the BPF side (bpf/events.h EACGM_ENTRY_READ):
// its MemoryRead, or the stack words its slots use; 0 when it reads nothing.
uint32_t bpf_entry_read(const ProbeSpec& spec);
// The row's `name_slots` byte for the BPF side: string slot low, handle slot high.
uint8_t bpf_name_slots(const ProbeSpec& spec);

// A decoded argument, ready to be shown or stored.
struct DecodedArg {
  std::string_view name;
  std::string text;               // human form: "0x7f12...", "cudaMemcpyHostToDevice", "(128,1,1)"
  std::optional<int64_t> number;  // numeric form where the argument is a plain number
  const ArgSpec* spec = nullptr;  // the row's argument it decodes
  uint64_t value = 0;  // the raw word (for an out-pointer: what the callee wrote through it)
  bool is_pointer() const;
};

// What one finished call captured, as the BPF side reported it.
struct RawCall {
  std::array<uint64_t, EACGM_CALL_ARGS> args{};
  uint64_t out_value = 0;  // the out-pointer's pointee, or the extra word for rows without one
  int64_t ret = 0;
  // A captured word by slot; the extra word comes in out_value. 0 for kNoSlot.
  uint64_t word(Slot slot) const {
    return slot < EACGM_CALL_ARGS ? args[slot] : slot == kExtra ? out_value : 0;
  }
};

std::vector<DecodedArg> decode_args(const ProbeSpec& spec, const RawCall& call);
uint64_t call_bytes(const ProbeSpec& spec, const RawCall& call);

// Bytes per element of an ncclDataType_t; 0 for an unknown type.
uint64_t nccl_type_size(uint64_t datatype);
std::string_view nccl_type_name(uint64_t datatype);
std::string_view memcpy_kind_name(uint64_t kind);

}  // namespace eacgm
