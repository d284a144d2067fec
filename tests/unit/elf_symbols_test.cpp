// Unit tests for reading function symbols and their uprobe file offsets out of ELF files: a
// synthetic library written by the test (exact expectations: versions, aliases, IFUNCs, a
// segment whose file offset differs from its address), plus the real libc and, when installed,
// the CUDA libraries. No privileges needed.
#include "probes/elf_symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "test_support.h"

namespace eacgm {
namespace {

constexpr const char* kNccl = "/usr/local/cuda/lib64/libnccl.so.2";
constexpr const char* kLibc = "/lib/x86_64-linux-gnu/libc.so.6";

bool exists(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

// Replaces the file rather than truncating it: ext4 flushes a file truncated and rewritten in
// place when it is closed, which made the corruption test take seconds on a busy disk.
void write_bytes(const std::string& path, const std::string& bytes) {
  unlink(path.c_str());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

const ElfSymbol* find(const std::vector<ElfSymbol>& symbols, const std::string& name) {
  auto it = std::find_if(symbols.begin(), symbols.end(),
                         [&](const ElfSymbol& s) { return s.name == name; });
  return it == symbols.end() ? nullptr : &*it;
}

// --- A synthetic shared library, laid out by hand ---------------------------------------------
//
// Two PT_LOAD segments; the code one is at file offset 0x1000 but address 0x201000, so every
// function's file offset is its address minus 0x200000.
constexpr uint64_t kTextAddress = 0x201000;
constexpr uint64_t kTextOffset = 0x1000;
constexpr uint64_t kTextSize = 0x100;

class StringTable {
 public:
  StringTable() : bytes_(1, '\0') {}
  uint32_t add(const std::string& s) {
    uint32_t offset = static_cast<uint32_t>(bytes_.size());
    bytes_ += s;
    bytes_ += '\0';
    return offset;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

template <typename T>
std::string as_bytes(const std::vector<T>& records) {
  return std::string(reinterpret_cast<const char*>(records.data()), records.size() * sizeof(T));
}

Elf64_Sym make_sym(uint32_t name, unsigned type, unsigned bind, uint64_t value, uint64_t size,
                   uint16_t shndx = 1) {
  Elf64_Sym sym{};
  sym.st_name = name;
  sym.st_info = ELF64_ST_INFO(bind, type);
  sym.st_shndx = shndx;
  sym.st_value = value;
  sym.st_size = size;
  return sym;
}

std::string synthetic_library(uint16_t machine = EM_X86_64) {
  StringTable dynstr, strtab, shstrtab;
  std::vector<Elf64_Sym> dynsym(1);
  std::vector<Elf64_Half> versym(1);
  auto dyn = [&](const char* name, unsigned type, unsigned bind, uint64_t value, Elf64_Half version,
                 uint16_t shndx = 1) {
    dynsym.push_back(make_sym(dynstr.add(name), type, bind, value, 16, shndx));
    versym.push_back(version);
  };
  dyn("foo", STT_FUNC, STB_GLOBAL, 0x201010, 0x8002);  // foo@V1: hidden, not the default
  dyn("foo", STT_FUNC, STB_GLOBAL, 0x201020, 3);       // foo@@V2
  dyn("pfoo", STT_FUNC, STB_GLOBAL, 0x201020, 1);      // an alias at the same address
  dyn("wfoo", STT_FUNC, STB_WEAK, 0x201020, 1);        // a weak alias (NCCL style)
  dyn("chooser", STT_GNU_IFUNC, STB_GLOBAL, 0x201030, 1);
  dyn("variable", STT_OBJECT, STB_GLOBAL, 0x201040, 1);
  dyn("imported", STT_FUNC, STB_GLOBAL, 0, 1, SHN_UNDEF);
  dyn("nowhere", STT_FUNC, STB_GLOBAL, 0x300000, 1);  // in no segment
  dyn("absolute", STT_FUNC, STB_GLOBAL, 0x201000, 1, SHN_ABS);
  const uint32_t soname = dynstr.add("libsynthetic.so.1");

  std::vector<Elf64_Sym> symtab(1);
  auto sym = [&](const char* name, unsigned type, unsigned bind, uint64_t value) {
    symtab.push_back(make_sym(strtab.add(name), type, bind, value, 8));
  };
  sym("static_helper", STT_FUNC, STB_LOCAL, 0x201050);
  sym("foo@@V2", STT_FUNC, STB_GLOBAL, 0x201020);
  sym("internal", STT_FUNC, STB_GLOBAL, 0x201060);  // hidden visibility: only in .symtab
  sym("bar@V1", STT_FUNC, STB_GLOBAL, 0x201070);
  sym("bar@@V2", STT_FUNC, STB_GLOBAL, 0x201080);
  sym("baz@V1", STT_FUNC, STB_GLOBAL, 0x201090);
  sym("first", STT_FUNC, STB_GLOBAL, kTextAddress);
  symtab.push_back(make_sym(1u << 30, STT_FUNC, STB_GLOBAL, 0x2010a0, 8));  // name out of bounds

  std::vector<Elf64_Dyn> dynamic(2);
  dynamic[0].d_tag = DT_SONAME;
  dynamic[0].d_un.d_val = soname;
  dynamic[1].d_tag = DT_NULL;

  std::string file(kTextOffset, '\0');
  for (uint64_t i = 0; i < kTextSize; ++i) file += static_cast<char>(0x40 + i % 64);

  std::vector<Elf64_Shdr> shdrs(1);
  auto section = [&](const char* name, uint32_t type, const std::string& bytes, uint32_t link,
                     uint64_t entsize, uint32_t info = 0) {
    while (file.size() % 8 != 0) file += '\0';
    Elf64_Shdr shdr{};
    shdr.sh_name = shstrtab.add(name);
    shdr.sh_type = type;
    shdr.sh_offset = file.size();
    shdr.sh_size = bytes.size();
    shdr.sh_link = link;
    shdr.sh_info = info;
    shdr.sh_addralign = 8;
    shdr.sh_entsize = entsize;
    file += bytes;
    shdrs.push_back(shdr);
  };
  Elf64_Shdr text{};
  text.sh_name = shstrtab.add(".text");
  text.sh_type = SHT_PROGBITS;
  text.sh_flags = SHF_ALLOC | SHF_EXECINSTR;
  text.sh_addr = kTextAddress;
  text.sh_offset = kTextOffset;
  text.sh_size = kTextSize;
  text.sh_addralign = 16;
  shdrs.push_back(text);                                                      // 1
  section(".dynsym", SHT_DYNSYM, as_bytes(dynsym), 3, sizeof(Elf64_Sym), 1);  // 2
  section(".dynstr", SHT_STRTAB, dynstr.bytes(), 0, 0);                       // 3
  section(".gnu.version", SHT_GNU_versym, as_bytes(versym), 2, 2);            // 4
  section(".symtab", SHT_SYMTAB, as_bytes(symtab), 6, sizeof(Elf64_Sym), 2);  // 5
  section(".strtab", SHT_STRTAB, strtab.bytes(), 0, 0);                       // 6
  section(".dynamic", SHT_DYNAMIC, as_bytes(dynamic), 3, sizeof(Elf64_Dyn));  // 7
  const uint32_t shstrtab_name = shstrtab.add(".shstrtab");
  section(".shstrtab", SHT_STRTAB, shstrtab.bytes(), 0, 0);  // 8
  shdrs.back().sh_name = shstrtab_name;
  while (file.size() % 8 != 0) file += '\0';
  const uint64_t shoff = file.size();
  file += as_bytes(shdrs);

  std::vector<Elf64_Phdr> phdrs(2);
  phdrs[0].p_type = PT_LOAD;
  phdrs[0].p_flags = PF_R;
  phdrs[0].p_filesz = phdrs[0].p_memsz = kTextOffset;
  phdrs[0].p_align = 0x1000;
  phdrs[1].p_type = PT_LOAD;
  phdrs[1].p_flags = PF_R | PF_X;
  phdrs[1].p_offset = kTextOffset;
  phdrs[1].p_vaddr = phdrs[1].p_paddr = kTextAddress;
  phdrs[1].p_filesz = phdrs[1].p_memsz = kTextSize;
  phdrs[1].p_align = 0x1000;

  Elf64_Ehdr ehdr{};
  std::memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
  ehdr.e_ident[EI_CLASS] = ELFCLASS64;
  ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr.e_ident[EI_VERSION] = EV_CURRENT;
  ehdr.e_type = ET_DYN;
  ehdr.e_machine = machine;
  ehdr.e_version = EV_CURRENT;
  ehdr.e_phoff = sizeof(Elf64_Ehdr);
  ehdr.e_shoff = shoff;
  ehdr.e_ehsize = sizeof(Elf64_Ehdr);
  ehdr.e_phentsize = sizeof(Elf64_Phdr);
  ehdr.e_phnum = static_cast<Elf64_Half>(phdrs.size());
  ehdr.e_shentsize = sizeof(Elf64_Shdr);
  ehdr.e_shnum = static_cast<Elf64_Half>(shdrs.size());
  ehdr.e_shstrndx = static_cast<Elf64_Half>(shdrs.size() - 1);
  std::memcpy(file.data(), &ehdr, sizeof ehdr);
  std::string program_headers = as_bytes(phdrs);
  std::memcpy(file.data() + sizeof ehdr, program_headers.data(), program_headers.size());
  return file;
}

class SyntheticLibraryTest : public testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path().string() + "/libsynthetic.so.1";
    write_bytes(path_, synthetic_library());
  }
  TempDir dir_;
  std::string path_;
};

TEST_F(SyntheticLibraryTest, FileOffsetComesFromTheContainingLoadSegment) {
  auto symbols = read_function_symbols(path_);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  const std::string bytes = read_bytes(path_);
  for (const ElfSymbol& s : *symbols) {
    EXPECT_EQ(s.file_offset, s.address - kTextAddress + kTextOffset) << s.name;
    // The first byte of the function in the file is the one the test wrote for that address.
    ASSERT_LT(s.file_offset, bytes.size()) << s.name;
    EXPECT_EQ(bytes[s.file_offset], static_cast<char>(0x40 + (s.address - kTextAddress) % 64));
  }
  const ElfSymbol* first = find(*symbols, "first");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->file_offset, kTextOffset);
}

TEST_F(SyntheticLibraryTest, KeepsExactlyTheDefinedGlobalFunctions) {
  auto symbols = read_function_symbols(path_);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  std::vector<std::string> names;
  for (const ElfSymbol& s : *symbols) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  // Not: variable (data), imported (undefined), nowhere (outside every segment), absolute
  // (SHN_ABS), static_helper (local), the symbol whose name is out of bounds.
  EXPECT_EQ(names, (std::vector<std::string>{"bar", "baz", "chooser", "first", "foo", "internal",
                                             "pfoo", "wfoo"}));
}

TEST_F(SyntheticLibraryTest, DefaultVersionWinsAndSuffixesAreStripped) {
  auto symbols = read_function_symbols(path_);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  ASSERT_NE(find(*symbols, "foo"), nullptr);
  EXPECT_EQ(find(*symbols, "foo")->address, 0x201020u);  // .dynsym's foo@@V2, not foo@V1
  ASSERT_NE(find(*symbols, "bar"), nullptr);
  EXPECT_EQ(find(*symbols, "bar")->address, 0x201080u);  // .symtab's bar@@V2
  ASSERT_NE(find(*symbols, "baz"), nullptr);
  EXPECT_EQ(find(*symbols, "baz")->address, 0x201090u);  // only a non-default version: kept
}

TEST_F(SyntheticLibraryTest, AliasesAtOneAddressAreAllKept) {
  auto symbols = read_function_symbols(path_);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  const ElfSymbol* strong = find(*symbols, "pfoo");
  const ElfSymbol* weak = find(*symbols, "wfoo");
  ASSERT_NE(strong, nullptr);
  ASSERT_NE(weak, nullptr);
  EXPECT_EQ(strong->address, weak->address);
  EXPECT_FALSE(strong->weak);
  EXPECT_TRUE(weak->weak);
  EXPECT_EQ(strong->size, 16u);
}

TEST_F(SyntheticLibraryTest, SymbolAddressOfAVariableOrAFunction) {
  auto variable = read_symbol_address(path_, "variable");
  ASSERT_TRUE(variable.ok()) << variable.error().message;
  EXPECT_EQ(*variable, 0x201040u);
  auto bar = read_symbol_address(path_, "bar");  // only in .symtab, as bar@@V2
  ASSERT_TRUE(bar.ok()) << bar.error().message;
  EXPECT_EQ(*bar, 0x201080u);
  auto imported = read_symbol_address(path_, "imported");  // undefined here
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().message, path_ + " defines no symbol imported");
  EXPECT_FALSE(read_symbol_address(dir_.path().string() + "/missing.so", "variable").ok());
}

TEST(ElfSymbolsTest, TheLoaderDefinesItsRendezvous) {
  // serve's notice finds the loader's list from its probed rendezvous (bpf/core.bpf.c).
  auto r_debug = read_symbol_address("/lib64/ld-linux-x86-64.so.2", "_r_debug");
  auto probe = read_symbol_address("/lib64/ld-linux-x86-64.so.2", "_dl_debug_state");
  ASSERT_TRUE(r_debug.ok()) << r_debug.error().message;
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  EXPECT_NE(*r_debug, *probe);
}

TEST_F(SyntheticLibraryTest, IfuncsAreMarked) {
  auto symbols = read_function_symbols(path_);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  ASSERT_NE(find(*symbols, "chooser"), nullptr);
  EXPECT_TRUE(find(*symbols, "chooser")->ifunc);
  EXPECT_FALSE(find(*symbols, "foo")->ifunc);
}

TEST_F(SyntheticLibraryTest, Soname) { EXPECT_EQ(read_soname(path_), "libsynthetic.so.1"); }

TEST_F(SyntheticLibraryTest, OtherMachineIsAnError) {
  write_bytes(path_, synthetic_library(EM_AARCH64));
  auto symbols = read_function_symbols(path_);
  ASSERT_FALSE(symbols.ok());
  EXPECT_NE(symbols.error().message.find(path_), std::string::npos);
  EXPECT_NE(symbols.error().message.find("x86-64"), std::string::npos);
}

TEST_F(SyntheticLibraryTest, ThirtyTwoBitIsAnError) {
  std::string bytes = synthetic_library();
  bytes[EI_CLASS] = ELFCLASS32;
  write_bytes(path_, bytes);
  auto symbols = read_function_symbols(path_);
  ASSERT_FALSE(symbols.ok());
  EXPECT_NE(symbols.error().message.find(path_), std::string::npos);
}

// A damaged file must give an error or some symbols, never a crash: libraries come from the
// traced job, not from us.
TEST_F(SyntheticLibraryTest, TruncatedOrCorruptedFilesDoNotCrash) {
  const std::string good = synthetic_library();
  for (size_t length = 0; length < good.size(); length += 7) {
    write_bytes(path_, good.substr(0, length));
    auto symbols = read_function_symbols(path_);
    if (symbols.ok()) {
      for (const ElfSymbol& s : *symbols) EXPECT_FALSE(s.name.empty());
    }
    (void)read_soname(path_);
  }
  std::mt19937 random(42);
  for (int round = 0; round < 300; ++round) {
    std::string bad = good;
    for (int flips = 0; flips < 4; ++flips) {
      bad[random() % bad.size()] = static_cast<char>(random());
    }
    write_bytes(path_, bad);
    auto symbols = read_function_symbols(path_);
    (void)read_soname(path_);
  }
}

// --- Errors -----------------------------------------------------------------------------------

TEST(ElfSymbolsTest, MissingFileIsAnErrorNamingIt) {
  const std::string path = "/nonexistent/eacgm/libnothing.so";
  auto symbols = read_function_symbols(path);
  ASSERT_FALSE(symbols.ok());
  EXPECT_NE(symbols.error().message.find(path), std::string::npos);
  EXPECT_EQ(read_soname(path), std::nullopt);
}

TEST(ElfSymbolsTest, NonElfFileIsAnErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.path().string() + "/not_a_library.so";
  write_bytes(path, "#!/bin/sh\necho this is a script, not a shared library\n");
  auto symbols = read_function_symbols(path);
  ASSERT_FALSE(symbols.ok());
  EXPECT_NE(symbols.error().message.find(path), std::string::npos);
  EXPECT_NE(symbols.error().message.find("not an ELF"), std::string::npos);

  write_bytes(path, "");
  EXPECT_FALSE(read_function_symbols(path).ok());
  EXPECT_FALSE(read_function_symbols(dir.path()).ok());  // a directory
}

// --- Real libraries ---------------------------------------------------------------------------

// Uses the libc this test runs with: the bytes at file_offset in the file must be the bytes of
// the function as ld.so mapped it into this process.
TEST(ElfSymbolsTest, LibcFileOffsetsMatchTheMappedCode) {
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  void* malloc_address = dlsym(libc, "malloc");
  Dl_info info{};
  ASSERT_NE(dladdr(malloc_address, &info), 0);
  const std::string path = info.dli_fname;

  auto symbols = read_function_symbols(path);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  const ElfSymbol* malloc_symbol = find(*symbols, "malloc");
  ASSERT_NE(malloc_symbol, nullptr);
  EXPECT_FALSE(malloc_symbol->ifunc);
  const auto* base = static_cast<const char*>(info.dli_fbase);
  EXPECT_EQ(base + malloc_symbol->address, malloc_address);

  const std::string bytes = read_bytes(path);
  int compared = 0;
  for (const char* name : {"malloc", "free", "open", "pthread_create", "qsort"}) {
    const ElfSymbol* s = find(*symbols, name);
    ASSERT_NE(s, nullptr) << name;
    const size_t n = std::min<uint64_t>(s->size, 32);
    ASSERT_LE(s->file_offset + n, bytes.size()) << name;
    EXPECT_EQ(std::memcmp(bytes.data() + s->file_offset, base + s->address, n), 0) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 5);
}

TEST(ElfSymbolsTest, LibcVersionedNamesComeOutPlain) {
  if (!exists(kLibc)) GTEST_SKIP() << kLibc << " not present";
  auto symbols = read_function_symbols(kLibc);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  EXPECT_GT(symbols->size(), 1000u);
  for (const ElfSymbol& s : *symbols) ASSERT_EQ(s.name.find('@'), std::string::npos) << s.name;
  // memcpy@@GLIBC_2.14 (an IFUNC) is the default; memcpy@GLIBC_2.2.5 is a plain compat FUNC.
  const ElfSymbol* memcpy_symbol = find(*symbols, "memcpy");
  ASSERT_NE(memcpy_symbol, nullptr);
  EXPECT_TRUE(memcpy_symbol->ifunc);
  ASSERT_NE(find(*symbols, "malloc"), nullptr);
  EXPECT_EQ(std::count_if(symbols->begin(), symbols->end(),
                          [](const ElfSymbol& s) { return s.name == "memcpy"; }),
            1);
  EXPECT_EQ(read_soname(kLibc), "libc.so.6");
}

// The containing PT_LOAD segment, read independently of libelf with plain <elf.h> structs.
std::optional<Elf64_Phdr> load_segment_of(const std::string& bytes, uint64_t address) {
  Elf64_Ehdr ehdr;
  std::memcpy(&ehdr, bytes.data(), sizeof ehdr);
  for (int i = 0; i < ehdr.e_phnum; ++i) {
    Elf64_Phdr phdr;
    std::memcpy(&phdr, bytes.data() + ehdr.e_phoff + i * sizeof phdr, sizeof phdr);
    if (phdr.p_type == PT_LOAD && address >= phdr.p_vaddr &&
        address < phdr.p_vaddr + phdr.p_filesz) {
      return phdr;
    }
  }
  return std::nullopt;
}

TEST(ElfSymbolsTest, CudaRuntime) {
  if (!exists(kCudart)) GTEST_SKIP() << kCudart << " not present";
  auto symbols = read_function_symbols(kCudart);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  const ElfSymbol* s = find(*symbols, "cudaMalloc");  // cudaMalloc@@libcudart.so.13
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->ifunc);
  EXPECT_FALSE(s->weak);
  EXPECT_GT(s->size, 0u);

  const std::string bytes = read_bytes(kCudart);
  auto segment = load_segment_of(bytes, s->address);
  ASSERT_TRUE(segment.has_value());
  EXPECT_NE(segment->p_flags & PF_X, 0u);
  EXPECT_EQ(s->file_offset, s->address - segment->p_vaddr + segment->p_offset);
  EXPECT_EQ(read_soname(kCudart), "libcudart.so.13");
}

TEST(ElfSymbolsTest, NcclWeakAliasesShareTheAddress) {
  if (!exists(kNccl)) GTEST_SKIP() << kNccl << " not present";
  auto symbols = read_function_symbols(kNccl);
  ASSERT_TRUE(symbols.ok()) << symbols.error().message;
  const ElfSymbol* alias = find(*symbols, "ncclAllReduce");
  const ElfSymbol* real = find(*symbols, "pncclAllReduce");
  ASSERT_NE(alias, nullptr);
  ASSERT_NE(real, nullptr);
  EXPECT_EQ(alias->address, real->address);
  EXPECT_EQ(alias->file_offset, real->file_offset);
  EXPECT_TRUE(alias->weak);
  EXPECT_FALSE(real->weak);
}

}  // namespace
}  // namespace eacgm
