// JSON text for eacgm's outputs. Names and strings read from a traced process (Python function
// and file names walked from its memory, comm, library paths, arguments) need not be UTF-8, and
// nlohmann's plain dump() throws type_error.316 on the first invalid byte: at the end of a
// recording that once aborted eacgm and lost summary.json. Every output goes through here, so an
// invalid byte becomes U+FFFD and the rest of the text is kept.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace eacgm {

// `indent` as nlohmann's dump(): -1 for one line, n for n spaces a level. Works for json and
// ordered_json alike.
template <typename Json>
std::string json_text(const Json& value, int indent = -1) {
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace eacgm
