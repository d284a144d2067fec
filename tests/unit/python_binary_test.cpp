// Finding CPython in ELF files and its runtime state in live processes. Uses the interpreters
// installed on the machine (Debian's static /usr/bin/python3.11 with USDT probes, pyenv's shared
// builds under ~/.pyenv/versions) and skips the cases whose interpreter is missing. The live
// tests read their own child processes' memory: no privileges needed.
#include "layers/python/python_binary.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "layers/python/python_layouts.h"
#include "layers/python/python_lines.h"
#include "test_support.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDebianPython = "/usr/bin/python3.11";

fs::path pyenv_versions() {
  const char* root = std::getenv("PYENV_ROOT");
  if (root != nullptr) return fs::path(root) / "versions";
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : "/root") / ".pyenv" / "versions";
}

// The pyenv installation of 3.<minor> (any patch release), or empty.
fs::path pyenv_prefix(int minor) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(pyenv_versions(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("3." + std::to_string(minor) + ".")) return entry.path();
  }
  return {};
}

fs::path pyenv_libpython(int minor) {
  fs::path prefix = pyenv_prefix(minor);
  if (prefix.empty()) return {};
  fs::path lib = prefix / "lib" / ("libpython3." + std::to_string(minor) + ".so.1.0");
  return fs::exists(lib) ? lib : fs::path();
}

// st_value of `symbol` as `nm -D` prints it; nullopt when nm is missing or does not list it.
std::optional<uint64_t> nm_value(const std::string& path, const std::string& symbol) {
  const std::string command = "nm -D --defined-only '" + path + "' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::optional<uint64_t> value;
  char line[4096];
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    std::istringstream fields(line);
    std::string address, type, name;
    if (fields >> address >> type >> name && name == symbol)
      value = std::stoull(address, nullptr, 16);
  }
  pclose(pipe);
  return value;
}

PythonInterpreter inspect_ok(const std::string& path) {
  auto result = inspect_interpreter(path);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
  EXPECT_TRUE(result.ok() && result->has_value()) << path << " is CPython";
  return result.ok() && result->has_value() ? **result : PythonInterpreter{};
}

// A scratch directory, removed with everything in it.

TEST(PythonBinaryTest, DebianStaticPythonHasUsdt) {
  if (!fs::exists(kDebianPython)) GTEST_SKIP() << kDebianPython << " is not installed";
  PythonInterpreter python = inspect_ok(kDebianPython);
  EXPECT_EQ(python.version, 311u);
  EXPECT_EQ(python.runtime_symbol, nm_value(kDebianPython, "_PyRuntime"));
  EXPECT_NE(python.runtime_symbol, 0u);
  EXPECT_TRUE(python.has_usdt);
  for (const char* probe : {"function__entry", "function__return", "gc__start", "gc__done"}) {
    EXPECT_NE(std::find(python.usdt_probes.begin(), python.usdt_probes.end(), probe),
              python.usdt_probes.end())
        << probe;
  }
  EXPECT_EQ(python.id, file_id(kDebianPython));
}

TEST(PythonBinaryTest, PyenvSharedLibrariesHaveNoUsdt) {
  int found = 0;
  for (int minor = 8; minor <= 13; ++minor) {
    const fs::path lib = pyenv_libpython(minor);
    if (lib.empty()) continue;
    ++found;
    SCOPED_TRACE(lib.string());
    PythonInterpreter python = inspect_ok(lib);
    EXPECT_EQ(python.version, 300u + minor);
    EXPECT_EQ(python.runtime_symbol, nm_value(lib, "_PyRuntime"));
    EXPECT_FALSE(python.has_usdt);  // pyenv builds without --with-dtrace
    EXPECT_TRUE(python.usdt_probes.empty());
  }
  if (found == 0) GTEST_SKIP() << "no pyenv CPython under " << pyenv_versions();
}

