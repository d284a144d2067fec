// A recorded session read back for analysis (eacgm analyze, eacgm model fit): its calls from
// events.sqlite in arrival order (the order the live analysis saw them), each carrying the
// process's outstanding device bytes, which are rebuilt from the allocation and free rows the same
// way the live session model keeps them (Session::add_call).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "analysis/features.h"
#include "analysis/window_analyzer.h"
#include "common/result.h"
#include "session/session_database.h"

namespace eacgm {

// Where a call ran, for what needs the nesting of calls (eacgm compare: torch operator self time)
// or the kernel a launch named.
struct CallPlace {
  uint32_t tid = 0;
  uint32_t depth = 0;       // calls.depth: traced calls open on the thread when it began
  std::string_view kernel;  // calls.kernel (points into `names`); empty when none or unknown
};

struct RecordedSession {
  std::string dir;
  uint64_t start_ns = 0, end_ns = 0;
  std::map<uint32_t, EntityInfo> processes;
  std::map<uint32_t, uint64_t> process_end_ns;  // processes that exited
  std::vector<CallSample> calls;                // in arrival order
  std::set<std::string, std::less<>> names;     // the calls' names point here
  std::vector<CallPlace> places;                // calls[i]'s place, when loaded `with_places`
};

// Errors name the directory or file and say what is wrong (missing, not a session database,
// unreadable). Not movable once loaded (calls point into `names`): hence the pointer.
// `with_places` also fills `places` (the analysis replay has no use for them).
Result<std::unique_ptr<RecordedSession>> load_recorded_session(const std::string& dir,
                                                               bool with_places = false);

// Plays the session's calls into `analyzer` as the live recorder would (advancing its clock with
// the calls) and returns every anomaly it reports, leaks included when `leaks` is given.
std::vector<Anomaly> replay_session(const RecordedSession& session, WindowAnalyzer& analyzer,
                                    class LeakDetector* leaks = nullptr);

// Every complete window of every process, keyed by entity_key (for `eacgm model fit`). Their API
// names point into `session`, which must outlive them.
std::map<std::string, std::vector<Window>> session_windows(const RecordedSession& session,
                                                           uint64_t window_ns);

}  // namespace eacgm
