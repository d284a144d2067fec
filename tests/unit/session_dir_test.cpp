// Session directories (-o of record and attach) and what a full disk costs them: a directory
// that is not a session is refused untouched, a session is replaced whole, a second recording is
// locked out; a sink whose writes fail counts exactly the calls its file is missing, and leaves
// a file that still opens. A full disk is played by RLIMIT_FSIZE (no root needed): writes past
// the limit fail with EFBIG, as they would with ENOSPC (tests/e2e/test_cli.py fills a real tmpfs).
#include "agent/session_dir.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "sinks/perfetto_proto.h"
#include "sinks/perfetto_writer.h"
#include "sinks/sqlite_writer.h"
#include "sinks/summary.h"
#include "test_support.h"

namespace eacgm {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = fs::relative(e.path(), dir).string();
    names.insert(e.is_directory() ? name + "/" : name + ":" + read_bytes(e.path().string()));
  }
  return names;
}

TEST(SessionDir, CreatesANewDirectoryAndLocksIt) {
  TempDir tmp;
  const std::string path = (tmp.path() / "a" / "run1").string();
  auto dir = SessionDir::claim(path);
  ASSERT_TRUE(dir) << dir.error().message;
  EXPECT_FALSE(dir->had_session());
  EXPECT_TRUE(fs::is_directory(path));
  // The lock file names its holder, for the message of a second recording.
  EXPECT_EQ(read_bytes(path + "/" + SessionDir::kLockFile), std::to_string(getpid()) + "\n");
  auto cleared = dir->clear_previous();
  ASSERT_TRUE(cleared);
  EXPECT_EQ(*cleared, 0u);
}

TEST(SessionDir, RefusesADirectoryThatIsNotASessionAndTouchesNothing) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "project";
  write_text(dir / "train.py", "print(1)\n");
  write_text(dir / "data" / "x.csv", "1,2\n");
  write_text(dir / "summary.json", "{\"not\": \"ours\"}\n");  // a summary of some other tool
  const auto before = listing(dir);
  auto claimed = SessionDir::claim(dir.string());
  ASSERT_FALSE(claimed);
  const std::string& message = claimed.error().message;
  EXPECT_NE(message.find("not empty and holds no eacgm session"), std::string::npos) << message;
  EXPECT_NE(message.find("data, summary.json, train.py"), std::string::npos) << message;
  EXPECT_NE(message.find("Choose a new or empty directory"), std::string::npos) << message;
  EXPECT_EQ(listing(dir), before);  // not even the lock file
}

TEST(SessionDir, ReplacesAPreviousSessionWholeAndKeepsOtherFiles) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  write_text(dir / "summary.json", "{\"version\": \"0.1.0\", \"events\": {}, \"layers\": {}}\n");
  write_text(dir / "events.sqlite", "db");
  write_text(dir / "events.sqlite-wal", "wal");
  write_text(dir / "trace.perfetto-trace", "trace");
  write_text(dir / "flight_recorder" / "4242.json", "{}");
  write_text(dir / "flight_recorder" / "4243.json", "{}");
  write_text(dir / "my-notes.txt", "keep me");
  auto claimed = SessionDir::claim(dir.string());
  ASSERT_TRUE(claimed) << claimed.error().message;
  EXPECT_TRUE(claimed->had_session());
  // Nothing is removed until the recording is sure to start.
  EXPECT_TRUE(fs::exists(dir / "flight_recorder" / "4242.json"));
  auto cleared = claimed->clear_previous();
  ASSERT_TRUE(cleared) << cleared.error().message;
  EXPECT_EQ(*cleared, 7u);  // 4 files, flight_recorder/ and its 2 files
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{SessionDir::kLockFile, "my-notes.txt"}));
}

TEST(SessionDir, AnOldSessionWithoutSummaryOrLockIsStillOne) {
  // eacgm 0.1.0 killed mid-run: only files eacgm writes, no summary yet.
  TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  write_text(dir / "events.sqlite", "db");
  write_text(dir / "trace.perfetto-trace.events.tmp", "x");
  auto claimed = SessionDir::claim(dir.string());
  ASSERT_TRUE(claimed) << claimed.error().message;
  EXPECT_TRUE(claimed->had_session());
}

TEST(SessionDir, ASecondRecordingIsLockedOutUntilTheFirstEnds) {
  TempDir tmp;
  const std::string path = (tmp.path() / "run").string();
  {
    auto first = SessionDir::claim(path);
    ASSERT_TRUE(first) << first.error().message;
    write_text(fs::path(path) / "events.sqlite", "the first recording's");
    auto second = SessionDir::claim(path);
    ASSERT_FALSE(second);
    EXPECT_NE(second.error().message.find(
                  fmt::format("another eacgm (pid {}) is recording into this directory", getpid())),
              std::string::npos)
        << second.error().message;
    EXPECT_EQ(read_bytes(path + "/events.sqlite"), "the first recording's");
  }
  auto third = SessionDir::claim(path);  // the first one's lock went with it
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_TRUE(third->had_session());
}

