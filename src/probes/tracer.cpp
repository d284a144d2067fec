#include "probes/tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "layers/python/python_layouts.h"
#include "probes/elf_symbols.h"
#include "probes/skeletons.h"

namespace eacgm {
namespace {

// libbpf's diagnostics are collected and shown only when loading fails (or
// with --verbose): a user needs them to understand a BTF or verifier error.
std::string& libbpf_log() {
  static std::string log;
  return log;
}
// Objects load on several threads (Tracer::open): the log is shared.
std::mutex& libbpf_log_mutex() {
  static std::mutex mutex;
  return mutex;
}
bool g_verbose = false;

int collect_libbpf_output(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG && !g_verbose) return 0;
  char line[1024];
  const int n = vsnprintf(line, sizeof(line), format, args);
  if (g_verbose) fputs(line, stderr);
  std::lock_guard lock(libbpf_log_mutex());
  std::string& log = libbpf_log();
  if (log.size() < 64 * 1024) log += line;
  return n;
}

std::string libbpf_error(std::string_view what, int err) {
  std::string message = fmt::format("{}: {}", what, std::strerror(err < 0 ? -err : err));
  std::lock_guard lock(libbpf_log_mutex());
  const std::string& log = libbpf_log();
  if (!log.empty()) {
    // The last lines say why; the verifier's full dump is too long to be useful here.
    const size_t keep = 2000;
    message +=
        "\nlibbpf said:\n" + (log.size() > keep ? "..." + log.substr(log.size() - keep) : log);
  }
  return message;
}

// The maps every layer object shares with the core object.
template <typename Skel>
int reuse_shared_maps(Skel* layer, eacgm_core* core) {
  const std::pair<bpf_map*, bpf_map*> shared[] = {
      {layer->maps.targets, core->maps.targets},
      {layer->maps.events, core->maps.events},
      {layer->maps.drops, core->maps.drops},
      {layer->maps.call_stacks, core->maps.call_stacks},
      {layer->maps.py_procs, core->maps.py_procs},
      {layer->maps.py_procs_added, core->maps.py_procs_added},
      {layer->maps.py_layouts, core->maps.py_layouts},
      {layer->maps.py_tstates, core->maps.py_tstates},
      {layer->maps.py_tstate_misses, core->maps.py_tstate_misses},
      {layer->maps.py_codes_seen, core->maps.py_codes_seen},
  };
  for (auto [mine, theirs] : shared) {
    if (int err = bpf_map__reuse_fd(mine, bpf_map__fd(theirs)); err) return err;
  }
  return 0;
}

// The BPF link fds this process holds (their fdinfo names a link_id). Only the reader thread
// attaches probes, so the fds that appear across one attach call are that call's.
std::set<int> own_link_fds() {
  std::set<int> fds;
  DIR* dir = opendir("/proc/self/fdinfo");
  if (!dir) return fds;
  while (dirent* d = readdir(dir)) {
    char* end = nullptr;
    const long fd = strtol(d->d_name, &end, 10);
    if (end == d->d_name || *end != 0) continue;
    std::ifstream info(fmt::format("/proc/self/fdinfo/{}", fd));
    std::string line;
    while (std::getline(info, line)) {
      if (line.starts_with("link_id:")) {
        fds.insert(static_cast<int>(fd));
        break;
      }
    }
  }
  closedir(dir);
  return fds;
}

// The total of a one-entry per-CPU counter map; 0 when it cannot be read.
uint64_t sum_per_cpu(const bpf_map* map) {
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return 0;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpu));
  const uint32_t key = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(map), &key, per_cpu.data()) != 0) return 0;
  uint64_t total = 0;
  for (uint64_t n : per_cpu) total += n;
  return total;
}

}  // namespace

// The entry and return programs of one layer's loaded object.
struct LayerPrograms {
  bpf_program* entry = nullptr;
  bpf_program* ret = nullptr;
  bpf_program* unwind = nullptr;  // torch: the unwind guard and its counter
  bpf_map* unwound = nullptr;
  bpf_object* obj = nullptr;
  std::function<void()> destroy;
};

struct Tracer::Programs {
  eacgm_core* core = nullptr;
  eacgm_os* os = nullptr;  // also in `layers`, which owns it
  eacgm_python* python = nullptr;
  std::map<Layer, LayerPrograms> layers;
  std::vector<ProbeLink> core_links;  // raw tracepoints: released in microseconds
  std::vector<ProbeLink> os_links;    // perf events, like the USDT probes: ~50 ms each
  std::vector<ProbeLink> usdt_links;  // the python layer's
  // The perf-event links inside usdt_links: libbpf keeps them to itself (a USDT link has no fd
  // of its own), so they are found as they appear (see attach_python_usdt).
  std::vector<int> usdt_link_fds;

  ~Programs() {
    {
      LinkRelease release;
      for (auto* links : {&core_links, &os_links, &usdt_links}) {
        for (ProbeLink& link : *links) link.release_into(release);
      }
    }
    for (auto& [layer, progs] : layers) progs.destroy();
    eacgm_python__destroy(python);
    eacgm_core__destroy(core);
  }
};

