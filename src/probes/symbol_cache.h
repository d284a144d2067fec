// What eacgm reads from a library and reads again each run, kept on disk by the library's GNU
// build id: a file with the same build id has the same symbols. Reading libtorch_cpu.so's operator
// entry points and naming them takes ~90 ms here, paid at every start (the library is on the job's
// search path) or while a target waits at the loader stop; from the cache, a few ms.
//
// $XDG_CACHE_HOME/eacgm/<kind>/<build id>, else $HOME/.cache/eacgm/...; no cache when neither is
// set or writable. Entries are "offset name" lines; a file that does not parse is ignored (and
// rewritten), so a corrupt cache costs one slow read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace eacgm {

using CachedSymbols = std::vector<std::pair<uint64_t, std::string>>;  // file offset, name

std::optional<CachedSymbols> load_cached_symbols(std::string_view kind, std::string_view build_id);
void store_cached_symbols(std::string_view kind, std::string_view build_id,
                          const CachedSymbols& symbols);

// The text of one cache file, and back (nullopt when it does not parse).
std::string format_cached_symbols(const CachedSymbols& symbols);
std::optional<CachedSymbols> parse_cached_symbols(std::string_view text);

}  // namespace eacgm
