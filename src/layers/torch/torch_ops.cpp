#include "layers/torch/torch_ops.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <set>

#include "probes/elf_symbols.h"
#include "probes/library_identity.h"
#include "probes/symbol_cache.h"

namespace eacgm {
namespace {

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Base operator names of the default set, matched whole (each with every overload). They are
// the operators that dominate the time of training and inference steps; elementwise arithmetic
// (add, mul) and views are left out: they are called by the thousand per step, cost little each,
// and their probes would cost more than they tell. `--torch-ops all` has them.
constexpr std::string_view kDefaultOps[] = {
    // matrix products
    R"(mm|bmm|addmm|_addmm_activation|addbmm|baddbmm|addmv|mv|dot|vdot|matmul|linear|einsum)",
    R"(tensordot|mkldnn_linear|_mkldnn_linear\w*|fbgemm_linear\w*|matmul_backward)",
    R"(linear_backward|mkldnn_linear_backward\w*)",
    // convolutions, pooling
    R"(conv[123]d|conv_transpose[123]d|conv_tbc\w*|_?convolution\w*|\w+_convolution\w*)",
    R"(_?conv_depthwise\w*|slow_conv\w*|\w*pool[123]d\w*)",
    // attention
    R"(\w*attention\w*|_transformer_encoder_layer_fwd|_native_multi_head_attention)",
    // softmax
    R"(\w*softmax\w*)",
    // normalisation, dropout
    R"(\w*(layer|batch|group|instance|rms)_norm\w*|norm|linalg_vector_norm|\w*dropout\w*)",
    // embedding
    R"(\w*embedding\w*)",
    // activations (with in-place variants and backward kernels)
    R"((relu|relu6|gelu|silu|sigmoid|tanh|leaky_relu|hardtanh|elu|mish|hardswish|hardsigmoid)_?)",
    R"((relu|gelu|silu|sigmoid|tanh|leaky_relu|hardtanh|elu|mish|hardswish|hardsigmoid)_backward)",
    R"(threshold|threshold_|threshold_backward|glu\w*|prelu\w*|_prelu_kernel\w*|softplus\w*)",
    R"(log_sigmoid\w*)",
    // losses
    R"(\w*_loss\w*|\w*cross_entropy\w*|kl_div\w*)",
    // optimizers
    R"(_foreach_\w*|_fused_adam\w*|_fused_sgd\w*|addcmul_?|addcdiv_?|lerp_?)",
    // copies and conversions
    R"(copy_|_copy_from\w*|to|_to_copy|clone|contiguous)",
    // concatenation
    R"(cat|_cat|concat|concatenate|stack|_stack|hstack|vstack)",
    // reductions that close most steps (loss, metrics)
    R"(sum|mean)",
    // recurrent layers
    R"(lstm\w*|gru\w*|rnn_tanh\w*|rnn_relu\w*|_thnn_fused_\w*)",
};

std::string default_pattern() {
  std::string pattern;
  for (std::string_view part : kDefaultOps) {
    if (!pattern.empty()) pattern += '|';
    pattern += part;
  }
  return pattern;
}

}  // namespace

std::optional<std::string_view> aten_op_struct(std::string_view mangled) {
  constexpr std::string_view kPrefix = "_ZN2at4_ops";
  constexpr std::string_view kCall = "4callE";
  if (!mangled.starts_with(kPrefix)) return std::nullopt;
  std::string_view rest = mangled.substr(kPrefix.size());
  size_t length = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), length);
  if (ec != std::errc{} || length == 0) return std::nullopt;
  rest = rest.substr(static_cast<size_t>(end - rest.data()));
  if (rest.size() < length) return std::nullopt;
  const std::string_view name = rest.substr(0, length);
  if (!is_identifier(name) || !rest.substr(length).starts_with(kCall)) return std::nullopt;
  return name;
}

void AtenOpNamer::learn(std::string_view op, std::string_view overload, bool schema) {
  if (!is_identifier(op) || (!overload.empty() && !is_identifier(overload))) return;
  std::string key(op);
  std::string full(op);
  if (!overload.empty()) {
    key += '_';
    key += overload;
    full += '.';
    full += overload;
  }
  op_names_.emplace(op);
  // The first declaration wins: names are unique per struct in any library we have seen, and
  // a later one would only be a string that happens to look like a schema.
  (schema ? from_schema_ : from_declared_).try_emplace(std::move(key), std::move(full));
}

void AtenOpNamer::learn_strings(std::string_view strings) {
  size_t start = 0;
  while (start < strings.size()) {
    size_t end = strings.find('\0', start);
    if (end == std::string_view::npos) end = strings.size();
    std::string_view s = strings.substr(start, end - start);
    start = end + 1;
    const bool prefixed = s.starts_with("aten::");
    if (prefixed) s.remove_prefix(6);
    const size_t paren = s.find('(');
    const bool schema =
        paren != std::string_view::npos && s.find(") -> ") != std::string_view::npos;
    if (!schema && !prefixed) continue;
    const std::string_view name = schema ? s.substr(0, paren) : s;
    const size_t dot = name.find('.');
    learn(name.substr(0, dot),
          dot == std::string_view::npos ? std::string_view{} : name.substr(dot + 1), schema);
  }
}