// The python layer's stack sampler: one task iterator link per interpreter
// process (it visits that process's threads only), run `hz` times a second
// from a thread of its own. Running an iterator is a read() on a fresh
// iterator fd; the program writes its samples to the ring buffer.
struct Tracer::PythonSampler {
  bpf_program* program = nullptr;
  mutable std::mutex mutex;
  std::map<uint32_t, ProbeLink> links;  // by pid
  uint32_t registered = 0;              // what py_procs_added says (see python_walk.bpf.h)
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;

  ~PythonSampler() {
    LinkRelease release;
    halt(release);
  }

  // Stops the thread; its iterator links go into `release`.
  void halt(LinkRelease& release) {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (thread.joinable()) thread.join();
    for (auto& [pid, link] : links) link.release_into(release);
    links.clear();
  }

  void run(double hz) {
    using clock = std::chrono::steady_clock;
    const auto period =
        std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(1.0 / hz));
    auto next = clock::now();
    char sink[256];
    std::unique_lock lock(mutex);
    while (!stop) {
      for (auto& [pid, link] : links) {
        const int fd = bpf_iter_create(link.fd());
        if (fd < 0) continue;
        while (read(fd, sink, sizeof(sink)) > 0) {
        }
        close(fd);
      }
      next += period;
      const auto now = clock::now();
      if (next < now) next = now;  // fell behind (a busy machine): skip, never burst
      wake.wait_until(lock, next, [this] { return stop; });
    }
  }
};

namespace {

// serve's notice of new processes (bpf/core.bpf.c): the library name prefixes, and where the
// loader's list of objects (`_r_debug`) lies from the probed `_dl_debug_state`, both in the
// loader eacgm probes. Error when the loader lacks either symbol or a prefix does not fit.
template <typename Rodata>
Result<void> configure_notice(Rodata& rodata, const std::vector<std::string>& prefixes) {
  if (prefixes.size() > EACGM_NOTICE_PREFIXES) {
    return Error{fmt::format("more than {} library prefixes", EACGM_NOTICE_PREFIXES)};
  }
  auto probe = read_symbol_address(kLoaderPath, "_dl_debug_state");
  if (!probe) return probe.error();
  auto r_debug = read_symbol_address(kLoaderPath, "_r_debug");
  if (!r_debug) return r_debug.error();
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const std::string& prefix = prefixes[i];
    if (prefix.empty() || prefix.size() >= EACGM_NOTICE_PREFIX_LEN) {
      return Error{fmt::format("library prefix '{}' is empty or too long", prefix)};
    }
    for (size_t k = 0; k < EACGM_NOTICE_PREFIX_LEN; ++k) {
      rodata.notice_prefix[i][k] = k < prefix.size() ? prefix[k] : '\0';
    }
  }
  rodata.r_debug_from_probe = static_cast<int64_t>(*r_debug - *probe);
  rodata.notice_new = 1;
  return {};
}

// Opens, configures from the probe table, and loads one layer object. Every
// layer object has the same shape (see src/layers/cuda/cuda.bpf.c), so one template
// serves all of them.
template <typename Skel>
Result<LayerPrograms> load_table_skeleton(Layer layer, Skel* (*open)(const bpf_object_open_opts*),
                                          int (*load)(Skel*), void (*destroy)(Skel*),
                                          eacgm_core* core, const bpf_object_open_opts* opts,
                                          bool multi, bool py_attribution, bool may_stop) {
  if constexpr (requires(Skel * s) {
                  s->progs.call_entry;
                  s->progs.call_return;
                  s->rodata->out_slot;
                }) {
    Skel* skel = open(opts);
    const std::string name(layer_name(layer));
    if (!skel) return Error{libbpf_error("cannot open the " + name + " BPF program", errno)};
    LayerPrograms progs{.entry = skel->progs.call_entry,
                        .ret = skel->progs.call_return,
                        .obj = skel->obj,
                        .destroy = [skel, destroy] { destroy(skel); }};
    if (int err = reuse_shared_maps(skel, core); err) {
      progs.destroy();
      return Error{libbpf_error("cannot share maps with the " + name + " BPF program", err)};
    }
    std::span<const ProbeSpec> table = probe_table(layer);
    for (size_t i = 0; i < EACGM_MAX_FUNCS; ++i) {
      skel->rodata->out_slot[i] = kNoSlot;
      skel->rodata->row_flags[i] = 0;
      skel->rodata->name_slots[i] = 0;
      skel->rodata->entry_read[i] = 0;
    }
    for (size_t i = 0; i < table.size(); ++i) {
      skel->rodata->out_slot[i] = table[i].out_slot;
      skel->rodata->row_flags[i] = bpf_row_flags(table[i]);
      skel->rodata->name_slots[i] = bpf_name_slots(table[i]);
      skel->rodata->entry_read[i] = bpf_entry_read(table[i]);
    }
    skel->rodata->py_attribution = py_attribution ? 1 : 0;
    if constexpr (requires { skel->rodata->stop_on_unwind; }) {
      skel->rodata->stop_on_unwind = may_stop ? 1 : 0;
    }
    if (multi) {
      const auto type = static_cast<bpf_attach_type>(kBpfTraceUprobeMulti);
      bpf_program__set_expected_attach_type(progs.entry, type);
      bpf_program__set_expected_attach_type(progs.ret, type);
      if constexpr (requires { skel->progs.on_unwind_start; }) {
        bpf_program__set_expected_attach_type(skel->progs.on_unwind_start, type);
      }
    }
    if (int err = load(skel); err) {
      progs.destroy();
      return Error{libbpf_error("cannot load the " + name + " BPF program", err)};
    }
    if constexpr (requires { skel->progs.on_unwind_start; }) {
      progs.unwind = skel->progs.on_unwind_start;
      progs.unwound = skel->maps.calls_unwound;
    }
    return progs;
  } else {
    return Error{fmt::format("the {} BPF program is not a probe-table program", layer_name(layer))};
  }
}

