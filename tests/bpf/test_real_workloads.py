"""Real workloads as the test bed (tests/workloads/): a PyTorch CNN and MLP trained from a
DataLoader with worker processes, a gloo job started as torchrun starts ranks, threads, asyncio,
a bash/subprocess chain and heavy imports, on Debian's python3.11 and python3-torch. Healthy runs
must yield no anomaly at all; each injected fault exactly its own, naming the right process and
function. The workloads print `pid=` lines (and ranks `rank=R pid=P`) so a test knows who is who."""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from eacgm_testlib import EACGM, EacgmTest, main, require_root  # noqa: E402

WORKLOADS = os.path.join(os.path.dirname(__file__), "..", "workloads")
PYTHON = "/usr/bin/python3.11"


def have_torch():
    return os.path.exists("/usr/lib/python3/dist-packages/torch/__init__.py")


class RealWorkloads(EacgmTest):
    def run_workload(self, script, *args, timeout=120):
        require_root(self)
        session = self.record([PYTHON, os.path.join(WORKLOADS, script), *args], timeout=timeout)
        self.assertEqual(session.returncode, 0, session.stderr[-3000:])
        self.assertIsNotNone(session.summary, session.stderr[-3000:])
        self.assertEqual(session.summary["exit_code"], 0)
        return session

    def main_pid(self, session):
        return int(re.search(r"^pid=(\d+)$", session.stdout, re.M).group(1))

    def assertNoAnomaly(self, session):
        self.assertEqual([a["message"] for a in session.summary["anomalies"]], [])

    def assertOnlySlowCall(self, session, function):
        anomalies = session.summary["anomalies"]
        self.assertEqual(len(anomalies), 1, [a["message"] for a in anomalies])
        a = anomalies[0]
        self.assertEqual((a["kind"], a["layer"]), ("slow_call", "python"))
        self.assertEqual(a["evidence"]["function"], function)
        self.assertGreaterEqual(a["evidence"]["duration_ms"], 350)
        return a

    # --- PyTorch training from a DataLoader ---------------------------------------------------

    @unittest.skipUnless(have_torch(), "needs Debian's python3-torch")
    def test_a_healthy_training_job_with_workers_has_no_anomaly(self):
        s = self.run_workload("train_cnn.py", "--workers", "2")
        self.assertNoAnomaly(s)
        main_pid = self.main_pid(s)
        workers = [p for p in s.summary["processes"] if p["ppid"] == main_pid]
        self.assertGreaterEqual(len(workers), 4)  # two per epoch
        self.assertEqual(s.process(main_pid)["role"], "main")
        self.assertEqual({p["role"] for p in workers}, {"worker"})
        python = s.summary["layers"]["python"]
        self.assertIn("samples_rejected", python)
        self.assertGreater(python["samples"], 100)
        # import torch is start-up, with its time, not a stall.
        startup = {p["pid"]: p["import_s"] for p in python["startup"]}
        self.assertGreater(startup[main_pid], 0.3)
        # Every operator timed, and the torch table is there.
        self.assertEqual(s.summary["layers"]["torch"]["ops"]["aten::convolution_backward"]["count"],
                         2 * 2 * 12)  # two convolutions, two epochs of 12 steps

    @unittest.skipUnless(have_torch(), "needs Debian's python3-torch")
    def test_a_slow_function_in_the_main_process_of_a_job_with_workers(self):
        s = self.run_workload("train_cnn.py", "--workers", "2", "--fault", "slow_main")
        a = self.assertOnlySlowCall(s, "train_cnn.py:slow_checkpoint")
        self.assertEqual(a["pid"], self.main_pid(s))
        self.assertEqual(a["evidence"]["tid"], self.main_pid(s))
        # Offline, analyze says what the live run found that it does not replay, and finds
        # nothing of the GPU's on a job without one.
        report_path = os.path.join(self.tmp, "report.json")
        proc = subprocess.run([EACGM, "analyze", s.path, "-o", report_path], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(report_path) as f:
            report = json.load(f)
        self.assertEqual([(x["kind"], x["evidence"]["function"]) for x in report["live_only"]],
                         [("slow_call", "train_cnn.py:slow_checkpoint")])
        self.assertIn("recorded live, not replayed here", proc.stdout)
        self.assertEqual([x for x in report["anomalies"] if x["layer"] in ("cuda", "nccl")], [])

    @unittest.skipUnless(have_torch(), "needs Debian's python3-torch")
    def test_a_slow_getitem_in_persistent_workers_is_one_finding(self):
        s = self.run_workload("train_cnn.py", "--workers", "4", "--persistent", "--model", "mlp",
                              "--fault", "slow_worker")
        a = self.assertOnlySlowCall(s, "train_cnn.py:SyntheticImages.__getitem__")
        worker = s.process(a["pid"])
        self.assertEqual(worker["ppid"], self.main_pid(s))  # a DataLoader worker, not the main
        slow = s.summary["layers"]["python"]["slow_calls"]
        self.assertEqual([(c["function"], c["occurrences"]) for c in slow],
                         [("train_cnn.py:SyntheticImages.__getitem__", 2)])  # once per epoch

    @unittest.skipUnless(have_torch(), "needs Debian's python3-torch")
    def test_a_blocking_read_in_a_training_loop_without_workers(self):
        s = self.run_workload("train_cnn.py", "--workers", "0", "--model", "mlp", "--fault",
                              "blocking_read")
        a = self.assertOnlySlowCall(s, "train_cnn.py:blocking_read")
        self.assertEqual(a["pid"], self.main_pid(s))
        self.assertLess(a["evidence"]["on_cpu_fraction"], 0.5)

    @unittest.skipUnless(have_torch(), "needs Debian's python3-torch")
    def test_a_late_gloo_rank_is_named_and_its_peer_is_not(self):
        s = self.run_workload("gloo_allreduce.py", "--launch", "2", "--late-rank", "1")
        # The ranks by the RANK their launcher gave them.
        ranks = {p["rank"]: p["pid"] for p in s.summary["processes"] if p["rank"] is not None}
        self.assertEqual(sorted(ranks), [0, 1], s.summary["processes"])
        self.assertEqual({s.process(pid)["role"] for pid in ranks.values()}, {"rank"})
        launcher = s.process(s.process(ranks[0])["ppid"])
        self.assertEqual(launcher["role"], "launcher", s.summary["processes"])
        a = self.assertOnlySlowCall(s, "gloo_allreduce.py:late_data_step")
        self.assertEqual(a["pid"], ranks[1])

    # --- Python job shapes ----------------------------------------------------------------------

    def test_healthy_threads_asyncio_subprocess_chains_and_imports_have_no_anomaly(self):
        for shape in ["threads", "asyncio", "chain", "imports"]:
            with self.subTest(shape=shape):
                s = self.run_workload("pipelines.py", "--shape", shape)
                self.assertNoAnomaly(s)
                if shape == "chain":  # python -> bash -c (which execs) python -> python
                    comms = [p["comm"] for p in s.summary["processes"]]
                    self.assertEqual(comms.count("python3.11"), 3, comms)

    def test_a_slow_consumer_thread_is_named(self):
        s = self.run_workload("pipelines.py", "--shape", "threads", "--fault", "slow_consumer")
        a = self.assertOnlySlowCall(s, "pipelines.py:handle")
        self.assertEqual(a["pid"], self.main_pid(s))
        self.assertNotEqual(a["evidence"]["tid"], a["pid"])  # a consumer thread, not the main


if __name__ == "__main__":
    main()
