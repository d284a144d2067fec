// Which build of which library a mapped file is: enough to tell that a
// process holds two different builds of one library (two CUDA runtimes, a
// PyTorch cuBLAS next to a TensorFlow cuBLAS), which share no state and
// often disagree about the driver.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "probes/library_finder.h"

namespace eacgm {

struct LibraryBuild {
  std::string path;  // as the process mapped it
  FileId id;
  std::string family;    // "libcudart", "libcublasLt", "libtorch_cpu"
  std::string version;   // from the file name or soname ("13.0.96", "13"); empty if none
  std::string soname;    // DT_SONAME, empty if none
  std::string build_id;  // NT_GNU_BUILD_ID in hex, empty if none
  uint64_t size = 0;     // bytes
};

// The family of an ML/GPU library from its path: the file name before ".so",
// less the "-<hash>" that auditwheel adds to vendored copies
// ("libcublas-3b81d170.so.11" -> "libcublas"). nullopt for files outside the
// families where two builds in one process are a known source of failures
// (CUDA runtime and math libraries, cuDNN, NCCL, PyTorch, TensorFlow, ONNX
// Runtime, NVIDIA driver libraries).
std::optional<std::string> library_family(std::string_view path);

// The version in a library's file name or soname: what follows ".so."
// ("libcudart.so.13.0.96" -> "13.0.96"), empty when there is none.
std::string library_version(std::string_view name);

// Reads what identifies the build of the library at `read_path` (which may
// differ from `mapped_path`, e.g. through /proc/PID/root). nullopt when the
// file is not in a known family or cannot be read.
std::optional<LibraryBuild> identify_library(const std::string& mapped_path, FileId id,
                                             const std::string& read_path);

// The GNU build id of an ELF file, in hex; nullopt when it has none.
std::optional<std::string> read_build_id(const std::string& path);

}  // namespace eacgm