// Opens and loads the probe-table object of a layer whose source is its libraries: the skeleton
// eacgm_<name> built from src/layers/<name>/<name>.bpf.c (CMakeLists.txt lists them).
Result<LayerPrograms> load_table_layer(Layer layer, eacgm_core* core,
                                       const bpf_object_open_opts* opts, bool multi,
                                       bool py_attribution, bool may_stop) {
  const std::string_view object = layer_name(layer);
#define EACGM_LOAD_IF_NAMED(name)                                                          \
  if (object == #name) {                                                                   \
    return load_table_skeleton(layer, eacgm_##name##__open_opts, eacgm_##name##__load,     \
                               eacgm_##name##__destroy, core, opts, multi, py_attribution, \
                               may_stop);                                                  \
  }
  EACGM_LAYER_SKELETONS(EACGM_LOAD_IF_NAMED)
#undef EACGM_LOAD_IF_NAMED
  return Error{
      fmt::format("layer {} has no BPF program (src/layers/{}/{}.bpf.c)", object, object, object)};
}

// Opens and loads the os layer object; its tracepoints are attached one by
// one so that a kernel lacking one keeps the rest.
Result<LayerPrograms> load_os(eacgm_core* core, const bpf_object_open_opts* opts, eacgm_os** out) {
  eacgm_os* skel = eacgm_os__open_opts(opts);
  if (!skel) return Error{libbpf_error("cannot open the os BPF program", errno)};
  LayerPrograms progs{.obj = skel->obj, .destroy = [skel] { eacgm_os__destroy(skel); }};
  if (int err = reuse_shared_maps(skel, core); err) {
    progs.destroy();
    return Error{libbpf_error("cannot share maps with the os BPF program", err)};
  }
  if (int err = eacgm_os__load(skel); err) {
    progs.destroy();
    return Error{libbpf_error("cannot load the os BPF program", err)};
  }
  *out = skel;
  return progs;
}

}  // namespace

