#include "probes/library_finder.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>
#include <unordered_set>

namespace eacgm {
namespace {

// Reads a whole file into `out`; returns 0 or an errno value. /proc files report size 0, so
// this reads until EOF rather than trusting stat.
int read_file(const std::string& path, std::string& out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  out.clear();
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int error = n < 0 ? errno : 0;
      close(fd);
      return error;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
}

// The contents of /proc/PID/<name>, with "no such file" reported as "no such process".
Result<std::string> read_proc_file(uint32_t pid, const char* name) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  std::string text;
  int error = read_file(path, text);
  if (error == ENOENT || error == ESRCH) return Error{"no process with pid " + std::to_string(pid)};
  if (error != 0) return Error{"cannot read " + path + ": " + std::strerror(error)};
  return text;
}

// Splits off the next space-separated field of `line`.
std::string_view next_field(std::string_view& line) {
  size_t start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  size_t end = line.find(' ');
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

template <typename T>
bool parse_number(std::string_view text, int base, T& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out, base);
  return ec == std::errc() && ptr == end && !text.empty();
}

// "fe:01" (hex major:minor, as /proc/PID/maps shows it) in st_dev's encoding.
std::optional<uint64_t> parse_device(std::string_view text) {
  size_t colon = text.find(':');
  unsigned major_number = 0;
  unsigned minor_number = 0;
  if (colon == std::string_view::npos || !parse_number(text.substr(0, colon), 16, major_number) ||
      !parse_number(text.substr(colon + 1), 16, minor_number)) {
    return std::nullopt;
  }
  return makedev(major_number, minor_number);
}

bool is_directory(const std::string& path, FileId* id) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  *id = FileId{st.st_dev, st.st_ino};
  return true;
}

// An ordered list of existing directories, one entry per directory however it is spelled.
class DirList {
 public:
  void add(const std::string& dir) {
    FileId id{};
    if (!dir.empty() && dir[0] == '/' && is_directory(dir, &id) && seen_.insert(id).second) {
      dirs_.push_back(dir);
    }
  }
  // Adds the directories matching a glob(7) pattern, in sorted order.
  void add_glob(const std::string& pattern) {
    glob_t matches{};
    if (glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &matches) == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) add(matches.gl_pathv[i]);
    }
    globfree(&matches);
  }
  std::vector<std::string> take() { return std::move(dirs_); }

 private:
  std::vector<std::string> dirs_;
  std::set<FileId> seen_;
};

// A path from the environment, made safe to use as the fixed part of a glob pattern.
std::string glob_escape(std::string_view text) {
  std::string escaped;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return escaped;
}

