"""bpf: `eacgm slo` on real recordings of one simulated training job (simtrain under the simulated
CUDA runtime and NVML): baselines fitted from three healthy runs hold for a fourth healthy run (exit
0), and for a run that got faster; a run whose kernel launches are much slower violates
cudaLaunchKernel's p90 latency, a run that leaks device memory violates the device memory
objective, and a run whose steps stall violates every call rate objective, each API's and each
process's, and no share or memory objective (exit 1, naming them, with the observed value and the
threshold; a latency a cold cache raised is allowed within 2.5 times its threshold); bad
input is exit 2 with a one-line message; the Prometheus rules pass `promtool check rules`, and
`promtool test rules` fires the latency alert, alone, on a synthetic series of slow launches. The
recordings are short (about 1.3 s each) and shared.

Then a real job, when Debian's python3-torch is installed: tests/workloads/train_softmax.py (a
PyTorch CNN trained from a DataLoader) fitted from three healthy runs, with each torch operator's
self time, latency and call rate; a fourth healthy run holds, and a run whose one softmax has a
bigger input violates that softmax's objectives alone."""
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
# Every step stalls 20 ms longer on the host (a data loader that cannot keep up): 23 ms a step or
# more instead of about 3, so every API is called at most a seventh as often, and in the same mix.
# 120 steps: each API called at every step has more than 100 calls in the steady state, so its
# latency is judged too.
STALL = ["--steps", "120", "--stall-from-step", "1", "--stall-ms", "20"]
# The same job with 1 ms of host work a step instead of 2: every call rate up by a third or more,
# each API's share of the calls the same. A job that got faster is no violation.
FASTER = ["--steps", "550", "--step-us", "1000"]
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
        cls.stalled = cls.record_simtrain("stalled", (), STALL)
        cls.faster = cls.record_simtrain("faster", (), FASTER)
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
            rate = self.objectives(metric="calls/s", what="all calls", process=rank,
                                   phase="steady")
            self.assertEqual(rate[0]["bound"], "lower")
            # Each API simtrain calls at every step has its own call rate (a lower bound) and
            # share of the calls (an upper bound); those called a few times a run are skipped,
            # saying why.
            for api in ("cudaLaunchKernel", "cudaMalloc", "cudaFree", "cudaMemcpyAsync",
                        "cudaMemsetAsync", "cudaStreamSynchronize"):
                rate = self.objectives(metric="calls/s", what=api, process=rank, phase="steady")
                self.assertEqual(len(rate), 1, (api, rank))
                self.assertEqual((rate[0]["bound"], rate[0]["unit"], rate[0]["layer"]),
                                 ("lower", "/s", "cuda"))
                self.assertGreater(rate[0]["threshold"], 0, rate[0])
                share = self.objectives(metric="share of calls", what=api, process=rank,
                                        phase="steady")
                self.assertEqual(len(share), 1, (api, rank))
                self.assertEqual((share[0]["bound"], share[0]["unit"]), ("upper", "%"))
                self.assertLess(share[0]["threshold"], 100, share[0])
            launches = self.objectives(metric="share of calls", what="cudaLaunchKernel",
                                       process=rank, phase="steady")[0]
            # 5 of about 14 calls a step.
            for value in launches["evidence"]["values"]:
                self.assertAlmostEqual(value, 100 * 5 / 14.1, delta=1.5)
            for metric in ("calls/s", "share of calls"):
                few = [s for s in self.spec["skipped"] if s["what"] == "cudaDeviceSynchronize"
                       and s["metric"] == metric and s["process"] == rank
                       and s["window"]["phase"] == "steady"]
                self.assertEqual(len(few), 1, (metric, rank))
                self.assertRegex(few[0]["reason"], r"^\d+ calls in .*: .* needs at least 100$")
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

    def test_a_p99_fit_names_and_measures_p99s(self):
        # The p99 is a choice for machines with quiet tails (docs/SLO.md): on this shared machine
        # healthy runs' p99s spread so far that no verdict on them is steady, so this checks what
        # a p99 fit writes and that check measures the same tail; the verdicts on hand-made p99s
        # are the unit tests' (SloLatencyPercentile).
        p99 = os.path.join(self.shared, "slo-p99.json")
        fit = eacgm("slo", "fit", *self.healthy[:3], "-o", p99, "--latency-percentile", "99")
        self.assertEqual(fit.returncode, 0, fit.stdout + fit.stderr)
        with open(p99) as f:
            spec = json.load(f)
        self.assertEqual(spec["windows"]["latency_percentile"], 99)
        metrics = {o["metric"] for o in spec["objectives"]}
        self.assertIn("p99 latency", metrics)
        self.assertNotIn("p90 latency", metrics)
        launch = [o for o in spec["objectives"] if o["what"] == "cudaLaunchKernel"
                  and o["metric"] == "p99 latency" and o["window"]["phase"] == "steady"]
        self.assertEqual(sorted(o["process"] for o in launch), ["rank:0", "rank:1"])
        for o in launch:
            self.assertTrue(o["id"].startswith("steady/p99_latency/cuda/cudaLaunchKernel/"), o)
            self.assertEqual(o["statistic"], "p99 of the calls")
            # Each healthy run's value is its p99: never below its p90 in the default fit.
            p90 = next(x for x in self.spec["objectives"] if x["id"] == o["id"].replace(
                "p99_latency", "p90_latency"))
            for v99, v90 in zip(o["evidence"]["values"], p90["evidence"]["values"]):
                self.assertGreaterEqual(v99, v90, (o, p90))
        proc = eacgm("slo", "check", p99, self.slow, "--json")
        self.assertIn(proc.returncode, (0, 1), proc.stdout + proc.stderr)
        verdicts = json.loads(proc.stdout)["sessions"][0]
        latency = [v for v in verdicts["violations"] if v["metric"].endswith(" latency")]
        self.assertTrue(all(v["metric"] == "p99 latency" for v in latency), latency)
        rules = eacgm("slo", "rules", p99)
        self.assertEqual(rules.returncode, 0, rules.stderr)
        self.assertIn("histogram_quantile(0.99, ", rules.stdout)

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

    def test_stalled_steps_violate_every_call_rate_and_no_share_or_memory(self):
        report = self.check(self.stalled, expect=1)
        violations = report["sessions"][0]["violations"]
        ids = sorted(v["id"] for v in violations)
        # The job calls the same APIs in the same mix, as fast, with no more memory: no share of
        # the calls, memory or GPU objective is violated. One side effect on latency is real and
        # allowed: a step that begins after 20 ms of sleep finds its CPU's caches cold (other
        # processes ran there), so the first calls of each step are slower. Which API that shows
        # in depends on the order of a step's calls and on what else ran: cudaMalloc's p90 (the
        # first of three a step) rose from 9 us to 14-25 us here, cudaMemcpyAsync's (one a step)
        # from 4 us to 6 us on a busy day. A cold cache costs microseconds, not the launch
        # test's 20 us a call: each latency violation stays within 2.5 times its threshold.
        cold = {v["id"] for v in violations if v["metric"] == "p90 latency"}
        self.assertEqual([v["id"] for v in violations
                          if v["metric"] != "calls/s" and v["id"] not in cold], [],
                         json.dumps(violations, indent=1))
        for v in violations:
            if v["id"] in cold:
                self.assertLess(v["observed"], 2.5 * v["threshold"], v)
        # And every steady call rate objective that a drop to a seventh must cross is violated:
        # each API's on both ranks, and the ranks' own. The others were fitted from healthy runs
        # whose rates spread so far (on a busy machine, one run's slowest windows at 0.6 of
        # another's) that the margin took their threshold below a sixth of the best healthy
        # value: they hold a stall this deep by their own rule (docs/SLO.md, The threshold).
        rates = self.objectives(metric="calls/s", phase="steady")
        self.assertEqual(len(rates), 14, rates)  # 2 ranks x (6 APIs + all calls)
        expected = sorted(o["id"] for o in rates
                          if o["threshold"] > max(o["evidence"]["values"]) / 6)
        self.assertGreater(len(expected), 0, json.dumps(rates, indent=1))
        self.assertEqual([i for i in ids if i.startswith("steady/") and i not in cold
                          and i in expected], expected, json.dumps(rates, indent=1))
        for v in violations:
            if v["id"] in cold:
                continue
            self.assertEqual(v["bound"], "lower")
            self.assertLess(v["observed"], v["threshold"], v)
            self.assertLess(v["by"], 0, v)
        proc = eacgm("slo", "check", self.slo, self.stalled)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("cuda cudaLaunchKernel [rank:0] steady calls/s: ", proc.stdout)
        self.assertIn("below the threshold", proc.stdout)

    def test_a_faster_job_holds(self):
        # Rates have no upper bound: a job that got faster (every API called more often, in the
        # same mix) is no violation; a storm of one API is its share of the calls.
        report = self.check(self.faster, expect=0)
        self.assertEqual(report["sessions"][0]["violations"], [])

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
        for bad in ("100", "49", "99.5"):  # a flag's error: CLI11's, with its usage hint
            proc = eacgm("slo", "fit", self.healthy[0], "-o", os.path.join(tmp, "x.json"),
                         "--latency-percentile", bad)
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertTrue(proc.stderr.startswith("eacgm: error: "), proc.stderr)
            self.assertIn("--latency-percentile", proc.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "x.json")))
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
        # serve's call counters carry no process: per-API rates and shares are comments.
        self.assertIn("#   steady/calls_per_s/cuda/cudaLaunchKernel/rank:0 (threshold", text)
        self.assertIn("#   steady/share_of_calls/cuda/cudaMalloc/rank:1 (threshold", text)
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
            # Healthy ranks are late by microseconds on a quiet machine, and the threshold is then
            # the 1 ms floor; a busy one (a build beside the suite) can make the worst healthy
            # value plus its margin pass it. Never below the floor, and raised only to it.
            self.assertGreaterEqual(late["threshold"], 1e6)
            self.assertEqual("raised to" in late["rule"], late["threshold"] == 1e6, late)
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