// Copies `from` to `to`, replacing every occurrence of `pattern` by `replacement` (same length).
void copy_replacing(const fs::path& from, const fs::path& to, const std::string& pattern,
                    const std::string& replacement) {
  ASSERT_EQ(pattern.size(), replacement.size());
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = bytes.find(pattern); at != std::string::npos; at = bytes.find(pattern, at)) {
    bytes.replace(at, pattern.size(), replacement);
  }
  std::ofstream(to, std::ios::binary) << bytes;
}

// When neither the file name nor the soname says which CPython it is: Py_Version (3.11+) or the
// newest C API function the file defines.
TEST(PythonBinaryTest, VersionWithoutAName) {
  TempDir dir;
  int checked = 0;
  if (fs::exists(kDebianPython)) {
    fs::copy_file(kDebianPython, dir.path() / "python");
    EXPECT_EQ(inspect_ok(dir.path() / "python").version, 311u);
    ++checked;
  }
  for (int minor = 8; minor <= 13; ++minor) {
    const fs::path lib = pyenv_libpython(minor);
    if (lib.empty()) continue;
    SCOPED_TRACE(lib.string());
    const fs::path copy = dir.path() / ("interp" + std::to_string(minor));
    // The soname (in .dynstr) becomes "libpythonX.Y...": it names no version any more.
    const std::string name = "libpython3." + std::to_string(minor);
    copy_replacing(lib, copy, name, std::string(name.size() - 3, 'x') + "X.Y");
    EXPECT_EQ(inspect_ok(copy).version, 300u + minor);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no CPython installed";
}

TEST(PythonBinaryTest, OtherFiles) {
  auto not_python = inspect_interpreter("/bin/true");
  ASSERT_TRUE(not_python.ok()) << not_python.error().message;
  EXPECT_FALSE(not_python->has_value());

  TempDir dir;
  const fs::path garbage = dir.path() / "python3.11";
  std::ofstream(garbage) << "not an ELF file, though named like an interpreter\n";
  auto result = inspect_interpreter(garbage);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find(garbage.string()), std::string::npos);
  EXPECT_FALSE(inspect_interpreter((dir.path() / "missing").string()).ok());
  EXPECT_FALSE(inspect_interpreter(dir.path().string()).ok());  // a directory
}

