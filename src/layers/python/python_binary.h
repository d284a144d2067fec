// Which files are CPython interpreters, and where their runtime state is in a process.
//
// Everything the BPF stack walker reads hangs off one global, `_PyRuntime` (_PyRuntimeState),
// defined by whichever file holds the interpreter: libpython3.X.so for shared builds (pyenv,
// conda), the executable itself for static ones (Debian's /usr/bin/python3.11). Its address in
// a process is its address in the file plus that file's load bias, read from /proc/PID/maps.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "probes/elf_symbols.h"
#include "probes/library_finder.h"

namespace eacgm {

struct PythonInterpreter {
  std::string path;  // as given to inspect_interpreter
  FileId id;         // the file, to find its mappings in a process
  // major * 100 + minor (311). From Py_Version (3.11+), else the file name or soname
  // (python3.X, libpython3.X), else the newest C API function the file defines.
  uint32_t version;
  uint64_t runtime_symbol;  // st_value of _PyRuntime: its address in the file's own layout
  // USDT probes of provider "python" (.note.stapsdt): function__entry, gc__start, ...
  std::vector<std::string> usdt_probes;
  bool has_usdt;  // !usdt_probes.empty()
  std::vector<ElfLoadSegment> segments;
};

// Whether the ELF file `path` holds a CPython interpreter (it defines _PyRuntime), and which.
// nullopt for any other ELF file. Error when the file cannot be read or is not a 64-bit x86-64
// ELF file. A file with _PyRuntime but neither Py_Version, a telling name nor any of the 3.8+
// functions is 3.7, the first release with _PyRuntime (unsupported: python_layout() says so).
Result<std::optional<PythonInterpreter>> inspect_interpreter(const std::string& path);

// The address of _PyRuntime in a process that has `interpreter`'s file mapped as `file` (the
// MappedFile with the same FileId, from mapped_files or parse_maps). Error when the mappings do
// not show the segment that holds it where the file's program headers say it must be.
Result<uint64_t> runtime_address(const PythonInterpreter& interpreter, const MappedFile& file);

// Same, reading /proc/PID/maps. Error when the process is gone or does not map the file.
Result<uint64_t> runtime_address(uint32_t pid, const PythonInterpreter& interpreter);

}  // namespace eacgm
