"""e2e: whole `eacgm` runs as a user would make them, bad input included:
every mistake gets a clear message and exit code 2."""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM, SIM_CUDART, SIMTRAIN, CUDA_CALLS, EacgmTest, require_root  # noqa: E402


def run(*args, **kw):
    return subprocess.run([EACGM, *args], capture_output=True, text=True, timeout=60, **kw)


class BadInput(EacgmTest):
    def assertUsageError(self, proc, *fragments):
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        for fragment in fragments:
            self.assertIn(fragment, proc.stderr)

    def test_unknown_flag(self):
        self.assertUsageError(run("record", "--frobnicate", "-o", self.out(), "--", "true"),
                              "frobnicate")

    def test_no_subcommand(self):
        self.assertEqual(run().returncode, 2)

    def test_no_command(self):
        require_root(self)
        self.assertUsageError(run("record", "-o", self.out()), "no command")

    def test_unknown_layer(self):
        self.assertUsageError(run("record", "-o", self.out(), "--layers", "gpux", "--", "true"),
                              "unknown layer")

    def test_serve_refuses_the_python_layer(self):
        self.assertUsageError(run("serve", "--layers", "cuda,python"), "python layer",
                              "record")

    def test_bad_python_options(self):
        self.assertUsageError(run("record", "-o", self.out(), "--python-rate", "0", "--",
                                  "true"), "python-rate")
        self.assertUsageError(run("record", "-o", self.out(), "--python-slow-ms", "-5", "--",
                                  "true"), "python-slow-ms")

    def test_nonexistent_pid(self):
        self.assertUsageError(run("attach", "-p", "999999999", "-o", self.out()), "no process")

    def test_unwritable_output_directory(self):
        require_root(self)
        self.assertUsageError(run("record", "-o", "/etc/passwd/session", "--", "true"),
                              "/etc/passwd/session")

    def test_missing_btf(self):
        require_root(self)
        self.assertUsageError(run("record", "-o", self.out(), "--btf", "/nonexistent/vmlinux",
                                  "--", "true"), "BTF")

    def test_corrupt_btf(self):
        require_root(self)
        bad = os.path.join(self.tmp, "vmlinux")
        with open(bad, "wb") as f:
            f.write(b"\x9f\xeb\x01\x00" + os.urandom(4096))
        self.assertUsageError(run("record", "-o", self.out(), "--btf", bad, "--", "true"), "BTF")

    def test_no_privileges(self):
        require_root(self)  # to become nobody
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               "--inh-caps=-all", EACGM, "record", "-o", self.out(), "--", "true"],
                              capture_output=True, text=True, timeout=30)
        self.assertUsageError(proc, "needs root", "CAP_BPF")

    def test_command_that_does_not_exist(self):
        require_root(self)
        proc = run("record", "-o", self.out(), "--", "/nonexistent/program")
        self.assertEqual(proc.returncode, 127)
        self.assertIn("cannot run", proc.stderr)


class Commands(EacgmTest):
    def test_doctor_reports_each_check(self):
        proc = run("doctor")
        for fragment in ("BTF", "uprobes", "tracefs", "kprobes", "lockdown", "privileges", "cuda"):
            self.assertIn(fragment, proc.stdout)
        # Debian's interpreter is a dependency: the python layer names it, with its USDT probes.
        self.assertIn("/usr/bin/python3.11 (CPython 3.11, USDT probes)", proc.stdout)
        if os.geteuid() == 0:
            self.assertEqual(proc.returncode, 0, proc.stdout)
            self.assertIn("fentry", proc.stdout)
            if os.path.exists("/usr/local/cuda/lib64/libcudart.so.13"):
                self.assertIn("/usr/local/cuda", proc.stdout)

    def test_record_exit_code_is_the_jobs(self):
        require_root(self)
        s = self.record(["/bin/sh", "-c", "exit 7"])
        self.assertEqual(s.returncode, 7)
        self.assertEqual(s.summary["exit_code"], 7)
        self.assertEqual(s.summary["processes"][0]["exit"]["code"], 7)
        self.assertEqual(s.summary["layers"]["cuda"]["status"], "unavailable" if not os.path.exists(
            "/usr/local/cuda/lib64/libcudart.so.13") else "active")

    def test_demo_training_job_names_the_leaking_ranks(self):
        require_root(self)
        # The README's demo: every rank leaks 1 MiB of device memory per step.
        s = self.record([SIMTRAIN, "--ranks", "2", "--steps", "200", "--leak-bytes", "1048576"])
        self.assertEqual(s.returncode, 0, s.stderr)
        ranks = {p["rank"]: p["pid"] for p in s.summary["processes"] if p["rank"] is not None}
        self.assertEqual(sorted(ranks), [0, 1])
        self.assertEqual(s.count("cudaLaunchKernel"), 2 * 200 * 5)
        self.assertIn("cudaLaunchKernel", s.stdout)  # the printed report
        leaks = sorted(a["pid"] for a in s.summary["anomalies"] if a["kind"] == "leak")
        self.assertEqual(leaks, sorted(ranks.values()))
        self.assertEqual(len(s.summary["anomalies"]), 2, s.summary["anomalies"])
        for pid in ranks.values():
            self.assertEqual(s.summary["memory"]["outstanding_device_bytes"][str(pid)], 200 << 20)
        self.assertSessionComplete(s)

    def test_healthy_training_job_has_no_anomaly(self):
        require_root(self)
        s = self.record([SIMTRAIN, "--ranks", "2", "--steps", "300"])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.summary["anomalies"], [])


if __name__ == "__main__":
    eacgm_testlib.main()