// The address arithmetic on hand-written maps, with the segments of a shared library (and a PIE
// executable) and of a non-PIE executable.
TEST(PythonBinaryTest, RuntimeAddressFromMaps) {
  PythonInterpreter shared{.path = "/lib/libpython3.12.so.1.0",
                           .id = {0x801, 42},
                           .version = 312,
                           .runtime_symbol = 0x567a40,
                           .usdt_probes = {},
                           .has_usdt = false,
                           .segments = {{0x0, 0x6e000, 0x0, 0x6e000},
                                        {0x6e000, 0x2d0000, 0x6e000, 0x2d0000},
                                        {0x33e000, 0x120000, 0x33e000, 0x120000},
                                        {0x45fb30, 0x150000, 0x45eb30, 0x100000}}};
  // The last segment shares its first file page (0x45e000) with the one before: two mappings
  // of that page; the relro part of the data segment is split off read-only.
  const std::string maps =
      "7f0000000000-7f000006e000 r--p 00000000 08:01 42 /lib/libpython3.12.so.1.0\n"
      "7f000006e000-7f000033e000 r-xp 0006e000 08:01 42 /lib/libpython3.12.so.1.0\n"
      "7f000033e000-7f000045f000 r--p 0033e000 08:01 42 /lib/libpython3.12.so.1.0\n"
      "7f000045f000-7f0000470000 r--p 0045e000 08:01 42 /lib/libpython3.12.so.1.0\n"
      "7f0000470000-7f0000560000 rw-p 0046f000 08:01 42 /lib/libpython3.12.so.1.0\n"
      "7f0000560000-7f00005b0000 rw-p 00000000 00:00 0\n";
  std::vector<MappedFile> files = parse_maps(maps);
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(files[0].mappings.size(), 5u);
  EXPECT_EQ(files[0].mappings[3], (FileMapping{0x7f000045f000, 0x7f0000470000, 0x45e000}));
  auto address = runtime_address(shared, files[0]);
  ASSERT_TRUE(address.ok()) << address.error().message;
  EXPECT_EQ(*address, 0x7f0000567a40u);  // in .bss, past the file image: the anonymous mapping

  // Loaded elsewhere: the bias moves the address.
  std::vector<MappedFile> moved = parse_maps(
      "7f1000000000-7f100006e000 r--p 00000000 08:01 42 /lib/libpython3.12.so.1.0\n"
      "7f100045f000-7f1000560000 rw-p 0045e000 08:01 42 /lib/libpython3.12.so.1.0\n");
  address = runtime_address(shared, moved[0]);
  ASSERT_TRUE(address.ok()) << address.error().message;
  EXPECT_EQ(*address, 0x7f1000567a40u);

  // The data segment is not where the program headers put it: no guess.
  std::vector<MappedFile> odd = parse_maps(
      "7f1000000000-7f100006e000 r--p 00000000 08:01 42 /lib/libpython3.12.so.1.0\n"
      "7f2000000000-7f2000100000 rw-p 0045e000 08:01 42 /lib/libpython3.12.so.1.0\n");
  EXPECT_FALSE(runtime_address(shared, odd[0]).ok());
  // Only part of the file mapped (no first page).
  std::vector<MappedFile> partial =
      parse_maps("7f100045f000-7f1000560000 rw-p 0045e000 08:01 42 /lib/libpython3.12.so.1.0\n");
  EXPECT_FALSE(runtime_address(shared, partial[0]).ok());

  // A non-PIE executable is mapped at its link addresses.
  PythonInterpreter exec{.path = "/usr/bin/python3.11",
                         .id = {0x801, 7},
                         .version = 311,
                         .runtime_symbol = 0xa5b740,
                         .usdt_probes = {},
                         .has_usdt = false,
                         .segments = {{0x400000, 0x1e3e8, 0x0, 0x1e3e8},
                                      {0x41f000, 0x2b2289, 0x1f000, 0x2b2289},
                                      {0x6d2000, 0x272968, 0x2d2000, 0x272968},
                                      {0x945dc8, 0x1832f0, 0x544dc8, 0x13e4b0}}};
  std::vector<MappedFile> debian = parse_maps(
      "00400000-0041f000 r--p 00000000 08:01 7 /usr/bin/python3.11\n"
      "0041f000-006d2000 r-xp 0001f000 08:01 7 /usr/bin/python3.11\n"
      "006d2000-00945000 r--p 002d2000 08:01 7 /usr/bin/python3.11\n"
      "00945000-00946000 r--p 00544000 08:01 7 /usr/bin/python3.11\n"
      "00946000-00a84000 rw-p 00545000 08:01 7 /usr/bin/python3.11\n");
  address = runtime_address(exec, debian[0]);
  ASSERT_TRUE(address.ok()) << address.error().message;
  EXPECT_EQ(*address, 0xa5b740u);
}

