#include "serve/discovery.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "probes/library_finder.h"
#include "probes/probe_table.h"

namespace eacgm {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<int> number(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(it->second.c_str(), &end, 10);
  if (*end != '\0' || value < 0 || value > 1'000'000) return std::nullopt;
  return static_cast<int>(value);
}

}  // namespace

std::optional<std::string> cgroup2_mount(std::string_view mounts_text) {
  std::istringstream in{std::string(mounts_text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string device, mount_point, type;
    if (fields >> device >> mount_point >> type && type == "cgroup2") return mount_point;
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_v2_path(std::string_view text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (line.starts_with("0::")) return std::string(line.substr(3));
    start = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> process_cgroup(uint32_t pid) {
  return cgroup_v2_path(read_file(fmt::format("/proc/{}/cgroup", pid)));
}

bool cgroup_within(std::string_view path, std::string_view root) {
  if (root == "/" || root.empty()) return true;
  if (!path.starts_with(root)) return false;
  return path.size() == root.size() || path[root.size()] == '/';
}

Result<std::string> resolve_cgroup(const std::string& arg) {
  const std::optional<std::string> mount = cgroup2_mount(read_file("/proc/self/mounts"));
  if (!mount) return Error{"--cgroup: no cgroup v2 hierarchy is mounted on this machine"};
  namespace fs = std::filesystem;
  std::error_code ec;
  // A directory of the hierarchy itself, or a cgroup path below its root.
  for (const fs::path& candidate :
       {fs::path(arg), fs::path(*mount) / fs::path(arg).relative_path()}) {
    const fs::path canonical = fs::weakly_canonical(candidate, ec);
    if (ec || !fs::is_directory(canonical, ec)) continue;
    const std::string text = canonical.string();
    if (!cgroup_within(text, *mount)) continue;
    if (!fs::exists(canonical / "cgroup.procs", ec)) continue;
    const std::string relative = text.substr(mount->size());
    return relative.empty() ? std::string("/") : relative;
  }
  return Error{fmt::format("--cgroup {}: no such cgroup (the cgroup v2 hierarchy is mounted at {})",
                           arg, *mount)};
}

std::optional<std::string> cgroup_directory(const std::string& cgroup) {
  const std::optional<std::string> mount = cgroup2_mount(read_file("/proc/self/mounts"));
  if (!mount) return std::nullopt;
  return cgroup == "/" ? *mount : *mount + cgroup;
}

std::vector<uint32_t> list_pids() {
  std::vector<uint32_t> pids;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* d = readdir(proc)) {
      char* end = nullptr;
      const unsigned long pid = std::strtoul(d->d_name, &end, 10);
      if (pid != 0 && *end == '\0') pids.push_back(static_cast<uint32_t>(pid));
    }
    closedir(proc);
  }
  return pids;
}

bool maps_traced_library(uint32_t pid, const std::set<Layer>& layers) {
  auto files = mapped_files(pid);
  if (!files) return false;
  for (const MappedFile& file : *files) {
    if (!file.executable) continue;
    const std::optional<Layer> layer = library_layer(file.path);
    if (layer && layers.contains(*layer)) return true;
  }
  return false;
}

std::string job_id_from_environment(const std::map<std::string, std::string>& env) {
  for (const char* name : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    if (auto it = env.find(name); it != env.end() && !it->second.empty()) return it->second;
  }
  auto addr = env.find("MASTER_ADDR");
  if (addr == env.end() || addr->second.empty()) return "";
  auto port = env.find("MASTER_PORT");
  return port == env.end() ? addr->second : fmt::format("{}:{}", addr->second, port->second);
}

ServedProcess identify_process(uint32_t pid) {
  ServedProcess p;
  p.pid = pid;
  p.comm = read_file(fmt::format("/proc/{}/comm", pid));
  while (!p.comm.empty() && p.comm.back() == '\n') p.comm.pop_back();
  if (auto env = process_environment(pid); env && !env->empty()) {
    p.environment_read = true;
    p.rank = number(*env, "RANK");
    p.local_rank = number(*env, "LOCAL_RANK");
    p.world_size = number(*env, "WORLD_SIZE");
    p.job_id = job_id_from_environment(*env);
  }
  p.cgroup = process_cgroup(pid).value_or("");
  return p;
}

}  // namespace eacgm
