#include "probes/symbol_cache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace eacgm {
namespace {

constexpr std::string_view kHeader = "eacgm-symbols 1\n";

std::optional<std::filesystem::path> cache_dir(std::string_view kind) {
  std::filesystem::path base;
  if (const char* xdg = getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/') {
    base = xdg;
  } else if (const char* home = getenv("HOME"); home && home[0] == '/') {
    base = std::filesystem::path(home) / ".cache";
  } else {
    return std::nullopt;
  }
  return base / "eacgm" / kind;
}

// A build id is hex; anything else never becomes a file name.
bool plain_hex(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string format_cached_symbols(const CachedSymbols& symbols) {
  std::string out(kHeader);
  for (const auto& [offset, name] : symbols) out += fmt::format("{:x} {}\n", offset, name);
  out += "end\n";  // a file cut short (a full disk) has no end line
  return out;
}

std::optional<CachedSymbols> parse_cached_symbols(std::string_view text) {
  if (!text.starts_with(kHeader)) return std::nullopt;
  text.remove_prefix(kHeader.size());
  CachedSymbols out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    if (eol == std::string_view::npos) return std::nullopt;
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol + 1);
    if (line == "end") return text.empty() ? std::optional(std::move(out)) : std::nullopt;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space + 1 >= line.size()) return std::nullopt;
    uint64_t offset = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + space, offset, 16);
    if (ec != std::errc() || end != line.data() + space) return std::nullopt;
    out.emplace_back(offset, std::string(line.substr(space + 1)));
  }
  return std::nullopt;  // no end line
}

std::optional<CachedSymbols> load_cached_symbols(std::string_view kind, std::string_view build_id) {
  const auto dir = cache_dir(kind);
  if (!dir || !plain_hex(build_id)) return std::nullopt;
  std::ifstream in(*dir / build_id);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_cached_symbols(text.str());
}

void store_cached_symbols(std::string_view kind, std::string_view build_id,
                          const CachedSymbols& symbols) {
  const auto dir = cache_dir(kind);
  if (!dir || !plain_hex(build_id)) return;
  std::error_code ec;
  std::filesystem::create_directories(*dir, ec);
  if (ec) return;  // a cache only: the next run reads the library again
  const std::filesystem::path path = *dir / build_id;
  const std::filesystem::path tmp = path.string() + fmt::format(".{}", getpid());
  {
    std::ofstream out(tmp);
    out << format_cached_symbols(symbols);
    if (!out.flush()) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace eacgm
