// probe_overhead: what tracing one CUDA runtime call costs, measured against the floor of a uprobe
// pair that does nothing, and how many traced calls per second eacgm records without drops.
//
// The workload is simgpu's `cuda_calls --sequence sync-loop`, which times N calls of
// cudaStreamSynchronize(NULL) (with --driver, the driver's cuStreamSynchronize in NVIDIA's stub
// libcuda: the driver layer's probes) between two clock reads, so process start-up, attaching and
// writing the session are outside the measurement. Modes, run in interleaved rounds so that drift
// on a noisy machine hits all of them alike:
//   untraced  nothing attached;
//   bare      bench/bare_probe.bpf.c's empty entry and return programs on the function: the floor;
//   handlers  eacgm's own BPF programs (probes::Tracer) with a reader thread that only counts
//             events: eacgm without its user-space sinks. This reader keeps up, so the kernel
//             wakes it for nearly every event, which is costly (bench/handler_cost shows how much);
//   eacgm     `eacgm record -q -o DIR -- cuda_calls ...`: the whole tool.
// Run as root. docs/PERFORMANCE.md explains the numbers and has this machine's results.
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench_skeletons.h"
#include "bpf/events.h"
#include "probes/probe_link.h"
#include "probes/probe_table.h"
#include "probes/tracer.h"
#include "workload.h"

namespace {

namespace fs = std::filesystem;
using eacgm::Error;
using eacgm::ProbeLink;
using eacgm::Result;
using eacgm::bench::kDriverFunction;
using eacgm::bench::kFunction;
using eacgm::bench::kNvidiaDriverStub;
using eacgm::bench::kNvidiaLib;
using eacgm::bench::median;
using eacgm::bench::read_file;
using eacgm::bench::Run;
using json = nlohmann::json;

enum class Mode { kUntraced, kBare, kHandlers, kEacgm };
constexpr Mode kModes[] = {Mode::kUntraced, Mode::kBare, Mode::kHandlers, Mode::kEacgm};

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kUntraced:
      return "untraced";
    case Mode::kBare:
      return "bare";
    case Mode::kHandlers:
      return "handlers";
    case Mode::kEacgm:
      return "eacgm";
  }
  return "?";
}

bool records(Mode mode) { return mode == Mode::kHandlers || mode == Mode::kEacgm; }

struct Options {
  std::string lib;
  std::string function = kFunction;
  bool driver = false;
  bool sim = false;
  std::string sim_latency = "0";
  long long calls = 200000;
  int runs = 5;
  std::vector<int> procs = {1, 2};
  long long rate_calls = 1000000;
  bool skip_overhead = false;
  bool skip_rate = false;
  std::string eacgm = EACGM_BENCH_EACGM;
  std::string cuda_calls = EACGM_BENCH_CUDA_CALLS;
  bool json = false;
};

// bench/bare_probe.bpf.c, loaded once, attached for the runs of the `bare` mode only.
class BareProbe {
 public:
  static Result<std::unique_ptr<BareProbe>> load(const std::string& lib,
                                                 const std::string& function) {
    auto offset = eacgm::bench::function_offset(lib, function);
    if (!offset) return offset.error();
    std::unique_ptr<BareProbe> probe(new BareProbe());
    probe->lib_ = lib;
    probe->offset_ = *offset;
    probe->skel_ = eacgm_bare_probe__open();
    if (!probe->skel_) return Error{"cannot open the bare_probe BPF program"};
    const auto type = static_cast<bpf_attach_type>(eacgm::kBpfTraceUprobeMulti);
    bpf_program__set_expected_attach_type(probe->skel_->progs.bare_entry, type);
    bpf_program__set_expected_attach_type(probe->skel_->progs.bare_return, type);
    if (eacgm_bare_probe__load(probe->skel_) != 0) {
      return Error{"cannot load the bare_probe BPF program (uprobe_multi needs Linux 6.6+)"};
    }
    return probe;
  }
  ~BareProbe() { eacgm_bare_probe__destroy(skel_); }

