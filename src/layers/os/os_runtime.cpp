#include "layers/os/os_runtime.h"

#include <glob.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <sstream>

#include "common/clock.h"
#include "layers/os/os_monitor.h"
#include "probes/library_identity.h"

namespace eacgm {
namespace {

// Device files matching comma-separated globs, by kernel dev_t (major << 20 | minor: what the
// BPF side reads from the inode).
std::map<uint32_t, std::string> char_devices_matching(const std::string& patterns) {
  std::map<uint32_t, std::string> out;
  std::stringstream ss(patterns);
  std::string pattern;
  while (std::getline(ss, pattern, ',')) {
    if (pattern.empty()) continue;
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        struct stat st {};
        if (stat(g.gl_pathv[i], &st) != 0 || !S_ISCHR(st.st_mode)) continue;
        const uint32_t rdev = (major(st.st_rdev) << 20) | minor(st.st_rdev);
        out.try_emplace(rdev, g.gl_pathv[i]);
      }
    }
    globfree(&g);
  }
  return out;
}

class OsRuntime : public LayerRuntime {
 public:
  OsRuntime(const LayerRuntimeSetup& setup, LayerHost& host)
      : host_(host), os_(setup.mode.os_monitor), ioctl_devices_(setup.options.ioctl_devices) {}

  // The tracer times the ioctls of the devices that match the pattern now; tick() looks again
  // once a second, for devices created later (a driver loaded by the job).
  void start() override { refresh_ioctl_devices(); }

  bool on_event(const Event& event) override {
    os_.set_session_start(host_.session().start_ns);  // anomalies count seconds from it
    uint32_t pid = 0;
    if (const auto* s = std::get_if<SignalEvent>(&event)) {
      if (!os_.on_signal(*s)) return true;  // eacgm's own loader stop and resume
      pid = s->pid;
    } else if (const auto* o = std::get_if<OomKillEvent>(&event)) {
      os_.on_oom_kill(*o);
      pid = o->pid;
    } else if (const auto* m = std::get_if<MmapEvent>(&event)) {
      os_.on_mmap(*m);
      pid = m->pid;
    } else if (const auto* i = std::get_if<IoctlEvent>(&event)) {
      os_.on_ioctl(*i);
      pid = i->pid;
    } else {
      return false;
    }
    host_.remember(pid, event);
    return true;
  }

  // A slow ioctl inside a traced call is that call's slowness (OsMonitor::on_traced_call).
  void on_call(CallRecord& call, ProcessInfo& /*process*/) override {
    os_.on_traced_call(call.pid, call.tid, call.start_ns, call.start_ns + call.duration_ns);
  }

  void on_process_start(uint32_t pid, const ProcessInfo& process, uint64_t ts_ns) override {
    os_.on_process(pid, process.comm, ts_ns);
  }

  // The wait status says how; the signals and the OOM kill seen say why.
  void on_exit(uint32_t pid, ProcessInfo& process) override {
    if (process.exit) process.exit = os_.explain(pid, *process.exit);
    os_.on_process_exit(pid);
  }

  // Two builds of one library in one process, and which build each process runs.
  void on_mapped_files(uint32_t pid, const std::vector<MappedFile>& files) override {
    std::vector<LibraryBuild> builds;
    for (const MappedFile& file : files) {
      if (!file.executable || !library_family(file.path)) continue;
      auto known = library_builds_.find(file.id);
      if (known == library_builds_.end()) {
        // Read through /proc/PID/root: the target may live in another mount namespace.
        std::optional<LibraryBuild> build =
            identify_library(file.path, file.id, path_in_root_of(pid, file.path));
        if (!build) continue;
        known = library_builds_.emplace(file.id, std::move(*build)).first;
      }
      builds.push_back(known->second);
      builds.back().path = file.path;  // one inode, perhaps several names: this process's
    }
    os_.set_session_start(host_.session().start_ns);
    os_.on_libraries(pid, builds, monotonic_ns());
  }

  void forget(uint32_t pid) override { os_.forget_process(pid); }

  void tick(uint64_t now_ns, bool final) override {
    os_.set_session_start(host_.session().start_ns);
    for (Anomaly& a : os_.take_anomalies(final ? OsMonitor::kReleaseAll : now_ns)) {
      host_.report(std::move(a));
    }
    if (now_ns >= devices_refreshed_ns_ + 1'000'000'000) refresh_ioctl_devices();
  }

  void finish() override {
    for (Anomaly& a : os_.take_anomalies()) host_.report(std::move(a));
    Session& session = host_.session();
    session.os = os_.activity();
    const nlohmann::json figures = os_.figures();
    for (const auto& [key, value] : figures.items()) session.layers[Layer::kOs].extra[key] = value;
  }

  const std::map<uint32_t, std::string>* device_names() const override {
    return &os_.activity().devices;
  }

 private:
  void refresh_ioctl_devices() {
    ProbeControl* probes = host_.probes();
    if (!probes) return;
    devices_refreshed_ns_ = monotonic_ns();
    std::map<uint32_t, std::string> devices = char_devices_matching(ioctl_devices_);
    std::set<uint32_t> numbers;
    for (const auto& [rdev, path] : devices) numbers.insert(rdev);
    if (auto r = probes->set_ioctl_devices(numbers); !r) host_.warn(r.error().message);
    os_.set_devices(ioctl_devices_, std::move(devices));
  }

  LayerHost& host_;
  OsMonitor os_;
  std::string ioctl_devices_;
  uint64_t devices_refreshed_ns_ = 0;
  std::map<FileId, LibraryBuild> library_builds_;  // identified files (reading ELF costs)
};

}  // namespace

std::unique_ptr<LayerRuntime> make_os_runtime(const LayerRuntimeSetup& setup, LayerHost& host) {
  return std::make_unique<OsRuntime>(setup, host);
}

}  // namespace eacgm
