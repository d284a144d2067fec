#include "layers/python/python_binary.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>

#include "probes/elf_symbols.h"

namespace eacgm {
namespace {

constexpr uint64_t kPageSize = 4096;  // x86-64: the granule the kernel maps segments in

uint64_t page_down(uint64_t value) { return value & ~(kPageSize - 1); }

// An ELF file opened for reading with libelf (pread, not mmap: a file replaced while we read
// it gives an error, not a SIGBUS).
class ElfFile {
 public:
  ElfFile() = default;
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;
  ~ElfFile() {
    if (elf_ != nullptr) elf_end(elf_);
    if (fd_ >= 0) close(fd_);
  }

  Result<void> open(const std::string& path) {
    if (elf_version(EV_CURRENT) == EV_NONE) return Error{"libelf is unusable (version mismatch)"};
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return Error{fmt::format("cannot open {}: {}", path, std::strerror(errno))};
    struct stat st {};
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      return Error{fmt::format("{} is not a regular file", path)};
    }
    id_ = {st.st_dev, st.st_ino};
    elf_ = elf_begin(fd_, ELF_C_READ, nullptr);
    GElf_Ehdr ehdr;
    if (elf_ == nullptr || elf_kind(elf_) != ELF_K_ELF || gelf_getehdr(elf_, &ehdr) == nullptr) {
      return Error{fmt::format("{} is not an ELF file", path)};
    }
    if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_ident[EI_DATA] != ELFDATA2LSB ||
        ehdr.e_machine != EM_X86_64) {
      return Error{fmt::format("{} is not a 64-bit x86-64 ELF file", path)};
    }
    return {};
  }

  Elf* elf() const { return elf_; }
  FileId id() const { return id_; }

  // The first section of type `type` (and name `name`, unless empty).
  Elf_Scn* section(uint32_t type, std::string_view name = {}) const {
    size_t names = 0;
    if (elf_getshdrstrndx(elf_, &names) != 0) return nullptr;
    for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn != nullptr; scn = elf_nextscn(elf_, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != type) continue;
      const char* section_name = elf_strptr(elf_, names, shdr.sh_name);
      if (name.empty() || (section_name != nullptr && name == section_name)) return scn;
    }
    return nullptr;
  }

 private:
  int fd_ = -1;
  Elf* elf_ = nullptr;
  FileId id_{};
};

// The symbols that say whether a file is CPython and which one. _PyRuntime exists from 3.7 on.
// Py_Version (3.11+) is PY_VERSION_HEX; before it, the newest C API function a release added
// tells 3.8, 3.9 and 3.10 apart (each stays in later releases).
struct PythonSymbols {
  std::optional<GElf_Sym> runtime, py_version;
  bool new_ref = false;         // Py_NewRef: 3.10
  bool frame_get_code = false;  // PyFrame_GetCode: 3.9
  bool posonly_code = false;    // PyCode_NewWithPosOnlyArgs: 3.8
};

void scan_symbols(Elf* elf, Elf_Scn* table, PythonSymbols& found) {
  GElf_Shdr shdr;
  if (table == nullptr || gelf_getshdr(table, &shdr) == nullptr) return;
  std::string_view symbols = section_bytes(table);
  std::string_view strings = section_bytes(elf_getscn(elf, shdr.sh_link));
  for (size_t i = 1; i < symbols.size() / sizeof(Elf64_Sym); ++i) {
    Elf64_Sym sym;
    std::memcpy(&sym, symbols.data() + i * sizeof(sym), sizeof(sym));  // may be unaligned
    if (sym.st_shndx == SHN_UNDEF) continue;
    std::string_view name = string_at(strings, sym.st_name);
    if (name == "_PyRuntime") found.runtime = sym;
    if (name == "Py_Version") found.py_version = sym;
    found.new_ref |= name == "Py_NewRef";
    found.frame_get_code |= name == "PyFrame_GetCode";
    found.posonly_code |= name == "PyCode_NewWithPosOnlyArgs";
  }
}