  // The entry and return probes, attached until the result is destroyed.
  Result<std::vector<ProbeLink>> attach() const {
    const uint64_t offsets[] = {offset_};
    const uint64_t cookies[] = {0};
    std::vector<ProbeLink> links;
    for (auto [prog, ret] :
         {std::pair{skel_->progs.bare_entry, false}, std::pair{skel_->progs.bare_return, true}}) {
      auto link = ProbeLink::uprobe_multi(bpf_program__fd(prog), lib_, offsets, cookies, ret);
      if (!link) return link.error();
      links.push_back(std::move(*link));
    }
    return links;
  }

 private:
  BareProbe() = default;
  std::string lib_;
  uint64_t offset_ = 0;
  eacgm_bare_probe* skel_ = nullptr;
};

// eacgm's BPF programs and ring buffer, as `eacgm record` sets them up, with a reader thread that
// only counts call events. This process is the target: the workload it starts joins the target
// set through the fork tracepoint.
class CountingTracer {
 public:
  static Result<std::unique_ptr<CountingTracer>> start(const std::string& lib) {
    const std::optional<eacgm::Layer> layer = eacgm::library_layer(lib);
    if (!layer) return Error{lib + " is not a library of a traced layer"};
    std::unique_ptr<CountingTracer> self(new CountingTracer());
    eacgm::Tracer::Options topts;
    topts.layers = {*layer};
    topts.stop_on_dlopen = false;
    auto tracer = eacgm::Tracer::open(topts, [p = self.get()](std::span<const std::byte> data) {
      eacgm_header hdr;
      if (data.size() < sizeof(hdr)) return;
      std::memcpy(&hdr, data.data(), sizeof(hdr));
      if (hdr.kind == EACGM_EV_CALL) ++p->recorded_;
    });
    if (!tracer) return tracer.error();
    self->tracer_ = std::move(*tracer);
    if (auto r = self->tracer_->add_target(static_cast<uint32_t>(getpid())); !r) return r.error();
    if (auto r = self->tracer_->attach_library(*layer, lib); !r) return r.error();
    self->reader_ = std::thread([p = self.get()] {
      while (!p->stop_.load()) p->tracer_->poll(100);
    });
    return self;
  }
  ~CountingTracer() { stop(); }

  // Stops reading, drains what is left, and returns {recorded, dropped}.
  std::pair<uint64_t, uint64_t> stop() {
    if (reader_.joinable()) {
      stop_ = true;
      reader_.join();
      tracer_->detach_probes();
      tracer_->drain();
    }
    return {recorded_, tracer_->dropped()};
  }

 private:
  CountingTracer() = default;
  std::unique_ptr<eacgm::Tracer> tracer_;
  std::thread reader_;
  std::atomic<bool> stop_ = false;
  uint64_t recorded_ = 0;  // written by the reader thread, read after it has stopped
};

class Bench {
 public:
  Bench(Options options, std::unique_ptr<BareProbe> bare, fs::path dir)
      : o_(std::move(options)), bare_(std::move(bare)), dir_(std::move(dir)) {}

  Result<Run> run(Mode mode, int procs, long long calls) {
    using eacgm::bench::parse_sync_loops;
    using eacgm::bench::run_command;
    std::vector<std::string> argv =
        eacgm::bench::sync_loop_argv(o_.cuda_calls, o_.lib, procs, calls, o_.function);
    const fs::path err_path = dir_ / "stderr.txt";
    switch (mode) {
      case Mode::kUntraced: {
        auto out = run_command(argv, err_path);
        if (!out) return out.error();
        return parse_sync_loops(*out, procs, calls);
      }
      case Mode::kBare: {
        auto links = bare_->attach();
        if (!links) return links.error();
        auto out = run_command(argv, err_path);
        if (!out) return out.error();
        return parse_sync_loops(*out, procs, calls);
      }
      case Mode::kHandlers: {
        auto tracer = CountingTracer::start(o_.lib);
        if (!tracer) return tracer.error();
        auto out = run_command(argv, err_path);
        auto [recorded, dropped] = (*tracer)->stop();
        if (!out) return out.error();
        auto run = parse_sync_loops(*out, procs, calls);
        if (run) {
          run->recorded = recorded;
          run->dropped = dropped;
        }
        return run;
      }
      case Mode::kEacgm: {
        const fs::path session = dir_ / "session";
        fs::remove_all(session);
        argv.insert(argv.begin(), {o_.eacgm, "record", "-q", "-o", session.string(), "--"});
        auto out = run_command(argv, err_path);
        if (!out) return out.error();
        auto run = parse_sync_loops(*out, procs, calls);
        if (!run) return run;
        try {
          const json summary = json::parse(read_file(session / "summary.json"));
          run->recorded = summary.at("events").at("recorded").get<uint64_t>();
          run->dropped = summary.at("events").at("dropped").get<uint64_t>();
        } catch (const json::exception& e) {
          return Error{
              fmt::format("cannot read {}: {}", (session / "summary.json").string(), e.what())};
        }
        fs::remove_all(session);  // a million calls make a quarter-gigabyte session
        return run;
      }
    }
    return Error{"unknown mode"};
  }