class SloTorch(eacgm_testlib.SharedRecordingsTest):
    """Torch operators' objectives on a real job: tests/workloads/train_softmax.py (train_cnn.py's
    CNN, trained from a DataLoader worker, with a softmax of a score buffer after each step),
    recorded with the torch layer. Fitted from three healthy runs, every operator the main process
    calls at each step has a self time (an upper bound), a p90 latency, a call rate (unless the
    healthy runs' paces spread too far for a lower bound) and a share of the calls; a fourth
    healthy run holds them all, and a run whose softmax has a buffer 30 times
    bigger (still small: 80 KB) violates the objectives of that softmax alone.

    The fit's margin is 75 % (`--tolerance 0.75`), not the default 50 %: this job is CPU-bound,
    and this machine's two vCPUs are shared with other builds. Measured on 18 healthy runs of
    this job (each checked against fits of three others, 60 checks): with 50 %, 4 checks failed,
    a run that spent half its length at a third of its pace while another job held the CPUs and
    runs at half the slowest fitted run's pace; with 75 %, none did. The softmax's slowdown is
    ten times its healthy self time and more."""
    shared_prefix = "eacgm-slo-torch-"
    PYTHON = "/usr/bin/python3.11"
    SCRIPT = os.path.join(os.path.dirname(__file__), "..", "workloads", "train_softmax.py")
    MAIN = "comm:python3.11"

    @classmethod
    def setUpClass(cls):
        if subprocess.run([cls.PYTHON, "-c", "import torch"], capture_output=True).returncode:
            raise unittest.SkipTest("needs Debian's python3-torch for /usr/bin/python3.11")
        super().setUpClass()
        cls.healthy = [cls.record(f"healthy{i}") for i in range(4)]
        cls.slow = cls.record("slow", ["--score-rows", "2000"])
        cls.slo = os.path.join(cls.shared, "slo.json")
        fit = eacgm("slo", "fit", *cls.healthy[:3], "-o", cls.slo, "--tolerance", "0.75")
        assert fit.returncode == 0, fit.stdout + fit.stderr
        with open(cls.slo) as f:
            cls.spec = json.load(f)

    @classmethod
    def record(cls, name, extra_args=()):
        out = os.path.join(cls.shared, name)
        # One epoch of 400 steps (about 2 s after torch's import), so that the operators are
        # called in most of the steady state's windows; one DataLoader worker process.
        proc = subprocess.run([EACGM, "record", "-q", "-o", out, "--layers", "torch", "--",
                               cls.PYTHON, cls.SCRIPT, "--workers", "1", "--epochs", "1",
                               "--batches", "400", *extra_args],
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return out

    def objective(self, metric, what):
        found = [o for o in self.spec["objectives"] if o["metric"] == metric and o["what"] == what
                 and o["process"] == self.MAIN and o["window"]["phase"] == "steady"]
        self.assertEqual(len(found), 1, (metric, what))
        return found[0]

    def test_fit_holds_each_operators_self_time(self):
        for op in ("aten::mkldnn_convolution", "aten::convolution_backward", "aten::addmm",
                   "aten::_softmax", "aten::softmax.int", "aten::_log_softmax"):
            self_time = self.objective("self time", op)
            self.assertEqual((self_time["layer"], self_time["bound"], self_time["unit"]),
                             ("torch", "upper", "ns"))
            self.assertEqual(self_time["statistic"],
                             "P90 of the windows' median self time, the first and last left out")
            self.assertGreaterEqual(min(self_time["evidence"]["counts"]), 100)
            self.assertGreater(self_time["threshold"], max(self_time["evidence"]["values"]))
            self.assertEqual(self.objective("p90 latency", op)["bound"], "upper")
            # A call rate, unless the healthy runs' paces spread so far (one at less than half
            # another's, when another job takes the CPUs) that the margin leaves a lower bound
            # of 0: then it is skipped, saying so, as the NCCL bandwidth above.
            rate = [o for o in self.spec["objectives"] if o["metric"] == "calls/s"
                    and o["what"] == op and o["process"] == self.MAIN]
            if rate:
                self.assertEqual(rate[0]["bound"], "lower")
                self.assertGreater(rate[0]["threshold"], 0)
            else:
                skipped = [s for s in self.spec["skipped"] if s["metric"] == "calls/s"
                           and s["what"] == op and s["process"] == self.MAIN]
                self.assertEqual(len(skipped), 1, op)
                self.assertIn("lower bound of 0", skipped[0]["reason"])

    def test_healthy_run_holds(self):
        proc = eacgm("slo", "check", self.slo, self.healthy[3], "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        report = json.loads(proc.stdout)
        self.assertEqual(report["sessions"][0]["violations"], [])
        self.assertGreaterEqual(report["sessions"][0]["held"], 60, report)

    def test_a_bigger_softmax_violates_its_own_objectives_alone(self):
        proc = eacgm("slo", "check", self.slo, self.slow, "--json")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        violations = json.loads(proc.stdout)["sessions"][0]["violations"]
        ids = {v["id"] for v in violations}
        # The kernel's self time and latency, and the latency of the operator around it, whose
        # own self time moves by a few microseconds at most (cold caches after the kernel: 5 us
        # healthy, up to 8.5 us measured), under the 20 us floor of a self time threshold.
        kernel = {f"steady/self_time/torch/aten::_softmax/{self.MAIN}",
                  f"steady/p90_latency/torch/aten::_softmax/{self.MAIN}",
                  f"steady/p90_latency/torch/aten::softmax.int/{self.MAIN}"}
        self.assertEqual(ids, kernel, json.dumps(violations, indent=1))
        self_time = next(v for v in violations
                         if v["id"] == f"steady/self_time/torch/aten::_softmax/{self.MAIN}")
        self.assertGreater(self_time["ratio"], 3, self_time)


if __name__ == "__main__":
    eacgm_testlib.main()