std::string env_value(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

std::vector<MappedFile> parse_maps(std::string_view maps_text) {
  // Each line: "start-end perms offset major:minor inode   path", e.g.
  // "7f3c1a000000-7f3c1a026000 r-xp 00026000 fe:00 332835   /usr/lib/x86_64-linux-gnu/libc.so.6".
  // The path is the rest of the line (it may contain spaces); the kernel escapes a newline in a
  // file name as "\012" and appends " (deleted)" to files unlinked since they were mapped.
  constexpr std::string_view kDeleted = " (deleted)";
  std::vector<MappedFile> files;
  std::map<FileId, size_t> index;
  while (!maps_text.empty()) {
    size_t eol = maps_text.find('\n');
    std::string_view line = maps_text.substr(0, eol);
    maps_text.remove_prefix(eol == std::string_view::npos ? maps_text.size() : eol + 1);

    std::string_view range = next_field(line);
    std::string_view perms = next_field(line);
    std::string_view offset_text = next_field(line);
    std::optional<uint64_t> dev = parse_device(next_field(line));
    uint64_t inode = 0;
    if (!dev || !parse_number(next_field(line), 10, inode) || inode == 0) continue;
    size_t path_start = line.find_first_not_of(' ');
    if (path_start == std::string_view::npos || line[path_start] != '/') continue;
    std::string_view path = line.substr(path_start);
    bool deleted = path.ends_with(kDeleted);
    if (deleted) path.remove_suffix(kDeleted.size());
    bool executable = perms.size() >= 3 && perms[2] == 'x';

    FileId id{*dev, inode};
    auto [it, inserted] = index.try_emplace(id, files.size());
    if (inserted) {
      files.push_back({std::string(path), id, executable, deleted});
    } else {
      files[it->second].executable |= executable;
    }
    FileMapping mapping{};
    const size_t dash = range.find('-');
    if (dash != std::string_view::npos && parse_number(range.substr(0, dash), 16, mapping.start) &&
        parse_number(range.substr(dash + 1), 16, mapping.end) &&
        parse_number(offset_text, 16, mapping.offset)) {
      files[it->second].mappings.push_back(mapping);
    }
  }
  return files;
}

Result<std::vector<MappedFile>> mapped_files(uint32_t pid) {
  auto text = read_proc_file(pid, "maps");
  if (!text) return text.error();
  return parse_maps(text.value());
}

std::string path_in_root_of(uint32_t pid, std::string_view path) {
  return "/proc/" + std::to_string(pid) + "/root" + std::string(path);
}

std::string_view path_seen_by_process(std::string_view path) {
  constexpr std::string_view kProc = "/proc/";
  constexpr std::string_view kRoot = "/root/";
  if (!path.starts_with(kProc)) return path;
  const size_t digits_end = path.find_first_not_of("0123456789", kProc.size());
  if (digits_end == kProc.size() || digits_end == std::string_view::npos ||
      path.substr(digits_end, kRoot.size()) != kRoot)
    return path;
  return path.substr(digits_end + kRoot.size() - 1);  // from the root's "/"
}

std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

Result<std::map<std::string, std::string>> process_environment(uint32_t pid) {
  auto text = read_proc_file(pid, "environ");
  if (!text) return text.error();
  std::map<std::string, std::string> env;
  std::string_view rest = text.value();
  while (!rest.empty()) {
    size_t end = rest.find('\0');
    std::string_view entry = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.try_emplace(std::string(entry.substr(0, eq)), entry.substr(eq + 1));
  }
  return env;
}

// /etc/ld.so.cache as written by glibc's ldconfig. Facts from glibc's sysdeps/generic/dl-cache.h
// and elf/ldconfig.h (integers are in the writer's byte order; we only accept little-endian):
//
// New format, the only one glibc >= 2.32 writes by default. A 48-byte header:
//    0 char magic[17] = "glibc-ld.so.cache"   17 char version[3] = "1.1"
//   20 u32 nlibs   24 u32 len_strings   28 u8 flags (bits 0-1: byte order, 0 unset, 2 little)
//   29 u8 pad[3]   32 u32 extension_offset   36 u32 unused[3]
// then nlibs 24-byte entries: i32 flags, u32 key (soname), u32 value (path), u32 osversion,
// u64 hwcap; then the NUL-terminated strings. key and value are offsets from the start of this
// header, not of the string table.
// Entry flags: low byte the type (3 = ELF for glibc), high byte the ABI (0x03 = x86-64, 0x00 =
// the default one, i.e. i386 on x86, 0x08 = x32).
//
// Old format ("compat", the default before glibc 2.32): a 16-byte header (char magic[11] =
// "ld.so-1.7.0", pad to 12, u32 nlibs), nlibs 12-byte entries (i32 flags, u32 key, u32 value)
// and, at the next 8-byte boundary, a complete new-format cache as above, which is what we read.
// An old-only file (no ABI bits: we could not tell x86-64 from i386) yields nothing.
std::vector<std::string> parse_ld_so_cache(std::string_view bytes) {
  constexpr std::string_view kNewMagic("glibc-ld.so.cache1.1", 20);
  constexpr std::string_view kOldMagic("ld.so-1.7.0", 11);
  constexpr size_t kNewHeaderSize = 48, kNewEntrySize = 24;
  constexpr size_t kOldHeaderSize = 16, kOldEntrySize = 12;
  constexpr uint32_t kElfLibc6 = 0x0003, kX8664Lib64 = 0x0300;

  auto u32_at = [&](size_t offset) {
    uint32_t value;
    std::memcpy(&value, bytes.data() + offset, sizeof value);
    return value;
  };
  size_t base = 0;  // where the new-format header starts
  if (bytes.starts_with(kOldMagic)) {
    if (bytes.size() < kOldHeaderSize) return {};
    uint64_t old_count = u32_at(12);
    if (old_count > (bytes.size() - kOldHeaderSize) / kOldEntrySize) return {};
    base = (kOldHeaderSize + old_count * kOldEntrySize + 7) & ~size_t{7};
  }
  if (base > bytes.size() || bytes.size() - base < kNewHeaderSize ||
      !bytes.substr(base).starts_with(kNewMagic)) {
    return {};
  }
  const uint8_t byte_order = static_cast<uint8_t>(bytes[base + 28]) & 3;
  if (byte_order != 0 && byte_order != 2) return {};
  const uint64_t count = u32_at(base + 20);
  if (count > (bytes.size() - base - kNewHeaderSize) / kNewEntrySize) return {};

  const std::string_view strings = bytes.substr(base);
  std::vector<std::string> dirs;
  std::unordered_set<std::string_view> seen;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t entry = base + kNewHeaderSize + i * kNewEntrySize;
    const uint32_t flags = u32_at(entry);
    if ((flags & 0xff) != kElfLibc6 || (flags & 0xff00) != kX8664Lib64) continue;
    const uint32_t value = u32_at(entry + 8);
    if (value >= strings.size()) continue;
    std::string_view path = strings.substr(value);
    path = path.substr(0, path.find('\0'));  // an unterminated string ends with the file
    size_t slash = path.rfind('/');
    if (path.empty() || path[0] != '/' || slash == std::string_view::npos) continue;
    std::string_view dir = slash == 0 ? path.substr(0, 1) : path.substr(0, slash);
    if (seen.insert(dir).second) dirs.emplace_back(dir);
  }
  return dirs;
}

