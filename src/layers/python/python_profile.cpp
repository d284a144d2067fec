#include "layers/python/python_profile.h"

#include <fmt/format.h>

#include <algorithm>

#include "layers/python/python_layouts.h"
#include "layers/python/python_lines.h"

namespace eacgm {
namespace {

std::string base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool is_name_char(char c, bool first) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (!first && c >= '0' && c <= '9');
}

// One dotted part of a qualname: an identifier, or a compiler-made `<module>`, `<lambda>`,
// `<locals>`, `<listcomp>`, `<genexpr>`.
bool is_name_part(std::string_view part) {
  if (part.size() > 2 && part.front() == '<' && part.back() == '>') {
    return std::all_of(part.begin() + 1, part.end() - 1,
                       [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
  }
  if (part.empty() || !is_name_char(part[0], true)) return false;
  return std::all_of(part.begin() + 1, part.end(), [](char c) { return is_name_char(c, false); });
}

// FNV-1a over the outer frames' code objects.
uint64_t stack_hash(const std::vector<PyFrameRef>& frames) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 1; i < frames.size(); ++i) {
    h ^= frames[i].code;
    h *= 1099511628211ull;
  }
  return h ^ frames.size();
}

// Frames of the interpreter's own machinery, the standard library and installed packages say
// little about where the job's time goes; the first frame outside them is the one a person edits.
// The BPF side applies the same rule when it picks the frame behind a call (python_walk.bpf.h).
bool is_library_file(std::string_view file) {
  return file.starts_with("<froz") || file.find("/lib/python3") != std::string_view::npos ||
         file.find("-packages/") != std::string_view::npos;
}

}  // namespace

std::string python_function_path(std::string_view file, std::string_view script_dir) {
  if (file.starts_with('<')) return std::string(file);
  for (std::string_view packages : {"/site-packages/", "/dist-packages/"}) {
    if (const size_t at = file.rfind(packages); at != std::string_view::npos) {
      return std::string(file.substr(at + packages.size()));
    }
  }
  if (const size_t at = file.find("/lib/python3."); at != std::string_view::npos) {
    if (const size_t slash = file.find('/', at + 13); slash != std::string_view::npos) {
      return std::string(file.substr(slash + 1));
    }
  }
  if (!script_dir.empty() && file.size() > script_dir.size() + 1 && file.starts_with(script_dir) &&
      file[script_dir.size()] == '/') {
    return std::string(file.substr(script_dir.size() + 1));
  }
  std::string name = base_name(file);
  if (name == "__init__.py" || name == "__main__.py") {
    const std::string_view dir = file.substr(0, file.size() - name.size() - 1);
    if (file.size() > name.size() && !dir.empty()) return base_name(dir) + "/" + name;
  }
  return name;
}

std::string python_function_key(std::string_view file, std::string_view name,
                                std::string_view script_dir) {
  return fmt::format("{}:{}", python_function_path(file, script_dir), name);
}

std::string python_script_dir(const std::vector<std::string>& argv, std::string_view cwd) {
  // Options that take a value as the next argument; -c and -m end the interpreter's options
  // and run no script file.
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-W" || arg == "-X" || arg == "--check-hash-based-pycs") {
      ++i;
      continue;
    }
    if (arg.starts_with("-c") || arg.starts_with("-m") || arg == "-") return {};
    if (arg.starts_with('-')) continue;  // -u, -O, -B, -E, -I, -W... glued to their values
    const size_t slash = arg.rfind('/');
    if (arg.starts_with('/')) return slash == 0 ? "/" : arg.substr(0, slash);
    std::string dir(cwd);
    if (slash != std::string::npos) dir += "/" + arg.substr(0, slash);
    return dir;
  }
  return {};
}

