// Where a function lives in an ELF file: the file offset a uprobe attaches to.
//
// A uprobe is placed at an offset in a file (the kernel binds it to the inode), so for every
// traced function we need the offset of its first instruction in the file. That is not the
// symbol's address: the address is in the file's link-time virtual layout, and the PT_LOAD
// program header containing it says where that part of the file lives
// (offset = address - p_vaddr + p_offset). The two coincide for most GNU ld output but not for
// lld-linked libraries (e.g. LLVM's), so we always do the arithmetic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

struct Elf;      // libelf
struct Elf_Scn;  // libelf

namespace eacgm {

struct ElfSymbol {
  std::string name;      // without any @VERSION / @@VERSION suffix
  uint64_t address;      // st_value (virtual address in the file's link-time layout)
  uint64_t file_offset;  // offset in the file of the first instruction: what a uprobe attaches to
  uint64_t size;
  bool weak;
  // STT_GNU_IFUNC: `address` is the resolver, which runs once when the symbol is bound (ld.so
  // calls it to pick e.g. an AVX2 memcpy), not on every call. A uprobe there counts bindings,
  // not calls; callers that want calls must skip these (or find the implementation by name).
  bool ifunc;
};

// All defined functions (STT_FUNC and STT_GNU_IFUNC, the latter marked `ifunc`) with global or
// weak binding from .dynsym and .symtab, deduplicated by name; local (file-static) functions are
// left out because their names are not unique. When several versions of a name are defined
// (libc's memcpy@GLIBC_2.2.5 and memcpy@@GLIBC_2.14) the default version wins, which is the one
// newly linked programs call. Names that share an address (NCCL's weak `ncclX` aliases of
// `pncclX`) are all kept: callers that attach once per address dedupe by address. Symbols whose
// address lies in no PT_LOAD segment's file image (nothing there to probe) are left out.
// Errors (naming the file): missing or unreadable, not ELF, not 64-bit x86-64.
Result<std::vector<ElfSymbol>> read_function_symbols(const std::string& path);

// st_value (the link-time address) of the defined symbol `name` of any type (a variable such as
// ld.so's `_r_debug`, or a function): the first definition in .dynsym, else in .symtab, whatever
// its version (for names defined once, as the loader's are). Error (naming the file and the
// symbol) when it is unreadable or has none.
Result<uint64_t> read_symbol_address(const std::string& path, std::string_view name);

// DT_SONAME of a shared library ("libc.so.6"); nullopt when the file has none or is unreadable.
std::optional<std::string> read_soname(const std::string& path);

// The contents of a section, as libelf hands them over (converted to memory byte order, which
// for the little-endian files we accept is the file's); empty for a null section.
std::string_view section_bytes(Elf_Scn* scn);

// A PT_LOAD segment of an ELF file.
struct ElfLoadSegment {
  uint64_t vaddr;
  uint64_t memsz;
  uint64_t offset;
  uint64_t filesz;
};

// The PT_LOAD segments of an open ELF file, in program-header order; empty when it has none or
// its program headers cannot be read.
std::vector<ElfLoadSegment> load_segments(Elf* elf);

// The NUL-terminated string at `offset` of a string table; empty if out of bounds or unterminated.
std::string_view string_at(std::string_view table, uint64_t offset);

// The bytes of the section called `name` (".rodata"). Error when the file is unreadable or has
// no such section (or it occupies no bytes in the file, like .bss).
Result<std::string> read_section(const std::string& path, std::string_view name);

}  // namespace eacgm