Result<std::unique_ptr<Tracer>> Tracer::open(const Options& options, EventHandler handler) {
  static std::once_flag print_once;
  std::call_once(print_once, [] { libbpf_set_print(collect_libbpf_output); });
  g_verbose = options.verbose;
  {
    std::lock_guard lock(libbpf_log_mutex());
    libbpf_log().clear();
  }

  std::unique_ptr<Tracer> tracer(new Tracer());
  tracer->handler_ = std::move(handler);
  tracer->torch_filter_ = options.torch_ops;
  if (options.duty_cycle && !kernel_has_uprobe_multi()) {
    // Without them every function is a link of its own, released one by one (~50 ms each).
    return Error{
        "--overhead-budget needs uprobe_multi links (Linux 6.6 or later), which this kernel "
        "lacks; trace without a budget, or narrow the layers"};
  }
  tracer->duty_cycle_ = options.duty_cycle;
  tracer->may_stop_ = options.stop_on_dlopen;
  // Counted from the first program on: each run then reads the clock twice (~20 ns here), which
  // is how summary.json's `overhead` can say what the probes cost.
  tracer->stats_fd_ = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (tracer->stats_fd_ < 0) {
    tracer->stats_problem_ = fmt::format("the kernel's BPF run-time statistics are unavailable: {}",
                                         std::strerror(errno));
  }
  // Before any program can stop a target; forked before this process holds a BPF fd.
  if (Result<TargetGuardian> guardian = TargetGuardian::start(); guardian) {
    tracer->guardian_.emplace(std::move(*guardian));
  } else {
    tracer->warnings_.push_back(guardian.error().message +
                                "; a target paused when eacgm dies stays paused");
  }
  tracer->programs_ = std::make_unique<Programs>();
  Programs& p = *tracer->programs_;

  LIBBPF_OPTS(bpf_object_open_opts, open_opts);
  if (!options.btf_path.empty()) {
    if (access(options.btf_path.c_str(), R_OK) != 0) {
      return Error{
          fmt::format("cannot read kernel BTF {}: {}", options.btf_path, std::strerror(errno))};
    }
    open_opts.btf_custom_path = options.btf_path.c_str();
  }

  p.core = eacgm_core__open_opts(&open_opts);
  if (!p.core) return Error{libbpf_error("cannot open the core BPF program", errno)};
  p.core->rodata->stop_on_dlopen = options.stop_on_dlopen ? 1 : 0;
  if (!options.notice_libraries.empty()) {
    if (auto r = configure_notice(*p.core->rodata, options.notice_libraries); !r) {
      tracer->warnings_.push_back(
          fmt::format("new processes are found by the /proc scan only (a job's first calls may "
                      "come before it): {}",
                      r.error().message));
    } else if (!options.notice_cgroup_dir.empty()) {
      p.core->rodata->notice_in_cgroup = 1;
    }
  }
  if (kernel_has_uprobe_multi()) {
    bpf_program__set_expected_attach_type(p.core->progs.on_dl_debug_state,
                                          static_cast<bpf_attach_type>(kBpfTraceUprobeMulti));
  }
  if (int err = eacgm_core__load(p.core); err) {
    return Error{libbpf_error("cannot load the core BPF program (is the kernel BTF valid?)", err)};
  }
  if (p.core->rodata->notice_in_cgroup) {
    // The map holds the cgroup itself: the directory's descriptor can go at once.
    const int cgroup_fd = ::open(options.notice_cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY);
    const uint32_t slot = 0;
    const int err = cgroup_fd < 0 ? errno
                    : bpf_map_update_elem(bpf_map__fd(p.core->maps.notice_cgroup), &slot,
                                          &cgroup_fd, BPF_ANY) != 0
                        ? errno
                        : 0;
    if (cgroup_fd >= 0) close(cgroup_fd);
    if (err != 0) {
      // With its slot empty the program notices nobody: the /proc scan still finds the job.
      tracer->warnings_.push_back(fmt::format(
          "new processes are found by the /proc scan only (a job's first calls may come before "
          "it): cannot give the kernel the cgroup {}: {}",
          options.notice_cgroup_dir, std::strerror(err)));
    }
  }
  // Targets the kernel makes itself (forks, serve's notice) are in the map before eacgm hears
  // of them: the guardian reads it should eacgm die.
  if (tracer->guardian_ && !tracer->guardian_->watch_targets(bpf_map__fd(p.core->maps.targets))) {
    tracer->warnings_.push_back(
        "the guardian could not be given the targets map; a process paused as eacgm dies, "
        "before eacgm heard of it, stays paused");
  }
  for (bpf_program* prog : {p.core->progs.on_fork, p.core->progs.on_exec, p.core->progs.on_exit}) {
    Result<ProbeLink> link = ProbeLink::tracepoint(prog);
    if (!link) {
      return Error{fmt::format("cannot attach tracepoint program {}: {}", bpf_program__name(prog),
                               link.error().message)};
    }
    p.core_links.push_back(std::move(*link));
  }

  // The os object on a thread of its own: each object parses the kernel's BTF again and waits
  // for the verifier, and depends only on the core's maps. (libbpf keeps no state across objects
  // but its feature cache, which it reads and writes atomically.) The layers traced through a
  // probe table load when a library of theirs is first probed (load_layers), the python layer's
  // programs when the first interpreter is (load_python): a job that never runs Python or loads
  // libtorch or libcuda does not wait for their verification, the dearest part of eacgm's start
  // (call_entry with Python attribution: 0.36-0.56 s each on two busy CPUs, strace -T).
  tracer->btf_path_ = options.btf_path;
  tracer->py_attribution_ = options.layers.contains(Layer::kPython);
  auto concurrently = [](auto load) {
    return std::async(std::launch::async | std::launch::deferred, load);
  };
  eacgm_os* os_skel = nullptr;
  std::optional<std::future<Result<LayerPrograms>>> os_loaded;
  for (Layer layer : options.layers) {
    switch (layer_info(layer).source) {
      case LayerSource::kLibraries:
        tracer->table_layers_.insert(layer);
        break;
      case LayerSource::kTracepoints:
        os_loaded.emplace(concurrently([&] { return load_os(p.core, &open_opts, &os_skel); }));
        break;
      case LayerSource::kInterpreters:  // loaded with the first interpreter (load_python)
      case LayerSource::kUserSpace:     // no BPF program: the agent runtime reads it
        break;
    }
  }
  // The load is waited for: it uses this frame.
  if (os_loaded) {
    if (Result<LayerPrograms> progs = os_loaded->get(); progs) {
      p.layers.emplace(Layer::kOs, std::move(*progs));
    } else {
      // The os layer needs no library and must never cost the others.
      tracer->layer_problems_[Layer::kOs] = progs.error().message;
    }
  }
  p.os = os_skel;
  if (p.os) {
    std::vector<std::string> missing;
    size_t attached = 0;
    bpf_program* prog = nullptr;
    bpf_object__for_each_program(prog, p.os->obj) {
      Result<ProbeLink> link = ProbeLink::tracepoint(prog);
      if (!link) {
        missing.push_back(fmt::format("{} ({})", bpf_program__name(prog), link.error().message));
        continue;
      }
      p.os_links.push_back(std::move(*link));
      ++attached;
    }
    if (attached == 0) {
      tracer->layer_problems_[Layer::kOs] =
          fmt::format("no os tracepoint could be attached: {}", fmt::join(missing, ", "));
    } else if (!missing.empty()) {
      tracer->warnings_.push_back(
          fmt::format("os layer: not attached: {}", fmt::join(missing, ", ")));
    }
  }

  auto ring = RingReader::open(
      bpf_map__fd(p.core->maps.events),
      [self = tracer.get()](std::span<const std::byte> record) { self->handler_(record); });
  if (!ring) return Error{"cannot open the ring buffer: " + ring.error().message};
  tracer->ring_ = std::move(*ring);
  return tracer;
}

Tracer::~Tracer() {
  detach_probes();
  if (stats_fd_ >= 0) close(stats_fd_);
  python_.reset();  // its thread runs programs_'s iterator
  ring_.reset();    // before programs_, which holds the ring buffer map
}

