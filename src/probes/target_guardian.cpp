#include "probes/target_guardian.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/bpf.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace eacgm {
namespace {

// The words eacgm sends: a pid to watch, this (a clean end), or the word that carries
// link fds (SCM_RIGHTS) handed over.
constexpr uint32_t kCleanEnd = 0;
constexpr uint32_t kHandOver = 0xffffffffu;
constexpr uint32_t kTargetsMap = 0xfffffffeu;  // carries one fd: the targets map
constexpr size_t kFdsPerMessage = 64;

// Everything below runs in the guardian: system calls and fixed storage only (see the header).
constexpr size_t kMaxWatched = 1 << 16;
constexpr size_t kMaxProcesses = 1 << 18;
uint32_t g_watched[kMaxWatched];
size_t g_watched_count = 0;
uint32_t g_pids[kMaxProcesses];
uint32_t g_ppids[kMaxProcesses];
bool g_stopped[kMaxProcesses];
uint32_t g_covered[kMaxProcesses];
constexpr size_t kMaxHeld = 4096;
int g_held[kMaxHeld];  // links handed over
size_t g_held_count = 0;
int g_targets_map = -1;  // watch_targets()

void hold(int fd) {
  if (g_held_count < kMaxHeld) {
    g_held[g_held_count++] = fd;
  } else {
    close(fd);  // beyond the bound: released now, in this process's time all the same
  }
}

void release_held() {
  for (size_t i = 0; i < g_held_count; ++i) close(g_held[i]);
  g_held_count = 0;
}

void write_text(const char* text) {
  size_t n = 0;
  while (text[n]) ++n;
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

// Decimal digits of `value` into `out` (at least 11 bytes), NUL-terminated.
void format_uint(uint32_t value, char* out) {
  char digits[11];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value);
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  out[n] = 0;
}

bool parse_uint(const char* s, uint32_t* value) {
  uint64_t v = 0;
  if (*s == 0) return false;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*s - '0');
    if (v > 0xffffffffu) return false;
  }
  *value = static_cast<uint32_t>(v);
  return true;
}

// State and parent from /proc/PID/stat: "pid (comm) S ppid ...", comm may hold anything.
bool read_stat(uint32_t pid, char* state, uint32_t* ppid) {
  char path[32] = "/proc/";
  format_uint(pid, path + 6);
  size_t end = 6;
  while (path[end]) ++end;
  std::memcpy(path + end, "/stat", 6);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  ssize_t close_paren = n - 1;
  while (close_paren >= 0 && buf[close_paren] != ')') --close_paren;
  if (close_paren < 0 || close_paren + 4 >= n) return false;
  *state = buf[close_paren + 2];
  uint64_t v = 0;
  for (ssize_t i = close_paren + 4; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) {
    v = v * 10 + static_cast<uint64_t>(buf[i] - '0');
  }
  *ppid = static_cast<uint32_t>(v);
  return true;
}

bool is_watched(uint32_t pid) {
  for (size_t i = 0; i < g_watched_count; ++i) {
    if (g_watched[i] == pid) return true;
  }
  return false;
}

void add_watched(uint32_t pid) {
  if (is_watched(pid)) return;
  if (g_watched_count == kMaxWatched) {  // keep the live ones (serve watches many over time)
    size_t kept = 0;
    for (size_t i = 0; i < g_watched_count; ++i) {
      if (kill(static_cast<pid_t>(g_watched[i]), 0) == 0 || errno != ESRCH) {
        g_watched[kept++] = g_watched[i];
      }
    }
    g_watched_count = kept;
    if (kept == kMaxWatched) return;
  }
  g_watched[g_watched_count++] = pid;
}

