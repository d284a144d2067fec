#include "probes/probe_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

namespace eacgm {
namespace {

// ncclDataType_t values 0..11 from nccl.h, with their sizes.
constexpr std::pair<std::string_view, uint64_t> kNcclTypes[] = {
    {"ncclInt8", 1},    {"ncclUint8", 1},    {"ncclInt32", 4},      {"ncclUint32", 4},
    {"ncclInt64", 8},   {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},
    {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1}};

constexpr std::string_view kNcclOps[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};

constexpr std::string_view kMemcpyKinds[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice",
                                             "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
                                             "cudaMemcpyDefault"};

std::string dim3_text(uint64_t xy, uint64_t z) {
  return fmt::format("({},{},{})", static_cast<uint32_t>(xy), static_cast<uint32_t>(xy >> 32),
                     static_cast<uint32_t>(z));
}

}  // namespace

const ProbeSpec* find_probe(Layer layer, std::string_view symbol) {
  for (const ProbeSpec& spec : probe_table(layer)) {
    if (spec.symbol == symbol) return &spec;
  }
  return nullptr;
}

ApiClass api_class(Layer layer, std::string_view symbol) {
  const ProbeSpec* spec = find_probe(layer, symbol);
  return spec ? spec->api_class : ApiClass::kOther;
}

std::span<const ProbeSpec> probe_table(Layer layer) {
  const LayerInfo& info = layer_info(layer);
  return info.rows ? info.rows() : std::span<const ProbeSpec>{};
}

bool may_duty_cycle(const ProbeSpec& spec) {
  return layer_info(spec.layer).duty_cycled && spec.memory == MemoryEffect::kNone &&
         spec.role == CallRole::kPlain && spec.name_slot == kNoSlot && spec.alias_slot == kNoSlot &&
         !spec.emit_entry;
}

uint8_t bpf_row_flags(const ProbeSpec& spec) {
  return (spec.emit_entry ? EACGM_ROW_EMIT_ENTRY : 0) |
         (spec.name_slot != kNoSlot ? EACGM_ROW_NAMES : 0);
}

static_assert(MemoryRead::kStackArgs == EACGM_READ_STACK);
static_assert(kExtra == EACGM_CALL_ARGS && kExtra + 1 == EACGM_CALL_WORDS);

uint32_t bpf_entry_read(const ProbeSpec& spec) {
  if (spec.read) {
    const MemoryRead& r = *spec.read;
    return EACGM_ENTRY_READ(uint32_t{r.words}, uint32_t{r.into}, uint32_t{r.from},
                            uint32_t{r.offset_words});
  }
  // Otherwise the stack words the row's slots use, read from the first one on.
  int last = -1;
  const auto use = [&](Slot slot) {
    if (slot != kNoSlot && slot >= kStack0) last = std::max(last, static_cast<int>(slot));
  };
  // A communicator's 128-byte ncclUniqueId is passed in memory: its first 16
  // bytes, the two stack words, name the communicator across processes.
  if (spec.role == CallRole::kCommInit) use(kStack1);
  for (Slot slot :
       {spec.bytes_slot, spec.dtype_slot, spec.out_slot, spec.memory_ptr_slot, spec.comm_slot,
        spec.rank_slot, spec.nranks_slot, spec.name_slot, spec.name_key_slot, spec.alias_slot,
        spec.kernel_slot, spec.bytes_times[0], spec.bytes_times[1]}) {
    use(slot);
  }
  for (const ArgSpec& arg : spec.args) {
    use(arg.slot);
    // A dim3's later parts are in the slots after its own.
    if (arg.format == ArgFormat::kDim3 || arg.format == ArgFormat::kDim3High) {
      use(static_cast<Slot>(arg.slot + 1));
    }
    if (arg.format == ArgFormat::kDim3Split) use(static_cast<Slot>(arg.slot + 2));
  }
  if (last < 0) return 0;
  const uint32_t words = static_cast<uint32_t>(last - kStack0 + 1);
  return EACGM_ENTRY_READ(words, uint32_t{kStack0}, uint32_t{MemoryRead::kStackArgs}, 0u);
}

uint8_t bpf_name_slots(const ProbeSpec& spec) {
  if (spec.name_slot == kNoSlot) return 0;
  const uint8_t key = spec.name_key_slot == spec.out_slot ? EACGM_NAME_KEY_OUT : spec.name_key_slot;
  return static_cast<uint8_t>(key << 4 | (spec.name_slot & 0xf));
}

bool DecodedArg::is_pointer() const {
  return spec != nullptr &&
         (spec->format == ArgFormat::kPointer || spec->format == ArgFormat::kOutPointer);
}

namespace {

// "0x7f12ab": fmt's "{:#x}", written by hand because every pointer argument of every recorded call
// is formatted, and fmt's format-string parsing cost more than the rest of decoding.
std::string hex_word_text(uint64_t value) {
  char digits[2 + 16];
  digits[0] = '0';
  digits[1] = 'x';
  const auto [end, ec] = std::to_chars(digits + 2, digits + sizeof(digits), value, 16);
  (void)ec;  // 16 hex digits always fit
  return std::string(digits, end);
}

}  // namespace

std::vector<DecodedArg> decode_args(const ProbeSpec& spec, const RawCall& call) {
  std::vector<DecodedArg> out;
  out.reserve(spec.args.size());
  for (const ArgSpec& arg : spec.args) {
    const uint64_t v = call.word(arg.slot);
    DecodedArg d{.name = arg.name,
                 .text = {},
                 .number = std::nullopt,
                 .spec = &arg,
                 .value = arg.format == ArgFormat::kOutPointer ? call.out_value : v};
    switch (arg.format) {
      case ArgFormat::kInt:
        d.number = static_cast<int32_t>(v);
        d.text = std::to_string(*d.number);
        break;
      case ArgFormat::kUInt32:
        d.number = static_cast<uint32_t>(v);
        d.text = std::to_string(*d.number);
        break;
      case ArgFormat::kUInt:
      case ArgFormat::kSize:
        d.number = static_cast<int64_t>(v);
        d.text = std::to_string(v);
        break;
      case ArgFormat::kPointer:
        d.text = hex_word_text(v);
        break;
      case ArgFormat::kOutPointer:
        // What the callee wrote through the pointer, e.g. the new allocation.
        d.text = hex_word_text(call.out_value);
        break;
      case ArgFormat::kMemcpyKind:
        d.text = std::string(memcpy_kind_name(v));
        break;
      case ArgFormat::kDim3:
        d.text = dim3_text(v, call.word(static_cast<Slot>(arg.slot + 1)));
        break;
      case ArgFormat::kDim3High: {
        const uint64_t yz = call.word(static_cast<Slot>(arg.slot + 1));
        d.text = fmt::format("({},{},{})", static_cast<uint32_t>(v >> 32),
                             static_cast<uint32_t>(yz), static_cast<uint32_t>(yz >> 32));
        break;
      }
      case ArgFormat::kDim3Split:
        d.text = fmt::format("({},{},{})", static_cast<uint32_t>(v),
                             static_cast<uint32_t>(call.word(static_cast<Slot>(arg.slot + 1))),
                             static_cast<uint32_t>(call.word(static_cast<Slot>(arg.slot + 2))));
        break;
      case ArgFormat::kCString:
        d.text = hex_word_text(v);
        break;
      case ArgFormat::kNcclDataType:
        d.text = std::string(nccl_type_name(static_cast<uint32_t>(v)));
        break;
      case ArgFormat::kNcclRedOp: {
        const auto op = static_cast<uint32_t>(v);
        // Ops past ncclAvg are user-defined (ncclRedOpCreatePreMulSum).
        d.text =
            op < std::size(kNcclOps) ? std::string(kNcclOps[op]) : fmt::format("custom({})", op);
        break;
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

uint64_t call_bytes(const ProbeSpec& spec, const RawCall& call) {
  if (spec.bytes_slot == kNoSlot) return 0;
  uint64_t n = call.word(spec.bytes_slot);
  for (Slot times : spec.bytes_times) {
    if (times != kNoSlot) n *= call.word(times);
  }
  if (spec.dtype_slot == kNoSlot) return n * spec.bytes_scale;
  return n * nccl_type_size(static_cast<uint32_t>(call.word(spec.dtype_slot)));
}

uint64_t nccl_type_size(uint64_t datatype) {
  return datatype < std::size(kNcclTypes) ? kNcclTypes[datatype].second : 0;
}

std::string_view nccl_type_name(uint64_t datatype) {
  return datatype < std::size(kNcclTypes) ? kNcclTypes[datatype].first : "ncclUnknownType";
}

std::string_view memcpy_kind_name(uint64_t kind) {
  return kind < std::size(kMemcpyKinds) ? kMemcpyKinds[kind] : "cudaMemcpyInvalidKind";
}

bool is_unwinder_library(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return base.starts_with("libgcc_s.so") || base.starts_with("libunwind.so");
}

}  // namespace eacgm
