// How `eacgm serve` finds what to trace: processes that map a library of an
// enabled layer (by a periodic /proc scan), optionally only those inside one
// cgroup v2 subtree, and who each of them is (rank, job, cgroup).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "probes/probe_table.h"
#include "serve/serve_metrics.h"

namespace eacgm {

// The mount point of the cgroup v2 hierarchy in a mounts table (/proc/self/mounts
// text): /sys/fs/cgroup on unified hosts, /sys/fs/cgroup/unified on hybrid ones.
std::optional<std::string> cgroup2_mount(std::string_view mounts_text);
// The cgroup v2 path ("/a/b") in the text of /proc/PID/cgroup (its "0::" line).
std::optional<std::string> cgroup_v2_path(std::string_view proc_cgroup_text);
std::optional<std::string> process_cgroup(uint32_t pid);
// Whether cgroup `path` is `root` or lies below it.
bool cgroup_within(std::string_view path, std::string_view root);
// `--cgroup ARG`: a directory of the mounted cgroup v2 hierarchy, or a path
// relative to its root. Returns the cgroup path ("/a/b"), or an error that
// says what is wrong.
Result<std::string> resolve_cgroup(const std::string& arg);
// The directory of `cgroup` (a path below the hierarchy's root, as resolve_cgroup gives it) under
// the cgroup v2 mount; nullopt when no hierarchy is mounted.
std::optional<std::string> cgroup_directory(const std::string& cgroup);

// Every process id in /proc.
std::vector<uint32_t> list_pids();
// Whether `pid` maps a library of one of `layers` (false when it is gone). Layers found otherwise
// (python by its interpreter, os by tracepoints, gpu through NVML) match no library.
bool maps_traced_library(uint32_t pid, const std::set<Layer>& layers);

// Rank, job and cgroup of `pid` from /proc/PID/environ and /proc/PID/cgroup.
ServedProcess identify_process(uint32_t pid);
// The job a process belongs to, from the variables launchers set: torchrun's
// TORCHELASTIC_RUN_ID, Slurm's SLURM_JOB_ID, else MASTER_ADDR:MASTER_PORT.
std::string job_id_from_environment(const std::map<std::string, std::string>& env);

}  // namespace eacgm
