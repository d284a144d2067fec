#include "probes/elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace eacgm {
namespace {

// An open ELF file: the descriptor and libelf's handle on it. libelf reads only the headers and
// the sections we ask for (symbol and string tables), with pread rather than mmap: a library
// truncated in place while we read it (cp over it) gives an error, not a SIGBUS in the tracer.
class ElfHandle {
 public:
  ElfHandle(int fd, Elf* elf) : fd_(fd), elf_(elf) {}
  ElfHandle(const ElfHandle&) = delete;
  ElfHandle& operator=(const ElfHandle&) = delete;
  ~ElfHandle() {
    if (elf_ != nullptr) elf_end(elf_);
    if (fd_ >= 0) close(fd_);
  }
  Elf* elf() const { return elf_; }

 private:
  int fd_;
  Elf* elf_;
};

Result<std::unique_ptr<ElfHandle>> open_elf(const std::string& path) {
  static const bool kLibelfReady = elf_version(EV_CURRENT) != EV_NONE;
  if (!kLibelfReady) return Error{"libelf is unusable (version mismatch)"};

  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{"cannot open " + path + ": " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Error{path + " is not a regular file"};
  }
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  auto handle = std::make_unique<ElfHandle>(fd, elf);
  if (elf == nullptr) {
    return Error{"cannot read " + path + " as ELF: " + elf_errmsg(-1)};
  }
  if (elf_kind(elf) != ELF_K_ELF) return Error{path + " is not an ELF file"};
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr) {
    return Error{path + " has a corrupt ELF header: " + elf_errmsg(-1)};
  }
  if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_ident[EI_DATA] != ELFDATA2LSB ||
      ehdr.e_machine != EM_X86_64) {
    return Error{path + " is not a 64-bit x86-64 ELF file"};
  }
  return handle;
}

// File offset of `address`, from the segment whose file image contains it.
std::optional<uint64_t> address_to_offset(const std::vector<ElfLoadSegment>& segments,
                                          uint64_t address) {
  for (const ElfLoadSegment& seg : segments) {
    if (address >= seg.vaddr && address - seg.vaddr < seg.filesz) {
      return address - seg.vaddr + seg.offset;
    }
  }
  return std::nullopt;
}

// One element of a table of fixed-size records. Copied out, because libelf may hand over data
// at an address not aligned for the record type.
template <typename T>
T record_at(std::string_view table, size_t index) {
  T value;
  std::memcpy(&value, table.data() + index * sizeof(T), sizeof(T));
  return value;
}

struct SymbolTable {
  Elf_Scn* symbols = nullptr;
  Elf_Scn* versions = nullptr;  // SHT_GNU_versym parallel to `symbols`, if any
};

// Adds one symbol table's functions to `out`, deduplicating by name through `by_name`. `rank` of
// an entry is 1 for a default (or unversioned) definition, 0 for a non-default version; a higher
// rank replaces a lower one, otherwise the first seen wins.
void collect_functions(Elf* elf, const SymbolTable& table,
                       const std::vector<ElfLoadSegment>& segments, std::vector<ElfSymbol>& out,
                       std::vector<uint8_t>& ranks,
                       std::unordered_map<std::string_view, size_t>& by_name) {
  GElf_Shdr shdr;
  if (gelf_getshdr(table.symbols, &shdr) == nullptr) return;
  std::string_view symbols = section_bytes(table.symbols);
  std::string_view strings = section_bytes(elf_getscn(elf, shdr.sh_link));
  std::string_view versions = section_bytes(table.versions);
  const size_t count = symbols.size() / sizeof(Elf64_Sym);
  const size_t version_count = versions.size() / sizeof(Elf64_Half);
  by_name.reserve(by_name.size() + count);

  for (size_t i = 1; i < count; ++i) {  // entry 0 is the reserved null symbol
    const auto sym = record_at<Elf64_Sym>(symbols, i);
    const unsigned type = ELF64_ST_TYPE(sym.st_info);
    const unsigned bind = ELF64_ST_BIND(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
    if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
    if (sym.st_shndx == SHN_UNDEF || sym.st_shndx == SHN_ABS) continue;

    std::string_view name = string_at(strings, sym.st_name);
    uint8_t rank = 1;
    // .dynsym names carry no version; .gnu.version says whether this one is hidden (non-default).
    if (i < version_count && (record_at<Elf64_Half>(versions, i) & 0x8000) != 0) rank = 0;
    // .symtab names may: "name@VER" (non-default) or "name@@VER" (default).
    if (size_t at = name.find('@'); at != std::string_view::npos) {
      if (name.substr(at, 2) != "@@") rank = 0;
      name = name.substr(0, at);
    }
    if (name.empty()) continue;
    std::optional<uint64_t> offset = address_to_offset(segments, sym.st_value);
    if (!offset) continue;

    ElfSymbol symbol{std::string(name), sym.st_value,     *offset,
                     sym.st_size,       bind == STB_WEAK, type == STT_GNU_IFUNC};
    auto [it, inserted] = by_name.try_emplace(name, out.size());
    if (inserted) {
      out.push_back(std::move(symbol));
      ranks.push_back(rank);
    } else if (rank > ranks[it->second]) {
      out[it->second] = std::move(symbol);
      ranks[it->second] = rank;
    }
  }
}

}  // namespace

