// Which library files a target process uses, or will use.
//
// Uprobes bind to an inode, not to a name: a job that loads the `libcudart.so.12` shipped in a
// pip wheel (site-packages/nvidia/cuda_runtime/lib) is not traced by probes on the system copy.
// So files are identified by (device, inode), found in /proc/PID/maps for what is already
// mapped and in the directories a job would search for what it may load later.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace eacgm {

// A file as the kernel knows it. `dev` is in the st_dev encoding (makedev(major, minor)), so ids
// from /proc/PID/maps and from stat(2) compare equal for the same file.
struct FileId {
  uint64_t dev;
  uint64_t inode;
  auto operator<=>(const FileId&) const = default;
};

// One mapping of a file: addresses [start, end) show the file from `offset` on.
struct FileMapping {
  uint64_t start;
  uint64_t end;
  uint64_t offset;
  auto operator<=>(const FileMapping&) const = default;
};

struct MappedFile {
  std::string path;  // as shown in maps, without the " (deleted)" suffix
  FileId id;
  bool executable;  // at least one of its mappings is executable
  // The file was unlinked (or replaced, e.g. by a package upgrade) after it was mapped. `path`
  // now names nothing or another file; the mapped one can still be reached for probing through
  // /proc/PID/map_files/<start>-<end>.
  bool deleted;
  // Every mapping of the file, in address order: where its segments are (to turn a symbol's
  // address in the file into one in the process).
  std::vector<FileMapping> mappings{};
};

// The files mapped by process `pid`: one entry per distinct file (by dev+inode), in address
// order of their first mapping. Anonymous and pseudo mappings ([heap], [vdso], ...) are skipped.
// Error when the process does not exist or its maps cannot be read.
Result<std::vector<MappedFile>> mapped_files(uint32_t pid);

// Same, from the text of a maps file.
std::vector<MappedFile> parse_maps(std::string_view maps_text);

// `path`, as process `pid` names it, reached through /proc/PID/root: the same file from here even
// when the process lives in another mount namespace (a container).
std::string path_in_root_of(uint32_t pid, std::string_view path);

// The name a process knows a file by: `path` less a /proc/PID/root prefix
// ("/proc/42/root/usr/lib/libcuda.so.1" -> "/usr/lib/libcuda.so.1"); any other path unchanged.
std::string_view path_seen_by_process(std::string_view path);

// dev/inode of the file `path` resolves to (following symlinks); nullopt if it does not exist.
std::optional<FileId> file_id(const std::string& path);

// The environment of process `pid` (/proc/PID/environ) as it was at exec time; the first
// definition of a name wins, as with getenv(3). Error when it cannot be read.
Result<std::map<std::string, std::string>> process_environment(uint32_t pid);

// Directories of the 64-bit x86-64 libraries listed in an ld.so cache (the contents of
// /etc/ld.so.cache), in order of first appearance, without duplicates. Empty for a file in an
// unknown format; never fails, whatever the bytes.
std::vector<std::string> parse_ld_so_cache(std::string_view cache_bytes);

// Directories where a job with environment `env` would find its libraries, in this order:
// LD_LIBRARY_PATH entries (absolute ones; relative entries depend on the job's working
// directory), the directories of /etc/ld.so.cache, the default system directories,
// /usr/local/cuda/lib64, /usr/local/cuda-*/lib64 (and their targets/x86_64-linux/lib),
// CUDA_HOME and CUDA_PATH's lib64 and targets/x86_64-linux/lib, then Python wheel directories
// (`nvidia/*/lib`, `torch/lib`) under the site-packages and dist-packages of /usr/lib/python3*,
// /usr/local/lib/python3*, $VIRTUAL_ENV, $CONDA_PREFIX, ~/.pyenv/versions/*, ~/.local (HOME from
// `env`). Only existing directories; one entry per directory (by dev+inode, first spelling kept).
std::vector<std::string> library_search_dirs(const std::map<std::string, std::string>& env);

// The directories a program named without a slash is looked for in, as execvp(3) looks: the
// entries of `path_variable` (PATH's value; nullptr when it is unset) in order, an empty entry
// being the working directory ("."); unset or empty, the shells' default
// /usr/local/bin:/usr/bin:/bin. Whether they exist is not checked.
std::vector<std::string> program_search_dirs(const char* path_variable);

// Every distinct regular file (by dev+inode) in `dirs` whose name starts with `name_prefix`
// ("libcudart.so" finds libcudart.so, libcudart.so.13, libcudart.so.13.0.96: one file), as a
// canonical path (symlinks resolved), in order of `dirs`.
std::vector<std::string> find_library_files(std::string_view name_prefix,
                                            const std::vector<std::string>& dirs);

}  // namespace eacgm