 private:
  Options o_;
  std::unique_ptr<BareProbe> bare_;
  fs::path dir_;
};

// All runs of one section: per mode, one Run per round.
using Runs = std::map<Mode, std::vector<Run>>;

// `rounds` rounds of every mode, the order rotated each round.
Result<Runs> measure(Bench& bench, const Options& o, int procs, long long calls,
                     const std::string& label) {
  Runs runs;
  constexpr size_t kCount = std::size(kModes);
  const bool progress = isatty(STDERR_FILENO);
  for (int r = 0; r < o.runs; ++r) {
    if (progress) fmt::print(stderr, "\r{}: round {}/{} ", label, r + 1, o.runs);
    for (size_t i = 0; i < kCount; ++i) {
      const Mode mode = kModes[(i + static_cast<size_t>(r)) % kCount];
      auto run = bench.run(mode, procs, calls);
      if (!run) return Error{fmt::format("{} run: {}", mode_name(mode), run.error().message)};
      runs[mode].push_back(std::move(*run));
    }
  }
  if (progress) fmt::print(stderr, "\r{:60}\r", "");
  return runs;
}

// Each run's ns per call (single-process runs) and calls per second.
std::vector<double> ns_values(const std::vector<Run>& runs) {
  std::vector<double> v;
  for (const Run& r : runs) v.push_back(r.ns_per_call.front());
  return v;
}

std::vector<double> rate_values(const std::vector<Run>& runs) {
  std::vector<double> v;
  for (const Run& r : runs) v.push_back(r.calls_per_s);
  return v;
}

