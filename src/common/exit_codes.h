// How every eacgm command ends: its exit codes, and the one-line error that goes with a failure.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <string>
#include <string_view>

namespace eacgm {

// Exit code for bad input: flags, a missing target, no privileges, an
// unwritable directory, a kernel that cannot trace.
inline constexpr int kExitUsage = 2;
// Every other command: done, or failed on good input (a write error, a model that does not fit).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
// record and attach: the session lost output (a write failed: a full disk) and says so in
// summary.json ("complete": false). record exits with it only when the job itself succeeded
// (a failed job's own code says more); sysexits.h's EX_IOERR, so it stands apart from 1 and 2.
inline constexpr int kExitOutputLost = 74;

// Prints "<who>: error: <message>" on stderr and returns `code`, for `return fail(...)`.
inline int fail(int code, const std::string& message, std::string_view who = "eacgm") {
  fmt::print(stderr, "{}: error: {}\n", who, message);
  return code;
}

// Runs a command's body; whatever escapes it (only std::bad_alloc is expected) becomes a
// message and kExitFailed, never a crash.
template <typename Fn>
int guarded(Fn&& fn, std::string_view who = "eacgm") {
  try {
    return fn();
  } catch (const std::exception& e) {
    return fail(kExitFailed, e.what(), who);
  }
}

}  // namespace eacgm
