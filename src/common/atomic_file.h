// A file written whole or not at all: the text goes to PATH.tmp, which is renamed over PATH only
// once every byte is on disk, so a full disk or a kill mid-write never leaves a truncated
// report where the last good one was.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace eacgm {

// The error names the path and says why ("cannot write out/report.html: No space left on device").
Result<void> write_file_atomically(const std::string& path, std::string_view contents);

}  // namespace eacgm