// Resumes every stopped process that is watched or descends from one. Returns how many.
size_t resume_stopped() {
  const int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  size_t count = 0;
  alignas(8) char entries[8192];
  while (count < kMaxProcesses) {
    const long n = syscall(SYS_getdents64, dir, entries, sizeof(entries));
    if (n <= 0) break;
    for (long at = 0; at < n && count < kMaxProcesses;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(entries + at);
      at += d->d_reclen;
      uint32_t pid = 0;
      char state = 0;
      uint32_t ppid = 0;
      if (!parse_uint(d->d_name, &pid) || !read_stat(pid, &state, &ppid)) continue;
      g_pids[count] = pid;
      g_ppids[count] = ppid;
      g_stopped[count] = state == 'T';  // a group stop ('t' is a debugger's: not ours to end)
      ++count;
    }
  }
  close(dir);
  // Watched processes and the targets map's, then their descendants, generation by generation.
  size_t covered = 0;
  for (size_t i = 0; i < g_watched_count && covered < kMaxProcesses; ++i) {
    g_covered[covered++] = g_watched[i];
  }
  if (g_targets_map >= 0) {
    uint32_t key = 0, next = 0;
    union bpf_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.map_fd = static_cast<uint32_t>(g_targets_map);
    attr.key = 0;  // NULL: the first key
    attr.next_key = reinterpret_cast<uint64_t>(&next);
    while (covered < kMaxProcesses &&
           syscall(SYS_bpf, BPF_MAP_GET_NEXT_KEY, &attr, sizeof(attr)) == 0) {
      g_covered[covered++] = next;
      key = next;
      attr.key = reinterpret_cast<uint64_t>(&key);
    }
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < count && covered < kMaxProcesses; ++i) {
      bool parent_covered = false, self_covered = false;
      for (size_t j = 0; j < covered; ++j) {
        parent_covered = parent_covered || g_covered[j] == g_ppids[i];
        self_covered = self_covered || g_covered[j] == g_pids[i];
      }
      if (parent_covered && !self_covered) {
        g_covered[covered++] = g_pids[i];
        grew = true;
      }
    }
  }
  size_t resumed = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!g_stopped[i]) continue;
    for (size_t j = 0; j < covered; ++j) {
      if (g_covered[j] == g_pids[i]) {
        if (kill(static_cast<pid_t>(g_pids[i]), SIGCONT) == 0) ++resumed;
        break;
      }
    }
  }
  return resumed;
}

void pause_ms(long ms) {
  timespec t{ms / 1000, (ms % 1000) * 1'000'000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

// True while `pid` still holds its files: it exists and is not yet a zombie. A process gives
// up its fds (and with them its BPF links) before it becomes a zombie.
bool holds_its_files(uint32_t pid) {
  char state = 0;
  uint32_t ppid = 0;
  if (!read_stat(pid, &state, &ppid)) return false;
  return state != 'Z' && state != 'X';
}

[[noreturn]] void guardian_main(int sock, uint32_t agent) {
  setsid();  // out of eacgm's process group and terminal: their signals are not for it
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
    sigaction(sig, &ignore, nullptr);
  }
  // Nothing of eacgm's stays open here but stderr and the socket: a BPF link held by the
  // guardian would outlive eacgm and go on stopping targets.
  if (sock != 3) {
    dup2(sock, 3);
    close(sock);
  }
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    for (int fd = 4; fd < 65536; ++fd) close(fd);
  }
  close(STDIN_FILENO);
  close(STDOUT_FILENO);
  const uint32_t self = static_cast<uint32_t>(getpid());
  if (write(3, &self, sizeof(self)) != sizeof(self)) _exit(1);  // eacgm waits for this

  unsigned char buf[4096];
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)];
  size_t have = 0;
  while (true) {
    iovec iov{buf + have, sizeof(buf) - have};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(3, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // eacgm is gone
    // A message with fds is read alone (the kernel never joins it to others): they are its
    // links handed over, or the targets map when its word says so.
    int fresh[kFdsPerMessage];
    size_t fresh_count = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < fds; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fresh_count < kFdsPerMessage) {
          fresh[fresh_count++] = fd;
        } else {
          hold(fd);
        }
      }
    }
    have += static_cast<size_t>(n);
    size_t at = 0;
    for (; at + 4 <= have; at += 4) {
      uint32_t word;
      std::memcpy(&word, buf + at, 4);
      if (word == kTargetsMap && fresh_count == 1 && g_targets_map < 0) {
        g_targets_map = fresh[--fresh_count];
        continue;
      }
      if (word == kCleanEnd) {
        // Nothing more to say, and a pipe reading eacgm's stderr (`2>&1 | tee`) must see its
        // end now, not after the wait below, which is then nobody's.
        close(STDERR_FILENO);
        release_held();
        _exit(0);
      }
      if (word != kHandOver && word != kTargetsMap) add_watched(word);
    }
    for (size_t i = 0; i < fresh_count; ++i) hold(fresh[i]);
    std::memmove(buf, buf + at, have - at);
    have -= at;
  }
  release_held();  // first: none of them stops a target, but the sweep should not wait
  // The EOF comes as eacgm's exit closes its fds, the socket (an early fd) among the first: its
  // BPF links are released after it, one RCU grace period each, and go on stopping targets
  // meanwhile. With hundreds of links on a loaded machine that takes seconds (a fixed 3 s sweep
  // left a job stopped in CI). So sweep until eacgm has given up every fd (a zombie, or gone;
  // bounded, should it hang in the kernel), then a while longer for a stop raised by a program
  // that ran last, which takes effect when its target next returns to user space.
  size_t resumed = resume_stopped();
  constexpr int kAgentExitBound = 6000;  // x 100 ms: 10 minutes
  for (int i = 0; i < kAgentExitBound && agent != 0 && holds_its_files(agent); ++i) {
    pause_ms(100);
    resumed += resume_stopped();
  }
  for (int i = 0; i < 30; ++i) {
    pause_ms(100);
    resumed += resume_stopped();
  }
  if (resumed > 0) {
    char count[12];
    format_uint(static_cast<uint32_t>(resumed), count);
    write_text(
        "eacgm: the agent ended without resuming the processes it had paused; its guardian "
        "resumed ");
    write_text(count);
    write_text(" of them\n");
  }
  _exit(0);
}

}  // namespace

