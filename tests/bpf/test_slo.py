"""bpf: `eacgm slo` on real recordings of one simulated training job (simtrain under the simulated
CUDA runtime and NVML): baselines fitted from three healthy runs hold for a fourth healthy run (exit
0); a run whose kernel launches are much slower violates cudaLaunchKernel's p90 latency, and a run
that leaks device memory violates the device memory objective (exit 1, naming them, with the
observed value and the threshold); bad input is exit 2 with a one-line message; the Prometheus
rules pass `promtool check rules`, and `promtool test rules` fires the latency alert, alone, on a
synthetic series of slow launches. The recordings are short (about 1.3 s each) and shared."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM, SIM_LIB_DIR, SIMNCCL_JOB, SIMTRAIN  # noqa: E402

# 400 steps of about 3 ms (2 ms of host work each): ~1.3 s a run.
JOB = ["--ranks", "2", "--steps", "400", "--step-us", "2000"]
# cudaLaunchKernel's simulated latency from 3 us to 20 us: every launch much slower.
SLOW_LAUNCH = "latency cudaLaunchKernel 20us"
LEAK_BYTES = str(1 << 20)  # one more 1 MiB cudaMalloc per step, never freed
SIM_NVML = os.path.join(SIM_LIB_DIR, "libnvidia-ml.so.1")
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
# serve's latency buckets (src/serve/exposition.h): 1-2.5-5 per decade, 1 us to 10 s.
BUCKETS = [m * 10.0 ** e for e in range(-6, 1) for m in (1, 2.5, 5)] + [10.0]


def eacgm(*args):
    return subprocess.run([EACGM, *args], capture_output=True, text=True, timeout=120)


class Slo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root to load BPF programs")
        cls.shared = tempfile.mkdtemp(prefix="eacgm-slo-")
        cls.healthy = [cls.record_simtrain(f"healthy{i}") for i in range(4)]
        cls.slow = cls.record_simtrain("slow", [SLOW_LAUNCH])
        cls.leak = cls.record_simtrain("leak", (), ["--leak-bytes", LEAK_BYTES])
        cls.slo = os.path.join(cls.shared, "slo.json")
        fit = eacgm("slo", "fit", *cls.healthy[:3], "-o", cls.slo)
        assert fit.returncode == 0, fit.stdout + fit.stderr
        cls.fit_stdout = fit.stdout
        with open(cls.slo) as f:
            cls.spec = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    @classmethod
    def record_simtrain(cls, name, rules=(), extra_args=()):
        out = os.path.join(cls.shared, name)
        # The simulated NVML: two GPUs, busy at 60 % with 20 GiB used (scripted: the processes'
        # own figures would count eacgm and the launcher, which come and go).
        env = dict(os.environ, SIMGPU_DEVICE_COUNT="2")
        env["SIMGPU_RULES"] = "; ".join(["nvml set util 60", "nvml set memory_used 20GiB", *rules])
        proc = subprocess.run([EACGM, "record", "-q", "-o", out, "--layers", "cuda,os,gpu",
                               "--nvml-lib", SIM_NVML, "--gpu-rate", "50", "--",
                               SIMTRAIN, *JOB, *extra_args],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        return out

    def objectives(self, **match):
        return [o for o in self.spec["objectives"]
                if all(o.get(k) == v or o["window"].get(k) == v for k, v in match.items())]

    def check(self, *sessions, expect):
        proc = eacgm("slo", "check", self.slo, *sessions, "--json")
        self.assertEqual(proc.returncode, expect, proc.stdout + proc.stderr)
        return json.loads(proc.stdout)

    def test_fit_writes_each_objective_with_its_evidence(self):
        self.assertEqual(self.spec["version"], 1)
        self.assertEqual(self.spec["runs"], self.healthy[:3])
        self.assertIn("objectives", self.fit_stdout)
        for o in self.spec["objectives"]:
            for field in ("id", "what", "layer", "process", "metric", "unit", "bound",
                          "threshold", "window", "evidence"):
                self.assertIn(field, o)
            self.assertEqual(o["evidence"]["runs"], self.healthy[:3], o)
            self.assertEqual(len(o["evidence"]["values"]), 3, o)
            worst = (max if o["bound"] == "upper" else min)(o["evidence"]["values"])
            if o["bound"] == "upper":
                self.assertGreaterEqual(o["threshold"], worst, o)
            else:
                self.assertLess(o["threshold"], worst, o)
        for rank in ("rank:0", "rank:1"):
            latency = self.objectives(what="cudaLaunchKernel", metric="p90 latency", process=rank,
                                      phase="steady")
            self.assertEqual(len(latency), 1, rank)
            self.assertEqual(latency[0]["unit"], "ns")
            self.assertGreaterEqual(min(latency[0]["evidence"]["counts"]), 100)
            memory = self.objectives(metric="device memory peak", process=rank, phase="steady")
            self.assertEqual(len(memory), 1, rank)
            rate = self.objectives(metric="calls/s", process=rank, phase="steady")
            self.assertEqual(rate[0]["bound"], "lower")
        util = self.objectives(metric="utilization", layer="gpu", phase="steady")
        self.assertEqual(sorted(o["what"] for o in util), ["device 0", "device 1"],
                         json.dumps(self.spec["objectives"], indent=1)[:3000])
        for o in util:
            self.assertEqual(o["evidence"]["values"], [60, 60, 60], o)
            self.assertEqual(o["bound"], "lower")
            self.assertEqual(o["threshold"], 48, o)  # 60 less 20 %
        self.assertEqual(len(self.objectives(metric="events/s", what="MAP_POPULATE mmaps")), 1)
        oom = self.objectives(metric="anomalies/s", what="oom_kill")
        self.assertEqual(oom[0]["threshold"], 0)
        # What had too little data is listed with why, not silently left out.
        self.assertTrue(self.spec["skipped"])
        for s in self.spec["skipped"]:
            self.assertTrue(s["reason"], s)

    def test_healthy_run_holds(self):
        report = self.check(self.healthy[3], expect=0)
        self.assertEqual(report["verdict"], "held")
        self.assertEqual(report["sessions"][0]["violations"], [])
        proc = eacgm("slo", "check", self.slo, self.healthy[3])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("every objective holds", proc.stdout)
        self.assertIn("verdict: the SLO holds", proc.stdout)

    def test_slow_launches_violate_launch_latency(self):
        report = self.check(self.healthy[3], self.slow, expect=1)
        self.assertEqual(report["sessions"][0]["violations"], [])
        violations = report["sessions"][1]["violations"]
        latency = [v for v in violations if v["what"] == "cudaLaunchKernel"
                   and v["metric"] == "p90 latency" and v["window"]["phase"] == "steady"]
        self.assertEqual(sorted(v["process"] for v in latency), ["rank:0", "rank:1"],
                         json.dumps(violations, indent=1))
        for v in latency:
            self.assertGreater(v["observed"], v["threshold"], v)
            self.assertGreater(v["observed"], 20000, v)  # 20 us a launch, and then some
            self.assertAlmostEqual(v["by"], v["observed"] - v["threshold"], places=3)
        proc = eacgm("slo", "check", self.slo, self.slow)
        self.assertEqual(proc.returncode, 1)
        line = next(l for l in proc.stdout.splitlines() if "cudaLaunchKernel" in l)
        self.assertIn("p90 latency", line)
        self.assertIn("above the threshold", line)
        self.assertIn("healthy runs", line)
        self.assertIn("VIOLATED", proc.stdout)

    def test_leak_violates_device_memory(self):
        report = self.check(self.leak, expect=1)
        memory = [v for v in report["sessions"][0]["violations"]
                  if v["metric"] == "device memory peak" and v["window"]["phase"] == "steady"]
        self.assertEqual(sorted(v["process"] for v in memory), ["rank:0", "rank:1"],
                         json.dumps(report, indent=1))
        for v in memory:
            self.assertEqual(v["unit"], "bytes")
            self.assertGreater(v["ratio"], 1.1, v)
        proc = eacgm("slo", "check", self.slo, self.leak)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("memory device memory [rank:0] steady device memory peak", proc.stdout)

    def test_bad_input_is_exit_2_with_one_line(self):
        def assertBad(args, fragment):
            proc = eacgm("slo", *args)
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertIn(fragment, proc.stderr)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertTrue(proc.stderr.startswith("eacgm: error: "), proc.stderr)

        tmp = tempfile.mkdtemp(prefix="eacgm-slo-bad-")
        self.addCleanup(shutil.rmtree, tmp, True)
        missing = os.path.join(tmp, "missing.json")
        assertBad(["check", missing, self.healthy[0]], "no SLO file")
        assertBad(["rules", missing], "no SLO file")
        corrupt = os.path.join(tmp, "corrupt.json")
        with open(self.slo) as f, open(corrupt, "w") as g:
            g.write(f.read()[:500])
        assertBad(["check", corrupt, self.healthy[0]], "is not JSON")
        newer = os.path.join(tmp, "newer.json")
        with open(newer, "w") as f:
            json.dump(dict(self.spec, version=2), f)
        assertBad(["check", newer, self.healthy[0]], "version 2; this eacgm reads version 1")
        assertBad(["check", self.slo, os.path.join(tmp, "nowhere")], "no such session directory")
        os.mkdir(os.path.join(tmp, "empty"))
        assertBad(["check", self.slo, os.path.join(tmp, "empty")], "no events.sqlite")
        assertBad(["fit", os.path.join(tmp, "nowhere"), "-o", os.path.join(tmp, "x.json")],
                  "no such session directory")
        assertBad(["fit", self.healthy[0], "-o", os.path.join(tmp, "no", "dir", "x.json")],
                  "cannot write")
        proc = eacgm("slo", "check", self.slo)  # no session: CLI11's usage error
        self.assertEqual(proc.returncode, 2)

    def test_rules_pass_promtool_and_fire_only_the_latency_alert(self):
        rules = os.path.join(self.shared, "rules.yml")
        proc = eacgm("slo", "rules", self.slo, "-o", rules)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(rules) as f:
            text = f.read()
        self.assertIn('api=\\"cudaLaunchKernel\\"', text)
        self.assertIn("eacgm_process_device_memory_bytes", text)
        self.assertIn("eacgm_gpu_util_ratio", text)
        self.assertIn("# Objectives with no rule here", text)
        if not os.path.exists(PROMTOOL):
            self.skipTest("promtool is not installed (Debian's prometheus package)")
        proc = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr + text)
        self.assertIn("SUCCESS", proc.stdout + proc.stderr)

        # One node where cudaLaunchKernel's calls all take far longer than its threshold, while
        # the GPU and device memory stay at their healthy values: after `for` (5 min), the
        # latency alert fires, and no other.
        latency = self.objectives(what="cudaLaunchKernel", metric="p90 latency", phase="steady")
        threshold_s = max(o["threshold"] for o in latency) / 1e9
        slow_from = next(b for b in BUCKETS if b >= 2 * threshold_s)
        node = 'instance="node1:9412",job="eacgm"'
        series = []
        for le in BUCKETS + ["+Inf"]:
            per_min = 6000 if le == "+Inf" or le > slow_from else 0
            series.append((f'eacgm_call_duration_seconds_bucket{{{node},layer="cuda",'
                           f'api="cudaLaunchKernel",le="{le}"}}', f"0+{per_min}x30"))
        series.append((f"eacgm_processes_traced{{{node}}}", "2+0x30"))
        for o in self.objectives(metric="utilization", phase="steady"):
            device = o["what"].split()[-1]
            series.append((f'eacgm_gpu_util_ratio{{{node},device="{device}"}}',
                           f"{min(o['evidence']['values']) / 100}+0x30"))
        for o in self.objectives(metric="memory used", phase="steady"):
            device = o["what"].split()[-1]
            series.append((f'eacgm_gpu_memory_used_bytes{{{node},device="{device}"}}',
                           f"{max(o['evidence']['values'])}+0x30"))
        for o in self.objectives(metric="device memory peak", phase="steady"):
            if o["process"].startswith("rank:"):
                rank = o["process"].split(":")[1]
                series.append((f'eacgm_process_device_memory_bytes{{{node},pid="1{rank}",'
                               f'rank="{rank}",job_id=""}}',
                               f"{max(o['evidence']['values'])}+0x30"))
        expected = ('ALERTS{alertname="EacgmSloLatency",alertstate="firing",'
                    'instance="node1:9412",severity="warning",'
                    'slo="steady/p90_latency/cuda/cudaLaunchKernel"}')
        lines = ["rule_files:", f"  - {json.dumps(rules)}", "evaluation_interval: 1m", "tests:",
                 "  - interval: 1m", "    input_series:"]
        for name, values in series:
            lines += [f"      - series: {json.dumps(name)}",
                      f"        values: {json.dumps(values)}"]
        lines += ["    promql_expr_test:",
                  '      - expr: ALERTS{alertstate="firing"}',
                  "        eval_time: 20m",
                  "        exp_samples:",
                  f"          - labels: {json.dumps(expected)}",
                  "            value: 1"]
        test_file = os.path.join(self.shared, "rules_test.yml")
        with open(test_file, "w") as f:
            f.write("\n".join(lines) + "\n")
        proc = subprocess.run([PROMTOOL, "test", "rules", test_file], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)


class SloNccl(eacgm_testlib.SharedRecordingsTest):
    """NCCL objectives on real recordings of the simulated 4-rank job: each rank's collective
    lateness and each collective's bandwidth are fitted from three healthy runs; a fourth
    healthy run holds every lateness objective, and a run whose rank 2 is 3 ms late at every
    step violates rank 2's lateness objective by its delay, more than any other rank's."""
    shared_prefix = "eacgm-slo-nccl-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.healthy = [cls.record(f"healthy{i}") for i in range(4)]
        cls.late = cls.record("late", ["--slow-rank", "2", "--slow-ms", "3"])
        cls.slo = os.path.join(cls.shared, "slo.json")
        fit = eacgm("slo", "fit", *cls.healthy[:3], "-o", cls.slo)
        assert fit.returncode == 0, fit.stdout + fit.stderr
        with open(cls.slo) as f:
            cls.spec = json.load(f)

    @classmethod
    def record(cls, name, extra_args=()):
        out = os.path.join(cls.shared, name)
        proc = subprocess.run([EACGM, "record", "-q", "-o", out, "--layers", "cuda,nccl", "--",
                               SIMNCCL_JOB, "--ranks", "4", "--steps", "200", "--step-us", "2000",
                               *extra_args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return out

    def lateness_violations(self, session):
        proc = eacgm("slo", "check", self.slo, session, "--json")
        self.assertIn(proc.returncode, (0, 1), proc.stdout + proc.stderr)
        violations = json.loads(proc.stdout)["sessions"][0]["violations"]
        return {v["id"]: v["observed"] for v in violations if "/collective_lateness/" in v["id"]}

    def test_fit_has_lateness_and_bandwidth_per_rank(self):
        ids = {o["id"]: o for o in self.spec["objectives"]}
        for rank in range(4):
            late = ids[f"steady/collective_lateness/nccl/all_collectives/rank:{rank}"]
            self.assertEqual(late["bound"], "upper")
            # Healthy ranks are late by microseconds: the threshold is the 1 ms floor.
            self.assertEqual(late["threshold"], 1e6)
            # Bandwidth includes waiting for peers: on a busy machine the healthy runs may spread
            # too far for a lower bound, and then it is skipped, saying why; never a bound of 0.
            bandwidth = ids.get(f"steady/bandwidth/nccl/ncclAllReduce/rank:{rank}")
            if bandwidth is None:
                skipped = [s for s in self.spec["skipped"] if s["metric"] == "bandwidth"
                           and s["what"] == "ncclAllReduce" and s["process"] == f"rank:{rank}"]
                self.assertEqual(len(skipped), 1, self.spec["skipped"])
                self.assertIn("lower bound of 0", skipped[0]["reason"])
            else:
                self.assertEqual(bandwidth["bound"], "lower")
                self.assertGreater(bandwidth["threshold"], 0)

    def test_healthy_run_holds_every_lateness_objective(self):
        self.assertEqual(self.lateness_violations(self.healthy[3]), {})

    def test_late_rank_violates_its_lateness_objective_most(self):
        # Rank 2 is 3 ms late at every step: its objective is violated, by about its delay, and
        # by more than any other rank's (the ranks it holds up can arrive unevenly after it).
        violations = self.lateness_violations(self.late)
        late = violations.get("steady/collective_lateness/nccl/all_collectives/rank:2")
        self.assertIsNotNone(late, violations)
        self.assertGreater(late, 2e6, violations)
        self.assertEqual(max(violations, key=violations.get),
                         "steady/collective_lateness/nccl/all_collectives/rank:2", violations)


if __name__ == "__main__":
    eacgm_testlib.main()