Result<void> Tracer::load_python() {
  if (python_) return {};
  if (!py_attribution_) return Error{"the python layer is not enabled"};
  if (auto problem = layer_problem(Layer::kPython)) return Error{*problem};
  auto loaded = [this]() -> Result<void> {
    Programs& p = *programs_;
    LIBBPF_OPTS(bpf_object_open_opts, open_opts);
    if (!btf_path_.empty()) open_opts.btf_custom_path = btf_path_.c_str();
    p.python = eacgm_python__open_opts(&open_opts);
    if (!p.python) return Error{libbpf_error("cannot open the python BPF program", errno)};
    if (int err = reuse_shared_maps(p.python, p.core); err) {
      return Error{libbpf_error("cannot share maps with the python BPF program", err)};
    }
    if (int err = eacgm_python__load(p.python); err) {
      return Error{
          libbpf_error("cannot load the python BPF program (does the kernel have "
                       "sleepable task iterators, Linux 6.1 or later?)",
                       err)};
    }
    std::span<const eacgm_py_layout> layouts = python_layouts();
    for (uint32_t i = 0; i < layouts.size() && i < EACGM_PY_MAX_LAYOUTS; ++i) {
      if (bpf_map_update_elem(bpf_map__fd(p.core->maps.py_layouts), &i, &layouts[i], BPF_ANY) !=
          0) {
        return Error{fmt::format("cannot load the CPython layouts: {}", std::strerror(errno))};
      }
    }
    return {};
  }();
  if (!loaded) {
    layer_problems_[Layer::kPython] = loaded.error().message;  // told once, by this call
    return loaded;
  }
  python_ = std::make_unique<PythonSampler>();
  python_->program = programs_->python->progs.py_sample;
  if (sampler_hz_ > 0) python_->thread = std::thread([this] { python_->run(sampler_hz_); });
  return {};
}

Result<void> Tracer::load_layers(const std::set<Layer>& wanted) {
  Programs& p = *programs_;
  LIBBPF_OPTS(bpf_object_open_opts, open_opts);
  if (!btf_path_.empty()) open_opts.btf_custom_path = btf_path_.c_str();
  // Several at once load on threads of their own, as open() loads python and os.
  std::vector<std::pair<Layer, std::future<Result<LayerPrograms>>>> loading;
  for (Layer layer : wanted) {
    if (!table_layers_.contains(layer) || p.layers.contains(layer) ||
        layer_problems_.contains(layer)) {
      continue;
    }
    loading.emplace_back(layer, std::async(std::launch::async | std::launch::deferred,
                                           [&, layer, multi = kernel_has_uprobe_multi(),
                                            python = py_attribution_, stop = may_stop_] {
                                             return load_table_layer(layer, p.core, &open_opts,
                                                                     multi, python, stop);
                                           }));
  }
  std::optional<Error> failed;
  for (auto& [layer, loaded] : loading) {
    Result<LayerPrograms> progs = loaded.get();
    if (!progs) {
      // Told once, by the call that needed it; the layer's status says it too.
      layer_problems_[layer] = progs.error().message;
      if (!failed) failed = progs.error();
      continue;
    }
    p.layers.emplace(layer, std::move(*progs));
  }
  if (failed) return *failed;
  return {};
}

Result<void> Tracer::add_python_process(uint32_t pid, uint64_t runtime, uint32_t layout) {
  if (auto loaded = load_python(); !loaded) return loaded.error();
  const eacgm_py_proc proc{.runtime = runtime, .layout = layout, .pad = 0};
  std::lock_guard lock(python_->mutex);  // also orders the py_procs_added updates
  if (bpf_map_update_elem(bpf_map__fd(programs_->core->maps.py_procs), &pid, &proc, BPF_ANY) != 0) {
    return Error{fmt::format("cannot register python process {}: {}", pid, std::strerror(errno))};
  }
  // After the py_procs update: a thread that reads the new count finds the process.
  const uint32_t zero = 0, registered = ++python_->registered;
  if (bpf_map_update_elem(bpf_map__fd(programs_->core->maps.py_procs_added), &zero, &registered,
                          BPF_ANY) != 0) {
    return Error{fmt::format("cannot register python process {}: {}", pid, std::strerror(errno))};
  }
  if (python_->links.contains(pid)) return {};
  Result<ProbeLink> link = ProbeLink::task_iterator(python_->program, pid);
  if (!link) {
    bpf_map_delete_elem(bpf_map__fd(programs_->core->maps.py_procs), &pid);
    return Error{fmt::format("cannot sample the Python stacks of process {}: {}", pid,
                             link.error().message)};
  }
  python_->links.emplace(pid, std::move(*link));
  return {};
}

void Tracer::remove_python_process(uint32_t pid) {
  if (!python_) return;
  bpf_map_delete_elem(bpf_map__fd(programs_->core->maps.py_procs), &pid);
  std::lock_guard lock(python_->mutex);
  auto it = python_->links.find(pid);
  if (it == python_->links.end()) return;
  python_->links.erase(it);  // releases its link
}