Result<TargetGuardian> TargetGuardian::start() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Error{
        fmt::format("cannot start the guardian that resumes paused targets: socketpair: {}",
                    std::strerror(errno))};
  }
  const pid_t child = fork();
  if (child < 0) {
    const int e = errno;
    close(sv[0]);
    close(sv[1]);
    return Error{fmt::format("cannot start the guardian that resumes paused targets: fork: {}",
                             std::strerror(e))};
  }
  if (child == 0) {
    // Named at once: ps shows what it is, and nothing mistakes this copy of eacgm (its command
    // line is eacgm's) for eacgm or for the job it is about to start.
    prctl(PR_SET_NAME, "eacgm-guardian");
    // Forked twice: the guardian is nobody's child but init's, so eacgm never has to reap it
    // and its exit is no SIGCHLD in eacgm's loop.
    close(sv[0]);
    const auto agent = static_cast<uint32_t>(getppid());  // eacgm, whose exit it awaits
    const pid_t guardian = fork();
    if (guardian != 0) _exit(guardian < 0 ? 1 : 0);
    guardian_main(sv[1], agent);
  }
  close(sv[1]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  uint32_t guardian = 0;
  ssize_t n;
  do {
    n = recv(sv[0], &guardian, sizeof(guardian), MSG_WAITALL);
  } while (n < 0 && errno == EINTR);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n != sizeof(guardian)) {
    close(sv[0]);
    return Error{"cannot start the guardian that resumes paused targets: it did not come up"};
  }
  return TargetGuardian(sv[0], static_cast<pid_t>(guardian));
}

TargetGuardian::TargetGuardian(TargetGuardian&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), pid_(std::exchange(other.pid_, 0)) {}

TargetGuardian& TargetGuardian::operator=(TargetGuardian&& other) noexcept {
  if (this != &other) {
    this->~TargetGuardian();
    fd_ = std::exchange(other.fd_, -1);
    pid_ = std::exchange(other.pid_, 0);
  }
  return *this;
}

TargetGuardian::~TargetGuardian() {
  if (fd_ < 0) return;
  const uint32_t end = kCleanEnd;
  (void)send(fd_, &end, sizeof(end), MSG_NOSIGNAL);
  close(fd_);
  fd_ = -1;
}

bool TargetGuardian::hand_over(std::span<const int> link_fds) {
  return send_fds(kHandOver, link_fds);
}

bool TargetGuardian::watch_targets(int map_fd) {
  const int fds[] = {map_fd};
  return send_fds(kTargetsMap, fds);
}

bool TargetGuardian::send_fds(uint32_t what, std::span<const int> link_fds) {
  if (fd_ < 0) return false;
  for (size_t at = 0; at < link_fds.size(); at += kFdsPerMessage) {
    const size_t count = std::min(kFdsPerMessage, link_fds.size() - at);
    uint32_t word = what;
    iovec iov{&word, sizeof(word)};
    alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(c), link_fds.data() + at, sizeof(int) * count);
    ssize_t n;
    do {
      n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    // A part sent is the guardian's: the caller releasing those too only costs it the wait.
    if (n != sizeof(word)) return false;
  }
  return true;
}

void TargetGuardian::watch(uint32_t pid) {
  if (fd_ < 0 || pid == kCleanEnd) return;
  // Blocking: the guardian reads as fast as eacgm adds targets, and a pid it never learnt is a
  // target it could not resume. It dead (killed by hand): EPIPE, nothing more to do.
  (void)send(fd_, &pid, sizeof(pid), MSG_NOSIGNAL);
}

}  // namespace eacgm