std::vector<std::string> program_search_dirs(const char* path_variable) {
  std::string_view path =
      path_variable && *path_variable ? path_variable : "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> dirs;
  while (true) {
    const size_t colon = path.find(':');
    const std::string_view dir = path.substr(0, colon);
    dirs.emplace_back(dir.empty() ? std::string_view(".") : dir);
    if (colon == std::string_view::npos) return dirs;
    path.remove_prefix(colon + 1);
  }
}

std::vector<std::string> library_search_dirs(const std::map<std::string, std::string>& env) {
  DirList dirs;

  // ld.so splits LD_LIBRARY_PATH at ':' and ';'. Empty and relative entries name directories
  // relative to the job's working directory, which is not ours: skipped.
  const std::string ld_library_path = env_value(env, "LD_LIBRARY_PATH");
  std::string_view ld_path = ld_library_path;
  while (!ld_path.empty()) {
    size_t end = ld_path.find_first_of(":;");
    dirs.add(std::string(ld_path.substr(0, end)));
    ld_path.remove_prefix(end == std::string_view::npos ? ld_path.size() : end + 1);
  }

  if (std::string cache; read_file("/etc/ld.so.cache", cache) == 0) {
    for (const std::string& dir : parse_ld_so_cache(cache)) dirs.add(dir);
  }
  // ld.so's trusted directories, searched after the cache (and all there is without one).
  for (const char* dir : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                          "/usr/lib64", "/lib", "/usr/lib"}) {
    dirs.add(dir);
  }

  auto add_cuda_root = [&](const std::string& root) {
    dirs.add_glob(root + "/lib64");
    dirs.add_glob(root + "/targets/x86_64-linux/lib");
  };
  add_cuda_root("/usr/local/cuda");
  add_cuda_root("/usr/local/cuda-*");
  for (const char* name : {"CUDA_HOME", "CUDA_PATH"}) {
    std::string root = env_value(env, name);
    if (!root.empty()) add_cuda_root(glob_escape(root));
  }

  // Python environments: wheels such as nvidia-cuda-runtime-cu12 and torch carry their own
  // copies of the CUDA libraries, loaded through RPATH rather than the ld.so search path.
  std::vector<std::string> python_lib_dirs = {"/usr/lib", "/usr/local/lib"};
  for (const char* name : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    std::string prefix = env_value(env, name);
    if (!prefix.empty()) python_lib_dirs.push_back(glob_escape(prefix) + "/lib");
  }
  std::string home = env_value(env, "HOME");
  if (!home.empty()) {
    python_lib_dirs.push_back(glob_escape(home) + "/.pyenv/versions/*/lib");
    python_lib_dirs.push_back(glob_escape(home) + "/.local/lib");
  }
  for (const std::string& lib : python_lib_dirs) {
    for (const char* packages : {"site-packages", "dist-packages"}) {
      std::string site = lib + "/python3*/" + packages;
      dirs.add_glob(site + "/nvidia/*/lib");
      dirs.add_glob(site + "/torch/lib");
    }
  }
  return dirs.take();
}

std::vector<std::string> find_library_files(std::string_view name_prefix,
                                            const std::vector<std::string>& dirs) {
  std::vector<std::string> found;
  std::set<FileId> seen;
  for (const std::string& dir : dirs) {
    DIR* stream = opendir(dir.c_str());
    if (stream == nullptr) continue;
    std::vector<std::string> names;
    while (const dirent* entry = readdir(stream)) {
      std::string_view name = entry->d_name;
      if (name.starts_with(name_prefix)) names.emplace_back(name);
    }
    closedir(stream);
    std::sort(names.begin(), names.end());  // readdir's order is the file system's

    for (const std::string& name : names) {
      std::string path = dir + "/" + name;
      struct stat st {};
      if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (!seen.insert(FileId{st.st_dev, st.st_ino}).second) continue;
      char resolved[PATH_MAX];
      found.emplace_back(realpath(path.c_str(), resolved) != nullptr ? resolved : path);
    }
  }
  return found;
}

}  // namespace eacgm