// Files may grow to `bytes` while it lives; a write past that fails with EFBIG (not SIGXFSZ).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  sighandler_t old_handler_ = SIG_DFL;
};

const ProbeSpec kLossSpec{.symbol = "cudaMalloc", .layer = Layer::kCuda, .args = {}};

CallRecord loss_call(uint64_t i) {
  CallRecord call;
  call.pid = 7;
  call.tid = 7 + static_cast<uint32_t>(i % 3);
  call.spec = &kLossSpec;
  call.start_ns = 1000 * i;
  call.duration_ns = 500;
  return call;
}

TEST(OutputLoss, PerfettoTraceCountsTheCallsItLostAndStillOpens) {
  TempDir tmp;
  const std::string path = (tmp.path() / "trace.perfetto-trace").string();
  Session session;
  session.process(7).comm = "job";
  constexpr uint64_t kCalls = 60'000;  // about 3 MiB of packets: 1 MiB batches
  std::vector<OutputLoss> losses;
  {
    FileSizeLimit limit(3 << 19);  // 1.5 MiB: the first batch fits, the second does not
    auto writer = PerfettoWriter::open(path);
    ASSERT_TRUE(writer) << writer.error().message;
    for (uint64_t i = 0; i < kCalls; ++i) (*writer)->on_call(loss_call(i));
    auto finished = (*writer)->finish(session);
    EXPECT_FALSE(finished.ok());
    losses = (*writer)->losses();
  }
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].output, "trace.perfetto-trace");
  EXPECT_EQ(losses[0].calls, kCalls);
  EXPECT_GT(losses[0].calls_lost, 0u);
  EXPECT_LT(losses[0].calls_lost, kCalls);  // the first batch is in the trace
  EXPECT_NE(losses[0].error.find("File too large"), std::string::npos) << losses[0].error;
  // What is there is a trace that parses, holding exactly the calls not counted as lost.
  perfetto::Trace trace;
  ASSERT_TRUE(trace.ParseFromString(read_bytes(path)));
  uint64_t begins = 0;
  for (const auto& packet : trace.packet()) {
    begins += packet.has_track_event() &&
              packet.track_event().type() == perfetto::TrackEvent::TYPE_SLICE_BEGIN;
  }
  EXPECT_EQ(begins, kCalls - losses[0].calls_lost);
  EXPECT_FALSE(fs::exists(path + ".events.tmp"));
}

TEST(OutputLoss, SqliteCountsTheCallsNotInTheDatabase) {
  TempDir tmp;
  const std::string path = (tmp.path() / "events.sqlite").string();
  Session session;
  constexpr uint64_t kCalls = 30'000;
  std::vector<OutputLoss> losses;
  {
    auto writer = SqliteWriter::open(path);
    ASSERT_TRUE(writer) << writer.error().message;
    FileSizeLimit limit(1 << 20);
    for (uint64_t i = 0; i < kCalls; ++i) (*writer)->on_call(loss_call(i));
    EXPECT_FALSE((*writer)->finish(session).ok());
    losses = (*writer)->losses();
  }
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].output, "events.sqlite");
  EXPECT_EQ(losses[0].calls, kCalls);
  EXPECT_GT(losses[0].calls_lost, 0u);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM calls", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(static_cast<uint64_t>(sqlite3_column_int64(stmt, 0)), kCalls - losses[0].calls_lost);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(OutputLoss, SummarySaysWhatIsMissing) {
  Session session;
  EXPECT_EQ(summary_json(session)["complete"], true);
  EXPECT_EQ(summary_json(session)["lost"], nlohmann::json::array());
  session.lost.push_back({.output = "events.sqlite",
                          .calls = 12000,
                          .calls_lost = 8123,
                          .error = "inserting a call: database or disk is full"});
  const nlohmann::json j = summary_json(session);
  EXPECT_EQ(j["complete"], false);
  EXPECT_EQ(j["lost"], nlohmann::json::parse(R"([{"output": "events.sqlite", "calls": 12000,
      "calls_lost": 8123, "error": "inserting a call: database or disk is full"}])"));
  const std::string report = text_report(session);
  EXPECT_NE(report.find("WARNING: events.sqlite is incomplete: 8123 of its 12000 calls are "
                        "missing (inserting a call: database or disk is full)"),
            std::string::npos)
      << report;
}

TEST(OutputLoss, TheSummaryIsWrittenIntoItsReservation) {
  TempDir tmp;
  const std::string path = (tmp.path() / "summary.json").string();
  reserve_summary(path);
  // Reserved, not visible: the file is empty until the summary is written.
  EXPECT_EQ(fs::file_size(path + ".tmp"), 0u);
  Session session;
  session.version = "9.9";
  ASSERT_TRUE(write_summary(session, path).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const nlohmann::json j = nlohmann::json::parse(read_bytes(path));
  EXPECT_EQ(j["version"], "9.9");
  EXPECT_EQ(read_bytes(path).back(), '\n');
}

}  // namespace
}  // namespace eacgm
