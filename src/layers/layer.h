// A layer is a module: one folder under src/layers/ holds what eacgm knows of one part of a job
// (its BPF program, its probe rows, its decoding and detectors), and one descriptor, a LayerInfo,
// says what the rest of eacgm needs to know of it. The runtime, the sinks, the CLI and doctor ask
// the registry (src/layers/registry.cpp) and never name a layer.
//
// A new layer: its id below and in bpf/events.h (the number BPF writes in each record), its
// folder with its descriptor (and its runtime, if it keeps live state), and its line in
// registry.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/events.h"
#include "common/result.h"

namespace eacgm {

enum class Layer : uint32_t {
  kCuda = EACGM_LAYER_CUDA,
  kNccl = EACGM_LAYER_NCCL,
  kTorch = EACGM_LAYER_TORCH,
  kPython = EACGM_LAYER_PYTHON,
  kOs = EACGM_LAYER_OS,
  kGpu = EACGM_LAYER_GPU,
  kDriver = EACGM_LAYER_DRIVER,
};

struct ProbeSpec;
class Session;
struct LayerState;
class LayerRuntime;
class LayerHost;
struct LayerRuntimeSetup;
namespace report {
class LayerPage;
}

// Where a layer's events come from, which decides how the runtime loads and attaches it and how
// its status is settled at the end.
enum class LayerSource : uint8_t {
  // Probe rows attached to the layer's libraries, found in the targets' maps, on their library
  // search path and when they load one late. Its BPF object is the generic entry/return pair.
  kLibraries,
  // CPython interpreters, found by their own structures, whatever their file's name.
  kInterpreters,
  // Kernel tracepoints: nothing to find, active whenever its programs attach.
  kTracepoints,
  // Read by eacgm itself from user space (NVML): no BPF program.
  kUserSpace,
};

// What `eacgm doctor` knows of the machine before it asks a layer (cli/doctor.cpp).
struct DoctorContext {
  std::vector<std::string> library_dirs;  // where a job started from this shell finds libraries
  bool kernel_btf = false;                // /sys/kernel/btf/vmlinux
  bool tracefs_mounted = false;
  std::string nvml_library;  // --nvml-lib
};

// One line of `eacgm doctor`'s layers section: ready or not, why, and what it found (a file, a
// device), one per line below it.
struct DoctorCheck {
  std::string name;
  bool ok = false;
  std::string detail;
  std::vector<std::string> found;
};

struct LayerInfo {
  Layer id;
  std::string_view name;
  LayerSource source;
  // The layer's library files, by name prefix ("libcudart.so"); kLibraries only.
  std::span<const std::string_view> libraries = {};
  // The layer's fixed probe rows, a row's index its attach cookie; nullptr when its rows are made
  // at run time from a library's symbols (torch) or it has none.
  std::span<const ProbeSpec> (*rows)() = nullptr;
  // A status code's name in the layer's own terms ("cudaErrorMemoryAllocation"); nullptr when
  // the layer has none, and the number is shown.
  std::string_view (*status_name)(int64_t code) = nullptr;
  // The key under which summary.json lists the layer's calls (docs/SUMMARY_JSON.md); empty when
  // the layer has no call table and its figures are its own (os, gpu).
  std::string_view calls_key = "calls";
  // The layer's own section of the printed report, for a layer whose figures are its own (os,
  // gpu, python); nullptr: its calls' table (sinks/summary.cpp text_report).
  std::vector<std::string> (*report_lines)(const Session& session,
                                           const LayerState& state) = nullptr;
  // The layer's own part of `eacgm report`'s page, for figures the charts and tables every layer's
  // calls share do not show (report/layer_page.h); nullptr: those are all it has. An error is a
  // recording the page cannot be drawn from (a table it cannot read).
  Result<void> (*html_report)(report::LayerPage& page) = nullptr;
  // Its calls nest (an operator's total holds the operators it calls): its costliest calls are
  // those with the most self time.
  bool self_time = false;
  // Its calls are frequent and independent enough to be traced part of the time under
  // --overhead-budget (agent/duty_cycle.h; rows still opt out one by one, may_duty_cycle).
  bool duty_cycled = false;
  // It launches GPU kernels: kernels by name in its report and summary.
  bool launches_kernels = false;
  // Its calls' latency is the GPU's and the interconnect's: the analysis gives GPU advice.
  bool on_gpu = false;
  // Its calls are collectives that every rank enters (cross-rank analysis, collective features).
  bool collectives = false;
  // Set when a library of the layer found on the machine proves nothing: the layer is active only
  // when a traced process maps one, and this says why it is not ("the job does not use PyTorch").
  std::string_view inactive_unless_mapped = {};
  // Traced by `eacgm serve` unless --layers says otherwise (torch's operators cost too much for an
  // agent on every node by default).
  bool serve_by_default = true;
  // Set when `eacgm serve` cannot trace the layer at all: why not (python: per-function figures
  // have no bounded set of metric labels).
  std::string_view not_in_serve = {};
  // What `eacgm doctor` says of the layer on this machine; nullptr: whether each of its libraries
  // is on the search path (cli/doctor.cpp).
  std::vector<DoctorCheck> (*doctor)(const DoctorContext& context) = nullptr;
  // The layer's live state while a session runs (layers/layer_runtime.h); nullptr when the
  // session's own counting of its calls is all it needs (cuda, driver).
  std::unique_ptr<LayerRuntime> (*make_runtime)(const LayerRuntimeSetup& setup,
                                                LayerHost& host) = nullptr;
};

// Every layer, in the order outputs list them.
std::span<const LayerInfo* const> layer_registry();
const LayerInfo& layer_info(Layer layer);
std::span<const Layer> all_layers();
std::string_view layer_name(Layer layer);
std::optional<Layer> layer_from_name(std::string_view name);
// The layer whose library `path` is, by its file name; nullopt for any other file.
std::optional<Layer> library_layer(std::string_view path);
// The layer whose calls are collectives; nullopt when no layer's are.
std::optional<Layer> collective_layer();
// A status code's name in the layer's own terms; the number as text for layers without names.
std::string status_name(Layer layer, int64_t code);

}  // namespace eacgm