Result<bool> Tracer::attach_python_usdt(const std::string& path, bool calls) {
  if (auto loaded = load_python(); !loaded) return loaded.error();
  const std::optional<FileId> id = file_id(path);
  if (!id) return Error{fmt::format("cannot stat {}: {}", path, std::strerror(errno))};
  if (python_usdt_files_.contains(*id)) return false;
  python_usdt_files_.insert(*id);
  const std::pair<bpf_program*, const char*> probes[] = {
      {programs_->python->progs.py_function_return, "function__return"},
      {programs_->python->progs.py_gc_start, "gc__start"},
      {programs_->python->progs.py_gc_done, "gc__done"},
  };
  for (auto [prog, name] : probes) {
    if (!calls && prog == programs_->python->progs.py_function_return) continue;
    // Every process of the file (-1): the programs keep to targets, and a target's children
    // are covered from their first instruction.
    const std::set<int> before = own_link_fds();
    Result<ProbeLink> link = ProbeLink::usdt(prog, path, "python", name);
    for (int fd : own_link_fds()) {
      if (!before.contains(fd)) programs_->usdt_link_fds.push_back(fd);
    }
    if (!link) {
      return Error{fmt::format("cannot attach the python:{} USDT probe of {}: {}", name, path,
                               link.error().message)};
    }
    programs_->usdt_links.push_back(std::move(*link));
  }
  return true;
}

void Tracer::start_python_sampler(double hz) {
  sampler_hz_ = hz;  // for a sampler started when the python layer loads
  if (!python_ || python_->thread.joinable() || hz <= 0) return;
  python_->thread = std::thread([this, hz] { python_->run(hz); });
}

std::vector<Tracer::PythonCallCount> Tracer::python_call_counts() const {
  std::vector<PythonCallCount> out;
  if (!programs_->python) return out;
  struct Key {
    uint32_t tgid, pad;
    uint64_t file, name;
  };
  const int fd = bpf_map__fd(programs_->python->maps.py_calls);
  Key key{}, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    uint64_t count = 0;
    if (bpf_map_lookup_elem(fd, &next, &count) == 0) {
      out.push_back({next.tgid, next.file, next.name, count});
    }
    key = next;
    prev = &key;
  }
  return out;
}

void Tracer::pass_over(uint32_t pid) {
  // The kernel remembers it was noticed (bpf/core.bpf.c `noticed`): it is not looked at again.
  bpf_map_delete_elem(bpf_map__fd(programs_->core->maps.targets), &pid);
}

Result<void> Tracer::add_target(uint32_t pid) {
  if (guardian_) guardian_->watch(pid);
  const uint8_t one = 1;
  if (bpf_map_update_elem(bpf_map__fd(programs_->core->maps.targets), &pid, &one, BPF_ANY) != 0) {
    return Error{fmt::format("cannot add pid {} to the traced set: {}", pid, std::strerror(errno))};
  }
  return {};
}

Result<bool> Tracer::attach_library(Layer layer, const std::string& path) {
  const std::optional<FileId> id = file_id(path);
  if (!id) return Error{fmt::format("cannot stat {}: {}", path, std::strerror(errno))};
  for (const TracedLibrary& lib : libraries_) {
    if (lib.id == *id && lib.layer == layer) return false;
  }
  if (!table_layers_.contains(layer)) {
    return Error{fmt::format("layer {} is not enabled", layer_name(layer))};
  }
  if (layer_problems_.contains(layer)) return false;  // its programs did not load: said then
  if (auto loaded = load_layers({layer}); !loaded) return loaded.error();
  auto progs = programs_->layers.find(layer);
  bpf_program* entry = progs->second.entry;
  bpf_program* ret = progs->second.ret;

  std::vector<uint64_t> offsets;
  std::vector<uint64_t> cookies;
  if (layer == Layer::kTorch) {
    // The torch layer's rows come from the library itself (src/layers/torch/torch_ops.h).
    if (torch_skipped_.contains(*id)) return false;
    auto ops = torch_library_ops(path, torch_filter_, torch_ops_);
    if (!ops) return ops.error();
    if (ops->exported > 0 && ops->selected == 0) {
      torch_skipped_.insert(*id);
      return Error{fmt::format("--torch-ops '{}' selects none of the {} operators of {}",
                               torch_filter_.spec(), ops->exported, path)};
    }
    if (ops->over_limit > 0) {
      // Attaching happens while the job runs, after open()'s warnings were shown.
      fmt::print(stderr,
                 "eacgm: warning: {}: {} operators not probed: the torch layer holds at most {} "
                 "operators; narrow --torch-ops\n",
                 path, ops->over_limit, EACGM_MAX_FUNCS);
    }
    if (ops->offsets.empty()) {
      // libtorch_cuda (its kernels are reached through libtorch_cpu's entry points), or
      // nothing selected: remembered, so a later dlopen does not read the file again.
      torch_skipped_.insert(*id);
      return false;
    }
    offsets = std::move(ops->offsets);
    cookies = std::move(ops->cookies);
  } else {
    auto symbols = read_function_symbols(path);
    if (!symbols) return symbols.error();
    std::map<std::string_view, uint64_t> offset_of;
    for (const ElfSymbol& sym : *symbols) {
      // An IFUNC symbol is its resolver, which runs once at binding, not per call.
      if (!sym.ifunc) offset_of.emplace(sym.name, sym.file_offset);
    }
    // One probe per address: libraries export aliases (NCCL's weak nccl* of
    // pnccl*), and two probes on one address would count each call twice.
    std::set<uint64_t> seen;
    std::span<const ProbeSpec> table = probe_table(layer);
    for (size_t row = 0; row < table.size(); ++row) {
      auto it = offset_of.find(table[row].symbol);
      if (it == offset_of.end() || !seen.insert(it->second).second) continue;
      offsets.push_back(it->second);
      cookies.push_back(row);
    }
  }
  if (offsets.empty()) {
    return Error{
        fmt::format("{} exports none of the {} functions eacgm traces", path, layer_name(layer))};
  }
  const size_t functions = offsets.size();
  CycledRows cycled{entry, ret, path, {}, {}};
  if (duty_cycle_) {
    std::vector<uint64_t> always_offsets, always_cookies;
    for (size_t i = 0; i < offsets.size(); ++i) {
      const ProbeSpec* spec =
          layer == Layer::kTorch ? torch_ops_.row(cookies[i]) : &probe_table(layer)[cookies[i]];
      const bool cycles = spec != nullptr && may_duty_cycle(*spec);
      (cycles ? cycled.offsets : always_offsets).push_back(offsets[i]);
      (cycles ? cycled.cookies : always_cookies).push_back(cookies[i]);
    }
    offsets = std::move(always_offsets);
    cookies = std::move(always_cookies);
  }
  if (!offsets.empty()) {
    for (auto [prog, is_return] : {std::pair{entry, false}, std::pair{ret, true}}) {
      auto probe = ProbeLink::uprobes(prog, path, offsets, cookies, is_return);
      if (!probe) return probe.error();
      probes_.push_back(std::move(*probe));
    }
  }
  if (!cycled.offsets.empty()) {
    if (cycled_on_) {
      if (auto r = attach_cycled(cycled); !r) return r.error();
    }
    cycled_.push_back(std::move(cycled));
  }
  libraries_.push_back(TracedLibrary{layer, path, *id, functions});
  return true;
}

