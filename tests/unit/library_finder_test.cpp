// Unit tests for finding the library files a job maps or may load: /proc/PID/maps parsing, the
// ld.so cache parser (including damaged caches), the search directories and the file search.
// No privileges needed; temp directories stand in for Python environments and CUDA installs.
#include "probes/library_finder.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>  // mkdtemp
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "test_support.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

// The file this process's libc was loaded from, as ld.so names it.
std::string loaded_libc_path() {
  Dl_info info{};
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (libc == nullptr || dladdr(dlsym(libc, "getpid"), &info) == 0) return {};
  return info.dli_fname;
}

bool same_file(const std::string& a, const std::string& b) {
  auto id_a = file_id(a);
  return id_a.has_value() && id_a == file_id(b);
}

bool contains_same_dir(const std::vector<std::string>& dirs, const std::string& dir) {
  return std::any_of(dirs.begin(), dirs.end(),
                     [&](const std::string& d) { return same_file(d, dir); });
}

// --- /proc/PID/maps ---------------------------------------------------------------------------

TEST(ParseMapsTest, OneEntryPerFileSkippingPseudoMappings) {
  const std::string maps =
      "5581c7a00000-5581c7a02000 r--p 00000000 fe:00 247134                     /usr/bin/python3\n"
      "5581c7a02000-5581c7a07000 r-xp 00002000 fe:00 247134                     /usr/bin/python3\n"
      "5581c8e6f000-5581c8e90000 rw-p 00000000 00:00 0                          [heap]\n"
      "7f3c19e00000-7f3c19e26000 r--p 00000000 fe:00 332835                     "
      "/usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "7f3c19e26000-7f3c19f7c000 r-xp 00026000 fe:00 332835                     "
      "/usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "7f3c1a000000-7f3c1a010000 rw-p 00000000 00:00 0 \n"
      "7f3c1a100000-7f3c1a200000 r--p 00000000 103:02 99                        "
      "/data/my models/weights.bin\n"
      "7f3c1a300000-7f3c1a400000 r-xp 00000000 fe:00 4242                       "
      "/opt/venv/lib/libcudart.so.12 (deleted)\n"
      "7f3c1a500000-7f3c1a501000 rw-s 00000000 00:01 1025                       "
      "/memfd:pytorch (deleted)\n"
      "7ffd4f1c4000-7ffd4f1e5000 rw-p 00000000 00:00 0                          [stack]\n"
      "7ffd4f1f0000-7ffd4f1f4000 r--p 00000000 00:00 0                          [vvar]\n"
      "7ffd4f1f4000-7ffd4f1f6000 r-xp 00000000 00:00 0                          [vdso]\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"
      "garbage line\n"
      "\n"
      "7f3c1a600000-7f3c1a601000 r--p 00000000 fe:00 332835                     "
      "/usr/lib/x86_64-linux-gnu/libc.so.6";  // no final newline

  std::vector<MappedFile> files = parse_maps(maps);
  ASSERT_EQ(files.size(), 5u);

  EXPECT_EQ(files[0].path, "/usr/bin/python3");
  EXPECT_EQ(files[0].id, (FileId{makedev(0xfe, 0), 247134}));
  EXPECT_TRUE(files[0].executable);  // the second mapping is r-x
  EXPECT_FALSE(files[0].deleted);

  EXPECT_EQ(files[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_TRUE(files[1].executable);

  EXPECT_EQ(files[2].path, "/data/my models/weights.bin");  // spaces kept
  EXPECT_EQ(files[2].id, (FileId{makedev(0x103, 2), 99}));
  EXPECT_FALSE(files[2].executable);

  EXPECT_EQ(files[3].path, "/opt/venv/lib/libcudart.so.12");
  EXPECT_TRUE(files[3].deleted);
  EXPECT_TRUE(files[3].executable);

  EXPECT_EQ(files[4].path, "/memfd:pytorch");
  EXPECT_TRUE(files[4].deleted);
}

TEST(ParseMapsTest, EmptyText) { EXPECT_TRUE(parse_maps("").empty()); }

TEST(MappedFilesTest, OwnProcessMapsItsLibc) {
  const std::string libc = loaded_libc_path();
  ASSERT_FALSE(libc.empty());
  auto files = mapped_files(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(files.ok()) << files.error().message;
  // The id from maps equals the id stat(2) gives: the device numbers use the same encoding.
  auto it = std::find_if(files->begin(), files->end(),
                         [&](const MappedFile& f) { return f.id == file_id(libc); });
  ASSERT_NE(it, files->end());
  EXPECT_TRUE(it->executable);
  EXPECT_FALSE(it->deleted);
  EXPECT_NE(it->path.find("libc.so.6"), std::string::npos);
}

TEST(MappedFilesTest, NonexistentPidIsAnError) {
  auto files = mapped_files(4294967295u);  // far above any pid_max
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.error().message.find("4294967295"), std::string::npos);
}

TEST(FileIdTest, FollowsSymlinks) {
  TempDir dir;
  const std::string real = dir.path().string() + "/real";
  std::ofstream(real) << "x";
  fs::create_symlink("real", dir.path().string() + "/link");
  ASSERT_TRUE(file_id(real).has_value());
  EXPECT_EQ(file_id(real), file_id(dir.path().string() + "/link"));
  EXPECT_EQ(file_id(dir.path().string() + "/missing"), std::nullopt);
}

TEST(ProcessRootTest, APathThroughTheRootOfAProcessReachesTheSameFile) {
  const std::string own = path_in_root_of(static_cast<uint32_t>(getpid()), "/proc/self/exe");
  EXPECT_EQ(own, "/proc/" + std::to_string(getpid()) + "/root/proc/self/exe");
  EXPECT_EQ(file_id(own), file_id("/proc/self/exe"));
}

TEST(ProcessRootTest, OutputsNameFilesAsTheProcessKnowsThem) {
  EXPECT_EQ(path_seen_by_process("/proc/42/root/usr/lib/libcuda.so.1"), "/usr/lib/libcuda.so.1");
  EXPECT_EQ(path_seen_by_process(path_in_root_of(7, "/a/b")), "/a/b");
  // Anything else is left as it is.
  for (const char* other : {"/usr/lib/libcuda.so.1", "/proc/self/root/x", "/proc//root/x",
                            "/proc/42/rootx/y", "/proc/42", "/proc/42/root", "relative/path", ""})
    EXPECT_EQ(path_seen_by_process(other), other) << other;
}

// --- /proc/PID/environ ------------------------------------------------------------------------

// /proc/PID/environ shows the environment the process was exec'ed with (setenv(3) afterwards is
// invisible there), so the variable is given to a child process.
TEST(ProcessEnvironmentTest, ReadsTheEnvironmentOfAnotherProcess) {
  char arg0[] = "sleep";
  char arg1[] = "30";
  char* argv[] = {arg0, arg1, nullptr};
  char var[] = "EACGM_TEST_VARIABLE=value with = and spaces";
  char path_var[] = "PATH=/usr/bin:/bin";
  char* envp[] = {var, path_var, nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawnp(&child, "sleep", nullptr, nullptr, argv, envp), 0);
  // posix_spawn returns once the child's exec has switched address spaces, which is before the
  // kernel has set up the new environment: environ briefly reads empty. Wait for it.
  Result<std::map<std::string, std::string>> env = Error{"not read"};
  for (int attempt = 0; attempt < 500; ++attempt) {
    env = process_environment(static_cast<uint32_t>(child));
    if (!env.ok() || !env->empty()) break;
    usleep(10'000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->size(), 2u);
  EXPECT_EQ((*env)["EACGM_TEST_VARIABLE"], "value with = and spaces");
  EXPECT_EQ((*env)["PATH"], "/usr/bin:/bin");
}

TEST(ProcessEnvironmentTest, OwnProcess) {
  auto env = process_environment(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(env.ok()) << env.error().message;
}

TEST(ProcessEnvironmentTest, NonexistentPidIsAnError) {
  EXPECT_FALSE(process_environment(4294967295u).ok());
}

// --- ld.so cache ------------------------------------------------------------------------------

// Builds a new-format cache (layout documented in library_finder.cpp) from (flags, path) pairs.
std::string new_format_cache(const std::vector<std::pair<int32_t, std::string>>& libs,
                             uint8_t byte_order = 2) {
  const size_t strings_start = 48 + 24 * libs.size();
  std::string header(48, '\0');
  std::memcpy(header.data(), "glibc-ld.so.cache1.1", 20);
  const uint32_t count = static_cast<uint32_t>(libs.size());
  std::memcpy(header.data() + 20, &count, 4);
  header[28] = static_cast<char>(byte_order);
  std::string entries, strings;
  for (const auto& [flags, path] : libs) {
    const uint32_t key = static_cast<uint32_t>(strings_start + strings.size());
    strings += path.substr(path.rfind('/') + 1) + '\0';
    const uint32_t value = static_cast<uint32_t>(strings_start + strings.size());
    strings += path + '\0';
    char entry[24] = {};
    std::memcpy(entry, &flags, 4);
    std::memcpy(entry + 4, &key, 4);
    std::memcpy(entry + 8, &value, 4);
    entries.append(entry, sizeof entry);
  }
  const uint32_t length = static_cast<uint32_t>(strings.size());
  std::memcpy(header.data() + 24, &length, 4);
  return header + entries + strings;
}

const std::vector<std::pair<int32_t, std::string>> kLibs = {
    {0x0303, "/usr/lib/x86_64-linux-gnu/libz.so.1"},
    {0x0303, "/usr/local/cuda-13.0/lib/libcudart.so.13"},
    {0x0003, "/usr/lib/i386-linux-gnu/libz.so.1"},    // i386
    {0x0803, "/usr/libx32/libz.so.1"},                // x32
    {0x0303, "/usr/lib/x86_64-linux-gnu/libm.so.6"},  // same dir again
    {0x0303, "relative/libbad.so"},
};

TEST(LdSoCacheTest, NewFormatKeepsX8664Directories) {
  EXPECT_EQ(parse_ld_so_cache(new_format_cache(kLibs)),
            (std::vector<std::string>{"/usr/lib/x86_64-linux-gnu", "/usr/local/cuda-13.0/lib"}));
}

TEST(LdSoCacheTest, NewFormatEmbeddedInOldFormat) {
  // Old header (magic, pad, nlibs = 3), three 12-byte old entries, pad to 8: new cache at 56.
  std::string old(16 + 3 * 12, '\0');
  std::memcpy(old.data(), "ld.so-1.7.0", 11);
  const uint32_t count = 3;
  std::memcpy(old.data() + 12, &count, 4);
  old.resize(56, '\0');
  std::string new_part = new_format_cache(kLibs);
  // Offsets are relative to the new header, so the embedded copy reads the same.
  EXPECT_EQ(parse_ld_so_cache(old + new_part), parse_ld_so_cache(new_part));
  EXPECT_EQ(parse_ld_so_cache(old + new_part).size(), 2u);
}

TEST(LdSoCacheTest, UnknownFormatsYieldNothing) {
  EXPECT_TRUE(parse_ld_so_cache("").empty());
  EXPECT_TRUE(parse_ld_so_cache("ld.so-1.7.0").empty());
  EXPECT_TRUE(
      parse_ld_so_cache("not a cache at all, just some text that is long enough..").empty());
  EXPECT_TRUE(parse_ld_so_cache(new_format_cache(kLibs, /*byte_order=*/1)).empty());  // big endian
}

TEST(LdSoCacheTest, SystemCacheListsTheDirectoryOfLibc) {
  const std::string cache = read_bytes("/etc/ld.so.cache");
  if (!cache.starts_with("glibc-ld.so.cache1.1") && !cache.starts_with("ld.so-1.7.0")) {
    GTEST_SKIP() << "no ld.so cache in a known format";
  }
  std::vector<std::string> dirs = parse_ld_so_cache(cache);
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) EXPECT_EQ(dir[0], '/') << dir;
  const std::string libc = loaded_libc_path();
  EXPECT_TRUE(contains_same_dir(dirs, fs::path(libc).parent_path()));
}

// The cache is read from the machine being traced; a damaged one must not crash us.
TEST(LdSoCacheTest, TruncatedAndCorruptedCachesDoNotCrash) {
  std::string good = read_bytes("/etc/ld.so.cache");
  if (!good.starts_with("glibc-ld.so.cache1.1")) good = new_format_cache(kLibs);
  auto check = [](const std::string& bytes) {
    for (const std::string& dir : parse_ld_so_cache(bytes)) ASSERT_EQ(dir[0], '/');
  };
  for (size_t length = 0; length <= good.size(); length += 1 + length / 64) {
    check(good.substr(0, length));
  }
  std::mt19937 random(7);
  for (int round = 0; round < 2000; ++round) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(random() % 8);
    for (int i = 0; i < flips; ++i) {
      // Mostly the header and entries, where the counts and offsets are.
      size_t limit = (round % 2 == 0) ? std::min<size_t>(bad.size(), 48 + 24 * 4) : bad.size();
      bad[random() % limit] = static_cast<char>(random());
    }
    check(bad);
  }
  for (int round = 0; round < 500; ++round) {  // random bytes behind a valid magic
    std::string noise = "glibc-ld.so.cache1.1";
    noise.resize(20 + random() % 400);
    for (size_t i = 20; i < noise.size(); ++i) noise[i] = static_cast<char>(random());
    check(noise);
  }
}

// --- Search directories -----------------------------------------------------------------------

TEST(LibrarySearchDirsTest, LdLibraryPathFirstInOrderExistingOnly) {
  TempDir tmp;
  const std::string a = tmp.mkdirs("a");
  const std::string b = tmp.mkdirs("b");
  const std::string missing = tmp.path().string() + "/missing";
  std::vector<std::string> dirs = library_search_dirs(
      {{"LD_LIBRARY_PATH", b + ":" + missing + "::" + a + ";relative/dir:" + b + "/../b"}});
  ASSERT_GE(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], b);
  EXPECT_EQ(dirs[1], a);
  EXPECT_EQ(std::count(dirs.begin(), dirs.end(), missing), 0);
  EXPECT_EQ(std::count_if(dirs.begin(), dirs.end(),
                          [&](const std::string& d) { return same_file(d, b); }),
            1);
  // Then the system's directories (from the cache or the defaults).
  EXPECT_TRUE(contains_same_dir(dirs, fs::path(loaded_libc_path()).parent_path()));
}

TEST(LibrarySearchDirsTest, NoDuplicates) {
  std::vector<std::string> dirs = library_search_dirs({});
  for (size_t i = 0; i < dirs.size(); ++i) {
    for (size_t j = i + 1; j < dirs.size(); ++j) EXPECT_FALSE(same_file(dirs[i], dirs[j]));
  }
}

TEST(LibrarySearchDirsTest, CudaAndPythonEnvironmentsFromTheEnvironment) {
  TempDir tmp;
  const std::string cuda = tmp.mkdirs("cuda-12.4/lib64");
  // A name with glob metacharacters: must be taken literally.
  const std::string venv_wheel =
      tmp.mkdirs("venv[1]/lib/python3.11/site-packages/nvidia/cuda_runtime/lib");
  const std::string venv_torch = tmp.mkdirs("venv[1]/lib/python3.11/site-packages/torch/lib");
  const std::string conda_wheel = tmp.mkdirs("conda/lib/python3.10/site-packages/nvidia/nccl/lib");
  const std::string pyenv_wheel =
      tmp.mkdirs("home/.pyenv/versions/3.12.1/lib/python3.12/site-packages/nvidia/cublas/lib");
  const std::string user_wheel =
      tmp.mkdirs("home/.local/lib/python3.12/site-packages/nvidia/cudnn/lib");
  const std::string not_a_wheel = tmp.mkdirs("venv[1]/lib/python3.11/site-packages/other/lib");

  std::vector<std::string> dirs =
      library_search_dirs({{"CUDA_HOME", tmp.path().string() + "/cuda-12.4"},
                           {"VIRTUAL_ENV", tmp.path().string() + "/venv[1]"},
                           {"CONDA_PREFIX", tmp.path().string() + "/conda"},
                           {"HOME", tmp.path().string() + "/home"}});
  auto position = [&](const std::string& dir) {
    return std::find(dirs.begin(), dirs.end(), dir) - dirs.begin();
  };
  for (const std::string& dir :
       {cuda, venv_wheel, venv_torch, conda_wheel, pyenv_wheel, user_wheel}) {
    EXPECT_LT(position(dir), static_cast<long>(dirs.size())) << dir << " missing";
  }
  EXPECT_EQ(position(not_a_wheel), static_cast<long>(dirs.size()));
  EXPECT_LT(position(cuda), position(venv_wheel));
  EXPECT_LT(position(venv_wheel), position(conda_wheel));
  EXPECT_LT(position(conda_wheel), position(pyenv_wheel));
  EXPECT_LT(position(pyenv_wheel), position(user_wheel));
}

// --- Finding library files --------------------------------------------------------------------

TEST(FindLibraryFilesTest, SymlinksToOneFileGiveOnePath) {
  TempDir tmp;
  const std::string dir = tmp.mkdirs("lib");
  std::ofstream(dir + "/libfoo.so.1.2.3") << "not really ELF";
  fs::create_symlink("libfoo.so.1.2.3", dir + "/libfoo.so.1");
  fs::create_symlink("libfoo.so.1", dir + "/libfoo.so");
  std::ofstream(dir + "/libfoo_static.a") << "archive";
  fs::create_directory(dir + "/libfoo.so.d");  // a directory, not a library
  fs::create_symlink("lib", tmp.path().string() + "/lib64");

  std::vector<std::string> found = find_library_files(
      "libfoo.so", {dir, tmp.path().string() + "/lib64", tmp.path().string() + "/missing"});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], fs::canonical(dir + "/libfoo.so.1.2.3").string());
  EXPECT_TRUE(find_library_files("libbar.so", {dir}).empty());
}

