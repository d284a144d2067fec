// summary.json's `overhead`: what the estimate adds up and when it says it cannot.
#include "session/overhead.h"

#include <gtest/gtest.h>

#include "probes/trap_calibration.h"

namespace eacgm {
namespace {

TracingOverhead cuda_job() {
  TracingOverhead o;
  o.programs = {
      {.group = "cuda", .hits = 400000, .bpf_ns = 70'000'000, .traps = true},
      {.group = "os", .hits = 200, .bpf_ns = 100'000},  // tracepoints: no trap
      {.group = "python", .hits = 50, .bpf_ns = 9'000'000, .in_agent = true},  // the sampler
  };
  o.trap_ns_per_hit = 850;
  o.trap_source = "measured";
  o.agent_cpu_s = 0.8;
  o.agent_peak_rss_bytes = 75 << 20;
  return o;
}

TEST(TracingOverhead, AddsTrapsOfUprobesAndProgramTimeInTheJob) {
  const TracingOverhead o = cuda_job();
  // 400000 traps of 850 ns, 70 ms of cuda programs, 0.1 ms of os tracepoints; not the sampler.
  ASSERT_TRUE(o.estimated_added_s());
  EXPECT_NEAR(*o.estimated_added_s(), 0.340 + 0.070 + 0.0001, 1e-9);
  // 0.4101 s added to a 0.8101 s session: the job alone would have taken 0.4 s.
  ASSERT_TRUE(o.estimated_slowdown_pct(0.8101));
  EXPECT_NEAR(*o.estimated_slowdown_pct(0.8101), 100.0 * 0.4101 / 0.4, 1e-6);
  EXPECT_FALSE(o.estimated_slowdown_pct(0.4));  // more added than the session lasted: no figure
}

TEST(TracingOverhead, JsonHasHitsPerLayerAndTheSamplerApart) {
  const nlohmann::json j = cuda_job().to_json(1.0);
  EXPECT_EQ(j["probe_hits"], (nlohmann::json{{"cuda", 400000}, {"os", 200}}));
  EXPECT_EQ(j["bpf_ns"], 70'100'000);
  EXPECT_EQ(j["sampler_bpf_ns"], 9'000'000);
  EXPECT_EQ(j["trap_ns_per_hit"], 850.0);
  EXPECT_EQ(j["agent_peak_rss_bytes"], 75 << 20);
  EXPECT_FALSE(j.contains("problem"));
}

TEST(TracingOverhead, WithoutStatisticsOrTrapCostItSaysWhyAndEstimatesNothing) {
  TracingOverhead o = cuda_job();
  o.trap_ns_per_hit.reset();
  o.trap_source = "not measured: the kernel has no uprobe_multi links (Linux 6.6+)";
  EXPECT_FALSE(o.estimated_added_s());
  EXPECT_TRUE(o.to_json(1.0)["estimated_added_s"].is_null());
  EXPECT_NE(o.report_line(1.0).find("uprobe_multi"), std::string::npos);

  TracingOverhead none;
  none.programs_problem = "the kernel's BPF run-time statistics are unavailable: EINVAL";
  none.trap_ns_per_hit = 850;
  const nlohmann::json j = none.to_json(1.0);
  EXPECT_TRUE(j["probe_hits"].is_null());
  EXPECT_TRUE(j["estimated_added_s"].is_null());
  EXPECT_EQ(j["problem"], *none.programs_problem);
}

TEST(TrapCache, KeptForItsBootOnly) {
  const std::string line = format_trap_cache("a1ac48cf-boot", 852.94);
  EXPECT_EQ(line, "a1ac48cf-boot 852.9\n");
  EXPECT_EQ(parse_trap_cache(line, "a1ac48cf-boot"), 852.9);
  EXPECT_FALSE(parse_trap_cache(line, "another-boot"));
  EXPECT_FALSE(parse_trap_cache(line, ""));
  EXPECT_FALSE(parse_trap_cache("", "a1ac48cf-boot"));
  EXPECT_FALSE(parse_trap_cache("a1ac48cf-boot -3\n", "a1ac48cf-boot"));
  EXPECT_FALSE(parse_trap_cache("a1ac48cf-boot nan\n", "a1ac48cf-boot"));
  EXPECT_FALSE(parse_trap_cache("a1ac48cf-boot 1e300\n", "a1ac48cf-boot"));
}

}  // namespace
}  // namespace eacgm