std::string si(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.0f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

// Recorded and dropped over all runs of a mode, against what the workload made.
json completeness(const std::vector<Run>& runs, uint64_t expected_per_run) {
  uint64_t recorded = 0, dropped = 0, max_dropped = 0, complete = 0;
  for (const Run& r : runs) {
    recorded += r.recorded;
    dropped += r.dropped;
    max_dropped = std::max(max_dropped, r.dropped);
    complete += r.recorded == expected_per_run;
  }
  return {{"expected_per_run", expected_per_run},
          {"recorded", recorded},
          {"dropped", dropped},
          {"max_dropped_per_run", max_dropped},
          {"complete_runs", complete}};
}

json overhead_json(const Runs& runs, const Options& o) {
  json j;
  const double base = median(ns_values(runs.at(Mode::kUntraced)));
  const double bare_added = median(ns_values(runs.at(Mode::kBare))) - base;
  for (Mode mode : kModes) {
    const std::vector<double> ns = ns_values(runs.at(mode));
    json m = {{"median_ns", median(ns)}, {"runs_ns", ns}};
    if (mode != Mode::kUntraced) {
      m["added_ns"] = median(ns) - base;
      m["added_over_bare_added"] = (median(ns) - base) / bare_added;
      m["over_untraced"] = median(ns) / base;
    }
    if (records(mode)) m["events"] = completeness(runs.at(mode), static_cast<uint64_t>(o.calls));
    j[mode_name(mode)] = m;
  }
  j["calls"] = o.calls;
  return j;
}

void print_overhead(const json& j, const Options& o) {
  fmt::print("\nper call, 1 process, {} calls per run, median of {} interleaved rounds\n", o.calls,
             o.runs);
  fmt::print("  {:<9} {:>10} {:>10} {:>8}  {}\n", "mode", "ns/call", "added ns", "/bare+",
             "runs (ns/call)");
  for (Mode mode : kModes) {
    const json& m = j[mode_name(mode)];
    std::string runs;
    for (double v : m["runs_ns"]) runs += fmt::format(" {:.1f}", v);
    if (mode == Mode::kUntraced) {
      fmt::print("  {:<9} {:>10.1f} {:>10} {:>8} {}\n", mode_name(mode),
                 m["median_ns"].get<double>(), "", "", runs);
    } else {
      fmt::print("  {:<9} {:>10.1f} {:>10.1f} {:>8.3f} {}\n", mode_name(mode),
                 m["median_ns"].get<double>(), m["added_ns"].get<double>(),
                 m["added_over_bare_added"].get<double>(), runs);
    }
  }
  for (Mode mode : {Mode::kHandlers, Mode::kEacgm}) {
    const json& e = j[mode_name(mode)]["events"];
    fmt::print("  {}: {}/{} runs recorded all {} calls; {} dropped in all\n", mode_name(mode),
               e["complete_runs"].get<uint64_t>(), o.runs, o.calls, e["dropped"].get<uint64_t>());
  }
  const json& e = j["eacgm"];
  fmt::print("  eacgm added / bare added: {:.3f} (goal <= 1.15); eacgm / untraced: {:.1f}x\n",
             e["added_over_bare_added"].get<double>(), e["over_untraced"].get<double>());
}

json rate_json(const Runs& runs, const Options& o, int procs) {
  json j = {{"procs", procs}, {"calls_per_process", o.rate_calls}};
  for (Mode mode : kModes) {
    const std::vector<double> rates = rate_values(runs.at(mode));
    json m = {{"median_calls_per_s", median(rates)}, {"runs_calls_per_s", rates}};
    if (records(mode)) {
      m["events"] = completeness(runs.at(mode), static_cast<uint64_t>(procs * o.rate_calls));
    }
    j[mode_name(mode)] = m;
  }
  return j;
}

void print_rates(const json& rates, const Options& o) {
  fmt::print("\ncall rate: concurrent processes x {} calls, all processes together, median of {}\n",
             o.rate_calls, o.runs);
  fmt::print("  {:<5} {:<9} {:>10} {:>9} {:>13}\n", "procs", "mode", "calls/s", "dropped",
             "complete runs");
  for (const json& j : rates) {
    for (Mode mode : kModes) {
      const json& m = j[mode_name(mode)];
      std::string dropped, complete;
      if (m.contains("events")) {
        const json& e = m["events"];
        const double expected = e["expected_per_run"].get<double>() * o.runs;
        dropped = fmt::format("{:.1f}%", 100.0 * e["dropped"].get<double>() / expected);
        complete = fmt::format("{}/{}", e["complete_runs"].get<int>(), o.runs);
      }
      fmt::print("  {:<5} {:<9} {:>10} {:>9} {:>13}\n", j["procs"].get<int>(), mode_name(mode),
                 si(m["median_calls_per_s"].get<double>()), dropped, complete);
    }
  }
}

int run_main(Options o) {
  if (geteuid() != 0) {
    fmt::print(stderr, "probe_overhead: run as root (it loads BPF programs)\n");
    return 2;
  }
  if (o.driver) {
    if (o.sim) {
      fmt::print(stderr, "probe_overhead: --driver runs on NVIDIA's driver stub, not --sim\n");
      return 2;
    }
    if (o.lib.empty()) o.lib = kNvidiaDriverStub;
    o.function = kDriverFunction;
  }
  if (o.sim) {
    if (o.lib.empty()) o.lib = EACGM_BENCH_SIMGPU_LIB;
    // The simulated runtime's cudaStreamSynchronize waits 50 us unless told otherwise.
    setenv("SIMGPU_RULES", fmt::format("latency {} {}", o.function, o.sim_latency).c_str(), 1);
    // The runtime alone: in its default mode each call would also run a (traced) driver call.
    setenv("SIMGPU_RUNTIME_USES_DRIVER", "0", 1);
  } else if (o.lib.empty()) {
    o.lib = kNvidiaLib;
  }
  for (const std::string& path : {o.lib, o.eacgm, o.cuda_calls}) {
    if (access(path.c_str(), R_OK) != 0) {
      fmt::print(stderr, "probe_overhead: {}: {}\n", path, std::strerror(errno));
      return 2;
    }
  }
  auto scratch = eacgm::bench::Scratch::create(o.lib);
  if (!scratch) {
    fmt::print(stderr, "probe_overhead: {}\n", scratch.error().message);
    return 1;
  }
  const std::string installed_lib = o.lib;
  o.lib = (*scratch)->lib();
  auto bare = BareProbe::load(o.lib, o.function);
  if (!bare) {
    fmt::print(stderr, "probe_overhead: {}\n", bare.error().message);
    return 1;
  }
  Bench bench(o, std::move(*bare), (*scratch)->dir());

  utsname uts{};
  uname(&uts);
  json result = {{"function", o.function},
                 {"lib", installed_lib},
                 {"simgpu_rules", o.sim ? std::getenv("SIMGPU_RULES") : ""},
                 {"kernel", uts.release},
                 {"cpus", std::thread::hardware_concurrency()},
                 {"rounds", o.runs}};
  if (!o.json) {
    fmt::print("probe_overhead: {} in a copy of {}{}\nkernel {}, {} CPUs\n", o.function,
               installed_lib,
               o.sim ? fmt::format(" (SIMGPU_RULES='{}')", std::getenv("SIMGPU_RULES")) : "",
               uts.release, std::thread::hardware_concurrency());
  }

  int rc = 0;
  if (!o.skip_overhead) {
    auto overhead = measure(bench, o, 1, o.calls, "per-call overhead");
    if (overhead) {
      result["overhead"] = overhead_json(*overhead, o);
      if (!o.json) print_overhead(result["overhead"], o);
    } else {
      fmt::print(stderr, "probe_overhead: {}\n", overhead.error().message);
      rc = 1;
    }
  }
  if (rc == 0 && !o.skip_rate) {
    result["rate"] = json::array();
    for (int procs : o.procs) {
      auto runs = measure(bench, o, procs, o.rate_calls, fmt::format("call rate, {} procs", procs));
      if (!runs) {
        fmt::print(stderr, "probe_overhead: {}\n", runs.error().message);
        rc = 1;
        break;
      }
      result["rate"].push_back(rate_json(*runs, o, procs));
    }
    if (rc == 0 && !o.json) print_rates(result["rate"], o);
  }
  if (rc == 0 && o.json) fmt::print("{}\n", result.dump(2));
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Per-call cost of eacgm's probes against a bare uprobe pair, and the call rate it "
      "records without drops (run as root; see docs/PERFORMANCE.md)"};
  app.add_option("--lib", o.lib, fmt::format("CUDA runtime to call (default: {})", kNvidiaLib));
  app.add_flag("--driver", o.driver,
               fmt::format("the driver layer: {} in NVIDIA's stub (default lib: {})",
                           kDriverFunction, kNvidiaDriverStub));
  app.add_flag("--sim", o.sim,
               "call the simulated runtime (default lib: simgpu's) with --sim-latency per call");
  app.add_option("--sim-latency", o.sim_latency, "simulated cudaStreamSynchronize latency")
      ->capture_default_str();
  app.add_option("--calls", o.calls, "calls per run for the per-call overhead")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--runs", o.runs, "interleaved rounds (medians are over these)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--procs", o.procs, "concurrent processes for the call rate section")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--rate-calls", o.rate_calls, "calls per process for the call rate section")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--skip-overhead", o.skip_overhead, "measure the call rate only");
  app.add_flag("--skip-rate", o.skip_rate, "measure the per-call overhead only");
  app.add_option("--eacgm", o.eacgm, "eacgm binary")->capture_default_str();
  app.add_option("--cuda-calls", o.cuda_calls, "simgpu's cuda_calls binary")->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object instead of tables");
  CLI11_PARSE(app, argc, argv);
  return run_main(std::move(o));
}
