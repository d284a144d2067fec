#include "agent/session_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

namespace eacgm {
namespace {

namespace fs = std::filesystem;

// A summary.json that eacgm wrote: its contract's first fields (docs/SUMMARY_JSON.md).
bool eacgm_summary(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return false;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("version") && j.contains("events") && j.contains("layers");
}

// "a.txt, src and 3 more": enough to recognise the directory.
std::string some_names(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 3) out += fmt::format(" and {} more", names.size() - 3);
  return out;
}

}  // namespace

bool SessionDir::is_session_file(const std::string& name) {
  static const char* const kNames[] = {
      kLockFile,
      "summary.json",
      "summary.json.tmp",
      "events.sqlite",
      "events.sqlite-wal",
      "events.sqlite-shm",
      "events.sqlite-journal",
      "trace.perfetto-trace",
      "trace.perfetto-trace.events.tmp",
      "flight_recorder",
      ".eacgm-write-test",  // the writability probe of eacgm 0.1.0
  };
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

Result<SessionDir> SessionDir::claim(const std::string& path) {
  std::error_code ec;
  bool had_session = false;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> names, foreign;
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      names.push_back(name);
      if (!is_session_file(name)) foreign.push_back(name);
    }
    if (ec) return Error{fmt::format("cannot read output directory {}: {}", path, ec.message())};
    const fs::path dir(path);
    // Ours: it has the lock file, an eacgm summary, or only names eacgm writes (a session of an
    // eacgm without the lock file, killed before its summary).
    had_session = !names.empty() && (fs::exists(dir / kLockFile, ec) ||
                                     eacgm_summary(dir / "summary.json") || foreign.empty());
    if (!names.empty() && !had_session) {
      return Error{fmt::format(
          "-o {}: the directory is not empty and holds no eacgm session (it has {}); eacgm "
          "replaces only a session directory of its own and touches nothing else. Choose a new "
          "or empty directory, e.g. -o {}",
          path, some_names(std::move(names)), (dir / "eacgm-session").string())};
    }
  } else {
    fs::create_directories(path, ec);
    if (ec) return Error{fmt::format("cannot create output directory {}: {}", path, ec.message())};
  }

  const std::string lock_path = (fs::path(path) / kLockFile).string();
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Error{
        fmt::format("output directory {} is not writable: {}", path, std::strerror(errno))};
  }
  // Held until the recording ends; the kernel releases it if eacgm dies, so a stale lock never
  // outlives its recording.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char text[32] = {};
    const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return Error{fmt::format("cannot lock {}: {}", lock_path, std::strerror(err))};
    }
    const long pid = n > 0 ? std::strtol(text, nullptr, 10) : 0;
    return Error{fmt::format(
        "-o {}: another eacgm{} is recording into this directory; wait for it to finish or "
        "choose another directory",
        path, pid > 0 ? fmt::format(" (pid {})", pid) : "")};
  }
  // Who holds it, for the message of a second recording.
  const std::string pid = fmt::format("{}\n", getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    const int err = errno;
    close(fd);
    return Error{fmt::format("output directory {} is not writable: {}", path, std::strerror(err))};
  }
  return SessionDir(path, fd, had_session);
}

Result<size_t> SessionDir::clear_previous() {
  if (!had_session_) return size_t{0};
  std::error_code ec;
  std::vector<fs::path> previous;  // listed first: removing while reading a directory may skip
  for (const fs::directory_entry& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kLockFile && is_session_file(name)) previous.push_back(e.path());
  }
  if (ec) return Error{fmt::format("cannot read output directory {}: {}", path_, ec.message())};
  size_t removed = 0;
  for (const fs::path& p : previous) {
    const std::uintmax_t n = fs::remove_all(p, ec);
    if (ec) {
      return Error{
          fmt::format("cannot remove {} of the previous session: {}", p.string(), ec.message())};
    }
    removed += static_cast<size_t>(n);
  }
  return removed;
}

SessionDir::SessionDir(SessionDir&& other) noexcept
    : path_(std::move(other.path_)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      had_session_(other.had_session_) {}

SessionDir& SessionDir::operator=(SessionDir&& other) noexcept {
  if (this != &other) {
    if (lock_fd_ >= 0) close(lock_fd_);
    path_ = std::move(other.path_);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    had_session_ = other.had_session_;
  }
  return *this;
}

SessionDir::~SessionDir() {
  if (lock_fd_ >= 0) close(lock_fd_);
}

}  // namespace eacgm
