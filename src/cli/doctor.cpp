#include "cli/doctor.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "agent/privileges.h"
#include "layers/layer.h"
#include "probes/library_finder.h"
#include "probes/probe_link.h"
#include "probes/tracer.h"

extern char** environ;

namespace eacgm {
namespace {

bool exists(const char* path) { return access(path, F_OK) == 0; }

bool tracefs_mounted() {
  std::ifstream mounts("/proc/mounts");
  std::string dev, dir, type;
  std::string rest;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest)) {
    if (type == "tracefs") return true;
  }
  return false;
}

std::string lockdown_mode() {
  std::ifstream f("/sys/kernel/security/lockdown");
  std::string line;
  if (!std::getline(f, line)) return "unknown (securityfs not mounted)";
  // The active mode is the bracketed one: "none [integrity] confidentiality".
  const size_t open = line.find('['), close = line.find(']');
  return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1) : line;
}

// Loads and attaches a do-nothing fentry program: the only reliable test,
// since lockdown can refuse it on a kernel that has it built in.
std::string fentry_status() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) return "unavailable (no kernel BTF)";
  const int id = btf__find_by_name_kind(vmlinux, "do_exit", BTF_KIND_FUNC);
  btf__free(vmlinux);
  if (id <= 0) return "unavailable (do_exit not in BTF)";
  const bpf_insn insns[] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .src_reg = 0, .off = 0, .imm = 0},
      {.code = BPF_JMP | BPF_EXIT, .dst_reg = 0, .src_reg = 0, .off = 0, .imm = 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_TRACE_FENTRY,
              .attach_btf_id = static_cast<__u32>(id));
  const int fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "eacgm_fentry", "GPL", insns, 2, &opts);
  if (fd < 0) return fmt::format("unavailable ({})", std::strerror(errno));
  const int link = bpf_raw_tracepoint_open(nullptr, fd);
  const int err = errno;
  close(fd);
  if (link < 0) return fmt::format("unavailable ({})", std::strerror(err));
  close(link);
  return "available";
}

void row(std::string_view what, bool good, std::string_view detail) {
  fmt::print("  {:<28} {:<4} {}\n", what, good ? "ok" : "--", detail);
}

}  // namespace

int run_doctor(const std::string& nvml_lib) {
  libbpf_set_print(nullptr);
  bool can_trace = true;
  utsname u{};
  uname(&u);
  fmt::print("eacgm {} doctor\n\nkernel {} ({})\n", EACGM_VERSION, u.release, u.machine);

  const Privileges priv = current_privileges();
  fmt::print("\nprivileges\n");
  row("root or capabilities", priv.sufficient(), priv.explain());
  can_trace &= priv.sufficient();

  fmt::print("\nkernel features\n");
  const bool btf = exists("/sys/kernel/btf/vmlinux");
  row("BTF (/sys/kernel/btf/vmlinux)", btf,
      btf ? "present: CO-RE programs load" : "missing: eacgm cannot load its BPF programs");
  can_trace &= btf;
  const bool uprobes = exists("/sys/bus/event_source/devices/uprobe");
  row("uprobes", uprobes, uprobes ? "available" : "missing (CONFIG_UPROBE_EVENTS off?)");
  can_trace &= uprobes;
  if (priv.sufficient()) {
    const bool multi = kernel_has_uprobe_multi();
    row("uprobe_multi links", multi,
        multi ? "available: thousands of functions attach and detach in milliseconds"
              : "unavailable: one link per function (slow to detach)");
  }
  const bool tracefs = tracefs_mounted();
  row("tracefs mounted", tracefs,
      tracefs ? "yes" : "no: mount it with `mount -t tracefs nodev /sys/kernel/tracing`");
  const bool kprobes = exists("/sys/bus/event_source/devices/kprobe");
  row("kprobes", kprobes, kprobes ? "available" : "unavailable (eacgm uses tracepoints instead)");
  if (priv.sufficient() && btf) {
    const std::string fentry = fentry_status();
    row("fentry/fexit", fentry == "available", fentry + " (not required)");
  }
  row("lockdown", true, lockdown_mode());

  fmt::print("\nlayers (libraries a job started from this shell would load)\n");
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (size_t eq = kv.find('='); eq != std::string_view::npos) {
      env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  const DoctorContext context{.library_dirs = library_search_dirs(env),
                              .kernel_btf = btf,
                              .tracefs_mounted = tracefs,
                              .nvml_library = nvml_lib};
  auto print = [](const DoctorCheck& check) {
    row(check.name, check.ok, check.detail);
    for (const std::string& f : check.found) fmt::print("  {:<33} {}\n", "", f);
  };
  for (const LayerInfo* layer : layer_registry()) {
    if (layer->doctor != nullptr) {
      for (const DoctorCheck& check : layer->doctor(context)) print(check);
      continue;
    }
    for (std::string_view prefix : layer->libraries) {
      DoctorCheck check;
      check.name = layer->name;
      check.found = find_library_files(prefix, context.library_dirs);
      check.ok = !check.found.empty();
      check.detail = check.ok ? fmt::format("ready: {} file(s)", check.found.size())
                              : fmt::format(
                                    "no {}* found; libraries a job loads from elsewhere "
                                    "are still traced when it maps them",
                                    prefix);
      print(check);
    }
  }

  fmt::print("\nverdict: {}\n",
             can_trace ? "this machine can trace" : "this machine cannot trace (see above)");
  return can_trace ? 0 : 1;
}

}  // namespace eacgm
