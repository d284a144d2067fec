// The session directory of `record` and `attach` (-o DIR), held for one recording at a time.
//
// -o is often a directory that exists: the last run's session (recorded again, as scripts do), or
// by mistake a directory of other things (-o . in a project). A session is replaced whole, so
// that no file of the last recording (a flight recorder of a process that died then) reads as
// part of this one; anything else is never touched. A lock held for the recording's life keeps a
// second recording out, instead of two writers mixing their files.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace eacgm {

class SessionDir {
 public:
  // Holds the lock of every session directory: its presence also marks the directory as eacgm's.
  static constexpr const char* kLockFile = ".eacgm-session";

  // Creates `path`, or takes the session directory it is. Refuses (with a message that says
  // why and what to do, and nothing touched) a directory that holds anything but an eacgm
  // session, or one another eacgm records into.
  static Result<SessionDir> claim(const std::string& path);

  SessionDir(SessionDir&& other) noexcept;
  SessionDir& operator=(SessionDir&& other) noexcept;
  SessionDir(const SessionDir&) = delete;
  SessionDir& operator=(const SessionDir&) = delete;
  ~SessionDir();  // releases the lock

  // Removes the previous session's files (once the recording is sure to start, so that a run
  // that fails to start leaves the last session as it was). Returns how many it removed, 0 for
  // a new or empty directory.
  Result<size_t> clear_previous();

  const std::string& path() const { return path_; }
  // Whether the directory held an eacgm session when claimed.
  bool had_session() const { return had_session_; }

  // The names eacgm record writes into a session directory: what clear_previous() removes.
  static bool is_session_file(const std::string& name);

 private:
  SessionDir(std::string path, int lock_fd, bool had_session)
      : path_(std::move(path)), lock_fd_(lock_fd), had_session_(had_session) {}

  std::string path_;
  int lock_fd_ = -1;
  bool had_session_ = false;
};

}  // namespace eacgm