std::string AtenOpNamer::name(std::string_view op_struct) const {
  const std::string key(op_struct);
  if (auto it = from_schema_.find(key); it != from_schema_.end()) return "aten::" + it->second;
  if (auto it = from_declared_.find(key); it != from_declared_.end()) return "aten::" + it->second;
  // `erfinv_out`: the schema "erfinv.out(...)" was merged into "special_erfinv.out(...)", but
  // "erfinv" is a known operator. Longest first, so `_foreach_add__List` would still split
  // after `_foreach_add_` rather than `_foreach`.
  for (size_t cut = op_struct.rfind('_'); cut != std::string_view::npos && cut > 0;
       cut = op_struct.rfind('_', cut - 1)) {
    const std::string_view op = op_struct.substr(0, cut);
    const std::string_view overload = op_struct.substr(cut + 1);
    if (op_names_.contains(std::string(op)) && is_identifier(overload)) {
      return fmt::format("aten::{}.{}", op, overload);
    }
  }
  return "aten::" + key;
}

TorchOpFilter TorchOpFilter::default_set() {
  TorchOpFilter f;
  f.spec_ = "default";
  f.regex_ = std::regex(default_pattern(), std::regex::ECMAScript | std::regex::optimize);
  return f;
}

TorchOpFilter TorchOpFilter::all() {
  TorchOpFilter f;
  f.spec_ = "all";
  f.all_ = true;
  return f;
}

Result<TorchOpFilter> TorchOpFilter::parse(const std::string& spec) {
  if (spec == "default") return default_set();
  if (spec == "all") return all();
  if (spec.empty()) return Error{"--torch-ops is empty: give default, all or a regular expression"};
  TorchOpFilter f;
  f.spec_ = spec;
  try {
    f.regex_ = std::regex(spec, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return Error{
        fmt::format("--torch-ops '{}' is not a valid regular expression: {}", spec, e.what())};
  }
  return f;
}

bool TorchOpFilter::selects(std::string_view name) const {
  if (all_) return true;
  const std::string full(name);
  std::string_view bare = name;
  if (bare.starts_with("aten::")) bare.remove_prefix(6);
  const std::string_view op = bare.substr(0, bare.find('.'));
  // The default set names base operators; a user's expression may name any of the three forms.
  if (spec_ == "default") return std::regex_match(std::string(op), regex_);
  return std::regex_match(full, regex_) || std::regex_match(std::string(bare), regex_) ||
         std::regex_match(std::string(op), regex_);
}

std::optional<uint32_t> TorchOpTable::intern(const std::string& name) {
  if (auto it = ids_.find(name); it != ids_.end()) return it->second;
  if (rows_.size() >= EACGM_MAX_FUNCS) return std::nullopt;
  const auto id = static_cast<uint32_t>(rows_.size());
  const std::string& stored = names_.emplace_back(name);
  // Operators return tensors (often through a hidden pointer): no status code to judge.
  rows_.push_back(
      ProbeSpec{.symbol = stored, .layer = Layer::kTorch, .args = {}, .returns_status = false});
  ids_.emplace(name, id);
  return id;
}

const ProbeSpec* TorchOpTable::row(uint32_t func_id) const {
  return func_id < rows_.size() ? &rows_[func_id] : nullptr;
}

namespace {

// Every operator entry point of `path` with its operator name, in symbol order.
Result<CachedSymbols> read_named_entry_points(const std::string& path) {
  auto symbols = read_function_symbols(path);
  if (!symbols) return symbols.error();
  struct EntryPoint {
    std::string_view op_struct;
    uint64_t offset;
  };
  std::vector<EntryPoint> entries;
  for (const ElfSymbol& sym : *symbols) {
    if (sym.ifunc) continue;
    if (auto op = aten_op_struct(sym.name)) entries.push_back({*op, sym.file_offset});
  }
  CachedSymbols out;
  if (entries.empty()) return out;
  AtenOpNamer namer;
  auto rodata = read_section(path, ".rodata");
  if (rodata) namer.learn_strings(*rodata);  // without it, names fall back to the split rule
  for (const EntryPoint& e : entries) out.emplace_back(e.offset, namer.name(e.op_struct));
  return out;
}

}  // namespace

Result<TorchLibraryOps> torch_library_ops(const std::string& path, const TorchOpFilter& filter,
                                          TorchOpTable& table) {
  // Read once per build of the library (probes/symbol_cache.h); every filter applies to it.
  // The kind's number changes whenever the naming rules above do, so no cache of older rules
  // is read.
  constexpr std::string_view kKind = "torch-ops.1";
  CachedSymbols named;
  const std::optional<std::string> build_id = read_build_id(path);
  if (auto cached = build_id ? load_cached_symbols(kKind, *build_id) : std::nullopt) {
    named = std::move(*cached);
  } else {
    auto read = read_named_entry_points(path);
    if (!read) return read.error();
    named = std::move(*read);
    if (build_id) store_cached_symbols(kKind, *build_id, named);
  }
  TorchLibraryOps out;
  out.exported = named.size();
  std::set<uint64_t> seen;  // one probe per address: identical-code folding may merge two ops
  for (const auto& [offset, name] : named) {
    if (!filter.selects(name)) continue;
    ++out.selected;
    if (!seen.insert(offset).second) continue;
    const std::optional<uint32_t> row = table.intern(name);
    if (!row) {
      ++out.over_limit;
      continue;
    }
    out.offsets.push_back(offset);
    out.cookies.push_back(*row);
  }
  return out;
}

}  // namespace eacgm