// Reads another process's memory: process_vm_readv, or /proc/PID/mem where that is refused.
class ProcessMemory {
 public:
  explicit ProcessMemory(pid_t pid) : pid_(pid) {}
  bool read(uint64_t address, void* out, size_t size) const {
    iovec local{out, size};
    iovec remote{reinterpret_cast<void*>(address), size};
    if (process_vm_readv(pid_, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size)) return true;
    const int fd = open(("/proc/" + std::to_string(pid_) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = pread(fd, out, size, static_cast<off_t>(address)) == static_cast<ssize_t>(size);
    close(fd);
    return ok;
  }
  template <typename T>
  T value(uint64_t address) const {
    T v{};
    return read(address, &v, sizeof(v)) ? v : T{};
  }
  uint64_t word(uint64_t address) const { return value<uint64_t>(address); }

 private:
  pid_t pid_;
};

// A Python child that starts a second thread (whose state goes first in the interpreter's list
// of threads), says who its main thread is, then sleeps in a function.
class SleepingPython {
 public:
  static constexpr int kSleepLine = 4;  // of kScript
  static constexpr int kCallLine = 6;
  static constexpr const char* kScript =
      "import threading, time\n"
      "def wait_here():\n"
      "    print(threading.get_ident(), threading.get_native_id(), flush=True)\n"
      "    time.sleep(60)\n"
      "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
      "wait_here()\n";

  explicit SleepingPython(const std::string& python) {
    script_ = dir_.path() / "sleeper.py";
    std::ofstream(script_) << kScript;
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    const std::string script = script_.string();
    char* argv[] = {const_cast<char*>(python.c_str()), const_cast<char*>(script.c_str()), nullptr};
    if (posix_spawn(&pid_, python.c_str(), &actions, nullptr, argv, environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    FILE* in = fdopen(out[0], "r");
    if (in != nullptr && fscanf(in, "%lu %d", &thread_ident_, &native_id_) != 2) native_id_ = 0;
    if (in != nullptr) fclose(in);
  }
  ~SleepingPython() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool ready() const { return pid_ > 0 && native_id_ != 0; }
  unsigned long thread_ident() const { return thread_ident_; }
  int native_id() const { return native_id_; }
  std::string script() const { return script_.string(); }

 private:
  TempDir dir_;
  fs::path script_;
  pid_t pid_ = 0;
  unsigned long thread_ident_ = 0;
  int native_id_ = 0;
};

// A compact ASCII str's characters, as the BPF side reads them.
std::string ascii_string(const ProcessMemory& mem, const eacgm_py_layout& l, uint64_t str) {
  const uint32_t state = mem.value<uint32_t>(str + l.unicode_state);
  if (str == 0 || (state & (1u << 5)) == 0 || (state & (1u << 6)) == 0) return "<not ascii>";
  std::string text;
  for (char c; text.size() < 512 && mem.read(str + l.unicode_ascii_data + text.size(), &c, 1) &&
               c != '\0';) {
    text += c;
  }
  return text;
}

struct Frame {
  std::string name, file;
  int line = 0;
};

// The Python stack of the thread whose state is `tstate`, innermost first, walked as the BPF
// side walks it.
std::vector<Frame> walk_stack(const ProcessMemory& mem, const eacgm_py_layout& l, uint64_t tstate) {
  std::vector<Frame> frames;
  uint64_t frame = mem.word(tstate + l.tstate_frame);
  if (l.cframe_current_frame != EACGM_PY_NONE && frame != 0) {
    frame = mem.word(frame + l.cframe_current_frame);
  }
  for (int depth = 0; frame != 0 && depth < EACGM_PY_MAX_FRAMES; ++depth) {
    const uint64_t code = mem.word(frame + l.frame_code);
    const uint64_t instr = mem.word(frame + l.frame_instr);
    const bool cstack = l.frame_owner != EACGM_PY_NONE &&
                        mem.value<uint8_t>(frame + l.frame_owner) == l.frame_owner_cstack;
    frame = mem.word(frame + l.frame_back);
    if (cstack) continue;
    Frame f;
    const uint32_t name = l.code_qualname != EACGM_PY_NONE ? l.code_qualname : l.code_name;
    f.name = ascii_string(mem, l, mem.word(code + name));
    f.file = ascii_string(mem, l, mem.word(code + l.code_filename));
    const uint64_t table = mem.word(code + l.code_linetable);
    std::vector<uint8_t> bytes(std::min<uint64_t>(mem.word(table + l.bytes_size), 1 << 16));
    mem.read(table + l.bytes_data, bytes.data(), bytes.size());
    if (auto offset = python_instruction_offset(l.version, l, code, instr)) {
      f.line =
          python_line(l.version, bytes, mem.value<int32_t>(code + l.code_firstlineno), *offset);
    }
    frames.push_back(f);
  }
  return frames;
}

// Starts `python`, finds its interpreter file among its mappings, computes _PyRuntime's address
// and walks from there to the sleeping main thread's stack.
void check_live(const std::string& python, uint32_t version) {
  SCOPED_TRACE(python);
  SleepingPython child(python);
  ASSERT_TRUE(child.ready()) << "the child did not start";
  ASSERT_EQ(child.native_id(), child.pid());

  auto files = mapped_files(child.pid());
  ASSERT_TRUE(files.ok()) << files.error().message;
  std::optional<PythonInterpreter> interpreter;
  for (const MappedFile& file : *files) {
    if (!file.executable) continue;
    auto inspected = inspect_interpreter(file.path);
    ASSERT_TRUE(inspected.ok()) << inspected.error().message;  // every mapped ELF file reads
    if (inspected->has_value()) {
      ASSERT_FALSE(interpreter.has_value()) << "two interpreters in one process";
      interpreter = **inspected;
    }
  }
  ASSERT_TRUE(interpreter.has_value()) << "no file of the process defines _PyRuntime";
  EXPECT_EQ(interpreter->version, version);
  const eacgm_py_layout* layout = python_layout(version);
  ASSERT_NE(layout, nullptr);

  auto runtime = runtime_address(static_cast<uint32_t>(child.pid()), *interpreter);
  ASSERT_TRUE(runtime.ok()) << runtime.error().message;
  const ProcessMemory mem(child.pid());
  if (version >= 313) {  // the runtime starts with _Py_DebugOffsets and its cookie
    char cookie[8] = {};
    ASSERT_TRUE(mem.read(*runtime, cookie, sizeof(cookie))) << "cannot read the child's memory";
    EXPECT_EQ(std::string(cookie, 8), "xdebugpy");
  }
  const uint64_t interp = mem.word(*runtime + layout->runtime_interpreters_head);
  ASSERT_NE(interp, 0u) << "interpreters.head";
  uint64_t tstate = mem.word(interp + layout->interp_threads_head);
  ASSERT_NE(tstate, 0u) << "threads.head";
  int hops = 0;
  for (; tstate != 0 && hops < EACGM_PY_MAX_THREADS; ++hops) {
    if (mem.word(tstate + layout->tstate_thread_id) == child.thread_ident()) break;
    tstate = mem.word(tstate + layout->tstate_next);
  }
  ASSERT_NE(tstate, 0u) << "no thread state with thread_id " << child.thread_ident();
  EXPECT_EQ(hops, 1) << "the main thread's state follows the newer thread's";
  if (layout->tstate_native_thread_id != EACGM_PY_NONE) {
    EXPECT_EQ(mem.value<int64_t>(tstate + layout->tstate_native_thread_id), child.pid());
  }

  // The child printed before calling time.sleep: wait until it is there.
  std::vector<Frame> frames;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    frames = walk_stack(mem, *layout, tstate);
    if (!frames.empty() && frames[0].line == SleepingPython::kSleepLine) break;
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].name, "wait_here");
  EXPECT_EQ(frames[0].file, child.script());
  EXPECT_EQ(frames[0].line, SleepingPython::kSleepLine);
  EXPECT_EQ(frames[1].name, "<module>");
  EXPECT_EQ(frames[1].file, child.script());
  EXPECT_EQ(frames[1].line, SleepingPython::kCallLine);
}

TEST(PythonBinaryTest, LiveDebianPython) {
  if (!fs::exists(kDebianPython)) GTEST_SKIP() << kDebianPython << " is not installed";
  check_live(kDebianPython, 311);
}

TEST(PythonBinaryTest, LivePyenvPythons) {
  int found = 0;
  for (int minor = 8; minor <= 13; ++minor) {
    const fs::path prefix = pyenv_prefix(minor);
    const fs::path python = prefix / "bin" / ("python3." + std::to_string(minor));
    if (prefix.empty() || !fs::exists(python)) continue;
    ++found;
    check_live(python, 300 + minor);
  }
  if (found == 0) GTEST_SKIP() << "no pyenv CPython under " << pyenv_versions();
}

}  // namespace
}  // namespace eacgm
