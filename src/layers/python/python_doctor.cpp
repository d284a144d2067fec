#include "layers/python/python_doctor.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "layers/python/python_binary.h"
#include "layers/python/python_layouts.h"
#include "probes/library_finder.h"

namespace eacgm {

std::vector<DoctorCheck> python_doctor(const DoctorContext& context) {
  // The layer walks the interpreter's own structures, so it is the interpreters that count:
  // libpython on the library path and python3.8-3.13 on PATH (call counts and GC pauses need
  // the build's USDT probes).
  std::vector<std::string> candidates = find_library_files("libpython3", context.library_dirs);
  for (const std::string& dir : program_search_dirs(std::getenv("PATH"))) {
    for (int minor = 8; minor <= 13; ++minor) {
      candidates.push_back(fmt::format("{}/python3.{}", dir, minor));
    }
  }
  std::set<FileId> seen;
  DoctorCheck check;
  check.name = "python";
  for (const std::string& file : candidates) {
    std::error_code ec;
    const std::string real = std::filesystem::canonical(file, ec).string();
    if (ec) continue;
    const std::optional<FileId> id = file_id(real);
    if (!id || !seen.insert(*id).second) continue;
    auto interpreter = inspect_interpreter(real);
    if (!interpreter || !*interpreter) continue;
    const PythonInterpreter& p = **interpreter;
    check.found.push_back(fmt::format("{} (CPython {}.{}{}{})", real, p.version / 100,
                                      p.version % 100,
                                      python_layout(p.version) ? "" : ", unsupported",
                                      p.has_usdt ? ", USDT probes" : ", no USDT: sampled only"));
  }
  check.ok = !check.found.empty();
  check.detail = check.ok ? fmt::format("ready: {} interpreter(s)", check.found.size())
                          : "no CPython 3.8-3.13 found on PATH; interpreters a job runs are "
                            "still found when it starts them";
  return {std::move(check)};
}

}  // namespace eacgm
