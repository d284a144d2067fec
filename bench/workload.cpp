#include "workload.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "probes/elf_symbols.h"

extern char** environ;

namespace eacgm::bench {

std::vector<std::string> sync_loop_argv(const std::string& cuda_calls, const std::string& lib,
                                        int procs, long long calls, const std::string& function) {
  std::vector<std::string> one = {
      cuda_calls, "--lib", lib, "--sequence", "sync-loop", "--count", std::to_string(calls)};
  if (function != kFunction) one.insert(one.end(), {"--sync-function", function});
  if (procs == 1) return one;
  std::vector<std::string> sh = {"/bin/sh", "-c",
                                 R"(i=0; while [ $i -lt $0 ]; do "$@" & i=$((i+1)); done; wait)",
                                 std::to_string(procs)};
  sh.insert(sh.end(), one.begin(), one.end());
  return sh;
}

Result<std::string> run_command(const std::vector<std::string>& argv,
                                const std::filesystem::path& err_path,
                                const std::function<void(pid_t)>& on_spawn) {
  int out[2], in[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) {
    return Error{fmt::format("pipe: {}", std::strerror(errno))};
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // With on_spawn, a shell holds the command until on_spawn has seen its pid (which the exec
  // keeps): a tracer can add it to its targets before its first instruction runs.
  std::vector<std::string> full;
  if (on_spawn) full = {"/bin/sh", "-c", R"(read -r _ && exec "$@")", "sh"};
  full.insert(full.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (const std::string& a : full) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (err != 0) {
    close(in[1]);
    close(out[0]);
    return Error{fmt::format("cannot run {}: {}", full[0], std::strerror(err))};
  }
  if (on_spawn) {
    on_spawn(pid);
    // Only written to here, where the shell is waiting in `read`: a command that has already
    // exited would leave the pipe without a reader (SIGPIPE).
    if (write(in[1], "\n", 1) != 1) {
      // The shell is gone; its exit status says why.
    }
  }
  close(in[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) != 0;) {
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
    } else if (errno != EINTR) {
      break;
    }
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Error{fmt::format("{} failed (wait status {:#x}):\n{}{}", fmt::join(argv, " "), status,
                             text, read_file(err_path))};
  }
  return text;
}

Result<Run> parse_sync_loops(const std::string& out, int procs, long long calls) {
  Run run;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    long long count = 0, elapsed = 0, errors = 0;
    double ns = 0;
    if (std::sscanf(line.c_str(),
                    "sync-loop count=%lld elapsed_ns=%lld ns_per_call=%lf errors=%lld", &count,
                    &elapsed, &ns, &errors) != 4) {
      continue;
    }
    if (count != calls || elapsed <= 0) return Error{"unexpected cuda_calls output: " + line};
    run.ns_per_call.push_back(ns);
    run.calls_per_s += 1e9 * static_cast<double>(count) / static_cast<double>(elapsed);
  }
  if (run.ns_per_call.size() != static_cast<size_t>(procs)) {
    return Error{fmt::format("expected {} sync-loop lines from cuda_calls, got:\n{}", procs, out)};
  }
  return run;
}

Result<uint64_t> function_offset(const std::string& lib, const std::string& function) {
  auto symbols = read_function_symbols(lib);
  if (!symbols) return symbols.error();
  for (const ElfSymbol& sym : *symbols) {
    if (sym.name == function && !sym.ifunc) return sym.file_offset;
  }
  return Error{fmt::format("{} has no function {}", lib, function)};
}

Result<std::unique_ptr<Scratch>> Scratch::create(const std::string& lib) {
  char tmpl[] = "/tmp/eacgm-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return Error{fmt::format("mkdtemp: {}", std::strerror(errno))};
  std::unique_ptr<Scratch> scratch(new Scratch());
  scratch->dir_ = tmpl;
  const std::filesystem::path copy = scratch->dir_ / std::filesystem::path(lib).filename();
  std::error_code ec;
  std::filesystem::copy_file(lib, copy, ec);
  if (ec) return Error{fmt::format("cannot copy {} to {}: {}", lib, copy.string(), ec.message())};
  scratch->lib_ = copy.string();
  return scratch;
}

Scratch::~Scratch() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace eacgm::bench