Result<void> Tracer::attach_cycled(const CycledRows& rows) {
  for (auto [prog, is_return] : {std::pair{rows.entry, false}, std::pair{rows.ret, true}}) {
    auto probe = ProbeLink::uprobe_multi(bpf_program__fd(prog), rows.path, rows.offsets,
                                         rows.cookies, is_return);
    if (!probe) return probe.error();
    cycled_probes_.push_back(std::move(*probe));
  }
  return {};
}

Result<void> Tracer::set_cycled_probes(bool on) {
  if (on == cycled_on_) return {};
  cycled_on_ = on;
  if (!on) {
    LinkRelease release;
    for (ProbeLink& probe : cycled_probes_) probe.release_into(release);
    release.run();
    cycled_probes_.clear();
    return {};
  }
  for (const CycledRows& rows : cycled_) {
    if (auto r = attach_cycled(rows); !r) return r;
  }
  return {};
}

Result<bool> Tracer::attach_unwind_guard(const std::string& path) {
  if (table_layers_.contains(Layer::kTorch) && !programs_->layers.contains(Layer::kTorch)) {
    // No torch return probe yet, nothing to guard: a process whose libtorch is probed has
    // mapped its unwinder too, and its caller guards it in the same stop (Recorder).
    return false;
  }
  auto torch = programs_->layers.find(Layer::kTorch);
  if (torch == programs_->layers.end() || !torch->second.unwind) {
    return Error{"the torch layer is not enabled"};
  }
  const std::optional<FileId> id = file_id(path);
  if (!id) return Error{fmt::format("cannot stat {}: {}", path, std::strerror(errno))};
  if (unwind_guarded_.contains(*id)) return false;
  if (!may_stop_) {
    unwind_guarded_.insert(*id);  // said once per file
    return Error{fmt::format(
        "with --no-stop-on-dlopen a C++ exception thrown through a traced torch operator "
        "ends the job (its return addresses cannot be put back without stopping it; {})",
        path)};
  }
  auto symbols = read_function_symbols(path);
  if (!symbols) return symbols.error();
  // Every way unwinding starts: a throw (also std::rethrow_exception), a `throw;` and a forced
  // unwind (pthread_cancel, pthread_exit). _Unwind_Resume only goes on with an unwinding these
  // began, above frames they already saw to.
  std::set<uint64_t> offsets;
  for (const ElfSymbol& sym : *symbols) {
    if (sym.name == "_Unwind_RaiseException" || sym.name == "_Unwind_Resume_or_Rethrow" ||
        sym.name == "_Unwind_ForcedUnwind") {
      offsets.insert(sym.file_offset);
    }
  }
  if (offsets.empty()) {
    return Error{fmt::format(
        "{} has no _Unwind_RaiseException: a C++ exception thrown through a traced torch "
        "operator would end the job; --layers without torch avoids that",
        path)};
  }
  const std::vector<uint64_t> where(offsets.begin(), offsets.end());
  const std::vector<uint64_t> cookies(where.size(), 0);
  auto probe = ProbeLink::uprobes(torch->second.unwind, path, where, cookies, false);
  if (!probe) return probe.error();
  guard_probes_.push_back(std::move(*probe));
  unwind_guarded_.insert(*id);
  return true;
}

uint64_t Tracer::calls_unwound() const {
  auto torch = programs_->layers.find(Layer::kTorch);
  if (torch == programs_->layers.end() || !torch->second.unwound) return 0;
  return sum_per_cpu(torch->second.unwound);
}