bool plausible_python_code(std::string_view name, std::string_view file, uint64_t first_line) {
  // CPython's line numbers are ints that the parser gives; no source file has 16 M lines.
  if (first_line > (1u << 24)) return false;
  if (name.empty() || file.empty()) return false;
  size_t begin = 0;
  while (true) {
    const size_t dot = name.find('.', begin);
    if (!is_name_part(name.substr(begin, dot - begin))) return false;
    if (dot == std::string_view::npos) break;
    begin = dot + 1;
  }
  const bool printable = std::all_of(file.begin(), file.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (!printable) return false;
  // `<frozen importlib._bootstrap>`, `<string>`, `<stdin>`; else a path. A bare word that is
  // neither a path nor a .py file name is another object's string.
  if (file.front() == '<') return file.back() == '>';
  return file.find('/') != std::string_view::npos || file.ends_with(".py") ||
         file.ends_with(".pyw");
}

bool is_idle_wait(std::string_view function_key) {
  const size_t colon = function_key.rfind(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view path = function_key.substr(0, colon);
  std::string_view name = function_key.substr(colon + 1);
  // 3.8-3.10 have no qualname: co_name is the last part of one.
  if (const size_t dot = name.rfind('.'); dot != std::string_view::npos)
    name = name.substr(dot + 1);
  struct Waits {
    std::string_view path;
    std::initializer_list<std::string_view> names;
  };
  static const Waits kWaits[] = {
      {"threading.py", {"wait", "wait_for", "join", "_wait_for_tstate_lock"}},
      {"queue.py", {"get"}},
      {"selectors.py", {"select"}},
      {"socket.py", {"accept"}},
      {"multiprocessing/connection.py",
       {"wait", "poll", "_poll", "recv", "recv_bytes", "_recv", "_recv_bytes", "accept"}},
      {"multiprocessing/queues.py", {"get", "join"}},
      {"multiprocessing/popen_fork.py", {"wait", "poll"}},
      {"multiprocessing/process.py", {"join"}},
      {"concurrent/futures/_base.py", {"result", "wait", "as_completed"}},
      // A rank waiting for its peers, in a collective or at the rendezvous: the peer that is
      // late is the one to name (its own stall is judged on its own thread). The C++ waits
      // of torch.distributed leave these as the innermost Python frames.
      {"torch/distributed/distributed_c10d.py",
       {"all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_to_all",
        "all_to_all_single", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
        "broadcast", "reduce", "gather", "scatter", "barrier", "monitored_barrier",
        "_store_based_barrier", "recv", "send", "init_process_group"}},
      {"torch/distributed/rendezvous.py",
       {"_create_c10d_store", "_tcp_rendezvous_handler", "_env_rendezvous_handler"}},
  };
  for (const Waits& w : kWaits) {
    if (path == w.path) return std::find(w.names.begin(), w.names.end(), name) != w.names.end();
  }
  return false;
}

void PythonProfile::add_interpreter(Interpreter interpreter) {
  interpreters_[interpreter.pid] = std::move(interpreter);
}

void PythonProfile::on_fork(uint32_t parent, uint32_t child) {
  auto it = interpreters_.find(parent);
  if (it == interpreters_.end()) return;
  Interpreter copy = it->second;
  copy.pid = child;
  interpreters_[child] = std::move(copy);
  // The child's code objects are its parent's, at the same addresses; BPF describes each
  // again when the child shows it, which replaces these.
  std::vector<std::pair<CodeKey, Code>> inherited;
  for (auto c = codes_.lower_bound({parent, 0}); c != codes_.end() && c->first.first == parent;
       ++c) {
    inherited.emplace_back(CodeKey{child, c->first.second}, c->second);
  }
  for (auto& [key, code] : inherited) codes_.insert_or_assign(key, std::move(code));
}

void PythonProfile::forget(uint32_t pid) {
  interpreters_.erase(pid);
  rounds_.erase(pid);
  busy_.erase(pid);
  starved_.erase(pid);
}

void PythonProfile::on_code(const PyCodeEvent& event) {
  const CodeKey key{event.pid, event.code};
  // Described again: another code object took a freed one's address. Sites named after the
  // old one are forgotten with it.
  site_cache_.erase(site_cache_.lower_bound({event.pid, event.code, 0}),
                    site_cache_.lower_bound({event.pid, event.code + 1, 0}));
  if (!plausible_python_code(event.name, event.file, event.firstlineno)) {
    // Whatever the walker read there is not a live code object: forget what it was before, so
    // that no sample is named after it.
    ++codes_rejected_;
    rejected_codes_.insert(key);
    codes_.erase(key);
    return;
  }
  rejected_codes_.erase(key);
  const auto interpreter = interpreters_.find(event.pid);
  Code c;
  c.name = event.name;
  c.file = event.file;
  c.key = python_function_key(
      event.file, event.name,
      interpreter == interpreters_.end() ? std::string_view{} : interpreter->second.script_dir);
  c.first_line = static_cast<int>(event.firstlineno);
  c.library = is_library_file(event.file);
  c.idle_wait = c.library && is_idle_wait(c.key);
  c.importer = event.file.starts_with("<frozen importlib");
  // A truncated table would give wrong lines past its end: keep none (line 0).
  if (event.linetable_complete) c.linetable = event.linetable;
  codes_.insert_or_assign(key, std::move(c));
}

void PythonProfile::on_function(const PyFunctionEvent& event) {
  if (!plausible_python_code(event.name, event.file, 0)) return;  // not a name to count under
  usdt_names_[{event.pid, event.file_ptr, event.name_ptr}] = {event.file, event.name};
}

void PythonProfile::on_gc(const PyGcEvent& event) {
  // No collection frees more objects than an address space holds (2^47 bytes, 16 bytes each
  // at least) or lasts a day: such a record is not one to add up.
  constexpr int64_t kMostObjects = int64_t{1} << 43;
  constexpr uint64_t kLongestNs = 86'400'000'000'000;
  if (event.collected > kMostObjects || event.duration_ns > kLongestNs) return;
  PythonGcStats& s = gc_by_generation_[event.generation];
  ++s.collections;
  s.total_ns += event.duration_ns;
  s.max_ns = std::max(s.max_ns, event.duration_ns);
  if (event.collected > 0) s.collected += event.collected;
  gc_events_.push_back(event);
}

const PythonProfile::Code* PythonProfile::code(uint32_t pid, uint64_t code) const {
  auto it = codes_.find({pid, code});
  return it == codes_.end() ? nullptr : &it->second;
}

const PythonSite* PythonProfile::site(uint32_t pid, uint64_t code_addr, uint64_t instr) {
  if (code_addr == 0) return nullptr;
  const auto cache_key = std::tuple{pid, code_addr, instr};
  if (auto it = site_cache_.find(cache_key); it != site_cache_.end()) return it->second;
  const Code* c = code(pid, code_addr);
  if (!c) return nullptr;  // not described (yet): no name to give
  int line = 0;
  if (auto interp = interpreters_.find(pid);
      interp != interpreters_.end() && !c->linetable.empty()) {
    const int version = interp->second.version;
    if (const eacgm_py_layout* layout = python_layout(static_cast<uint32_t>(version))) {
      const auto v = static_cast<uint32_t>(version);
      if (auto offset = python_instruction_offset(v, *layout, code_addr, instr)) {
        line = python_line(v, c->linetable, c->first_line, *offset);
      }
    }
  }
  const std::string key = fmt::format("{}\n{}\n{}", c->key, c->file, line);
  auto [it, inserted] = sites_.try_emplace(key);
  if (inserted) it->second = PythonSite{c->key, c->file, line};
  site_cache_.emplace(cache_key, &it->second);
  return &it->second;
}

std::vector<PythonStackChange> PythonProfile::on_sample(const PySampleEvent& event) {
  std::vector<PythonStackChange> changes;
  if (event.frames.empty()) return changes;
  // A frame whose code object failed its description, or a pointer no live object can have
  // (user space ends at 2^47 on x86-64; objects are 8-aligned), means the walker followed
  // freed memory: no frame of this sample can be vouched for.
  for (const PyFrameRef& f : event.frames) {
    if (f.code % 8 != 0 || f.code >= (uint64_t{1} << 47) ||
        rejected_codes_.contains({event.pid, f.code})) {
      ++samples_rejected_;
      return changes;
    }
  }
  ++samples_;
  Thread& t = threads_[{event.pid, event.tid}];
  const uint64_t period = period_ns();
  // The sampler visits every thread of a process at once, a round per period, and a busy
  // machine delays rounds. A thread left Python only if rounds went by without it: two in a
  // row, since one read of a thread's frames can fail while it stays in Python. A late round
  // is no gap, and the time since the thread's previous sample is what it spent there.
  SamplerRounds& rounds = rounds_[event.pid];
  if (rounds.count == 0 || event.ts_ns > rounds.current_ns + period / 2) {
    rounds.current_ns = event.ts_ns;
    ++rounds.count;
  }
  const bool gap = t.last_ns != 0 && rounds.count > t.last_round + kRoundsMissedForAGap;
  t.last_round = rounds.count;
  uint64_t weight = period;
  if (t.last_ns != 0 && !gap && event.ts_ns > t.last_ns) weight = event.ts_ns - t.last_ns;
  // The timeline: a thread missing from a round left Python in between.
  if (gap && !t.stack.empty()) {
    changes.push_back({event.pid, event.tid, t.last_ns + period, t.stack.size(), {}});
    t.stack.clear();
  }
  size_t common = 0;
  const size_t depth = event.frames.size();
  while (common < t.stack.size() && common < depth &&
         t.stack[common] == event.frames[depth - 1 - common].code) {
    ++common;
  }
  if (common < t.stack.size() || common < depth) {
    PythonStackChange change{event.pid, event.tid, event.ts_ns, t.stack.size() - common, {}};
    t.stack.resize(common);
    for (size_t i = common; i < depth; ++i) {
      const PyFrameRef& f = event.frames[depth - 1 - i];
      t.stack.push_back(f.code);
      change.begun.push_back(site(event.pid, f.code, f.instr));
    }
    changes.push_back(std::move(change));
  }
  // Time it waited for a CPU since its previous sample ended by now: a span of its process's
  // starved time.
  if (t.last_ns != 0 && event.run_delay_ns > t.run_delay_ns && event.ts_ns > t.last_ns) {
    const uint64_t queued = std::min(event.run_delay_ns - t.run_delay_ns, event.ts_ns - t.last_ns);
    add_span(starved_[event.pid], event.ts_ns - queued, event.ts_ns, 0, kMaxStarvedSpans);
  }
  t.run_delay_ns = event.run_delay_ns;
  t.last_ns = event.ts_ns;
  if (event.state == PySampleEvent::State::kStopped) {
    // Stopped from outside (job control, a debugger, eacgm's own stop at a library load): its
    // code neither runs nor waits, so nothing is charged, and a call open before the stop is
    // judged on what came before it.
    if (t.call) close_call(event.pid, event.tid, *t.call);
    t.call.reset();
    t.switches = event.voluntary_switches;
    return changes;
  }

  const Code* innermost = code(event.pid, event.frames.front().code);
  const bool idle = innermost && innermost->idle_wait && !event.on_cpu();
  if (idle) fed_threads_.insert({event.pid, event.tid});
  bool importing = false;
  std::set<std::string_view> seen;  // recursion counts a function once per sample
  for (size_t i = 0; i < event.frames.size(); ++i) {
    const Code* c = code(event.pid, event.frames[i].code);
    if (!c) continue;
    importing = importing || c->importer;
    PythonFunctionStats& f = functions_[c->key];
    if (f.file.empty()) {
      f.file = c->file;
      f.first_line = c->first_line;
    }
    if (i == 0) {
      f.self_ns += weight;
      if (idle) f.idle_self_ns += weight;
    }
    if (seen.insert(c->key).second) {
      f.total_ns += weight;
      if (idle) f.idle_total_ns += weight;
      ++f.samples;
      f.threads.insert({event.pid, event.tid});
    }
  }
  if (importing) startup_[event.pid].import_ns += weight;

  const PyFrameRef& top = event.frames.front();
  const uint64_t hash = stack_hash(event.frames);
  // Samples show the same innermost call both for one call that blocks or computes and for a
  // loop of short calls from one line (a paced training step, asyncio tasks sharing one stack
  // shape). The kernel tells them apart: a thread that has begun another wait since the last
  // sample left the call it was in, so it is in a new call as far as stalls go. (A single call
  // whose wait is broken by wake-ups, such as a read that trickles in, is judged by its
  // longest unbroken stretch.)
  const bool new_wait = event.voluntary_switches != t.switches;
  t.switches = event.voluntary_switches;
  if (t.call && (gap || new_wait || t.call->code != top.code || t.call->stack_hash != hash)) {
    close_call(event.pid, event.tid, *t.call);
    t.call.reset();
  }
  if (!t.call) {
    t.traced.clear();
    t.call = OpenCall{.code = top.code,
                      .stack_hash = hash,
                      .instr = top.instr,
                      .first_ns = event.ts_ns,
                      .last_ns = event.ts_ns,
                      .samples = 0,
                      .on_cpu = 0,
                      .outer = {event.frames.begin() + 1, event.frames.end()},
                      .importing = importing};
  }
  t.call->last_ns = event.ts_ns;
  t.call->instr = top.instr;
  ++t.call->samples;
  if (event.on_cpu()) ++t.call->on_cpu;
  if (event.state == PySampleEvent::State::kUninterruptible) ++t.call->in_kernel;
  return changes;
}

std::vector<PythonStackChange> PythonProfile::close_stacks() {
  std::vector<PythonStackChange> changes;
  for (auto& [key, t] : threads_) {
    if (t.stack.empty()) continue;
    changes.push_back({key.first, key.second, t.last_ns + period_ns(), t.stack.size(), {}});
    t.stack.clear();
  }
  return changes;
}

void PythonProfile::note_traced_call(uint32_t pid, uint32_t tid, uint64_t start_ns,
                                     uint64_t duration_ns) {
  working_threads_.insert({pid, tid});
  // The process's busy spans: one that reaches this call (or comes within the gap) grows into
  // it, and so may the spans before it (an outer call returns after the calls it made).
  add_span(busy_[pid], start_ns, start_ns + duration_ns, kBusyGapNs, kMaxBusySpans);
  if (duration_ns < 1'000'000) return;  // too short to explain a stall of 100 ms
  for (HeldCall& h : held_) {
    if (h.call.pid != pid || h.call.tid != tid) continue;
    const uint64_t from = std::max(start_ns, h.call.start_ns);
    const uint64_t to = std::min(start_ns + duration_ns, h.call.start_ns + h.call.duration_ns);
    if (to > from) h.inside_ns += to - from;
  }
  auto it = threads_.find({pid, tid});
  if (it == threads_.end() || !it->second.call) return;
  std::vector<std::pair<uint64_t, uint64_t>>& traced = it->second.traced;
  if (traced.size() < 4096) traced.emplace_back(start_ns, start_ns + duration_ns);
}

void PythonProfile::add_span(Spans& spans, uint64_t from, uint64_t to, uint64_t gap_ns,
                             size_t max_spans) {
  // One that reaches this span (or comes within the gap) grows into it, and so may the spans
  // before it (an outer call returns after the calls it made).
  while (!spans.empty() && spans.back().second + gap_ns >= from &&
         spans.back().first <= to + gap_ns) {
    from = std::min(from, spans.back().first);
    to = std::max(to, spans.back().second);
    spans.pop_back();
  }
  spans.emplace_back(from, to);
  if (spans.size() > max_spans) spans.pop_front();
}

uint64_t PythonProfile::covered_ns(const Spans& spans, uint64_t from, uint64_t to) {
  uint64_t covered = 0;
  for (auto [start, end] : spans) {
    const uint64_t a = std::max(start, from), b = std::min(end, to);
    if (b > a) covered += b - a;
  }
  return covered;
}

std::optional<double> PythonProfile::cpu_wait_share(uint32_t pid, uint64_t from_ns,
                                                    uint64_t to_ns) const {
  if (!rounds_.contains(pid) || to_ns <= from_ns) return std::nullopt;
  const auto spans = starved_.find(pid);
  if (spans == starved_.end()) return 0.0;
  return static_cast<double>(covered_ns(spans->second, from_ns, to_ns)) /
         static_cast<double>(to_ns - from_ns);
}

void PythonProfile::MachineWaits::add(uint64_t duration_ns, const std::string& function) {
  ++count;
  total_ns += duration_ns;
  if (duration_ns > longest_ns) {
    longest_ns = duration_ns;
    longest_function = function;
  }
}

nlohmann::json PythonProfile::MachineWaits::to_json() const {
  return {{"count", count},
          {"total_ms", total_ns / 1e6},
          {"longest_ms", longest_ns / 1e6},
          {"longest_function", longest_function}};
}

void PythonProfile::close_call(uint32_t pid, uint32_t tid, const OpenCall& call) {
  // Seen from first to last sample: it ran that long and up to a period more on each side.
  const uint64_t duration = call.last_ns - call.first_ns + period_ns();
  if (duration <= options_.slow_call_ns) return;
  // A helper thread that neither makes traced calls nor takes work from a queue keeps time
  // (a heartbeat, a progress bar, a watchdog): its sleeps are its job.
  if (tid != pid && !working_threads_.contains({pid, tid}) && !fed_threads_.contains({pid, tid})) {
    return;
  }
  // Loading modules (`import torch` takes seconds): start-up, reported as such.
  if (call.importing) {
    note_slow_import(pid, duration, call);
    return;
  }
  // Mostly inside traced calls (a GPU sync, a collective): the latency and collective
  // detectors judge those.
  if (auto thread = threads_.find({pid, tid}); thread != threads_.end()) {
    uint64_t inside = 0;
    for (auto [start, end] : thread->second.traced) {
      const uint64_t from = std::max(start, call.first_ns);
      const uint64_t to = std::min(end, call.last_ns);
      if (to > from) inside += to - from;
    }
    if (2 * inside >= call.last_ns - call.first_ns && inside > 0) return;
  }
  const Code* c = code(pid, call.code);
  if (!c) return;
  const bool waiting = 2 * call.on_cpu < call.samples;
  // A queue's get, a condition's wait, a selector: the thread waits for work to be handed to
  // it; whoever should hand it is the one to judge (a slow DataLoader worker is named itself).
  if (c->idle_wait && waiting) return;
  // Waiting uninterruptibly in the kernel most of the time (page faults on code or data being
  // read in, reclaim, a contended mmap lock): the machine's doing, not the code's, seen in
  // healthy jobs at a library's first use. Counted (layers.python.kernel_waits), not reported.
  if (2 * call.in_kernel >= call.samples) {
    kernel_waits_.add(duration, c->key);
    return;
  }
  SlowCall s;
  s.supervisor = waiting && c->library && !working_threads_.contains({pid, tid});
  s.pid = pid;
  s.tid = tid;
  s.start_ns = call.first_ns;
  s.duration_ns = duration;
  s.on_cpu = call.samples ? static_cast<double>(call.on_cpu) / call.samples : 0;
  s.in_kernel = call.samples ? static_cast<double>(call.in_kernel) / call.samples : 0;
  s.function = c->key;
  s.file = c->file;
  if (const PythonSite* where = site(pid, call.code, call.instr)) s.line = where->line;
  for (const PyFrameRef& f : call.outer) {
    const Code* outer = code(pid, f.code);
    if (!outer) continue;
    const PythonSite* where = site(pid, f.code, f.instr);
    std::string frame = where && where->line ? fmt::format("{} ({}:{})", outer->key,
                                                           base_name(outer->file), where->line)
                                             : outer->key;
    if (s.called_from.empty() && !is_library_file(outer->file)) s.called_from = frame;
    s.stack.push_back(std::move(frame));
  }
  held_.push_back({.call = std::move(s), .inside_ns = 0, .waiting = waiting});
}

void PythonProfile::judge_held(uint64_t now_ns, bool final) {
  std::erase_if(held_, [&](HeldCall& h) {
    const SlowCall& s = h.call;
    if (!final && s.start_ns + s.duration_ns + options_.hold_ns > now_ns) return false;
    // Mostly inside its thread's traced calls that returned after the samples that ended it
    // (a driver call whose ioctls broke it into waits): that layer's to judge.
    if (2 * h.inside_ns >= s.duration_ns) return true;
    // Its process waited for a CPU for most of it, this thread or the one it waited for:
    // the machine's CPUs were taken. Counted (layers.python.cpu_waits), not reported.
    if (auto spans = starved_.find(s.pid);
        spans != starved_.end() &&
        2 * covered_ns(spans->second, s.start_ns, s.start_ns + s.duration_ns) >= s.duration_ns) {
      cpu_waits_.add(s.duration_ns, s.function);
      return true;
    }
    // Waiting while the process's threads worked in traced calls for most of it: waiting for
    // the work it handed them (PyTorch's backward runs on its autograd threads), which the other
    // layers' detectors judge. Counted (layers.python.waits_for_busy_threads), not reported.
    if (h.waiting) {
      uint64_t busy = 0;
      if (auto spans = busy_.find(s.pid); spans != busy_.end()) {
        busy = covered_ns(spans->second, s.start_ns, s.start_ns + s.duration_ns);
      }
      if (busy > 0 && 2 * busy >= s.duration_ns) {
        ++waits_for_busy_threads_;
        return true;
      }
    }
    slow_calls_.push_back(std::move(h.call));
    return true;
  });
}

void PythonProfile::note_slow_import(uint32_t pid, uint64_t duration_ns, const OpenCall& call) {
  // Name the import by the module being run: the innermost `<module>` frame on the stack.
  std::string module;
  if (const Code* c = code(pid, call.code); c && c->name == "<module>") module = c->key;
  for (size_t i = 0; module.empty() && i < call.outer.size(); ++i) {
    if (const Code* c = code(pid, call.outer[i].code); c && c->name == "<module>") module = c->key;
  }
  if (module.empty()) {
    const Code* c = code(pid, call.code);
    module = c ? c->key : "?";
  }
  constexpr size_t kKept = 5;
  auto& slowest = startup_[pid].slowest;
  slowest.emplace_back(duration_ns, std::move(module));
  std::sort(slowest.rbegin(), slowest.rend());
  if (slowest.size() > kKept) slowest.resize(kKept);
}

std::vector<Anomaly> PythonProfile::take_anomalies(const Session& session, uint64_t now_ns,
                                                   bool final) {
  if (final) {
    for (auto& [key, t] : threads_) {
      if (t.call) close_call(key.first, key.second, *t.call);
      t.call.reset();
    }
  } else {
    // A call still open past the threshold is reported when it ends; one whose thread a whole
    // later round of the sampler did not find has ended (the current round may still be on its
    // way), and so has one of a process the sampler no longer visits (it exited).
    for (auto& [key, t] : threads_) {
      auto rounds = rounds_.find(key.first);
      const bool missed =
          rounds != rounds_.end() && rounds->second.count > t.last_round + kRoundsMissedForAGap;
      if (t.call && (missed || now_ns > t.last_ns + kSamplerSilenceNs)) {
        close_call(key.first, key.second, *t.call);
        t.call.reset();
      }
    }
  }
  judge_held(now_ns, final);
  std::vector<Anomaly> out;
  for (SlowCall& s : slow_calls_) {
    // A process that started traced workers waits for them by design, in library code, making
    // no traced call itself. Its own code, or its waits once it works, are judged like any.
    if (s.supervisor && std::any_of(session.processes.begin(), session.processes.end(),
                                    [&s](const auto& p) { return p.second.ppid == s.pid; })) {
      continue;
    }
    // A callback that stalls every step is one finding, not one per step, and one function
    // that stalls at several lines is one finding too: the first is reported, the rest
    // counted (layers.python.slow_calls).
    // Forked workers (a DataLoader's, started again each epoch) run their parent's code: the
    // same function stalling in any of them is the same finding.
    uint32_t owner = s.pid;
    for (const ProcessInfo* p = session.find_process(owner);
         p && p->ppid != 0 && p->ppid != owner;) {
      const ProcessInfo* parent = session.find_process(p->ppid);
      if (!parent || parent->cmdline != p->cmdline) break;
      owner = p->ppid;
      p = parent;
    }
    SlowCallSummary& summary = slow_summary_[{owner, s.function}];
    summary.pids.insert(s.pid);
    ++summary.occurrences;
    summary.total_ns += s.duration_ns;
    summary.max_ns = std::max(summary.max_ns, s.duration_ns);
    summary.lines.insert(s.line);
    if (summary.occurrences > 1) continue;
    const std::string& called_from = s.called_from;
    Anomaly a;
    a.kind = "slow_call";
    a.layer = Layer::kPython;
    a.pid = s.pid;
    if (const ProcessInfo* p = session.find_process(s.pid)) a.rank = p->rank;
    a.t_s = s.start_ns > session.start_ns ? (s.start_ns - session.start_ns) / 1e9 : 0;
    a.score = -static_cast<double>(s.duration_ns) / 1e9;
    const std::string where =
        s.line ? fmt::format("{}:{}", base_name(s.file), s.line) : base_name(s.file);
    a.evidence = {{"function", s.function},
                  {"file", s.file},
                  {"line", s.line},
                  {"tid", s.tid},
                  {"duration_ms", s.duration_ns / 1e6},
                  {"threshold_ms", options_.slow_call_ns / 1e6},
                  {"on_cpu_fraction", s.on_cpu},
                  {"in_kernel_fraction", s.in_kernel},
                  {"stack", s.stack},
                  {"called_from", s.called_from}};
    a.message = fmt::format(
        "python: {} ({}) stayed the innermost Python call for {:.0f} ms without returning "
        "(thread {} of pid {}; on CPU {:.0f}% of the time){}",
        s.function, where, s.duration_ns / 1e6, s.tid, s.pid, 100 * s.on_cpu,
        called_from.empty() ? "" : fmt::format(", called from {}", called_from));
    a.suggestion =
        s.on_cpu < 0.5
            ? "it was waiting (I/O, a lock, a sleep or a device sync): make that I/O "
              "asynchronous or move it off the training thread (a DataLoader worker, a "
              "background thread)"
            : "it was computing in Python: vectorise it, move it to a worker, or profile that "
              "function";
    out.push_back(std::move(a));
  }
  slow_calls_.clear();
  return out;
}

void PythonProfile::add_call_count(uint32_t pid, uint64_t file_ptr, uint64_t name_ptr,
                                   uint64_t count) {
  auto names = usdt_names_.find({pid, file_ptr, name_ptr});
  if (names == usdt_names_.end()) return;  // its name event was lost: nothing to name it by
  const auto& [file, name] = names->second;
  // The probe passes co_name; the samples know co_qualname. Where exactly one code object of
  // the process has this file and a qualname ending in this name, that is the function.
  const auto interpreter = interpreters_.find(pid);
  std::string key = python_function_key(
      file, name,
      interpreter == interpreters_.end() ? std::string_view{} : interpreter->second.script_dir);
  std::string found;
  int matches = 0;
  for (auto c = codes_.lower_bound({pid, 0}); c != codes_.end() && c->first.first == pid; ++c) {
    const Code& code = c->second;
    if (code.file != file) continue;
    if (code.name == name || code.name.ends_with("." + name)) {
      if (found != code.key) ++matches;
      found = code.key;
    }
  }
  if (matches == 1) key = found;
  PythonFunctionStats& f = functions_[key];
  if (f.file.empty()) f.file = file;
  f.count = f.count.value_or(0) + count;
}

nlohmann::json PythonProfile::figures() const {
  using nlohmann::json;
  json functions = json::object();
  for (const auto& [key, f] : functions_) {
    json j = {{"file", f.file},
              {"first_line", f.first_line},
              {"samples", f.samples},
              {"total_ns", f.total_ns},
              {"self_ns", f.self_ns},
              {"idle_total_ns", f.idle_total_ns},
              {"idle_self_ns", f.idle_self_ns},
              {"threads", f.threads.size()}};
    if (f.count) j["count"] = *f.count;
    functions[key] = std::move(j);
  }
  json gc = json::object();
  for (const auto& [generation, s] : gc_by_generation_) {
    gc[std::to_string(generation)] = {{"collections", s.collections},
                                      {"total_ns", s.total_ns},
                                      {"max_ns", s.max_ns},
                                      {"collected", s.collected}};
  }
  json interpreters = json::array();
  for (const auto& [pid, i] : interpreters_) {
    interpreters.push_back({{"pid", pid},
                            {"version", fmt::format("{}.{}", i.version / 100, i.version % 100)},
                            {"path", i.path},
                            {"usdt", i.usdt}});
  }
  json slow = json::array();
  for (const auto& [key, summary] : slow_summary_) {
    const auto& [pid, function] = key;
    slow.push_back({{"pid", pid},
                    {"pids", summary.pids},
                    {"function", function},
                    {"line", summary.lines.empty() ? 0 : *summary.lines.begin()},
                    {"lines", summary.lines},
                    {"occurrences", summary.occurrences},
                    {"total_ms", summary.total_ns / 1e6},
                    {"max_ms", summary.max_ns / 1e6}});
  }
  json startup = json::array();
  for (const auto& [pid, st] : startup_) {
    json slowest = json::array();
    for (const auto& [ns, module] : st.slowest) {
      slowest.push_back({{"function", module}, {"ms", ns / 1e6}});
    }
    startup.push_back(
        {{"pid", pid}, {"import_s", st.import_ns / 1e9}, {"slowest_imports", std::move(slowest)}});
  }
  return {{"functions", std::move(functions)},
          {"slow_calls", std::move(slow)},
          {"kernel_waits", kernel_waits_.to_json()},
          {"cpu_waits", cpu_waits_.to_json()},
          {"waits_for_busy_threads", waits_for_busy_threads_},
          {"startup", std::move(startup)},
          {"samples_rejected", samples_rejected_},
          {"codes_rejected", codes_rejected_},
          {"gc", std::move(gc)},
          {"interpreters", std::move(interpreters)},
          {"sample_rate_hz", options_.rate_hz},
          {"samples", samples_},
          {"slow_call_threshold_ms", options_.slow_call_ns / 1e6}};
}

}  // namespace eacgm