// The value of Py_Version (an unsigned long in .rodata) as a version id.
std::optional<uint32_t> read_py_version(Elf* elf, const GElf_Sym& sym) {
  GElf_Shdr shdr;
  Elf_Scn* scn = elf_getscn(elf, sym.st_shndx);
  if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) {
    return std::nullopt;
  }
  std::string_view bytes = section_bytes(scn);
  uint32_t hex = 0;
  if (sym.st_value < shdr.sh_addr || sym.st_value - shdr.sh_addr + 4 > bytes.size()) {
    return std::nullopt;
  }
  std::memcpy(&hex, bytes.data() + (sym.st_value - shdr.sh_addr), sizeof(hex));
  return (hex >> 24) * 100 + ((hex >> 16) & 0xff);
}

// "python3.11", "libpython3.11.so.1.0", "libpython3.7m.so" -> 311, 311, 307.
std::optional<uint32_t> version_from_name(std::string_view name) {
  if (size_t slash = name.rfind('/'); slash != std::string_view::npos)
    name.remove_prefix(slash + 1);
  if (name.starts_with("lib")) name.remove_prefix(3);
  if (!name.starts_with("python") || name.size() < 9 || name[7] != '.') return std::nullopt;
  const char major = name[6];
  uint32_t minor = 0;
  size_t i = 8;
  for (; i < name.size() && i < 11 && name[i] >= '0' && name[i] <= '9'; ++i) {
    minor = minor * 10 + static_cast<uint32_t>(name[i] - '0');
  }
  if (major < '2' || major > '9' || i == 8) return std::nullopt;
  return static_cast<uint32_t>(major - '0') * 100 + minor;
}

std::optional<std::string> soname(Elf* elf, Elf_Scn* dynamic) {
  GElf_Shdr shdr;
  if (dynamic == nullptr || gelf_getshdr(dynamic, &shdr) == nullptr) return std::nullopt;
  std::string_view entries = section_bytes(dynamic);
  std::string_view strings = section_bytes(elf_getscn(elf, shdr.sh_link));
  for (size_t i = 0; i < entries.size() / sizeof(Elf64_Dyn); ++i) {
    Elf64_Dyn dyn;
    std::memcpy(&dyn, entries.data() + i * sizeof(dyn), sizeof(dyn));
    if (dyn.d_tag == DT_NULL) break;
    if (dyn.d_tag == DT_SONAME) return std::string(string_at(strings, dyn.d_un.d_val));
  }
  return std::nullopt;
}

// Names of the USDT probes of provider "python". Each SystemTap note (owner "stapsdt", type 3)
// describes one probe: three addresses (pc, base, semaphore), then provider, name and argument
// format as NUL-terminated strings.
std::vector<std::string> python_usdt_probes(Elf_Scn* notes) {
  std::vector<std::string> probes;
  Elf_Data* data = notes == nullptr ? nullptr : elf_getdata(notes, nullptr);
  if (data == nullptr || data->d_buf == nullptr) return probes;
  const std::string_view bytes(static_cast<const char*>(data->d_buf), data->d_size);
  GElf_Nhdr nhdr;
  size_t name_at = 0, desc_at = 0;
  for (size_t at = 0; (at = gelf_getnote(data, at, &nhdr, &name_at, &desc_at)) != 0;) {
    if (nhdr.n_type != 3 ||
        bytes.substr(name_at, nhdr.n_namesz) != std::string_view("stapsdt", 8)) {
      continue;
    }
    std::string_view desc = bytes.substr(desc_at, nhdr.n_descsz);
    if (desc.size() <= 3 * sizeof(uint64_t)) continue;
    std::string_view provider = string_at(desc, 3 * sizeof(uint64_t));
    std::string_view name = string_at(desc, 3 * sizeof(uint64_t) + provider.size() + 1);
    if (provider != "python" || name.empty()) continue;
    // A probe placed at several sites has one note per site.
    if (std::find(probes.begin(), probes.end(), name) == probes.end()) probes.emplace_back(name);
  }
  return probes;
}