std::vector<ElfLoadSegment> load_segments(Elf* elf) {
  std::vector<ElfLoadSegment> segments;
  size_t count = 0;
  if (elf_getphdrnum(elf, &count) != 0) return segments;
  for (size_t i = 0; i < count; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_LOAD) {
      continue;
    }
    segments.push_back({phdr.p_vaddr, phdr.p_memsz, phdr.p_offset, phdr.p_filesz});
  }
  return segments;
}

// The contents of a section, as libelf hands them over (converted to memory byte order, which
// for the little-endian files we accept is the file's).
std::string_view section_bytes(Elf_Scn* scn) {
  if (scn == nullptr) return {};
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr || data->d_buf == nullptr) return {};
  return {static_cast<const char*>(data->d_buf), data->d_size};
}

// The NUL-terminated string at `offset` of a string table; empty if out of bounds or unterminated.
std::string_view string_at(std::string_view table, uint64_t offset) {
  if (offset >= table.size()) return {};
  std::string_view rest = table.substr(offset);
  size_t end = rest.find('\0');
  return end == std::string_view::npos ? std::string_view{} : rest.substr(0, end);
}

Result<std::vector<ElfSymbol>> read_function_symbols(const std::string& path) {
  auto opened = open_elf(path);
  if (!opened) return opened.error();
  Elf* elf = opened.value()->elf();

  SymbolTable dynsym, symtab;
  std::vector<std::pair<size_t, Elf_Scn*>> version_tables;  // (linked symbol table, versym)
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    if (shdr.sh_type == SHT_DYNSYM) dynsym.symbols = scn;
    if (shdr.sh_type == SHT_SYMTAB) symtab.symbols = scn;
    if (shdr.sh_type == SHT_GNU_versym) version_tables.emplace_back(shdr.sh_link, scn);
  }
  for (const auto& [link, scn] : version_tables) {
    if (dynsym.symbols != nullptr && link == elf_ndxscn(dynsym.symbols)) dynsym.versions = scn;
  }

  const std::vector<ElfLoadSegment> segments = load_segments(elf);
  std::vector<ElfSymbol> symbols;
  std::vector<uint8_t> ranks;
  // Keys view the string tables, which live as long as `opened`.
  std::unordered_map<std::string_view, size_t> by_name;
  // The exported table first: its names are the ones other objects bind to.
  for (const SymbolTable* table : {&dynsym, &symtab}) {
    if (table->symbols != nullptr) {
      collect_functions(elf, *table, segments, symbols, ranks, by_name);
    }
  }
  return symbols;
}

Result<uint64_t> read_symbol_address(const std::string& path, std::string_view name) {
  auto opened = open_elf(path);
  if (!opened) return opened.error();
  Elf* elf = opened.value()->elf();
  std::optional<uint64_t> non_default;  // "name@VER": taken only if no default version is found
  for (const Elf64_Word type : {SHT_DYNSYM, SHT_SYMTAB}) {
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != type) continue;
      const std::string_view symbols = section_bytes(scn);
      const std::string_view strings = section_bytes(elf_getscn(elf, shdr.sh_link));
      for (size_t i = 1; i < symbols.size() / sizeof(Elf64_Sym); ++i) {
        const auto sym = record_at<Elf64_Sym>(symbols, i);
        if (sym.st_shndx == SHN_UNDEF) continue;
        std::string_view sym_name = string_at(strings, sym.st_name);
        const size_t at = sym_name.find('@');
        if (sym_name.substr(0, at) != name) continue;
        if (at != std::string_view::npos && sym_name.substr(at, 2) != "@@") {
          if (!non_default) non_default = sym.st_value;
          continue;
        }
        return static_cast<uint64_t>(sym.st_value);
      }
    }
  }
  if (non_default) return *non_default;
  return Error{path + " defines no symbol " + std::string(name)};
}

std::optional<std::string> read_soname(const std::string& path) {
  auto opened = open_elf(path);
  if (!opened) return std::nullopt;
  Elf* elf = opened.value()->elf();
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_DYNAMIC) continue;
    std::string_view entries = section_bytes(scn);
    std::string_view strings = section_bytes(elf_getscn(elf, shdr.sh_link));
    for (size_t i = 0; i < entries.size() / sizeof(Elf64_Dyn); ++i) {
      const auto dyn = record_at<Elf64_Dyn>(entries, i);
      if (dyn.d_tag == DT_NULL) break;
      if (dyn.d_tag != DT_SONAME) continue;
      std::string_view soname = string_at(strings, dyn.d_un.d_val);
      if (soname.empty()) return std::nullopt;
      return std::string(soname);
    }
  }
  return std::nullopt;
}

Result<std::string> read_section(const std::string& path, std::string_view name) {
  auto opened = open_elf(path);
  if (!opened) return opened.error();
  Elf* elf = opened.value()->elf();
  size_t names_index = 0;
  if (elf_getshdrstrndx(elf, &names_index) != 0) {
    return Error{path + " has no section name table: " + elf_errmsg(-1)};
  }
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) continue;
    const char* section_name = elf_strptr(elf, names_index, shdr.sh_name);
    if (section_name == nullptr || name != section_name) continue;
    return std::string(section_bytes(scn));
  }
  return Error{path + " has no " + std::string(name) + " section"};
}

}  // namespace eacgm