TEST(FindLibraryFilesTest, FindsTheCudaRuntime) {
  if (access(kCudart, R_OK) != 0) GTEST_SKIP() << kCudart << " not present";
  auto env = process_environment(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(env.ok());
  std::vector<std::string> found = find_library_files("libcudart.so", library_search_dirs(*env));
  EXPECT_TRUE(std::any_of(found.begin(), found.end(),
                          [](const std::string& path) { return same_file(path, kCudart); }));
  for (const std::string& path : found) EXPECT_EQ(fs::canonical(path).string(), path);
}

TEST(ProgramSearchDirs, PathIsSplitAsExecvpSplitsIt) {
  EXPECT_EQ(program_search_dirs("/opt/py/bin:/usr/bin"),
            (std::vector<std::string>{"/opt/py/bin", "/usr/bin"}));
  // An empty entry, first, last or between two colons, is the working directory.
  EXPECT_EQ(program_search_dirs(":/usr/bin::/bin:"),
            (std::vector<std::string>{".", "/usr/bin", ".", "/bin", "."}));
  // PATH unset or empty: the shells' default, not nowhere.
  const std::vector<std::string> fallback{"/usr/local/bin", "/usr/bin", "/bin"};
  EXPECT_EQ(program_search_dirs(nullptr), fallback);
  EXPECT_EQ(program_search_dirs(""), fallback);
}

}  // namespace
}  // namespace eacgm
