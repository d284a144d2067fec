#include "common/atomic_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace eacgm {

Result<void> write_file_atomically(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
    if (!f) return Error{fmt::format("cannot write {}: {}", path, std::strerror(errno))};
    f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!f.flush()) {
      const int saved = errno;
      std::remove(tmp.c_str());
      return Error{fmt::format("cannot write {}: {}", path, std::strerror(saved))};
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    std::remove(tmp.c_str());
    return Error{fmt::format("cannot write {}: {}", path, std::strerror(saved))};
  }
  return {};
}

}  // namespace eacgm
