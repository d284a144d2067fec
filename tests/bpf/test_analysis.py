"""bpf: the analysis engine on real recordings. simtrain runs long enough for one-second windows
(--step-us paces it); a latency spike is injected into one API of one rank with the simulated
runtime's own rules. The live run and `eacgm analyze` must name that API and that rank, and a
healthy run must raise nothing. `eacgm model fit` learns from the healthy run, and bad input to
either command is a clear error with exit code 2."""
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM, SIMTRAIN, EacgmTest  # noqa: E402

# About 4.1 ms per step: 4000 steps last ~17 s, i.e. a setup second, 10 warm-up windows, then
# scored windows.
STEPS, STEP_US = "4000", "4000"
# Rank 1's launches take 500 us from its 15001st launch (step 3001, about 12.5 s in): 150 times
# the usual ~3 us, but steps only get ~40 % slower, so this is a latency fault, not a stall.
SPIKE = "rank=1 latency cudaLaunchKernel 500us from=15001"


def eacgm(*args):
    return subprocess.run([EACGM, *args], capture_output=True, text=True, timeout=120)


class Analysis(EacgmTest):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root to load BPF programs")
        import tempfile
        cls.shared = tempfile.mkdtemp(prefix="eacgm-analysis-")
        cls.healthy = cls.record_simtrain("healthy", {})
        cls.spiked = cls.record_simtrain("spiked", {"SIMGPU_RULES": SPIKE})

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    @classmethod
    def record_simtrain(cls, name, extra_env):
        out = os.path.join(cls.shared, name)
        env = dict(os.environ, **extra_env)
        proc = subprocess.run([EACGM, "record", "-o", out, "--layers", "cuda", "--", SIMTRAIN,
                               "--ranks", "2", "--steps", STEPS, "--step-us", STEP_US],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        ranks = {p["rank"]: p["pid"] for p in summary["processes"] if p["rank"] is not None}
        return {"dir": out, "summary": summary, "ranks": ranks, "stderr": proc.stderr}

    def analyze(self, session, *flags):
        report = os.path.join(self.tmp, "report.json")
        proc = eacgm("analyze", session["dir"], "-o", report, *flags)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(report) as f:
            return json.load(f), proc.stdout

    def assertSpikeFound(self, anomalies, session, what):
        latency = [a for a in anomalies if a["kind"] == "latency"]
        self.assertEqual(len(latency), 1, f"{what}: {json.dumps(anomalies, indent=1)}")
        a = latency[0]
        self.assertEqual(a["evidence"]["api"], "cudaLaunchKernel")
        self.assertEqual(a["rank"], 1)
        self.assertEqual(a["pid"], session["ranks"][1])
        self.assertIn("cudaLaunchKernel", a["message"])
        self.assertGreater(a["evidence"]["ratio"], 20)
        self.assertTrue(a["suggestion"])
        self.assertEqual(len(a["evidence"]["window_s"]), 2)
        # Rank 0 was healthy throughout: nothing about it.
        self.assertEqual([x for x in anomalies if x["rank"] == 0], [], what)
        self.assertEqual([x for x in anomalies if x["kind"] == "throughput"], [], what)

    def test_healthy_run_raises_nothing_live_or_offline(self):
        self.assertEqual(self.healthy["summary"]["anomalies"], [])
        report, _ = self.analyze(self.healthy)
        self.assertEqual(report["anomalies"], [])
        workers = {w["rank"]: w for w in report["workers"]}
        self.assertEqual(set(workers), {0, 1})
        for w in workers.values():  # each learned a baseline and was then scored
            self.assertTrue(w["baseline"].startswith("warm-up"), w)
            self.assertGreater(w["scored_windows"], 2, w)

    def test_latency_spike_is_named_live_and_offline(self):
        self.assertSpikeFound(self.spiked["summary"]["anomalies"], self.spiked, "live")
        report, stdout = self.analyze(self.spiked)
        self.assertSpikeFound(report["anomalies"], self.spiked, "analyze")
        self.assertIn("[latency]", stdout)

    def test_model_fit_on_healthy_run_then_analyze(self):
        model = os.path.join(self.tmp, "model.json")
        proc = eacgm("model", "fit", self.healthy["dir"], "-o", model)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(model) as f:
            m = json.load(f)
        self.assertEqual(m["format"], "eacgm-detector")
        self.assertEqual(set(m["entities"]), {"rank:0", "rank:1", "*"})
        report, _ = self.analyze(self.healthy, "--model", model)
        self.assertEqual(report["anomalies"], [])
        report, _ = self.analyze(self.spiked, "--model", model)
        self.assertSpikeFound(report["anomalies"], self.spiked, "analyze --model")
        self.assertEqual({w["baseline"] for w in report["workers"]}, {"model"})

    def test_bad_input_is_a_clear_error(self):
        def assertBad(args, fragment):
            proc = eacgm(*args)
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertIn(fragment, proc.stderr)

        missing = os.path.join(self.tmp, "nowhere")
        assertBad(["analyze", missing], "no such session directory")
        assertBad(["model", "fit", missing, "-o", os.path.join(self.tmp, "m.json")],
                  "no such session directory")
        os.mkdir(os.path.join(self.tmp, "empty"))
        assertBad(["analyze", os.path.join(self.tmp, "empty")], "no events.sqlite")
        corrupt = os.path.join(self.tmp, "corrupt")
        os.mkdir(corrupt)
        with open(os.path.join(corrupt, "events.sqlite"), "wb") as f:
            f.write(b"this is not a database" * 100)
        assertBad(["analyze", corrupt], "events.sqlite")
        # A model whose features this eacgm does not compute.
        model = os.path.join(self.tmp, "model.json")
        self.assertEqual(eacgm("model", "fit", self.healthy["dir"], "-o", model).returncode, 0)
        with open(model) as f:
            m = json.load(f)
        m["entities"]["rank:0"]["features"][0] = "gpu_temperature"
        bad_model = os.path.join(self.tmp, "bad_model.json")
        with open(bad_model, "w") as f:
            json.dump(m, f)
        assertBad(["analyze", self.healthy["dir"], "--model", bad_model],
                  "unknown feature 'gpu_temperature'")
        with open(bad_model, "w") as f:
            json.dump({"format": "eacgm-gmm"}, f)
        assertBad(["analyze", self.healthy["dir"], "--model", bad_model], "not an eacgm detector model")
        assertBad(["analyze", self.healthy["dir"], "--model", missing], "cannot read model")


class ShortJob(EacgmTest):
    """A job shorter than the live warm-up (about 5 s against 1 + 10 windows) is never judged
    live; `eacgm analyze` judges it against its whole run. Rank 1's stream synchronisations take
    30 ms instead of 2 ms for 15 steps (200-214), rank 0 stays healthy."""

    RULES = ("latency cudaStreamSynchronize 2ms;"
             "rank=1 latency cudaStreamSynchronize 30ms from=200 until=214")

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root to load BPF programs")
        import tempfile
        cls.shared = tempfile.mkdtemp(prefix="eacgm-short-")
        cls.dir = os.path.join(cls.shared, "short")
        env = dict(os.environ, SIMGPU_RULES=cls.RULES)
        cls.proc = subprocess.run([EACGM, "record", "-o", cls.dir, "--layers", "cuda", "--",
                                   SIMTRAIN, "--ranks", "2", "--steps", "400", "--step-us", "8000"],
                                  capture_output=True, text=True, timeout=120, env=env)
        with open(os.path.join(cls.dir, "summary.json")) as f:
            cls.summary = json.load(f)
        cls.ranks = {p["rank"]: p["pid"] for p in cls.summary["processes"]
                     if p["rank"] is not None}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def test_the_episode_is_found_offline_against_the_whole_run(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        # Live, no baseline was ever learned: nothing is claimed about either rank.
        self.assertEqual(self.summary["anomalies"], [])
        report = os.path.join(self.tmp, "report.json")
        proc = eacgm("analyze", self.dir, "-o", report)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(report) as f:
            report = json.load(f)
        ranked = [w for w in report["workers"] if w["rank"] is not None]
        self.assertEqual(len(ranked), 2, report["workers"])
        for w in ranked:
            self.assertTrue(w["whole_run"], w)
            self.assertTrue(w["baseline"].startswith("none"), w)
        self.assertIn("latency judged against its whole run", proc.stdout)
        anomalies = report["anomalies"]
        self.assertEqual(len(anomalies), 1, json.dumps(anomalies, indent=1))
        a = anomalies[0]
        self.assertEqual((a["kind"], a["layer"], a["rank"], a["pid"]),
                         ("latency", "cuda", 1, self.ranks[1]))
        self.assertEqual(a["evidence"]["api"], "cudaStreamSynchronize")
        self.assertEqual(a["evidence"]["calls"], 15)
        self.assertEqual(a["evidence"]["baseline"], "whole run")
        self.assertGreater(a["evidence"]["ratio"], 10)
        self.assertIn("whole run", a["message"])
        self.assertIn("[latency]", proc.stdout)


if __name__ == "__main__":
    eacgm_testlib.main()
