// The HTML page and SVG charts of eacgm report / compare -o, on hand-made data: exact elements
// for known input, names from a traced process escaped, gaps and outliers handled. The rendered
// page in a real browser is tests/bpf/test_report.py.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <string>

#include "report/html_page.h"
#include "report/session_report.h"
#include "report/svg_chart.h"
#include "session/session.h"
#include "sinks/sqlite_writer.h"
#include "test_support.h"

namespace eacgm::report {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

constexpr double kGap = std::numeric_limits<double>::quiet_NaN();

// A session directory as record leaves it for a job that made no traced call: an empty
// database beside the given summary.json, which is all a test of the page then varies.
void write_callless_session(const std::filesystem::path& dir, const std::string& summary_json) {
  auto db = SqliteWriter::open((dir / "events.sqlite").string());
  ASSERT_TRUE(db.ok()) << db.error().message;
  ASSERT_TRUE((*db)->finish(Session{}).ok());
  std::ofstream(dir / "summary.json") << summary_json;
}

TEST(ReportHtml, EscapesMarkupQuotesAndControlBytes) {
  EXPECT_EQ(html_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  // A name walked from a traced process's memory may hold any byte: control bytes would make
  // the SVG invalid XML.
  EXPECT_EQ(html_escape(std::string("x\x01y", 3)), "x\xef\xbf\xbdy");
  EXPECT_EQ(html_escape("tab\tand\nline"), "tab\tand\nline");
}

TEST(ReportHtml, TicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(nice_ticks(0, 7.3, 5), (std::vector<double>{0, 2, 4, 6}));
  const std::vector<double> fifths = nice_ticks(0, 1, 5);
  ASSERT_EQ(fifths.size(), 6u);
  EXPECT_DOUBLE_EQ(fifths[1], 0.2);
  EXPECT_DOUBLE_EQ(fifths.back(), 1.0);
  EXPECT_EQ(nice_ticks(100, 350, 5), (std::vector<double>{100, 150, 200, 250, 300, 350}));
  EXPECT_EQ(nice_ticks(3, 3, 5), (std::vector<double>{3}));  // no range: one tick, no loop
}

TEST(ReportHtml, LineChartDrawsEachSeriesWithItsGapsAndEveryMarker) {
  LineChart c;
  c.title = "calls <per> second";
  c.series.push_back({"rank 0 <main>", {0, 1, 2, 3, 4}, {1, 2, kGap, 4, 5}});
  c.series.push_back({"rank 1", {0, 1, 2}, {3, 3, 3}});
  c.markers.push_back({1.5, "[leak] pid 7: \"grows\""});
  c.markers.push_back({2.5, "[hang] second"});
  const std::string svg = line_chart(c);
  EXPECT_EQ(count(svg, "<g class=\"series\""), 2u);
  EXPECT_EQ(count(svg, "<g class=\"marker\""), 2u);
  // The gap breaks the first line in two: two pen-downs.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      svg, m, std::regex("data-series=\"0\"[^>]*><title>[^<]*</title><path d=\"([^\"]*)\"")));
  EXPECT_EQ(count(m[1].str(), "M"), 2u);
  EXPECT_EQ(count(m[1].str(), "L"), 2u);
  // Names are escaped in the series, the legend and the title.
  EXPECT_EQ(count(svg, "rank 0 &lt;main&gt;"), 2u);
  EXPECT_NE(svg.find("calls &lt;per&gt; second"), std::string::npos);
  EXPECT_NE(svg.find("[leak] pid 7: &quot;grows&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("<main>"), std::string::npos);
  EXPECT_NE(svg.find("anomaly (2)"), std::string::npos);
}

TEST(ReportHtml, StepsHoldTheLevelAndLogScaleSkipsZeros) {
  LineChart c;
  c.steps = true;
  c.series.push_back({"memory", {0, 1, 2}, {10, 20, 30}});
  const std::string steps = line_chart(c);
  EXPECT_EQ(count(steps, "V"), 2u);  // a level change at each new point
  LineChart log;
  log.log_y = true;
  log.series.push_back({"latency", {0, 1, 2, 3}, {0, 1000, 10000, 0}});
  const std::string svg = line_chart(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<path d=\"([^\"]*)\"")));
  EXPECT_EQ(count(m[1].str(), "M") + count(m[1].str(), "L"), 2u);  // the zeros have no place
}

TEST(ReportHtml, HeatmapLeavesEmptyCellsBlankAndClipsOutliers) {
  Heatmap h;
  h.rows = {"rank 0", "rank 1"};
  std::vector<double> row0(100, 1.0), row1(100, 2.0);
  row0[5] = kGap;
  row1[7] = 1000.0;  // one collective that waited on a page fault
  h.values = {row0, row1};
  h.x_first = 0;
  h.x_last = 100;
  h.value_label = "later";
  const std::string svg = heatmap(h);
  EXPECT_EQ(count(svg, "<g class=\"heat-row\""), 2u);
  EXPECT_EQ(count(svg, "<rect x="), 199u + 1u);  // every cell but the gap, and the scale's bar
  // The scale tops at the 99th percentile, and says that larger values exist.
  EXPECT_NE(svg.find("≥ 2"), std::string::npos);
}

TEST(ReportHtml, DistributionsDrawABoxAMedianAndEveryValue) {
  const std::string svg = distributions(
      "latency", {{"base", {1, 2, 3, 4, 5}}, {"candidate", {10, 11, 12}}}, unit_formatter("ns"));
  EXPECT_EQ(count(svg, "<g class=\"distribution\""), 2u);
  EXPECT_EQ(count(svg, "<circle"), 8u);
  EXPECT_NE(svg.find("base: 5 values, median 3 ns, quartiles 2 ns to 4 ns"), std::string::npos);
  EXPECT_NE(svg.find("candidate: 3 values, median 11 ns"), std::string::npos);
  // Thousands of windows: a dot for every few, not a page of megabytes.
  const std::string many = distributions("x", {{"base", std::vector<double>(4000, 1.0)}}, {});
  EXPECT_LE(count(many, "<circle"), 400u);
}

TEST(ReportHtml, TablesCarrySortValuesAndBars) {
  Table t{{"API", "calls"}, {}, {}, "apis"};
  t.rows.push_back({text_cell("cudaMalloc<int>"), number_cell("1,200", 1200)});
  t.rows.push_back({text_cell("cudaFree"), number_cell("600", 600)});
  t.bars = {2.0, 1.0};
  const std::string html = table_html(t);
  EXPECT_NE(html.find("<table class=\"sortable apis\">"), std::string::npos);
  EXPECT_NE(html.find("data-value=\"1200\""), std::string::npos);
  EXPECT_NE(html.find("width:100.0%"), std::string::npos);
  EXPECT_NE(html.find("width:50.0%"), std::string::npos);
  EXPECT_NE(html.find("cudaMalloc&lt;int&gt;"), std::string::npos);
}

TEST(ReportHtml, PageIsSelfContainedWithSectionsInOrder) {
  HtmlPage page("eacgm report: <run>");
  page.add_fact("session", "run1");
  page.add_section("b", "Second <thing>", "<p>two</p>");
  page.add_section("a", "First", "<p>one</p>");
  const std::string html = page.render();
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_LT(html.find("<section id=\"b\">"), html.find("<section id=\"a\">"));
  EXPECT_NE(html.find("<h2>Second &lt;thing&gt;</h2>"), std::string::npos);
  EXPECT_NE(html.find("<title>eacgm report: &lt;run&gt;</title>"), std::string::npos);
  // Nothing is fetched: no external script, style sheet or image.
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(count(html, "data-ready"), 0u);  // set by the script, not written
  EXPECT_EQ(count(html, "dataset.ready = \"yes\""), 1u);
}

TEST(ReportHtml, TorchOperatorsAreTabledBySelfTimeFromTheirOpsTable) {
  // summary.json lists the torch layer's calls under "ops" (the other call layers' under
  // "calls"): the operators' table reads them from there.
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(write_callless_session(dir.path(), R"({
    "duration_s": 2.0, "events": {"recorded": 3, "dropped": 0, "undecodable": 0},
    "layers": {"torch": {"status": "active", "ops": {
      "aten::addmm": {"count": 40, "errors": 0, "total_ns": 9000000, "self_ns": 7000000,
                      "p50_ns": 200000, "p99_ns": 400000, "bytes": 0},
      "aten::relu": {"count": 40, "errors": 0, "total_ns": 3000000, "self_ns": 3000000,
                     "p50_ns": 70000, "p99_ns": 90000, "bytes": 0}}}}})"));
  auto html = session_report_html(dir.path().string());
  ASSERT_TRUE(html.ok()) << html.error().message;
  const size_t table = html->find("<h3>PyTorch operators by self time</h3>");
  ASSERT_NE(table, std::string::npos);
  const size_t addmm = html->find("aten::addmm", table);
  const size_t relu = html->find("aten::relu", table);
  ASSERT_NE(addmm, std::string::npos);
  ASSERT_NE(relu, std::string::npos);
  EXPECT_LT(addmm, relu);  // by self time, the costlier first
}

TEST(ReportHtml, PythonFunctionsAreTabledBySelfTimeLessTheirIdleWaits) {
  // A worker blocked on its queue (idle) is not where the time goes: "job.py:wait" spent 9 ms of
  // self time, 8.5 of them idle, and ranks below "job.py:train"'s 2 ms; "job.py:sleep", idle
  // throughout, is not listed at all. The python layer's table (layers/python/python_html.cpp).
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(write_callless_session(dir.path(), R"({
    "duration_s": 2.0, "events": {"recorded": 3, "dropped": 0, "undecodable": 0},
    "layers": {"python": {"status": "active", "functions": {
      "job.py:wait": {"self_ns": 9000000, "total_ns": 9000000, "idle_self_ns": 8500000,
                      "idle_total_ns": 8500000, "threads": 4},
      "job.py:train": {"self_ns": 2000000, "total_ns": 5000000, "threads": 1},
      "job.py:sleep": {"self_ns": 4000000, "total_ns": 4000000, "idle_self_ns": 4000000,
                       "idle_total_ns": 4000000, "threads": 1}}}}})"));
  auto html = session_report_html(dir.path().string());
  ASSERT_TRUE(html.ok()) << html.error().message;
  const size_t table = html->find("<h3>Python functions by self time (sampled)</h3>");
  ASSERT_NE(table, std::string::npos);
  const size_t train = html->find("job.py:train", table);
  const size_t wait = html->find("job.py:wait", table);
  ASSERT_NE(train, std::string::npos);
  ASSERT_NE(wait, std::string::npos);
  EXPECT_LT(train, wait);
  EXPECT_NE(html->find("500.00 us", wait), std::string::npos);  // its self time less its idle
  EXPECT_EQ(html->find("job.py:sleep"), std::string::npos);
}

TEST(ReportHtml, ALayersOwnSectionsAreSectionsOfThePage) {
  // The os layer's mappings come from its hook (layers/os/os_html.cpp), not from the page: they
  // are a section of their own, with its heading, like the page's.
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(write_callless_session(dir.path(), R"({
    "duration_s": 2.0, "events": {"recorded": 3, "dropped": 0, "undecodable": 0},
    "layers": {"os": {"status": "active", "mmap": {
      "4242": {"mmaps": 60, "munmaps": 10, "bytes_mapped": 1048576,
               "populate": {"count": 50, "peak_per_s": 170}}}}}})"));
  auto html = session_report_html(dir.path().string());
  ASSERT_TRUE(html.ok()) << html.error().message;
  const size_t section = html->find("<section id=\"mappings\">");
  ASSERT_NE(section, std::string::npos);
  EXPECT_NE(html->find("Memory mappings (os layer)", section), std::string::npos);
  const size_t row = html->find("pid 4242", section);
  ASSERT_NE(row, std::string::npos);
  EXPECT_NE(html->find(">50<", row), std::string::npos);
  EXPECT_NE(html->find("1.0 MiB", row), std::string::npos);
  EXPECT_EQ(html->find("<section id=\"top\">"), std::string::npos);  // no call tables
}

TEST(ReportHtml, EventsLostToDecodingAreSaidBesideTheDropped) {
  for (const uint64_t undecodable : {uint64_t{0}, uint64_t{7}}) {
    TempDir dir;
    ASSERT_NO_FATAL_FAILURE(write_callless_session(
        dir.path(),
        R"({"duration_s": 2.0, "events": {"recorded": 30, "dropped": 2, "undecodable": )" +
            std::to_string(undecodable) + "}}"));
    auto html = session_report_html(dir.path().string());
    ASSERT_TRUE(html.ok()) << html.error().message;
    EXPECT_NE(html->find(undecodable ? "30 recorded, 2 dropped, 7 undecodable"
                                     : "30 recorded, 2 dropped<"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace eacgm::report