// Whether a mapping of `file` shows its byte at `offset` at address `address`.
bool maps_offset_at(const MappedFile& file, uint64_t offset, uint64_t address) {
  for (const FileMapping& m : file.mappings) {
    if (address >= m.start && address < m.end && m.offset + (address - m.start) == offset) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<std::optional<PythonInterpreter>> inspect_interpreter(const std::string& path) {
  ElfFile file;
  if (auto opened = file.open(path); !opened) return opened.error();
  Elf* elf = file.elf();

  PythonSymbols symbols;
  scan_symbols(elf, file.section(SHT_DYNSYM), symbols);
  // _PyRuntime is exported (extension modules link against it), so .dynsym has it. The larger
  // .symtab is read only for files named like an interpreter, in case one was linked without
  // exports: inspecting every library of a process stays cheap.
  std::optional<std::string> so = soname(elf, file.section(SHT_DYNAMIC));
  std::optional<uint32_t> named = version_from_name(path);
  if (!named && so) named = version_from_name(*so);
  if (!symbols.runtime && named) scan_symbols(elf, file.section(SHT_SYMTAB), symbols);
  if (!symbols.runtime) return std::optional<PythonInterpreter>();

  std::optional<uint32_t> version;
  if (symbols.py_version) version = read_py_version(elf, *symbols.py_version);
  if (!version) version = named;
  if (!version) {
    version = symbols.new_ref          ? 310
              : symbols.frame_get_code ? 309
              : symbols.posonly_code   ? 308
                                       : 307;  // _PyRuntime appeared in 3.7
  }

  PythonInterpreter interpreter{
      .path = path,
      .id = file.id(),
      .version = *version,
      .runtime_symbol = symbols.runtime->st_value,
      .usdt_probes = python_usdt_probes(file.section(SHT_NOTE, ".note.stapsdt")),
      .has_usdt = false,
      .segments = load_segments(elf)};
  interpreter.has_usdt = !interpreter.usdt_probes.empty();
  return std::optional<PythonInterpreter>(std::move(interpreter));
}

Result<uint64_t> runtime_address(const PythonInterpreter& interpreter, const MappedFile& file) {
  const std::vector<ElfLoadSegment>& segments = interpreter.segments;
  const uint64_t symbol = interpreter.runtime_symbol;
  const ElfLoadSegment* holder = nullptr;
  for (const ElfLoadSegment& s : segments) {
    if (symbol >= s.vaddr && symbol - s.vaddr < s.memsz) holder = &s;
  }
  if (holder == nullptr) {
    return Error{fmt::format("_PyRuntime of {} lies in no loadable segment", interpreter.path)};
  }
  // The load bias, from the first segment: the lowest mapping of the file's first page. Later
  // segments' mappings may show that page too (segments share pages in the file), but above it.
  const ElfLoadSegment& first = segments.front();
  const FileMapping* base = nullptr;
  for (const FileMapping& m : file.mappings) {
    if (m.offset == page_down(first.offset) && (base == nullptr || m.start < base->start))
      base = &m;
  }
  if (base == nullptr) {
    return Error{fmt::format("{} is mapped without its first page", interpreter.path)};
  }
  const uint64_t bias = base->start - page_down(first.vaddr);
  // The segment holding _PyRuntime (.data or .bss) must be where that bias puts it, showing its
  // first file page: otherwise the mappings are not what the program headers describe (another
  // file under the same inode, a partial mapping) and the address would be a guess.
  if (!maps_offset_at(file, page_down(holder->offset), bias + page_down(holder->vaddr))) {
    return Error{
        fmt::format("the mappings of {} do not match its program headers", interpreter.path)};
  }
  return bias + symbol;
}

Result<uint64_t> runtime_address(uint32_t pid, const PythonInterpreter& interpreter) {
  auto files = mapped_files(pid);
  if (!files) return files.error();
  for (const MappedFile& file : *files) {
    if (file.id == interpreter.id) return runtime_address(interpreter, file);
  }
  return Error{fmt::format("process {} does not map {}", pid, interpreter.path)};
}

}  // namespace eacgm