Result<void> Tracer::attach_loader(const std::string& ld_so_path) {
  auto symbols = read_function_symbols(ld_so_path);
  if (!symbols) return symbols.error();
  for (const ElfSymbol& sym : *symbols) {
    if (sym.name != "_dl_debug_state") continue;
    const uint64_t offset[] = {sym.file_offset}, cookie[] = {0};
    bpf_program* prog = programs_->core->progs.on_dl_debug_state;
    auto probe = ProbeLink::uprobes(prog, ld_so_path, offset, cookie, false);
    if (!probe) {
      return Error{fmt::format("cannot probe the dynamic loader: {}", probe.error().message)};
    }
    guard_probes_.push_back(std::move(*probe));
    return {};
  }
  return Error{fmt::format("{} has no _dl_debug_state symbol", ld_so_path)};
}

int Tracer::poll(int timeout_ms) { return ring_->poll(timeout_ms); }
int Tracer::wait(int other_fd) {
  pollfd fds[2] = {{ring_->fd(), POLLIN, 0}, {other_fd, POLLIN, 0}};
  if (::poll(fds, other_fd >= 0 ? 2 : 1, EACGM_READER_POLL_MS) < 0 && errno != EINTR) {
    return -errno;
  }
  return drain();
}
int Tracer::drain() { return static_cast<int>(ring_->consume()); }

uint64_t Tracer::dropped() const { return sum_per_cpu(programs_->core->maps.drops); }

std::vector<Tracer::ProgramCost> Tracer::program_costs() const {
  std::vector<ProgramCost> out;
  if (stats_fd_ < 0) return out;
  // Per object: its uprobes (a hit also paid a trap), its tracepoints, its iterators (eacgm's
  // own threads).
  auto add = [&out](const std::string& group, const bpf_object* obj) {
    if (!obj) return;
    ProgramCost uprobes{.group = group, .traps = true};
    ProgramCost tracepoints{.group = group};
    ProgramCost agent{.group = group, .in_agent = true};
    bpf_program* prog = nullptr;
    bpf_object__for_each_program(prog, obj) {
      bpf_prog_info info{};
      uint32_t len = sizeof(info);
      if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) != 0) continue;
      // uprobes, uprobe_multi and USDT probes are kprobe-type programs
      ProgramCost& into = bpf_program__expected_attach_type(prog) == BPF_TRACE_ITER ? agent
                          : bpf_program__type(prog) == BPF_PROG_TYPE_KPROBE         ? uprobes
                                                                                    : tracepoints;
      into.hits += info.run_cnt;
      into.run_ns += info.run_time_ns;
    }
    for (const ProgramCost& cost : {uprobes, tracepoints, agent}) {
      if (cost.hits > 0) out.push_back(cost);
    }
  };
  add("core", programs_->core ? programs_->core->obj : nullptr);
  add("python", programs_->python ? programs_->python->obj : nullptr);
  for (const auto& [layer, progs] : programs_->layers)
    add(std::string(layer_name(layer)), progs.obj);
  return out;
}

std::optional<std::string> Tracer::layer_problem(Layer layer) const {
  auto it = layer_problems_.find(layer);
  if (it != layer_problems_.end()) return it->second;
  return std::nullopt;
}

Result<void> Tracer::set_ioctl_devices(const std::set<uint32_t>& rdevs) {
  if (!programs_->os || rdevs == ioctl_devices_) return {};
  const int fd = bpf_map__fd(programs_->os->maps.ioctl_devices);
  for (uint32_t rdev : ioctl_devices_) {
    if (!rdevs.contains(rdev)) bpf_map_delete_elem(fd, &rdev);
  }
  const uint8_t one = 1;
  for (uint32_t rdev : rdevs) {
    if (bpf_map_update_elem(fd, &rdev, &one, BPF_ANY) != 0) {
      return Error{fmt::format("cannot watch ioctls on device {}:{}: {}", rdev >> 20,
                               rdev & 0xfffff, std::strerror(errno))};
    }
  }
  ioctl_devices_ = rdevs;
  return {};
}

void Tracer::detach_probes() {
  if (!programs_) return;  // open() failed before loading anything
  {
    LinkRelease calls;
    if (python_) python_->halt(calls);  // no samples once we stop listening
    // Perf-event links that never stop a target go to the guardian, which releases them after
    // eacgm has gone: the kernel releases such links one at a time, ~50 ms each (see
    // target_guardian.h). Until then their programs may still run for a target that lives on
    // (attach), into a ring buffer nobody reads.
    std::vector<int> later = programs_->usdt_link_fds;
    for (const ProbeLink& link : programs_->os_links) later.push_back(link.fd());
    std::erase_if(later, [](int fd) { return fd < 0; });
    programs_->usdt_link_fds.clear();
    if (guardian_ && !later.empty()) guardian_->hand_over(later);
    for (auto* links : {&programs_->os_links, &programs_->core_links, &programs_->usdt_links}) {
      for (ProbeLink& link : *links) link.release_into(calls);
      links->clear();
    }
    for (ProbeLink& probe : probes_) probe.release_into(calls);
    probes_.clear();
    for (ProbeLink& probe : cycled_probes_) probe.release_into(calls);
    cycled_probes_.clear();
    cycled_.clear();
  }
  // Then the guards: the unwind guard must outlive the return probes it protects, and the
  // loader probe goes too, since nothing may stop a target once we stop listening.
  LinkRelease guards;
  for (ProbeLink& probe : guard_probes_) probe.release_into(guards);
  guards.run();
  guard_probes_.clear();
}

}  // namespace eacgm
