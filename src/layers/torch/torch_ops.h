// The PyTorch layer's probe table: one row per ATen operator, made at run time.
//
// Every ATen operator has a dispatcher entry point `at::_ops::<struct>::call` exported by
// libtorch_cpu.so (Python, C++ and composite operators all enter through it, CPU and CUDA
// tensors alike). Its mangled name survives PyTorch releases far better than the Python
// bindings' do, so operators are traced there. The struct is torchgen's "unambiguous name" of
// the operator: its name, then `_<overload>` when it has an overload name, which cannot be
// split back without knowing the operator names (`softmax_int` is softmax.int, but
// `linear_backward` is linear_backward). The library itself knows them: its schema strings
// ("softmax.int(Tensor self, int dim, ...) -> Tensor") are in its .rodata.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/result.h"
#include "probes/probe_table.h"

namespace eacgm {

// The struct name of a mangled `at::_ops::<struct>::call(...)` symbol ("softmax_int" for
// _ZN2at4_ops11softmax_int4callERKNS_6TensorE...); nullopt for any other symbol (redispatch,
// other namespaces, malformed lengths).
std::optional<std::string_view> aten_op_struct(std::string_view mangled);

// Turns struct names back into operator names ("aten::softmax.int"), from the operator names
// a library declares in its schema strings.
class AtenOpNamer {
 public:
  // Learns from a block of NUL-separated strings (a library's .rodata). Schemas
  // ("name.overload(args) -> ret") are trusted most, then bare "aten::name.overload" strings.
  void learn_strings(std::string_view strings);
  // "aten::<op>" or "aten::<op>.<overload>" for a struct name. What no string declares (the
  // linker may have merged a schema into a longer one that ends with it) is split after the
  // longest known operator name it starts with, or taken as an operator without overload.
  std::string name(std::string_view op_struct) const;
  size_t schemas() const { return from_schema_.size(); }

 private:
  void learn(std::string_view op, std::string_view overload, bool schema);

  std::unordered_map<std::string, std::string> from_schema_;    // struct -> "op.overload"
  std::unordered_map<std::string, std::string> from_declared_;  // same, from "aten::" strings
  std::unordered_set<std::string> op_names_;                    // every operator name seen
};

// Which operators to trace: `--torch-ops default|all|REGEX`.
class TorchOpFilter {
 public:
  // The operators that cost time in training and inference (see torch_ops.cpp).
  static TorchOpFilter default_set();
  static TorchOpFilter all();
  // "default", "all", or an ECMAScript regular expression that must match the whole of
  // "aten::op.overload", "op.overload" or "op" (so `mm|addmm` selects every overload of both).
  static Result<TorchOpFilter> parse(const std::string& spec);

  // `name` is "aten::op" or "aten::op.overload".
  bool selects(std::string_view name) const;
  const std::string& spec() const { return spec_; }

 private:
  std::string spec_ = "default";
  bool all_ = false;
  std::regex regex_;
};

// The rows of the torch layer: one per operator name, whichever library it was found in, so
// an operator keeps one func_id for the session. Rows never move (a deque), so CallRecord's
// spec pointers and the name views in them stay valid.
class TorchOpTable {
 public:
  // The row of `name`, added if new; nullopt once EACGM_MAX_FUNCS rows exist (the BPF side
  // has no room for more cookies).
  std::optional<uint32_t> intern(const std::string& name);
  const ProbeSpec* row(uint32_t func_id) const;
  size_t size() const { return rows_.size(); }

 private:
  std::deque<std::string> names_;
  std::deque<ProbeSpec> rows_;
  std::unordered_map<std::string, uint32_t> ids_;
};

// What to probe in one library for the torch layer.
struct TorchLibraryOps {
  std::vector<uint64_t> offsets;  // file offsets of the selected entry points
  std::vector<uint64_t> cookies;  // their rows in the TorchOpTable
  size_t exported = 0;            // operator entry points the library exports
  size_t selected = 0;            // of those, chosen by the filter
  size_t over_limit = 0;          // selected but left out: the table was full
};

// Finds the operator entry points of `path`, names them, keeps those `filter` selects and
// gives each a row of `table`. A library that exports no entry point (libtorch_cuda.so of
// most builds: its kernels are reached through libtorch_cpu's entry points) is not an error:
// `exported` is 0.
Result<TorchLibraryOps> torch_library_ops(const std::string& path, const TorchOpFilter& filter,
                                          TorchOpTable& table);

}  // namespace eacgm
