// What several unit tests share: time and size units, a scratch directory, reading a file, a
// table's columns, the real NVIDIA library the toolkit installs. One definition each, so that the
// test sources can also be compiled together (CMake's unity build).
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/sqlite_handles.h"

namespace eacgm {

inline constexpr uint64_t kMs = 1'000'000;     // in nanoseconds
inline constexpr uint64_t kS = 1'000'000'000;  // in nanoseconds
inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr const char* kCudart = "/usr/local/cuda/lib64/libcudart.so.13";

// A BPF record's bytes as the ring buffer hands them over; `size` cuts it short.
template <typename T>
std::vector<std::byte> bytes_of(const T& record, size_t size = sizeof(T)) {
  std::vector<std::byte> out(size);
  std::memcpy(out.data(), &record, std::min(size, sizeof(T)));
  return out;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A directory of its own under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(std::string_view tag = "eacgm") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (std::string(tag) + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Creates `relative` (and its parents) under the directory; returns the full path.
  std::string mkdirs(const std::string& relative) const {
    std::filesystem::path full = path_ / relative;
    std::filesystem::create_directories(full);
    return full.string();
  }

 private:
  std::filesystem::path path_;
};

// The names of `table`'s columns in the database, in their order; empty when it has none.
inline std::vector<std::string> column_names(sqlite3* db, const std::string& table) {
  std::vector<std::string> names;
  auto rows = sqlite_rows(db, "SELECT name FROM pragma_table_info('" + table + "') ORDER BY cid");
  if (rows.ok()) {
    for (const auto& row : *rows) names.push_back(row[0].value_or(""));
  }
  return names;
}

}  // namespace eacgm
