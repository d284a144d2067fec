// The on-disk cache of a library's symbols: what it holds comes back exactly, and a file that is
// cut short, altered or for another build is never taken for the truth.
#include "probes/symbol_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace eacgm {
namespace {

const CachedSymbols kOps = {{0x1a2b3c, "aten::addmm"}, {0x10, "aten::softmax.int"}, {0, "x y"}};

TEST(SymbolCache, FormatParsesBackExactly) {
  EXPECT_EQ(parse_cached_symbols(format_cached_symbols(kOps)), kOps);
  EXPECT_EQ(parse_cached_symbols(format_cached_symbols({})), CachedSymbols{});
}

TEST(SymbolCache, ATruncatedOrAlteredFileIsNotRead) {
  const std::string text = format_cached_symbols(kOps);
  EXPECT_FALSE(parse_cached_symbols(text.substr(0, text.size() - 4)));  // no end line
  EXPECT_FALSE(parse_cached_symbols(""));
  EXPECT_FALSE(parse_cached_symbols("eacgm-symbols 2\nend\n"));
  EXPECT_FALSE(parse_cached_symbols("eacgm-symbols 1\nzz aten::mm\nend\n"));
  EXPECT_FALSE(parse_cached_symbols("eacgm-symbols 1\n10\nend\n"));
  EXPECT_FALSE(parse_cached_symbols("eacgm-symbols 1\n10 aten::mm\nend\ntrailing\n"));
}

TEST(SymbolCache, StoredByBuildIdUnderTheCacheDirectory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("eacgm-cache-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const char* saved = getenv("XDG_CACHE_HOME");
  const std::string saved_value = saved ? saved : "";
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);

  EXPECT_FALSE(load_cached_symbols("torch-ops.1", "abc123"));
  store_cached_symbols("torch-ops.1", "abc123", kOps);
  EXPECT_TRUE(std::filesystem::exists(dir / "eacgm" / "torch-ops.1" / "abc123"));
  EXPECT_EQ(load_cached_symbols("torch-ops.1", "abc123"), kOps);
  EXPECT_FALSE(load_cached_symbols("torch-ops.1", "abc124"));  // another build
  EXPECT_FALSE(load_cached_symbols("torch-ops.2", "abc123"));  // other naming rules
  // Never a path from what is not a build id.
  store_cached_symbols("torch-ops.1", "../escape", kOps);
  EXPECT_FALSE(std::filesystem::exists(dir / "eacgm" / "escape"));
  EXPECT_FALSE(load_cached_symbols("torch-ops.1", "../escape"));
  // A damaged file is ignored.
  std::ofstream(dir / "eacgm" / "torch-ops.1" / "abc123") << "eacgm-symbols 1\n10 aten::mm\n";
  EXPECT_FALSE(load_cached_symbols("torch-ops.1", "abc123"));

  if (saved) {
    setenv("XDG_CACHE_HOME", saved_value.c_str(), 1);
  } else {
    unsetenv("XDG_CACHE_HOME");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace eacgm
