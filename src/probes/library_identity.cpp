#include "probes/library_identity.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "probes/elf_symbols.h"

namespace eacgm {
namespace {

// Families whose duplicates break jobs: each keeps process-wide state
// (contexts, handles, allocator caches, registered kernels) that a second
// copy does not share.
constexpr std::string_view kFamilies[] = {
    "libcudart",        "libcuda",        "libnvidia-ml",  "libcublas",
    "libcublasLt",      "libcudnn",       "libcufft",      "libcufftw",
    "libcurand",        "libcusparse",    "libcusparseLt", "libcusolver",
    "libnvrtc",         "libnvJitLink",   "libcupti",      "libnvToolsExt",
    "libnccl",          "libtorch",       "libtorch_cpu",  "libtorch_cuda",
    "libtorch_python",  "libc10",         "libc10_cuda",   "libtensorflow_framework",
    "libtensorflow_cc", "libonnxruntime",
};

bool all_hex(std::string_view s) {
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

}  // namespace

std::optional<std::string> library_family(std::string_view path) {
  const size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t so = base.find(".so");
  if (so == std::string_view::npos) return std::nullopt;
  std::string_view stem = base.substr(0, so);
  // auditwheel renames vendored libraries to name-<8 hex digits>.
  if (const size_t dash = stem.rfind('-'); dash != std::string_view::npos) {
    const std::string_view suffix = stem.substr(dash + 1);
    if (suffix.size() == 8 && all_hex(suffix)) stem = stem.substr(0, dash);
  }
  for (std::string_view family : kFamilies) {
    if (stem == family) return std::string(stem);
  }
  // cuDNN 8/9 split into libcudnn_ops, libcudnn_cnn_infer, ...: each its own family.
  if (stem.starts_with("libcudnn_")) return std::string(stem);
  return std::nullopt;
}

std::string library_version(std::string_view name) {
  const size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name = name.substr(slash + 1);
  const size_t so = name.find(".so.");
  if (so == std::string_view::npos) return "";
  return std::string(name.substr(so + 4));
}

std::optional<std::string> read_build_id(const std::string& path) {
  static const bool ready = elf_version(EV_CURRENT) != EV_NONE;
  if (!ready) return std::nullopt;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  std::optional<std::string> id;
  for (Elf_Scn* scn = elf ? elf_nextscn(elf, nullptr) : nullptr; scn && !id;
       scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_NOTE) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr) continue;
    size_t offset = 0;
    GElf_Nhdr note;
    size_t name_at = 0, desc_at = 0;
    while ((offset = gelf_getnote(data, offset, &note, &name_at, &desc_at)) > 0) {
      const char* bytes = static_cast<const char*>(data->d_buf);
      if (note.n_type != NT_GNU_BUILD_ID || note.n_namesz != 4 ||
          std::memcmp(bytes + name_at, "GNU", 4) != 0) {
        continue;
      }
      std::string hex;
      for (size_t i = 0; i < note.n_descsz; ++i) {
        hex += fmt::format("{:02x}", static_cast<unsigned char>(bytes[desc_at + i]));
      }
      id = hex;
      break;
    }
  }
  if (elf) elf_end(elf);
  close(fd);
  return id;
}

std::optional<LibraryBuild> identify_library(const std::string& mapped_path, FileId id,
                                             const std::string& read_path) {
  std::optional<std::string> family = library_family(mapped_path);
  if (!family) return std::nullopt;
  LibraryBuild build;
  build.path = mapped_path;
  build.id = id;
  build.family = *family;
  build.soname = read_soname(read_path).value_or("");
  build.version = library_version(mapped_path);
  if (build.version.empty()) build.version = library_version(build.soname);
  build.build_id = read_build_id(read_path).value_or("");
  struct stat st {};
  if (::stat(read_path.c_str(), &st) == 0) build.size = static_cast<uint64_t>(st.st_size);
  return build;
}

}  // namespace eacgm
